"""`course export-grades`: the gradebook's scores, in nbgrader's columns or Canvas's import layout.

The gradebook is built with nbgrader's own API (no kernels), so these tests take seconds.
"""
from __future__ import annotations

import csv
import subprocess
import sys

import pytest
from nbgrader.api import Gradebook

from course_lib.pipeline.export import NothingToExport, export_grades
from course_lib.pipeline.nbgrader_run import nbgrader_env
from tests.pipeline.conftest import copy_course

A = "00_orientation"


@pytest.fixture(scope="module")
def gradebook_course(tmp_path_factory):
    """alice 5/5 on time, bob 2/5 late with a 2-point penalty, carol enrolled with no submission.
    The tests only read it."""
    course = copy_course(tmp_path_factory.mktemp("export"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", nbgrader_env()["PATH"])  # a new gradebook runs `alembic`
        _fill_gradebook(course)
    return course


def _fill_gradebook(course):
    with Gradebook(f"sqlite:///{course.grading / 'gradebook.db'}") as gb:
        gb.add_assignment(A, duedate="2026-03-01 17:00:00 UTC")
        gb.add_notebook(A, A)
        gb.add_grade_cell("softmax", A, A, max_score=3, cell_type="code")
        gb.add_grade_cell("cost", A, A, max_score=2, cell_type="code")
        gb.add_student("alice", first_name="Ada", last_name="Lovelace", email="ada@example.org",
                       lms_user_id="4242")
        gb.add_student("bob")
        gb.add_student("carol", first_name="Carol", last_name="Shaw")
        gb.add_submission(A, "alice", timestamp="2026-03-01 16:00:00 UTC")
        gb.add_submission(A, "bob", timestamp="2026-03-01 18:00:00 UTC")
        for student, scores in {"alice": (3, 2), "bob": (2, 0)}.items():
            for cell, score in zip(("softmax", "cost"), scores):
                gb.find_grade(cell, A, A, student).auto_score = score
        gb.find_submission_notebook(A, A, "bob").late_submission_penalty = 2.0
        gb.db.commit()


def rows(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def test_canvas_file_has_canvas_import_layout(gradebook_course, tmp_path):
    path, _ = export_grades(gradebook_course, A, "canvas", tmp_path / "canvas.csv")
    assert rows(path) == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", A],
        ["Points Possible", "", "", "", "", "5"],
        ["Lovelace, Ada", "4242", "", "alice", "", "5"],
        ["bob", "", "", "bob", "", "0"],            # 2 before nbgrader's late penalty of 2
        ["Shaw, Carol", "", "", "carol", "", ""],   # no graded submission: empty, not 0
    ]


def test_csv_file_has_nbgrader_export_columns_and_scores(gradebook_course):
    path, _ = export_grades(gradebook_course, A, "csv")
    assert path == gradebook_course.grades / f"{A}-gradebook.csv"
    table = {row["student_id"]: row for row in csv.DictReader(path.open(encoding="utf-8"))}
    assert list(next(iter(table.values()))) == [
        "assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
        "raw_score", "late_submission_penalty", "score", "max_score"]
    assert (table["alice"]["raw_score"], table["alice"]["score"], table["alice"]["max_score"]) == ("5", "5", "5")
    assert (table["bob"]["raw_score"], table["bob"]["late_submission_penalty"], table["bob"]["score"]) == ("2", "2", "0")
    assert table["carol"]["score"] == "" and table["carol"]["timestamp"] == ""
    assert table["alice"]["duedate"] == "2026-03-01 17:00:00"


def test_scores_agree_with_nbgrader_own_export(gradebook_course, tmp_path):
    theirs = tmp_path / "nbgrader.csv"
    subprocess.run([sys.executable, "-m", "nbgrader", "export", f"--to={theirs}", "--log-level=WARN"],
                   cwd=gradebook_course.grading, check=True, capture_output=True, text=True, timeout=120)
    path, _ = export_grades(gradebook_course, A, "csv")
    ours = {r["student_id"]: r["score"] for r in csv.DictReader(path.open(encoding="utf-8"))}
    nbgrader = {r["student_id"]: r["score"] for r in csv.DictReader(theirs.open(encoding="utf-8"))}
    assert {s: float(v) for s, v in ours.items() if v} == {s: float(nbgrader[s]) for s in ("alice", "bob")}
    assert float(nbgrader["carol"]) == 0 and ours["carol"] == ""  # nbgrader's 0 is our empty cell


def test_command_line_writes_the_named_file_and_column(gradebook_course, tmp_path):
    target = tmp_path / "to_canvas.csv"
    result = subprocess.run(
        [sys.executable, "-m", "course_lib.cli", "export-grades", A, "--format", "canvas",
         "--output", str(target), "--column", "Orientation (1234)"],
        cwd=gradebook_course.root, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("to_canvas.csv: 3 students, 2 with a graded submission")
    assert rows(target)[0][-1] == "Orientation (1234)"


def test_an_assignment_never_graded_is_refused_with_what_to_run(gradebook_course):
    with pytest.raises(NothingToExport, match="course grade 01_tokenization"):
        export_grades(gradebook_course, "01_tokenization", "canvas")
    result = subprocess.run([sys.executable, "-m", "course_lib.cli", "export-grades", "99_nothing"],
                            cwd=gradebook_course.root, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "unknown assignment" in result.stderr
