"""``course grade``: autograde every submission, write feedback and a grades CSV.

nbgrader alone reports a submission it could not grade (corrupt JSON, a dead kernel, a hang)
as 0.0 in its CSV, the same as an honest zero. Here each student is autograded in its own
nbgrader process with a time limit; one that fails is reported as FAILED with the reason,
its stale grade is removed from the gradebook, and every other student keeps theirs.
"""
from __future__ import annotations

import csv
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from course_lib.pipeline.nbgrader_run import log_tail, run_nbgrader
from course_lib.pipeline.notebook_io import NotebookError, read_notebook
from course_lib.pipeline.paths import CoursePaths
from course_lib.pipeline.release import generate, resolve_assignments

CSV_FIELDS = ("student", "status", "score", "max_score", "reason")


class NoSubmissions(RuntimeError):
    pass


@dataclass
class StudentGrade:
    student: str
    status: str  # "graded" or "FAILED"
    score: float | None = None
    max_score: float | None = None
    reason: str = ""


def _db_url(paths: CoursePaths) -> str:
    return f"sqlite:///{paths.grading / 'gradebook.db'}"


def find_students(paths: CoursePaths, assignment: str) -> list[str]:
    if not paths.submitted.is_dir():
        return []
    return sorted(p.name for p in paths.submitted.iterdir() if (p / assignment).is_dir())


def precheck(paths: CoursePaths, assignment: str, student: str) -> str:
    """Why this submission cannot be graded, or '' when it can."""
    folder = paths.submitted / student / assignment
    expected = folder / f"{assignment}.ipynb"
    if not expected.exists():
        found = sorted(p.name for p in folder.glob("*.ipynb"))
        return f"no {expected.name} in the submission" + (f" (found {', '.join(found)})" if found else "")
    try:
        read_notebook(expected)
    except NotebookError as exc:
        return str(exc).replace(str(expected), expected.name)
    return ""


def explain_failure(log: str) -> str:
    """A one-line reason from nbgrader's log of a failed autograde."""
    if "DeadKernelError" in log or "Kernel died" in log or "kernel died" in log:
        return "the kernel died while running the notebook (os._exit, a crash or out of memory)"
    if "UnresponsiveKernelError" in log or "CellTimeoutError" in log or "Timeout waiting" in log:
        return "a cell hung and the kernel did not respond to an interrupt"
    errors = [line for line in log.splitlines() if "ERROR" in line or "Error" in line]
    return (errors[-1] if errors else (log.strip().splitlines() or ["nbgrader failed"])[-1]).strip()[:300]


def _forget(paths: CoursePaths, assignment: str, student: str) -> None:
    """Remove a student's earlier results so that a failure never shows a stale grade."""
    for folder in (paths.autograded, paths.feedback):
        shutil.rmtree(folder / student / assignment, ignore_errors=True)
    with Gradebook(_db_url(paths)) as gb:
        try:
            gb.remove_submission(assignment, student)
        except MissingEntry:
            pass


def autograde_one(paths: CoursePaths, assignment: str, student: str, *,
                  cell_timeout: int, notebook_timeout: float) -> StudentGrade:
    try:
        result = run_nbgrader(paths.grading, "autograde", assignment, "--student", student, "--force",
                              timeout=notebook_timeout, cell_timeout=cell_timeout, check=False)
    except subprocess.TimeoutExpired:
        return StudentGrade(student, "FAILED", reason=f"grading took longer than {notebook_timeout:g} s in total")
    autograded = paths.autograded / student / assignment / f"{assignment}.ipynb"
    if result.returncode != 0 or not autograded.exists():
        return StudentGrade(student, "FAILED", reason=explain_failure(log_tail(result, 60)))
    return StudentGrade(student, "graded")


def grade(paths: CoursePaths, assignment: str, *, cell_timeout: int = 30,
          notebook_timeout: float = 900, jobs: int = 2) -> list[StudentGrade]:
    """Autograde every submission of ``assignment``; feedback and CSV for the graded ones."""
    (assignment,) = resolve_assignments(paths, [assignment])
    students = find_students(paths, assignment)
    if not students:
        raise NoSubmissions(
            f"no submissions for {assignment}: put each one at "
            f"{paths.submitted.relative_to(paths.root)}/<student>/{assignment}/{assignment}.ipynb"
        )
    generate(paths, assignment)  # the gradebook must hold the current source cells
    results: dict[str, StudentGrade] = {}
    runnable = []
    for student in students:
        _forget(paths, assignment, student)
        reason = precheck(paths, assignment, student)
        if reason:
            results[student] = StudentGrade(student, "FAILED", reason=reason)
        else:
            runnable.append(student)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {s: pool.submit(autograde_one, paths, assignment, s, cell_timeout=cell_timeout,
                                  notebook_timeout=notebook_timeout) for s in runnable}
        results.update({s: f.result() for s, f in futures.items()})
    graded = [s for s in students if results[s].status == "graded"]
    for student in students:
        if results[student].status == "FAILED":
            _forget(paths, assignment, student)
    if graded:
        run_nbgrader(paths.grading, "generate_feedback", assignment, "--force", "--log-level=WARN")
        with Gradebook(_db_url(paths)) as gb:
            for student in graded:
                submission = gb.find_submission(assignment, student)
                results[student].score = float(submission.score)
                results[student].max_score = float(submission.max_score)
    ordered = [results[s] for s in students]
    write_csv(paths.grades / f"{assignment}.csv", ordered)
    return ordered


def write_csv(path: Path, grades: list[StudentGrade]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_FIELDS)
        for g in grades:
            writer.writerow([g.student, g.status, "" if g.score is None else f"{g.score:g}",
                             "" if g.max_score is None else f"{g.max_score:g}", g.reason])


def format_table(grades: list[StudentGrade]) -> str:
    width = max([len("student")] + [len(g.student) for g in grades])
    lines = [f"{'student':<{width}}  {'status':<6}  {'score':>9}  reason"]
    for g in grades:
        score = f"{g.score:g}/{g.max_score:g}" if g.score is not None else "-"
        lines.append(f"{g.student:<{width}}  {g.status:<6}  {score:>9}  {g.reason}")
    return "\n".join(lines)
