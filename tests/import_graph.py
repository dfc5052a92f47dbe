"""The import graph of course_lib, read from the source with ``ast`` (nothing is imported).

Every ``import`` counts: at module level, inside functions, under ``if TYPE_CHECKING``. A node
is a module (``course_lib.serving.engine``; a package's ``__init__`` is the package's name);
its unit is the layer table's name for it: the first package below ``course_lib``
(``serving``) or a top-level module (``evaluate``).
"""
from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "course_lib"


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _owner(name: str, known: dict[str, Path]) -> str | None:
    """The module that defines dotted ``name`` (the longest known prefix)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_edges(known: dict[str, Path]) -> dict[str, set[str]]:
    """{module: the course_lib modules it imports}, self-imports left out."""
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                submodules = [f"{origin}.{alias.name}" for alias in node.names]
                targets = [m for m in submodules if m in known]
                if len(targets) < len(submodules):  # some names are attributes of `origin` itself
                    targets.append(origin)
            else:
                continue
            for target in targets:
                owner = _owner(target, known) if target.startswith("course_lib") else None
                if owner and owner != name:
                    edges[name].add(owner)
    return edges


def unit(module: str) -> str:
    """``course_lib.serving.engine`` -> ``serving``; ``course_lib`` -> ``course_lib``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def unit_edges(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    between: dict[str, set[str]] = defaultdict(set)
    for source, targets in edges.items():
        for target in targets:
            if unit(source) != unit(target):
                between[unit(source)].add(unit(target))
    return between


def cycles(nodes, edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


def declared_layers(docstring: str) -> list[list[str]]:
    """The layer table of course_lib's docstring, top layer first: one list of names a line."""
    block = docstring.split("included):", 1)[1].strip("\n").splitlines()
    layers = []
    for line in block:
        if not line.startswith("    "):
            break
        names = re.split(r"\s{2,}", line.strip())[0].split()
        layers.append(names)
    return layers
