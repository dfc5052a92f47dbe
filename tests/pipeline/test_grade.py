"""`course grade`: right scores, FAILED with reasons, and honest grades no submission can touch."""
from __future__ import annotations

import csv
import socket
import subprocess
import sys
import threading

import nbformat
import pytest
from nbgrader.api import Gradebook, MissingEntry

from course_lib.pipeline.grade import GradeOptions, grade
from course_lib.pipeline.hidden import ALL_OR_NOTHING, PARTIAL, RULES, partial_score
from tests.hidden import attack
from tests.pipeline import hostile
from tests.pipeline import submissions as S
from tests.conftest import slow_fixture
from tests.pipeline.conftest import ASSIGNMENTS

A = "00_orientation"
WRONG_SOFTMAX = S.WRONG_SOFTMAX


def load(paths, name):
    source = nbformat.read(paths.source / name / f"{name}.ipynb", as_version=4)
    released = nbformat.read(paths.notebooks / f"{name}.ipynb", as_version=4)
    return source, released


def submit(paths, name, student, nb):
    S.write(nb, paths.submitted / student / name / f"{name}.ipynb")


def run_grade(paths, *options):
    """`course grade` through the CLI; returns (process result, CSV rows by student)."""
    result = subprocess.run([sys.executable, "-m", "course_lib.cli", "grade", A, *options],
                            cwd=paths.root, capture_output=True, text=True, timeout=900)
    with open(paths.grades / f"{A}.csv", newline="") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    return result, rows


def shown(row) -> str:
    return f"{row['status']} {row['score']}/{row['max_score']} {row['reason']}"


FULL_MARKS = "test_solutions_earn_full_marks_while_blank_and_delegating_answers_earn_zero"


def graded_beside_the_solutions(course, name, attacks):
    """The assignment's solutions, a blank notebook and ``attacks`` ({student: answer code by
    exercise}), graded by ``grade`` (one submission at a time: two such gradings run at once)."""
    source, released = load(course, name)
    submit(course, name, "solutions", S.correct(source))
    submit(course, name, "blank", S.blank(released))
    for student, code_by_exercise in attacks.items():
        submit(course, name, student, S.replace_answers(released, code_by_exercise))
    return source, {g.student: g for g in grade(course, name, GradeOptions(jobs=1))}


@slow_fixture(scope="module")
def beside_the_solutions(releases, tmp_path_factory, request):
    """{assignment: (course, attacks, future of (source, results by student))} for the
    assignments this session's tests grade beside the solutions.

    Two gradings run at once, each one submission at a time: as busy as one grading with
    ``jobs=2`` on two cores, while one grading's single-process steps (nbgrader's release into
    the gradebook, its feedback) overlap the other's kernels. The attacks are built here, in
    the main thread (attack.py times its trials with SIGALRM)."""
    from concurrent.futures import ThreadPoolExecutor

    names = [item.callspec.params["name"] for item in request.session.items
             if getattr(item, "originalname", "") == FULL_MARKS and getattr(item, "module", None) is request.module]
    gradings = {}
    with ThreadPoolExecutor(2) as pool:
        try:
            for name in dict.fromkeys(names):
                course = releases.copy(tmp_path_factory.mktemp(f"full_marks_{name}"), [name])
                attacks = {"delegates": attack.delegating_submission(name),
                           "equal_to_anything": attack.equal_to_anything(name)}
                gradings[name] = course, attacks, pool.submit(graded_beside_the_solutions, course, name, attacks)
            yield gradings
        finally:
            pool.shutdown(cancel_futures=True)


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_solutions_earn_full_marks_while_blank_and_delegating_answers_earn_zero(beside_the_solutions, name):
    """Graded beside the solutions: a blank notebook, the generated attack of
    tests/hidden/attack.py (each answer only imports a callable that would answer it, were it
    reachable) and answers that return values equal to anything, which must all score 0 in
    the real sandbox."""
    scratch_course, attacks, grading = beside_the_solutions[name]
    source, results = grading.result()
    for student, code_by_exercise in attacks.items():
        result = results[student]
        assert (result.status, result.score) == ("graded", 0), (student, result.reason, result.score, code_by_exercise)
    solutions, blank = results["solutions"], results["blank"]
    assert solutions.status == "graded", solutions.reason
    by_hand = sum(c.metadata["nbgrader"]["points"] for c in source.cells  # written answers: pending
                  if c.cell_type == "markdown" and c.metadata.get("nbgrader", {}).get("grade"))
    assert solutions.score == solutions.max_score - by_hand > 0, (
        (scratch_course.autograded / "solutions" / name / f"{name}.ipynb").read_text()[-3000:])
    assert blank.status == "graded" and blank.score == 0, blank.reason


def honest_zoo(source, released):
    return {
        "correct": S.correct(source),
        "blank": S.blank(released),
        "half_right": S.with_answer(released, source, "softmax_with_temperature", WRONG_SOFTMAX),
        "infinite_loop": S.prepend_to_first_answer(S.correct(source), "while True:\n    pass"),
        "edited_tests": S.edit_test_cells(S.with_answer(released, source, "softmax_with_temperature", WRONG_SOFTMAX)),
        "deleted_tests": S.delete_test_cells(S.correct(source)),
    }


HONEST_SCORES = {"correct": "5", "blank": "0", "half_right": "2", "infinite_loop": "2",
                 "edited_tests": "2", "deleted_tests": "5"}
OPTIONS = ("--cell-timeout", "10", "--timeout", "240", "--jobs", "2")


class Listener:
    """A TCP server on 127.0.0.1 that records whether anything ever connected."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.server.close()


@slow_fixture(scope="module")
def graded_together(releases, tmp_path_factory):
    """Honest submissions graded alone, then again in one run with every hostile one."""
    alone = releases.copy(tmp_path_factory.mktemp("alone"), [A])
    for student, nb in honest_zoo(*load(alone, A)).items():
        submit(alone, A, student, nb)
    _, alone_rows = run_grade(alone, *OPTIONS)

    paths = releases.copy(tmp_path_factory.mktemp("together"), [A])
    source, released = load(paths, A)
    listener = Listener()
    zoo = honest_zoo(source, released)
    zoo.update(hostile.build(
        released, source_path=paths.source / A / f"{A}.ipynb", hidden_path=paths.hidden / f"{A}.py",
        gradebook=paths.grading / "gradebook.db", autograded=paths.autograded, port=listener.port))
    for student, nb in zoo.items():
        submit(paths, A, student, nb)
    (paths.submitted / "follows_a_symlink" / A / "gradebook.db").symlink_to(paths.grading / "gradebook.db")
    corrupt = paths.submitted / "corrupt_json" / A / f"{A}.ipynb"
    corrupt.parent.mkdir(parents=True)
    corrupt.write_text('{"cells": [{"cell_type": "code", "sour')
    S.write(S.correct(source), paths.submitted / "misnamed" / A / "my_work.ipynb")
    result, rows = run_grade(paths, *OPTIONS)
    listener.close()
    return paths, alone_rows, result, rows, listener


def test_every_honest_student_keeps_the_score_they_get_alone(graded_together):
    _, alone, _, together, _ = graded_together
    for student, score in HONEST_SCORES.items():
        assert alone[student]["status"] == "graded", shown(alone[student])
        assert (alone[student]["score"], alone[student]["max_score"]) == (score, "5"), shown(alone[student])
        assert shown(together[student]) == shown(alone[student])


@pytest.mark.parametrize("student", [
    "reads_answer_key", "writes_gradebook", "silences_tracebacks", "rewrites_later_cells",
    "equal_to_anything", "delegates_to_reference", "patches_numpy_and_builtins", "exits_the_process",
    "fork_bomb", "eats_memory", "loops_ignoring_interrupts", "opens_a_connection", "prints_megabytes",
    "hangs_in_every_call", "kills_the_grader", "follows_a_symlink", "corrupt_json", "misnamed",
])
def test_every_hostile_submission_gets_zero_or_failed_with_a_reason(graded_together, student):
    _, _, _, rows, _ = graded_together
    row = rows[student]
    if row["status"] == "FAILED":
        assert row["score"] == "" and row["reason"], shown(row)
    else:
        assert row["status"] == "graded" and row["score"] == "0", shown(row)


@pytest.mark.parametrize("student, reason", [
    ("corrupt_json", "corrupt notebook JSON"),
    ("misnamed", "no 00_orientation.ipynb in the submission (found my_work.ipynb)"),
    ("exits_the_process", "kernel died"),
    ("loops_ignoring_interrupts", "did not respond to an interrupt"),
])
def test_ungradable_submissions_are_failed_with_the_reason_and_no_grade(graded_together, student, reason):
    paths, _, result, rows, _ = graded_together
    assert rows[student]["status"] == "FAILED" and reason in rows[student]["reason"], shown(rows[student])
    assert student in result.stderr and result.returncode == 1
    with Gradebook(f"sqlite:///{paths.grading / 'gradebook.db'}") as gb, pytest.raises(MissingEntry):
        gb.find_submission(A, student)


def test_the_sandbox_kept_the_network_and_the_grader_out_of_reach(graded_together):
    paths, _, result, rows, listener = graded_together
    assert listener.connections == 0
    assert result.stdout.splitlines()[0].startswith("sandbox: on (")
    with Gradebook(f"sqlite:///{paths.grading / 'gradebook.db'}") as gb:
        assert gb.find_submission(A, "correct").score == 5
    big = paths.autograded / "prints_megabytes" / A / f"{A}.ipynb"
    assert big.stat().st_size < 500_000, "a flood of output must be cut, not stored"
    leftovers = subprocess.run(["pgrep", "-f", "course-grade-"], capture_output=True, text=True).stdout
    assert not leftovers.strip(), f"sandbox processes outlived grading: {leftovers}"


def test_feedback_shows_each_hidden_check_but_never_its_code(graded_together):
    paths, _, _, _, _ = graded_together
    import html as html_lib
    import re

    hidden_source = (paths.hidden / f"{A}.py").read_text(encoding="utf-8")
    code_lines = [line.strip() for line in hidden_source.splitlines()
                  if len(line.strip()) > 25 and not line.strip().startswith(("#", '"""'))]
    page = (paths.feedback / "half_right" / A / f"{A}.html").read_text(encoding="utf-8")
    text = html_lib.unescape(re.sub(r"<[^>]+>", "", page))
    assert "✗ the worked example" in text and "✓ an empty message still pays the per-message overhead" in text
    assert not [line for line in code_lines if line in text]
    # Every check with its share of the points, each exercise's score, and the rule in one line.
    assert "Hidden tests: 0 of 3 points" in text and "Hidden tests: 2 of 2 points" in text
    assert "✗ the worked example (3 logits, T=0.7): " in text and "(0.1 of 3 points)" in text
    assert "(error path, 0.1 of 3 points)" in text and f"Rule: {RULES[PARTIAL]}." in text


PARTLY_RIGHT_SOFTMAX = """def softmax_with_temperature(logits, temperature=1.0):
    import numpy as np  # right but for T = 0 with a tie: all the mass goes to the first top logit
    z = np.asarray(logits, dtype=np.float64)
    if temperature < 0:
        raise ValueError("the temperature must be 0 or more")
    if temperature == 0:
        return np.eye(len(z))[int(np.argmax(z))]
    w = np.exp((z - z.max()) / temperature)
    return w / w.sum()
"""


def _partly_right_in_process() -> float:
    """The softmax exercise's partial score for PARTLY_RIGHT_SOFTMAX, from the hidden test run here."""
    from tests.hidden.conftest import verdict

    namespace = {}
    exec(PARTLY_RIGHT_SOFTMAX, namespace)
    checks = verdict(A, "softmax_with_temperature", softmax_with_temperature=namespace["softmax_with_temperature"])
    return partial_score(checks, 3)


def test_partial_credit_reaches_the_gradebook_the_csv_and_the_feedback(releases, tmp_path):
    """One exercise right but for one rule earns most of its points; --scoring all-or-nothing, none."""
    import html as html_lib
    import re

    expected = _partly_right_in_process()
    assert 0 < expected < 3
    scratch_course = releases.copy(tmp_path, [A])
    source, released = load(scratch_course, A)
    submit(scratch_course, A, "partly", S.with_answer(released, source, "softmax_with_temperature",
                                                      PARTLY_RIGHT_SOFTMAX))
    db = f"sqlite:///{scratch_course.grading / 'gradebook.db'}"
    for scoring, softmax in ((PARTIAL, expected), (ALL_OR_NOTHING, 0.0)):
        result, rows = run_grade(scratch_course, "--jobs", "1", "--scoring", scoring)
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[1] == f"scoring: {RULES[scoring]}"
        assert (rows["partly"]["score"], rows["partly"]["max_score"]) == (f"{2 + softmax:g}", "5"), shown(rows["partly"])
        with Gradebook(db) as gb:
            cell = gb.find_grade("softmax_with_temperature-tests", A, A, "partly")
            assert (cell.auto_score, cell.max_score) == (softmax, 3)
            assert gb.find_submission(A, "partly").score == pytest.approx(2 + softmax)
        page = (scratch_course.feedback / "partly" / A / f"{A}.html").read_text(encoding="utf-8")
        text = html_lib.unescape(re.sub(r"<[^>]+>", "", page))
        assert f"Hidden tests: {softmax:g} of 3 points" in text and f"Rule: {RULES[scoring]}." in text
        assert "✗ T = 0 with a tie for the top" in text
        if scoring == PARTIAL:
            assert "✓ the worked example (3 logits, T=0.7) (0.1 of 3 points)" in text


def test_a_failed_regrade_removes_the_earlier_grade(releases, tmp_path):
    scratch_course = releases.copy(tmp_path, [A])
    source, _ = load(scratch_course, A)
    submit(scratch_course, A, "late", S.correct(source))
    (first,) = grade(scratch_course, A)
    assert first.score == 5, first.reason
    (scratch_course.submitted / "late" / A / f"{A}.ipynb").write_text("not json")
    (result,) = grade(scratch_course, A)
    assert result.status == "FAILED" and result.score is None
    assert not (scratch_course.autograded / "late" / A).exists()


def test_no_sandbox_is_said_in_the_table_header(releases, tmp_path):
    scratch_course = releases.copy(tmp_path, [A])
    source, _ = load(scratch_course, A)
    submit(scratch_course, A, "solo", S.correct(source))
    result = subprocess.run([sys.executable, "-m", "course_lib.cli", "grade", A, "--no-sandbox"],
                            cwd=scratch_course.root, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("sandbox: OFF (--no-sandbox)")
    assert "solo" in result.stdout and "5/5" in result.stdout


@pytest.mark.slow  # it runs `course grade`, refused before grading
def test_bad_limits_are_refused_before_grading(scratch_course):
    result = subprocess.run([sys.executable, "-m", "course_lib.cli", "grade", A, "--memory-mb", "0"],
                            cwd=scratch_course.root, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "expected a whole number above 0" in result.stderr
