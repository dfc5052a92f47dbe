"""Stub out the course_lib reference answers inside the grading sandbox.

The course package is the reference implementation, and a notebook's setup cells import it,
so the sandbox cannot simply hide it. Instead, for each notebook, the functions and classes
named in its hidden tests' ``REFERENCES`` are replaced, in a copy of their module that the
sandbox mounts over the original file, by stubs that raise:

    >>> print(stub_source("def f(x):\\n    return 2 * x\\n", {"f"}, "m"))
    def f(*args, **kwargs):
        raise NotImplementedError('the course_lib reference `m.f` is not available while grading: use your own answer')

So an answer that merely calls the reference fails its hidden tests, however it imports it;
everything else in the package keeps working.
"""
from __future__ import annotations

import ast
import importlib.util
from collections import defaultdict
from pathlib import Path

from course_lib.pipeline import python_ast


def _raising(qualified: str) -> list[ast.stmt]:
    message = f"the course_lib reference `{qualified}` is not available while grading: use your own answer"
    return python_ast.parse(f"raise NotImplementedError({message!r})").body


def _stub_function(node: ast.FunctionDef | ast.AsyncFunctionDef, qualified: str) -> None:
    node.args = python_ast.parse("def f(*args, **kwargs): pass").body[0].args
    node.body = _raising(qualified)
    node.decorator_list = [d for d in node.decorator_list
                           if isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod")]
    node.returns = None


def stub_source(source: str, names: set[str], module: str) -> str:
    """``source`` with the top-level functions / classes in ``names`` turned into stubs."""
    tree = python_ast.parse(source)
    found = set()
    for node in tree.body:
        if getattr(node, "name", None) not in names:
            continue
        found.add(node.name)
        qualified = f"{module}.{node.name}"
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            _stub_function(node, qualified)
        elif isinstance(node, ast.ClassDef):
            # No decorators (a dataclass would write a working __init__), and an __init__
            # that raises, so the class cannot even be built; every method raises too.
            node.decorator_list = []
            if not any(getattr(item, "name", "") == "__init__" for item in node.body):
                node.body.insert(0, python_ast.parse("def __init__(self):\n    pass").body[0])
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    _stub_function(item, qualified)
    missing = names - found
    if missing:
        raise ValueError(f"{module} defines no top-level {', '.join(sorted(missing))} to stub")
    return ast.unparse(tree)


def write_stubs(references: list[str], folder: Path) -> dict[Path, Path]:
    """Stubbed copies of the modules defining ``references`` ("pkg.module.name") in
    ``folder``; returns {real module file: its stub}, what the sandbox mounts."""
    by_module: dict[str, set[str]] = defaultdict(set)
    for dotted in references:
        module, _, name = dotted.rpartition(".")
        by_module[module].add(name)
    overlays = {}
    for index, (module, names) in enumerate(sorted(by_module.items())):
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            raise ValueError(f"REFERENCES names {module}, which is not a Python module file")
        real = Path(spec.origin).resolve()
        stub = Path(folder) / f"{index:02d}_{real.name}"
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text(stub_source(real.read_text(encoding="utf-8"), names, module) + "\n", encoding="utf-8")
        overlays[real] = stub
    return overlays
