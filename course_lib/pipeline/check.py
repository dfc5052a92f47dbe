"""``course check``: run a notebook top to bottom in a fresh kernel, report each exercise.

One line per exercise: passed, not attempted, or failed with the visible test's own message.
Cells are bounded in time; a dead kernel or a hung cell is reported, never a traceback.
``--full`` (``full=True``) then runs the hidden tests too, the way the grader does: the
answer cells in a fresh sandboxed kernel, the hidden tests in this process, each exercise
scored by the grader's own rule (``hidden.score``, partial credit by default), so a learner
working alone sees the points ``course grade`` would give.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from course_lib.pipeline.authoring import COURSE_METADATA
from course_lib.pipeline.hidden import PARTIAL, RULES, score
from course_lib.pipeline.learner import ipc_kernel_manager
from course_lib.pipeline.notebook_io import read_notebook

ANSI = re.compile(r"\x1b\[[0-9;]*m")
CHECK_CELL_TIMEOUT = 120  # a learner's machine may be slow; the grader allows less


@dataclass
class ExerciseResult:
    exercise: str
    status: str  # "passed", "failed", "not attempted"
    message: str = ""
    hidden: str = ""  # with --full: "passed", or the first failed hidden check
    points: float = 0.0  # the exercise's points (the test cell's nbgrader points)
    earned: float | None = None  # with --full: its score under the grader's rule


@dataclass
class CheckReport:
    path: Path
    exercises: list[ExerciseResult] = field(default_factory=list)
    other_errors: list[str] = field(default_factory=list)
    fatal: str = ""  # the kernel died or a cell could not be interrupted
    scoring: str = PARTIAL  # the rule the hidden tests' points were scored by (with --full)
    written_points: float = 0.0  # answers written in prose, which only an instructor grades

    @property
    def ok(self) -> bool:
        return not self.fatal and all(e.status == "passed" and e.hidden in ("", "passed") for e in self.exercises)


def _error(cell) -> tuple[str, str] | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            value = ANSI.sub("", str(output.get("evalue", ""))).strip()
            return output.get("ename", "Error"), value.splitlines()[0] if value else ""
    return None


def execute(nb, workdir: Path, cell_timeout: int):
    with tempfile.TemporaryDirectory(prefix="course-check-") as run_dir:
        return _execute(nb, workdir, cell_timeout, ipc_kernel_manager(Path(run_dir) / "kernel"))


def _execute(nb, workdir: Path, cell_timeout: int, manager):
    client = NotebookClient(
        nb, km=manager, timeout=cell_timeout, kernel_name="python3", allow_errors=True,
        interrupt_on_timeout=True, record_timing=False,
        error_on_timeout={"ename": "CellTimeoutError", "evalue": f"the cell ran longer than {cell_timeout} s and was interrupted", "traceback": []},
        resources={"metadata": {"path": str(workdir)}},
    )
    client.execute(stderr=subprocess.DEVNULL)  # the kernel's own start-up chatter is not for learners
    return nb


def summarize(nb, path: Path) -> CheckReport:
    report = CheckReport(path=path)
    for index, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {})
        role = meta.get(COURSE_METADATA, {}).get("role")
        error = _error(cell) if cell.cell_type == "code" else None
        if role == "tests":
            name = meta[COURSE_METADATA]["exercise"]
            if error is None:
                report.exercises.append(ExerciseResult(name, "passed"))
            elif error[0] == "NotImplementedError":
                report.exercises.append(ExerciseResult(
                    name, "not attempted", "replace `raise NotImplementedError()` in its answer cell"))
            else:
                message = f"{error[0]}: {error[1]}" if error[1] else error[0]
                report.exercises.append(ExerciseResult(name, "failed", message))
        elif error is not None and error[0] != "NotImplementedError":  # unfinished work is reported above
            report.other_errors.append(f"cell {index + 1}: {error[0]}: {error[1]}")
        grading = meta.get("nbgrader", {})
        if cell.cell_type == "markdown" and grading.get("grade") and grading.get("solution"):
            report.written_points += float(grading.get("points", 0))
    return report


def check_notebook(path: Path | str, *, cell_timeout: int = CHECK_CELL_TIMEOUT, full: bool = False,
                   scoring: str = PARTIAL) -> CheckReport:
    """Run ``path`` in a fresh kernel (cwd = its folder) and summarize its tests.

    Raises NotebookError (from read_notebook) for anything that is not a valid notebook.
    """
    path = Path(path)
    nb = read_notebook(path)
    report = _visible(nb, path, cell_timeout)
    if full and not report.fatal:
        add_hidden_verdicts(report, read_notebook(path), cell_timeout, scoring)
    return report


def add_hidden_verdicts(report: CheckReport, nb, cell_timeout: int, scoring: str = PARTIAL) -> None:
    """Grade ``nb``'s answers with the hidden tests, as ``course grade`` would, and score them."""
    from course_lib.pipeline.autograde import GradingFailed, grade_answers
    from course_lib.pipeline.paths import find_course
    from course_lib.pipeline.sandbox import Limits, SandboxUnavailable, check_available

    try:
        check_available()
        limits = Limits()
    except SandboxUnavailable:
        limits = None  # your own code on your own machine: the sandbox is only a courtesy here
    try:
        verdicts = grade_answers(nb, find_course(report.path.resolve().parent), report.path.stem,
                                 limits=limits, cell_timeout=cell_timeout, notebook_timeout=3600)
    except GradingFailed as exc:
        report.fatal = f"the hidden tests could not run: {exc.args[0]}"
        return
    by_name = {e.exercise: e for e in report.exercises}
    report.scoring = scoring
    for index, checks in verdicts.items():
        failed = [r for r in checks.results if not r.passed]
        meta = nb.cells[index].metadata["nbgrader"]
        exercise = meta["grade_id"].removesuffix("-tests")
        if exercise in by_name:
            by_name[exercise].hidden = "passed" if not failed else (
                f"{len(failed)} of {len(checks.results)} fail; first: {failed[0].label}: {failed[0].message}")
            by_name[exercise].points = float(meta["points"])
            by_name[exercise].earned = score(checks, float(meta["points"]), scoring)


def _visible(nb, path: Path, cell_timeout: int) -> CheckReport:
    try:
        execute(nb, path.parent.resolve(), cell_timeout)
    except DeadKernelError:
        report = summarize(nb, path)
        report.fatal = "the kernel died while running the notebook (did a cell call os._exit or run out of memory?)"
        return report
    except CellTimeoutError:
        report = summarize(nb, path)
        report.fatal = f"a cell ran longer than {cell_timeout} s and could not be interrupted"
        return report
    return summarize(nb, path)


def format_report(report: CheckReport) -> str:
    lines = [f"{report.path.name}:"]
    marks = {"passed": "✓", "failed": "✗", "not attempted": "·"}
    for e in report.exercises:
        tail = f": {e.message}" if e.message else ""
        suffix = "" if e.status == "passed" else f" [{e.status}]"
        lines.append(f"  {marks[e.status]} {e.exercise}{suffix}{tail}")
        if e.hidden and e.status != "not attempted":
            lines.append(f"      hidden tests: {'✓ all pass' if e.hidden == 'passed' else '✗ ' + e.hidden}"
                         f" ({e.earned:g} of {e.points:g} points)")
    for other in report.other_errors:
        lines.append(f"  ! {other}")
    if report.fatal:
        lines.append(f"  ✗ {report.fatal}")
    passed = sum(e.status == "passed" for e in report.exercises)
    lines.append(f"{passed} of {len(report.exercises)} exercise checks pass.")
    scored = [e for e in report.exercises if e.earned is not None]
    if scored:
        lines.append(f"Hidden tests: {sum(e.earned for e in scored):g} of {sum(e.points for e in scored):g} points "
                     f"as the grader scores them ({RULES[report.scoring]}).")
    if report.written_points:
        lines.append(f"Written answers: {report.written_points:g} more points, graded by hand by your "
                     "instructor (nothing here checks them).")
    return "\n".join(lines)
