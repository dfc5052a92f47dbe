"""The class workflow end to end, through nbgrader's exchange, on one machine.

    instructor: nbgrader release_assignment -> collect -> course grade -> generate_feedback
                -> release_feedback -> course export-grades
    alice, bob: nbgrader fetch_assignment -> edit -> submit ... fetch_feedback

A temporary folder is the exchange (``Exchange.root``), and each student has a home folder
whose ``~/.jupyter/nbgrader_config.py`` names the course, the exchange and the student:
``CourseDirectory.student_id``, the id nbgrader's own ``--student`` option sets (on a hub it
is the login name, which both students here share). HOME also keeps each student's nbgrader
cache apart: fetch_feedback finds feedback through the submissions in that cache. Every
nbgrader command runs with the HOME of whoever runs it, none with the tester's.
"""
from __future__ import annotations

import csv
import html
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import pytest

from course_lib.pipeline.nbgrader_run import nbgrader_env
from tests.conftest import slow_fixture
from tests.pipeline import submissions as S
from tests.pipeline.test_grade import A, HONEST_SCORES, OPTIONS

COURSE_ID = "after-you-press-enter"  # grading/nbgrader_config.py
HALF = float(HONEST_SCORES["half_right"])  # bob's score before the late penalty
ROSTER = "id,first_name,last_name,email,lms_user_id\nalice,Ada,Lovelace,ada@example.org,4242\nbob,,,,\ncarol,,,,\n"


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in nbgrader_env().items() if not k.startswith("JUPYTER")}
    env["HOME"] = str(home)
    return env


def run(command: list[str], cwd: Path, home: Path, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=cwd, env=env_for(home), capture_output=True, text=True, timeout=900)
    if check and result.returncode != 0:
        pytest.fail(f"{' '.join(command)} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def nbgrader(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "nbgrader", *args], cwd, home)


def student_home(root: Path, student: str, exchange: Path) -> Path:
    home = root / "home" / student
    (home / ".jupyter").mkdir(parents=True)
    (home / ".jupyter" / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.Exchange.root = {str(exchange)!r}\n"
        f"c.CourseDirectory.student_id = {student!r}\n")
    return home


def answers(source) -> dict[str, str]:
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in source.cells
            if c.get("metadata", {}).get("nbgrader", {}).get("solution")}


def work_on(home: Path, code_by_exercise: dict[str, str]) -> None:
    """The student fills in their fetched notebook and saves it."""
    path = home / A / f"{A}.ipynb"
    nbformat.write(S.replace_answers(nbformat.read(path, as_version=4), code_by_exercise), str(path))


@slow_fixture(scope="module")
def classroom(releases, tmp_path_factory):
    root = tmp_path_factory.mktemp("classroom")
    paths = releases.copy(root / "course", [A])  # what `course release` does: grading/release/ and notebooks/
    exchange = root / "exchange"
    with open(paths.grading / "nbgrader_config.py", "a", encoding="utf-8") as config:
        config.write(f"\nc.Exchange.root = {str(exchange)!r}\n"
                     "c.LateSubmissionPlugin.penalty_method = 'zero'  # a late submission scores 0\n")
    teacher = root / "home" / "instructor"
    teacher.mkdir(parents=True)
    grading = paths.grading
    (root / "roster.csv").write_text(ROSTER)
    nbgrader("db", "student", "import", str(root / "roster.csv"), cwd=grading, home=teacher)
    nbgrader("release_assignment", A, cwd=grading, home=teacher)

    source = nbformat.read(paths.source / A / f"{A}.ipynb", as_version=4)
    alice, bob = (student_home(root, s, exchange) for s in ("alice", "bob"))
    nbgrader("fetch_assignment", A, cwd=alice, home=alice)
    work_on(alice, answers(source))
    nbgrader("submit", A, cwd=alice, home=alice)
    # The due date falls between the two submissions (set once alice has submitted, so that
    # the test needs no clock tricks): alice is on time, bob late.
    due = datetime.now(timezone.utc)
    time.sleep(1.0)
    nbgrader("fetch_assignment", A, cwd=bob, home=bob)
    work_on(bob, {**answers(source), "softmax_with_temperature": S.WRONG_SOFTMAX})
    nbgrader("submit", A, cwd=bob, home=bob)
    nbgrader("db", "assignment", "add", A, f"--duedate={due:%Y-%m-%d %H:%M:%S.%f} UTC", cwd=grading, home=teacher)

    nbgrader("collect", A, cwd=grading, home=teacher)
    graded = run([sys.executable, "-m", "course_lib.cli", "grade", A, *OPTIONS], paths.root, teacher, check=False)
    nbgrader("generate_feedback", A, cwd=grading, home=teacher)  # course grade ran it: again changes nothing
    nbgrader("release_feedback", A, cwd=grading, home=teacher)
    for home in (alice, bob):
        nbgrader("fetch_feedback", A, cwd=home, home=home)
    run([sys.executable, "-m", "course_lib.cli", "export-grades", A, "--format", "canvas"], paths.root, teacher)
    with open(paths.grades / f"{A}.csv", newline="", encoding="utf-8") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    return paths, {"alice": alice, "bob": bob}, exchange, graded, rows


def test_collect_leaves_each_submission_with_nbgrader_timestamp(classroom):
    paths, _, _, _, _ = classroom
    for student in ("alice", "bob"):
        folder = paths.submitted / student / A
        assert sorted(p.name for p in folder.iterdir()) == [f"{A}.ipynb", "submission_secret.txt", "timestamp.txt"]


def test_course_grade_grades_what_collect_produced_and_flags_the_late_one(classroom):
    _, _, _, graded, rows = classroom
    assert graded.returncode == 0, graded.stdout + graded.stderr
    alice, bob, carol = rows["alice"], rows["bob"], rows["carol"]
    assert (alice["status"], alice["score"], alice["max_score"], alice["reason"]) == ("graded", "5", "5", "")
    assert alice["seconds_late"] == "0" and alice["timestamp"].endswith(" UTC")
    # nbgrader decided bob was late, and its LateSubmissionPlugin ('zero') took all his points.
    assert (bob["status"], bob["score"], bob["late_penalty"]) == ("graded", "0", f"{HALF:g}"), bob
    assert re.fullmatch(rf"late by [^;]+; late penalty {HALF:g} \(score before it {HALF:g}\)", bob["reason"]), bob["reason"]
    assert float(bob["seconds_late"]) > 0
    assert (carol["status"], carol["reason"]) == ("absent", "not submitted")  # on the roster, never submitted
    assert "late by" in graded.stdout and "not submitted" in graded.stdout


def page_text(path: Path) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8"))))


def test_each_student_fetches_only_their_own_feedback(classroom):
    _, homes, exchange, _, _ = classroom
    released = sorted(p.name for p in (exchange / COURSE_ID / "feedback").iterdir())
    assert len(released) == 2  # named by a hash of each submission's secret, not by student
    pages = {}
    for student, home in homes.items():
        (page,) = (home / A / "feedback").glob(f"*/{A}.html")
        submitted_at = (home / ".local/share/jupyter/nbgrader_cache" / COURSE_ID).glob(f"{student}+{A}+*")
        assert page.parent.name == next(submitted_at).name.split("+")[2]  # feedback for this submission
        pages[student] = page_text(page)
    assert f"{A} (Score: 5.0 / 5.0)" in pages["alice"] and "return [0.5]" not in pages["alice"]
    assert f"{A} (Score: 0.0 / 5.0)" in pages["bob"] and "return [0.5]" in pages["bob"]
    assert f"Late submission penalty (Score: -{HALF:.1f})" in pages["bob"]


def test_export_grades_gives_canvas_the_gradebook_scores(classroom):
    paths, _, _, _, _ = classroom
    with open(paths.grades / f"{A}-canvas.csv", newline="", encoding="utf-8") as handle:
        table = list(csv.reader(handle))
    assert table == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", A],
        ["Points Possible", "", "", "", "", "5"],
        ["Lovelace, Ada", "4242", "", "alice", "", "5"],
        ["bob", "", "", "bob", "", "0"],
        ["carol", "", "", "carol", "", ""],
    ]
