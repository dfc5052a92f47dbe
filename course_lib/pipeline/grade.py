"""``course grade``: autograde every submission, write feedback and a grades CSV.

nbgrader alone reports a submission it could not grade (corrupt JSON, a dead kernel, a hang)
as 0.0 in its CSV, the same as an honest zero. Here ``--jobs`` worker processes
(grade_worker.py) each take the next student in turn and run nbgrader's autograde, whose
Execute step is the sandboxed, out-of-process grading of autograde.py. A submission that
fails is FAILED with the reason, its stale grade is removed from the gradebook, and every
other student keeps theirs. Feedback, the gradebook and the CSV are written here, by the
grader alone, once every student kernel is gone.

What ``nbgrader collect`` wrote is graded as it stands: its timestamp.txt is nbgrader's
submission time, nbgrader decides lateness against the gradebook's due date and applies
the configured late penalty; the row then says ``late by ...; late penalty ...``. Graded
rows also note extra notebooks and a missing timestamp.txt (when there is a due date);
a notebook of another assignment is FAILED; a student in the gradebook with nothing
submitted gets an ``absent`` row.
"""
from __future__ import annotations

import csv
import functools
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
from nbgrader.utils import parse_utc

from course_lib.pipeline import manual_grades
from course_lib.pipeline.grade_worker import RESULT
from course_lib.pipeline.hidden import PARTIAL, RULES, SCORING
from course_lib.pipeline.learner import GRADE_CELL_TIMEOUT, GRADE_NOTEBOOK_TIMEOUT
from course_lib.pipeline.nbgrader_run import nbgrader_env, run_nbgrader
from course_lib.pipeline.notebook_io import NotebookError, read_notebook
from course_lib.pipeline.paths import CoursePaths
from course_lib.pipeline.release import generate, refresh_sources, resolve_assignments
from course_lib.pipeline.sandbox import Limits, check_available

# timestamp, seconds_late and late_penalty are nbgrader's own figures, from the gradebook.
CSV_FIELDS = ("student", "status", "score", "max_score", "reason", "timestamp", "seconds_late", "late_penalty")


class NoSubmissions(RuntimeError):
    pass


@dataclass
class StudentGrade:
    student: str
    # "graded", "FAILED", or "absent" (in the gradebook, with nothing submitted). A graded
    # row may still carry a reason: a note the instructor should read (late, extra files).
    status: str
    score: float | None = None      # after nbgrader's late penalty, as its own export counts it
    max_score: float | None = None
    reason: str = ""
    timestamp: str = ""             # when the student submitted (collect's timestamp.txt), UTC
    seconds_late: float = 0.0       # past the due date, extensions included, as nbgrader counts it
    late_penalty: float = 0.0       # what nbgrader's LateSubmissionPlugin took off


def _db_url(paths: CoursePaths) -> str:
    return f"sqlite:///{paths.grading / 'gradebook.db'}"


def find_students(paths: CoursePaths, assignment: str) -> list[str]:
    if not paths.submitted.is_dir():
        return []
    return sorted(p.name for p in paths.submitted.iterdir() if (p / assignment).is_dir())


def absent_students(paths: CoursePaths, assignment: str, submitted: list[str]) -> list[str]:
    """Students in the gradebook (``nbgrader db student import``, or graded before) who
    have no ``submitted/<student>/<assignment>/`` folder."""
    with Gradebook(_db_url(paths)) as gb:
        enrolled = {student.id for student in gb.students}
    return sorted(enrolled - set(submitted))


def precheck(paths: CoursePaths, assignment: str, student: str) -> str:
    """Why this submission cannot be graded, or '' when it can."""
    folder = paths.submitted / student / assignment
    expected = folder / f"{assignment}.ipynb"
    if not expected.exists():
        return _no_notebook(paths, assignment, folder)
    try:
        nb = read_notebook(expected)
    except NotebookError as exc:
        return str(exc).replace(str(expected), expected.name)
    other = other_assignment_of(paths, assignment, nb)
    if other:
        return (f"{expected.name} is the notebook of {other} (its graded cells are {other}'s, none "
                f"are {assignment}'s): ask the student to submit their {assignment} notebook")
    return _timestamp_problem(folder)


def _no_notebook(paths: CoursePaths, assignment: str, folder: Path) -> str:
    found = sorted(p.name for p in folder.glob("*.ipynb"))
    if not found:
        return f"no {assignment}.ipynb in the submission"
    known = set(paths.assignments())
    # A student who submits one assignment's notebook under another's name gets told which.
    named = [f"{n}, the notebook of assignment {n[:-6]}" if n[:-6] in known else n for n in found]
    return f"no {assignment}.ipynb in the submission (found {', '.join(named)})"


def _grade_ids(nb) -> set[str]:
    return {cell.metadata.nbgrader.grade_id for cell in nb.cells
            if "grade_id" in cell.get("metadata", {}).get("nbgrader", {})}


@functools.lru_cache(maxsize=32)
def _source_grade_ids(path: Path, mtime_ns: int) -> frozenset[str]:  # mtime: a rebuilt source is reread
    return frozenset(_grade_ids(read_notebook(path)))


def other_assignment_of(paths: CoursePaths, assignment: str, nb) -> str:
    """The other assignment this notebook belongs to, or '' (told apart by nbgrader's cell ids:
    none of the ids only ``assignment`` has, some only the other has)."""
    ids = {}
    for name in paths.assignments():
        source = paths.source / name / f"{name}.ipynb"
        ids[name] = _source_grade_ids(source, source.stat().st_mtime_ns)
    if assignment not in ids:
        return ""
    submitted = _grade_ids(nb)
    others = set().union(*(v for k, v in ids.items() if k != assignment))
    if not submitted or submitted & (ids[assignment] - others):
        return ""
    return next((name for name, own in ids.items()
                 if name != assignment and submitted & (own - ids[assignment])), "")


def _timestamp_problem(folder: Path) -> str:
    """nbgrader's autograde stops at a timestamp.txt it cannot read: say so, and how to fix it."""
    path = folder / "timestamp.txt"
    text = path.read_text(encoding="utf-8", errors="replace").strip() if path.is_file() else ""
    if not text:
        return ""  # none, or empty: nbgrader grades it with no submission time
    try:
        parse_utc(text)
    except (ValueError, OverflowError):
        return (f"timestamp.txt holds {text[:40]!r}, not a time: correct it (nbgrader writes e.g. "
                "'2026-03-01 16:59:00.000000 UTC') or delete it to grade with no submission time")
    return ""


def has_timestamp(folder: Path) -> bool:
    path = folder / "timestamp.txt"
    return path.is_file() and bool(path.read_text(encoding="utf-8", errors="replace").strip())


def submission_notes(paths: CoursePaths, assignment: str, student: str, due_date) -> list[str]:
    """What the instructor should know about a submission that was graded anyway."""
    folder = paths.submitted / student / assignment
    notes = []
    extra = sorted(p.name for p in folder.glob("*.ipynb") if p.name != f"{assignment}.ipynb")
    if extra:
        notes.append(f"graded {assignment}.ipynb only; also submitted {', '.join(extra)}")
    if due_date is not None and not has_timestamp(folder):
        notes.append("no timestamp.txt (nbgrader collect writes one), so lateness was not checked")
    return notes


def describe_delay(seconds: float) -> str:
    """A delay in the two largest units that matter.

    >>> describe_delay(4.2), describe_delay(3725), describe_delay(2 * 86400 + 7 * 3600 + 60)
    ('4 s', '1 h 2 min', '2 d 7 h')
    """
    if seconds < 1:
        return "under 1 s"  # nbgrader counts any time past the due date as late
    seconds = int(round(seconds))
    parts = [(seconds // 86400, "d"), (seconds % 86400 // 3600, "h"), (seconds % 3600 // 60, "min"),
             (seconds % 60, "s")]
    first = next((i for i, (value, _) in enumerate(parts) if value), len(parts) - 1)
    return " ".join(f"{value} {unit}" for value, unit in parts[first:first + 2] if value)


def late_note(seconds_late: float, penalty: float, raw_score: float) -> str:
    """
    >>> late_note(3725, 0, 4), late_note(4, 2, 2)
    ('late by 1 h 2 min; late penalty 0', 'late by 4 s; late penalty 2 (score before it 2)')
    """
    note = f"late by {describe_delay(seconds_late)}; late penalty {penalty:g}"
    return note + (f" (score before it {raw_score:g})" if penalty else "")


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
    scoring: str = PARTIAL          # or ALL_OR_NOTHING (--scoring all-or-nothing); see hidden.RULES

    def __post_init__(self) -> None:
        if self.scoring not in SCORING:
            raise ValueError(f"scoring must be one of {', '.join(SCORING)}, got {self.scoring!r}")

    def worker_options(self) -> str:
        return json.dumps({"sandbox": self.sandbox, "cell_timeout": self.cell_timeout,
                           "notebook_timeout": self.notebook_timeout, "memory_mb": self.limits.memory_mb,
                           "processes": self.limits.processes, "cpu_seconds": self.limits.cpu_seconds,
                           "scoring": self.scoring})

    def describe(self) -> str:
        """The lines above the table: how the code ran, then which rule scored it."""
        return f"{self._sandbox_line()}\nscoring: {RULES[self.scoring]}"

    def _sandbox_line(self) -> str:
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
    by_hand = {student: manual_grades.keep(paths, assignment, student) for student in students}
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
    for student in graded:
        kept = manual_grades.restore(paths, assignment, student, by_hand[student])
        if kept:
            results[student].reason = "; ".join(filter(None, [
                results[student].reason, f"kept {kept} grade(s) given by hand (their answers are unchanged)"]))
    if graded:
        run_nbgrader(paths.grading, "generate_feedback", assignment, "--force", "--log-level=WARN")
        _record_scores(paths, assignment, [results[s] for s in graded])
    due_date = _due_date(paths, assignment)
    for student in graded:
        results[student].reason = "; ".join(
            filter(None, [results[student].reason, *submission_notes(paths, assignment, student, due_date)]))
    for student in absent_students(paths, assignment, students):
        results[student] = StudentGrade(student, "absent", reason="not submitted")
    ordered = [results[s] for s in sorted(results)]
    write_csv(paths.grades / f"{assignment}.csv", ordered)
    return ordered


def _due_date(paths: CoursePaths, assignment: str):
    with Gradebook(_db_url(paths)) as gb:
        return gb.find_assignment(assignment).duedate


def _record_scores(paths: CoursePaths, assignment: str, grades: list[StudentGrade]) -> None:
    """Score, submission time and lateness of each graded submission, as nbgrader recorded
    them: autograde read collect's timestamp.txt, and its AssignLatePenalties step asked the
    configured LateSubmissionPlugin for the penalty."""
    with Gradebook(_db_url(paths)) as gb:
        for g in grades:
            submission = gb.find_submission(assignment, g.student)
            raw = float(submission.score)
            g.late_penalty = float(submission.late_submission_penalty or 0.0)
            g.score = max(0.0, raw - g.late_penalty)  # as nbgrader's own export counts it
            g.max_score = float(submission.max_score)
            g.timestamp = f"{submission.timestamp:%Y-%m-%d %H:%M:%S} UTC" if submission.timestamp else ""
            g.seconds_late = float(submission.total_seconds_late)
            if g.seconds_late > 0:
                g.reason = "; ".join(filter(None, [g.reason, late_note(g.seconds_late, g.late_penalty, raw)]))
            pending = sum(grade.max_score for notebook in submission.notebooks for grade in notebook.grades
                          if grade.needs_manual_grade)
            if pending:  # written answers: the score above leaves them out until they are graded
                g.reason = "; ".join(filter(None, [g.reason, f"{pending:g} points wait for grading by hand"]))


def write_csv(path: Path, grades: list[StudentGrade]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_FIELDS)
        for g in grades:
            writer.writerow([g.student, g.status, "" if g.score is None else f"{g.score:g}",
                             "" if g.max_score is None else f"{g.max_score:g}", g.reason, g.timestamp,
                             # with no submission time, lateness is unknown, not 0
                             f"{g.seconds_late:g}" if g.timestamp else "",
                             f"{g.late_penalty:g}" if g.timestamp else ""])


def format_table(grades: list[StudentGrade]) -> str:
    width = max([len("student")] + [len(g.student) for g in grades])
    lines = [f"{'student':<{width}}  {'status':<6}  {'score':>9}  reason"]
    for g in grades:
        score = f"{g.score:g}/{g.max_score:g}" if g.score is not None else "-"
        lines.append(f"{g.student:<{width}}  {g.status:<6}  {score:>9}  {g.reason}")
    return "\n".join(lines)
