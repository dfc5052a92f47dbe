"""What a student's grading kernel must not be able to import, and the files that hide it.

Three kinds of code could answer an exercise for a student who reads the package first:

1. the visible checks, ``course_lib.checks``: each exercise's rules written out as code (and
   the references they compare against). Withheld whole: inside the sandbox the folder is a
   package whose import raises. Setup cells never import it (a ``[checks]`` cell does, and
   grading does not run those), so nothing honest needs it;
2. the oracles the tests compare against (rank-bm25, llguidance, transformers...): every
   distribution the course needs only for its tests, i.e. those of the ``dev`` extra that the
   runtime dependencies do not pull in themselves. Withheld the same way, by import name;
3. reference implementations that setup cells need beside them (the model, the engine, the
   tokenizer): those stay importable, and the functions that answer an exercise are stubbed
   by name (``REFERENCES`` in each hidden-test file; see reference_stubs.py).

The list for 1 and 2 is derived here, never kept by hand; ``tests/hidden/test_no_importable_answer.py``
tries every callable of the package and of the oracles on every exercise and fails when one
that scores is still reachable.

    >>> "course_lib.checks" in withheld_modules() and "rank_bm25" in withheld_modules()
    True
    >>> "jsonschema" in withheld_modules()  # a runtime dependency: setup cells may use it
    False
"""
from __future__ import annotations

import functools
import importlib.metadata as metadata
import importlib.util
import re
from pathlib import Path

from course_lib.pipeline.reference_stubs import write_stubs

COURSE_DISTRIBUTION = "course-lib"
VISIBLE_CHECKS = "course_lib.checks"
TEST_EXTRA = "dev"


def _name(requirement: str) -> str:
    """'rank-bm25<0.3,>=0.2.2; extra == "dev"' -> 'rank-bm25' (normalised, PEP 503)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0]).lower()


def _requirements(distribution: str, extra: str | None = None) -> set[str]:
    """Names a distribution requires: unconditionally, or (``extra``) only for that extra."""
    try:
        requires = metadata.distribution(distribution).requires or []
    except metadata.PackageNotFoundError:
        return set()
    wanted = set()
    for requirement in requires:
        marker = requirement.partition(";")[2]
        in_extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
        if (in_extra.group(1) if in_extra else None) == extra:
            wanted.add(_name(requirement))
    return wanted


def _runtime_closure() -> set[str]:
    """Every distribution the course needs at run time, dependencies of dependencies included."""
    seen: set[str] = set()
    todo = list(_requirements(COURSE_DISTRIBUTION))
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(_requirements(name))
    return seen


@functools.lru_cache(maxsize=1)
def oracle_distributions() -> tuple[str, ...]:
    """The distributions only the tests need: the ``dev`` extra less the runtime closure."""
    return tuple(sorted(_requirements(COURSE_DISTRIBUTION, TEST_EXTRA) - _runtime_closure()))


@functools.lru_cache(maxsize=1)
def withheld_modules() -> tuple[str, ...]:
    """Import names hidden from a grading kernel: the visible checks and every oracle's modules."""
    oracles = set(oracle_distributions())
    names = {module for module, owners in metadata.packages_distributions().items()
             if any(_name(owner) in oracles for owner in owners)}
    return (VISIBLE_CHECKS, *sorted(names))


def _refusal(module: str) -> str:
    why = ("the visible checks hold the exercises' rules" if module == VISIBLE_CHECKS
           else "it is an oracle the tests compare against")
    message = (f"`{module}` is not available while grading: {why}, so an answer must be your own "
               "code. (It is there when you run the notebook yourself.)")
    return f"raise ImportError({message!r})\n"


def _location(module: str) -> tuple[Path, bool] | None:
    """(folder or file, is_package) of an importable module, without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))).resolve(), True
    if spec.origin and spec.origin not in ("built-in", "frozen"):
        return Path(spec.origin).resolve(), False
    return None


def withheld_overlays(folder: Path) -> dict[Path, Path]:
    """{real path: its replacement} for every withheld module that is installed here.

    A package's folder is replaced by a folder whose ``__init__.py`` raises ImportError (its
    submodules, data files and ``__pycache__`` go with it); a one-file module by a file that
    raises. What the sandbox mounts, on top of everything else (sandbox.Sandbox).
    """
    folder = Path(folder)
    overlays = {}
    for index, module in enumerate(withheld_modules()):
        found = _location(module)
        if found is None:
            continue
        real, is_package = found
        if is_package:
            replacement = folder / f"{index:02d}_{module}"
            replacement.mkdir(parents=True, exist_ok=True)
            (replacement / "__init__.py").write_text(_refusal(module), encoding="utf-8")
        else:
            replacement = folder / f"{index:02d}_{real.name}"
            folder.mkdir(parents=True, exist_ok=True)
            replacement.write_text(_refusal(module), encoding="utf-8")
        overlays[real] = replacement
    return overlays


def sandbox_overlays(references, folder: Path) -> dict[Path, Path]:
    """Everything a grading sandbox mounts over the real files, for a notebook whose hidden
    tests list ``references``: the stubbed modules, the withheld modules, and an empty folder
    over each ``__pycache__`` beside a replaced file (a compiled copy of the real module,
    which ``marshal`` could load by hand)."""
    folder = Path(folder)
    hidden = withheld_overlays(folder / "withheld")
    # A stub inside a withheld folder would have nowhere to go (and nothing to hide).
    overlays = {real: stub for real, stub in write_stubs(list(references), folder / "stubs").items()
                if not any(folder_ in real.parents for folder_ in hidden)}
    overlays.update(hidden)
    empty = folder / "empty"
    empty.mkdir(parents=True, exist_ok=True)
    for real in list(overlays):
        cache = real.parent / "__pycache__"
        if real.is_file() and cache.is_dir():
            overlays[cache] = empty
    return overlays
