"""``course grade``: autograde every submission, write feedback and a grades CSV.

nbgrader alone reports a submission it could not grade (corrupt JSON, a dead kernel, a hang)
as 0.0 in its CSV, the same as an honest zero. Here ``--jobs`` worker processes
(grade_worker.py) each take the next student in turn and run nbgrader's autograde, whose
Execute step is the sandboxed, out-of-process grading of autograde.py. A submission that
fails is FAILED with the reason, its stale grade is removed from the gradebook, and every
other student keeps theirs. Feedback, the gradebook and the CSV are written here, by the
grader alone, once every student kernel is gone.
"""
from __future__ import annotations

import csv
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from course_lib.pipeline.grade_worker import RESULT
from course_lib.pipeline.learner import GRADE_CELL_TIMEOUT, GRADE_NOTEBOOK_TIMEOUT
from course_lib.pipeline.nbgrader_run import nbgrader_env, run_nbgrader
from course_lib.pipeline.notebook_io import NotebookError, read_notebook
from course_lib.pipeline.paths import CoursePaths
from course_lib.pipeline.release import generate, refresh_sources, resolve_assignments
from course_lib.pipeline.sandbox import Limits, check_available

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


def _forget(paths: CoursePaths, assignment: str, student: str) -> None:
    """Remove a student's earlier results so that a failure never shows a stale grade."""
    for folder in (paths.autograded, paths.feedback):
        shutil.rmtree(folder / student / assignment, ignore_errors=True)
    with Gradebook(_db_url(paths)) as gb:
        try:
            gb.remove_submission(assignment, student)
        except MissingEntry:
            pass


@dataclass(frozen=True)
class GradeOptions:
    cell_timeout: int = GRADE_CELL_TIMEOUT           # seconds per cell and per hidden-test call
    notebook_timeout: float = GRADE_NOTEBOOK_TIMEOUT  # seconds per submission in total
    jobs: int = 2                   # submissions graded at once
    sandbox: bool = True            # False: student code runs as you (--no-sandbox)
    limits: Limits = Limits()

    def worker_options(self) -> str:
        return json.dumps({"sandbox": self.sandbox, "cell_timeout": self.cell_timeout,
                           "notebook_timeout": self.notebook_timeout, "memory_mb": self.limits.memory_mb,
                           "processes": self.limits.processes, "cpu_seconds": self.limits.cpu_seconds})

    def describe(self) -> str:
        if not self.sandbox:
            return ("sandbox: OFF (--no-sandbox): student code ran as you, with the course folder "
                    "(answer key, gradebook) reachable")
        return f"sandbox: on ({self.limits.describe()}; {self.cell_timeout} s per cell)"


class _Worker:
    """One grade_worker process: send a student, wait for its line, within a time limit."""

    def __init__(self, paths: CoursePaths, assignment: str, options: GradeOptions) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "course_lib.pipeline.grade_worker", options.worker_options(), assignment],
            cwd=paths.grading, env=nbgrader_env(), text=True, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self.lines: queue.Queue = queue.Queue()
        self.log: deque[str] = deque(maxlen=40)
        threading.Thread(target=self._pump, args=(self.process.stdout, True), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.process.stderr, False), daemon=True).start()

    def _pump(self, stream, answers: bool) -> None:
        for line in stream:
            if answers and line.startswith(RESULT + " "):
                self.lines.put(json.loads(line[len(RESULT) + 1:]))
            else:
                self.log.append(line.rstrip())
        if answers:
            self.lines.put(None)  # the worker has exited

    def grade(self, student: str, timeout: float) -> StudentGrade:
        self.process.stdin.write(student + "\n")
        self.process.stdin.flush()
        try:
            answer = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            return StudentGrade(student, "FAILED", reason=f"grading took longer than {timeout:g} s in total")
        if answer is None or answer["student"] != student:
            tail = next((l for l in reversed(self.log) if l.strip()), "no message")
            return StudentGrade(student, "FAILED", reason=f"the grading process stopped ({tail[:200]})")
        return StudentGrade(student, "graded" if answer["ok"] else "FAILED", reason=answer["reason"])

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()

    def close(self) -> None:
        if self.alive:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def _autograde_all(paths: CoursePaths, assignment: str, students: list[str],
                   options: GradeOptions) -> dict[str, StudentGrade]:
    """Each of ``jobs`` threads drives one worker, taking the next student when free."""
    todo: deque[str] = deque(students)
    lock = threading.Lock()
    results: dict[str, StudentGrade] = {}
    # The worker enforces the total time itself; this outer bound only catches a stuck worker.
    allowance = options.notebook_timeout + 60

    def drive() -> None:
        worker = None
        try:
            while True:
                with lock:
                    if not todo:
                        return
                    student = todo.popleft()
                if worker is None or not worker.alive:
                    worker = _Worker(paths, assignment, options)
                results[student] = worker.grade(student, allowance)
        finally:
            if worker is not None:
                worker.close()

    threads = [threading.Thread(target=drive) for _ in range(max(1, min(options.jobs, len(students))))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def grade(paths: CoursePaths, assignment: str, options: GradeOptions = GradeOptions()) -> list[StudentGrade]:
    """Autograde every submission of ``assignment``; feedback and CSV for the graded ones."""
    (assignment,) = resolve_assignments(paths, [assignment])
    students = find_students(paths, assignment)
    if not students:
        raise NoSubmissions(
            f"no submissions for {assignment}: put each one at "
            f"{paths.submitted.relative_to(paths.root)}/<student>/{assignment}/{assignment}.ipynb"
        )
    if options.sandbox:
        check_available()
    refresh_sources(paths, [assignment])  # never grade against a stale source notebook
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
    results.update(_autograde_all(paths, assignment, runnable, options))
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
