"""``course export-grades``: one assignment's scores from nbgrader's gradebook, as a CSV or for Canvas.

    $ course export-grades 00_orientation --format canvas
    grading/grades/00_orientation-canvas.csv: 3 students, 2 with a graded submission

    Student,ID,SIS User ID,SIS Login ID,Section,00_orientation
    Points Possible,,,,,5
    "Lovelace, Ada",4242,,alice,,5
    bob,,,bob,,0
    carol,,,carol,,

Scores come from grading/gradebook.db, never from the CSV ``course grade`` writes: the score
after nbgrader's late penalty, never below 0, as nbgrader's own ``nbgrader export`` counts
it. A student in the gradebook without a graded submission gets an empty cell, not the 0
nbgrader's export writes there: no submission is not a zero until the instructor says so.

Canvas's gradebook import reads the five student columns in this order, then one column per
assignment, and an optional "Points Possible" row. It finds each row's student by ID (the
Canvas user id), else SIS User ID, else SIS Login ID, else the name. Here ID is the
student's ``lms_user_id`` in the gradebook (empty unless the roster was imported with one:
``nbgrader db student import students.csv`` with columns id,first_name,last_name,email,
lms_user_id), SIS Login ID is the nbgrader student id (the hub login), and SIS User ID and
Section are left empty. A column named like an existing Canvas assignment updates it
(``--column "Orientation (1234)"``, as Canvas's own export names it); any other name makes
a new assignment.

``--format csv`` writes nbgrader's export columns for this one assignment.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from course_lib.pipeline.paths import CoursePaths
from course_lib.pipeline.release import resolve_assignments

FORMATS = ("csv", "canvas")
CANVAS_STUDENT_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
# nbgrader's own export columns (nbgrader/plugins/export.py), for one assignment.
CSV_COLUMNS = ("assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
               "raw_score", "late_submission_penalty", "score", "max_score")


class NothingToExport(RuntimeError):
    """The assignment has no record in the gradebook yet; the message says what to run."""


@dataclass
class StudentScore:
    student_id: str
    first_name: str = ""
    last_name: str = ""
    email: str = ""
    lms_user_id: str = ""
    timestamp: str = ""
    raw_score: float | None = None   # None: no graded submission
    late_penalty: float | None = None

    @property
    def score(self) -> float | None:
        return None if self.raw_score is None else max(0.0, self.raw_score - (self.late_penalty or 0.0))


@dataclass
class AssignmentScores:
    name: str
    due_date: str
    max_score: float
    students: list[StudentScore]


def read_scores(paths: CoursePaths, assignment: str) -> AssignmentScores:
    """Every gradebook student's score on ``assignment``."""
    (assignment,) = resolve_assignments(paths, [assignment])
    db = paths.grading / "gradebook.db"
    if not db.is_file():
        raise NothingToExport(f"no gradebook at {db.relative_to(paths.root)}: grade first, with "
                              f"`course grade {assignment}`")
    with Gradebook(f"sqlite:///{db}") as gb:
        try:
            record = gb.find_assignment(assignment)
        except MissingEntry:
            raise NothingToExport(f"{assignment} is not in the gradebook yet: grade it first, with "
                                  f"`course grade {assignment}`") from None
        students = [_student_score(gb, assignment, student) for student in gb.students]
        return AssignmentScores(assignment, _text(record.duedate), float(record.max_score),
                                sorted(students, key=lambda s: s.student_id))


def _student_score(gb: Gradebook, assignment: str, student) -> StudentScore:
    row = StudentScore(student.id, _text(student.first_name), _text(student.last_name),
                       _text(student.email), _text(student.lms_user_id))
    try:
        submission = gb.find_submission(assignment, student.id)
    except MissingEntry:
        return row
    row.timestamp = _text(submission.timestamp)
    row.raw_score = float(submission.score)
    row.late_penalty = float(submission.late_submission_penalty or 0.0)
    return row


def _text(value) -> str:
    return "" if value is None else str(value)


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


def canvas_name(student: StudentScore) -> str:
    """Canvas's sortable name, which its import can match on when no id matches.

    >>> canvas_name(StudentScore("alice", "Ada", "Lovelace")), canvas_name(StudentScore("bob"))
    ('Lovelace, Ada', 'bob')
    """
    if student.first_name and student.last_name:
        return f"{student.last_name}, {student.first_name}"
    return student.first_name or student.last_name or student.student_id


def write_canvas(scores: AssignmentScores, path: Path, column: str | None = None) -> None:
    with _open(path) as handle:
        writer = csv.writer(handle)
        writer.writerow([*CANVAS_STUDENT_COLUMNS, column or scores.name])
        writer.writerow(["Points Possible", "", "", "", "", _number(scores.max_score)])
        for s in scores.students:
            writer.writerow([canvas_name(s), s.lms_user_id, "", s.student_id, "", _number(s.score)])


def write_plain(scores: AssignmentScores, path: Path) -> None:
    with _open(path) as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for s in scores.students:
            writer.writerow([scores.name, scores.due_date, s.timestamp, s.student_id, s.last_name,
                             s.first_name, s.email, _number(s.raw_score), _number(s.late_penalty),
                             _number(s.score), _number(scores.max_score)])


def _open(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("w", newline="", encoding="utf-8")


def default_output(paths: CoursePaths, assignment: str, fmt: str) -> Path:
    # Beside `course grade`'s own grading/grades/<assignment>.csv, never over it.
    return paths.grades / f"{assignment}-{'canvas' if fmt == 'canvas' else 'gradebook'}.csv"


def export_grades(paths: CoursePaths, assignment: str, fmt: str, output: Path | None = None,
                  column: str | None = None) -> tuple[Path, AssignmentScores]:
    """Write ``assignment``'s scores in ``fmt`` ("csv" or "canvas"); returns (file, scores)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    scores = read_scores(paths, assignment)
    path = output or default_output(paths, scores.name, fmt)
    if fmt == "canvas":
        write_canvas(scores, path, column)
    else:
        write_plain(scores, path)
    return path, scores
