"""Release: authoring file -> source notebook -> nbgrader generate_assignment -> notebooks/.

The one home of that chain: ``course release`` and ``course grade`` both rebuild the source
notebook from ``grading/authoring/`` first, so nothing ever grades or releases a stale
source. Running it twice changes nothing: nbgrader's output is deterministic for the same
source, and a notebook is only rewritten when its bytes differ.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from course_lib.pipeline.authoring import build_sources
from course_lib.pipeline.nbgrader_run import NbgraderFailed, run_nbgrader
from course_lib.pipeline.paths import CoursePaths


class UnknownAssignment(ValueError):
    pass


def refresh_sources(paths: CoursePaths, names: list[str] | None = None) -> list[Path]:
    """Rebuild grading/source/ from grading/authoring/ (all, or the named notebooks)."""
    if not paths.authoring.is_dir():
        return []  # a course laid out by hand, without authoring files: its sources stand
    authored = {p.stem for p in paths.authoring.glob("[0-9][0-9]_*.py")}
    wanted = [n for n in names if n in authored] if names else None
    if names and not wanted:
        return []
    return build_sources(paths.authoring, paths.source, wanted)


def resolve_assignments(paths: CoursePaths, names: list[str] | None) -> list[str]:
    known = paths.assignments()
    if not names:
        return known
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UnknownAssignment(
            f"unknown assignment(s): {', '.join(unknown)}; known: {', '.join(known) or 'none'}"
        )
    return list(names)


GRADEBOOK_CONFLICT = "Cannot add or remove cells"


def generate(paths: CoursePaths, name: str, *, gradebook: Path | None = None) -> Path:
    """nbgrader generate_assignment NAME; returns the released notebook's path.

    ``gradebook`` is the database nbgrader records the source cells in (default: the
    course's own, which grading needs).
    """
    db = ["--db", f"sqlite:///{gradebook}"] if gradebook else []
    try:
        run_nbgrader(paths.grading, "generate_assignment", name, "--force", "--log-level=WARN", *db)
    except NbgraderFailed as exc:
        if GRADEBOOK_CONFLICT in str(exc):
            raise NbgraderFailed(
                f"{name} now has different cells from the version already graded in "
                f"grading/gradebook.db; export the old grades first, then remove them with "
                f"`nbgrader db assignment remove {name} --force` (run in grading/) and grade again"
            ) from None
        raise
    return paths.release / name / f"{name}.ipynb"


def release(paths: CoursePaths, names: list[str] | None = None) -> list[tuple[str, bool]]:
    """Rebuild the sources, release each assignment and refresh notebooks/; returns
    (name, changed) pairs."""
    refresh_sources(paths, names)
    results = []
    for name in resolve_assignments(paths, names):
        # A throwaway gradebook: the learner copies depend on the source alone, never on
        # what has been graded already.
        with tempfile.TemporaryDirectory() as scratch:
            released = generate(paths, name, gradebook=Path(scratch) / "gradebook.db")
        target = paths.notebooks / f"{name}.ipynb"
        changed = not target.exists() or target.read_bytes() != released.read_bytes()
        if changed:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(released, target)
        results.append((name, changed))
    return results
