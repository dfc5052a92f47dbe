"""`course grade` on honest and broken submissions: right scores, FAILED with reasons, no leaks."""
from __future__ import annotations

import csv
import subprocess
import sys

import nbformat
import pytest
from nbgrader.api import Gradebook, MissingEntry

from course_lib.pipeline.grade import grade
from course_lib.pipeline.release import release
from tests.pipeline import submissions as S
from tests.pipeline.conftest import ASSIGNMENTS
from tests.pipeline.test_release import HIDDEN, regions

A = "00_orientation"
WRONG_SOFTMAX = "def softmax_with_temperature(logits, temperature=1.0):\n    return [0.5]"
CALLS_REFERENCE = "from course_lib.orientation import softmax_with_temperature"
PATCHES_TOOLS = (
    "import numpy as np\nnp.allclose = lambda *a, **k: True\n"
    "import course_lib.checks.report as r\nr.expect_close = lambda *a, **k: None\n"
    "r.expect_raises = lambda *a, **k: None\n"
    "def softmax_with_temperature(logits, temperature=1.0):\n    return np.zeros(len(logits))"
)
IGNORES_INTERRUPT = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"


def load(paths, name):
    source = nbformat.read(paths.source / name / f"{name}.ipynb", as_version=4)
    released = nbformat.read(paths.notebooks / f"{name}.ipynb", as_version=4)
    return source, released


def submit(paths, name, student, nb):
    S.write(nb, paths.submitted / student / name / f"{name}.ipynb")


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_solutions_earn_full_marks_and_a_blank_notebook_earns_zero(scratch_course, name):
    release(scratch_course, [name])
    source, released = load(scratch_course, name)
    submit(scratch_course, name, "solutions", S.correct(source))
    submit(scratch_course, name, "blank", S.blank(released))
    results = {g.student: g for g in grade(scratch_course, name, jobs=2)}
    assert results["solutions"].status == "graded"
    assert results["solutions"].score == results["solutions"].max_score > 0
    assert results["blank"].status == "graded" and results["blank"].score == 0


@pytest.fixture(scope="module")
def graded_zoo(tmp_path_factory):
    """One `course grade` run over a zoo of submissions to notebook 00, through the CLI."""
    from tests.pipeline.conftest import copy_course

    paths = copy_course(tmp_path_factory.mktemp("zoo"))
    release(paths, [A])
    source, released = load(paths, A)
    zoo = {
        "correct": S.correct(source),
        "blank": S.blank(released),
        "infinite_loop": S.prepend_to_first_answer(S.correct(source), "while True:\n    pass"),
        "killed_kernel": S.prepend_to_first_answer(S.correct(source), "import os\nos._exit(1)"),
        "ignores_interrupt": S.prepend_to_first_answer(S.correct(source), IGNORES_INTERRUPT),
        "edited_tests": S.edit_test_cells(S.with_answer(released, source, "softmax_with_temperature", WRONG_SOFTMAX)),
        "deleted_tests": S.delete_test_cells(S.correct(source)),
        "calls_reference": S.with_answer(released, source, "softmax_with_temperature", CALLS_REFERENCE),
        "patches_tools": S.with_answer(released, source, "softmax_with_temperature", PATCHES_TOOLS),
    }
    for student, nb in zoo.items():
        submit(paths, A, student, nb)
    corrupt = paths.submitted / "corrupt_json" / A / f"{A}.ipynb"
    corrupt.parent.mkdir(parents=True)
    corrupt.write_text('{"cells": [{"cell_type": "code", "sour')
    misnamed = paths.submitted / "misnamed" / A / "my_work.ipynb"
    S.write(S.correct(source), misnamed)
    result = subprocess.run(
        [sys.executable, "-m", "course_lib.cli", "grade", A, "--cell-timeout", "4", "--timeout", "45", "--jobs", "3"],
        cwd=paths.root, capture_output=True, text=True, timeout=600)
    with open(paths.grades / f"{A}.csv", newline="") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    return paths, result, rows


def test_grade_exits_non_zero_and_names_the_failed_submissions(graded_zoo):
    _, result, _ = graded_zoo
    assert result.returncode == 1, result.stdout + result.stderr
    for student in ("corrupt_json", "killed_kernel", "ignores_interrupt", "misnamed"):
        assert student in result.stderr
    assert "Traceback" not in result.stdout


@pytest.mark.parametrize("student, score", [
    ("correct", "5"), ("blank", "0"),
    ("infinite_loop", "2"),      # the hung cell is interrupted; only request_cost still works
    ("edited_tests", "2"),       # edited tests are restored, so the wrong softmax scores 0
    ("deleted_tests", "5"),      # deleted tests are put back and graded
    ("calls_reference", "2"),    # calling the reference earns nothing
    ("patches_tools", "0"),      # patched numpy / check helpers void the hidden tests
])
def test_scores(graded_zoo, student, score):
    _, _, rows = graded_zoo
    assert rows[student]["status"] == "graded"
    assert (rows[student]["score"], rows[student]["max_score"]) == (score, "5")


@pytest.mark.parametrize("student, reason", [
    ("corrupt_json", "corrupt notebook JSON"),
    ("killed_kernel", "kernel died"),
    ("ignores_interrupt", ""),
    ("misnamed", "no 00_orientation.ipynb in the submission (found my_work.ipynb)"),
])
def test_ungradable_submissions_are_failed_never_zero(graded_zoo, student, reason):
    paths, _, rows = graded_zoo
    row = rows[student]
    assert row["status"] == "FAILED" and row["score"] == "" and row["reason"]
    assert reason in row["reason"]
    with Gradebook(f"sqlite:///{paths.grading / 'gradebook.db'}") as gb, pytest.raises(MissingEntry):
        gb.find_submission(A, student)


def test_feedback_never_shows_hidden_test_source(graded_zoo):
    paths, _, _ = graded_zoo
    source = nbformat.read(paths.source / A / f"{A}.ipynb", as_version=4)
    hidden = [line for cell in source.cells for line in regions(cell.source, HIDDEN)]
    pages = sorted(paths.feedback.glob(f"*/{A}/{A}.html"))
    assert {p.parts[-3] for p in pages} >= {"correct", "blank", "edited_tests", "calls_reference"}
    for page in pages:
        html = page.read_text(encoding="utf-8")
        import html as html_lib

        text = html_lib.unescape(html)
        assert not [line for line in hidden if line in text], page
        assert "BEGIN HIDDEN TESTS" not in text
    reference = (paths.feedback / "calls_reference" / A / f"{A}.html").read_text(encoding="utf-8")
    assert "calls the course_lib reference" in reference


def test_a_failed_regrade_removes_the_earlier_grade(scratch_course):
    release(scratch_course, [A])
    source, _ = load(scratch_course, A)
    submit(scratch_course, A, "late", S.correct(source))
    assert grade(scratch_course, A)[0].score == 5
    (scratch_course.submitted / "late" / A / f"{A}.ipynb").write_text("not json")
    (result,) = grade(scratch_course, A)
    assert result.status == "FAILED" and result.score is None
    assert not (scratch_course.autograded / "late" / A).exists()
