"""Bad input to `course grade`: each case gets its own row with the reason, nobody else's grade moves.

One grading run holds every case (a run takes tens of seconds): two notebooks in one folder,
another assignment's notebook (under its own name, and renamed), no timestamp.txt, an
unreadable timestamp.txt, a late submission, and a gradebook student who submitted nothing;
beside them two honest submissions whose scores are known (test_grade.HONEST_SCORES).
"""
from __future__ import annotations

import nbformat
import pytest
from nbgrader.api import Gradebook, MissingEntry

from course_lib.pipeline.nbgrader_run import run_nbgrader
from tests.pipeline import submissions as S
from tests.conftest import slow_fixture
from tests.pipeline.test_grade import A, HONEST_SCORES, OPTIONS, load, run_grade, shown, submit

DUE = "2026-03-01 17:00:00 UTC"
ON_TIME = "2026-03-01 16:59:00.000000 UTC"  # nbgrader's own timestamp format
LATE = "2026-03-01 19:02:05.000000 UTC"     # 2 h 2 min 5 s past DUE
OTHER = "01_tokenization"


def collected(paths, student, nb, timestamp=ON_TIME):
    """A submission as `nbgrader collect` leaves it: the notebook beside timestamp.txt."""
    submit(paths, A, student, nb)
    if timestamp is not None:
        (paths.submitted / student / A / "timestamp.txt").write_text(timestamp)


@slow_fixture(scope="module")
def graded(releases, tmp_path_factory):
    paths = releases.copy(tmp_path_factory.mktemp("bad_input"), [A])
    source, released = load(paths, A)
    other = nbformat.read(paths.source / OTHER / f"{OTHER}.ipynb", as_version=4)
    run_nbgrader(paths.grading, "db", "assignment", "add", A, f"--duedate={DUE}", "--log-level=WARN")
    run_nbgrader(paths.grading, "db", "student", "add", "never_submitted", "--log-level=WARN")

    collected(paths, "good", S.correct(source))
    collected(paths, "half_right", S.with_answer(released, source, "softmax_with_temperature", S.WRONG_SOFTMAX))
    collected(paths, "two_notebooks", S.correct(source))
    S.write(S.blank(released), paths.submitted / "two_notebooks" / A / f"{A}-Copy1.ipynb")
    collected(paths, "other_assignment_file", S.correct(source))
    (paths.submitted / "other_assignment_file" / A / f"{A}.ipynb").unlink()
    S.write(other, paths.submitted / "other_assignment_file" / A / f"{OTHER}.ipynb")
    collected(paths, "other_assignment_renamed", other)
    collected(paths, "no_timestamp", S.correct(source), timestamp=None)
    collected(paths, "bad_timestamp", S.correct(source), timestamp="last tuesday-ish")
    collected(paths, "late", S.correct(source), timestamp=LATE)
    result, rows = run_grade(paths, *OPTIONS)
    return paths, result, rows


@pytest.mark.parametrize("student, status, score, reason", [
    ("good", "graded", "5", ""),
    ("half_right", "graded", HONEST_SCORES["half_right"], ""),
    ("two_notebooks", "graded", "5", f"graded {A}.ipynb only; also submitted {A}-Copy1.ipynb"),
    ("no_timestamp", "graded", "5", "no timestamp.txt (nbgrader collect writes one), so lateness was not checked"),
    ("late", "graded", "5", "late by 2 h 2 min; late penalty 0"),
    ("other_assignment_file", "FAILED", "",
     f"no {A}.ipynb in the submission (found {OTHER}.ipynb, the notebook of assignment {OTHER})"),
    ("other_assignment_renamed", "FAILED", "", f"{A}.ipynb is the notebook of {OTHER}"),
    ("bad_timestamp", "FAILED", "", "timestamp.txt holds 'last tuesday-ish', not a time"),
    ("never_submitted", "absent", "", "not submitted"),
])
def test_each_case_has_its_own_row_and_reason(graded, student, status, score, reason):
    _, result, rows = graded
    row = rows[student]
    assert (row["status"], row["score"]) == (status, score), shown(row)
    assert row["reason"].startswith(reason) if reason else row["reason"] == "", shown(row)
    assert student in result.stdout


def test_lateness_and_submission_time_are_nbgrader_figures(graded):
    paths, _, rows = graded
    assert (rows["late"]["timestamp"], rows["late"]["seconds_late"]) == ("2026-03-01 19:02:05 UTC", "7325")
    assert (rows["good"]["seconds_late"], rows["good"]["late_penalty"]) == ("0", "0")
    assert rows["no_timestamp"]["timestamp"] == "" and rows["no_timestamp"]["seconds_late"] == ""
    with Gradebook(f"sqlite:///{paths.grading / 'gradebook.db'}") as gb:
        assert gb.find_submission(A, "late").total_seconds_late == 7325
        assert str(gb.find_assignment(A).duedate) == "2026-03-01 17:00:00"  # grading kept the due date


def test_failed_cases_leave_no_grade_and_the_others_exit_status_counts_only_them(graded):
    paths, result, _ = graded
    failed = ["bad_timestamp", "other_assignment_file", "other_assignment_renamed"]
    assert result.returncode == 1
    assert all(student in result.stderr for student in failed) and "never_submitted" not in result.stderr
    with Gradebook(f"sqlite:///{paths.grading / 'gradebook.db'}") as gb:
        for student in [*failed, "never_submitted"]:
            with pytest.raises(MissingEntry):
                gb.find_submission(A, student)
        assert gb.find_submission(A, "good").score == 5


def test_the_extra_notebook_is_never_run(graded):
    paths, _, _ = graded
    autograded = paths.autograded / "two_notebooks" / A
    assert sorted(p.name for p in autograded.glob("*.ipynb")) == [f"{A}.ipynb"]
