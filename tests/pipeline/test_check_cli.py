"""`course check`: one line per exercise, exit codes, and bad input without a traceback."""
from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.pipeline.conftest import REPO


def course(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "course_lib.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # `course check` runs the notebook in a kernel
def test_source_notebook_passes_every_check():
    result = course("check", "grading/source/00_orientation/00_orientation.ipynb")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "✓ softmax_with_temperature" in result.stdout and "hidden tests" not in result.stdout
    assert "2 of 2 exercise checks pass." in result.stdout


@pytest.mark.slow  # `course check` runs the notebook in a kernel
def test_full_check_runs_the_hidden_tests_out_of_process():
    result = course("check", "--full", "grading/source/00_orientation/00_orientation.ipynb")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("hidden tests: ✓ all pass") == 2, result.stdout
    assert "hidden tests: ✓ all pass (3 of 3 points)" in result.stdout
    assert "Hidden tests: 5 of 5 points as the grader scores them (partial credit: " in result.stdout


@pytest.mark.slow  # `course check` runs the notebook in a kernel
def test_an_answer_breaking_a_stated_rule_fails_visibly_and_in_the_hidden_tests(tmp_path):
    """An argmax one-hot at T = 0 breaks the tie rule: the visible check says so, and --full
    names the rule in the hidden test's failure too (a green visible check means done)."""
    import nbformat

    nb = nbformat.read(REPO / "grading" / "source" / "00_orientation" / "00_orientation.ipynb", as_version=4)
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "softmax_with_temperature")
    answer.source = answer.source.replace(
        "winners = (z == top).astype(np.float64)", "winners = np.eye(len(z))[int(np.argmax(z))]")
    path = tmp_path / "00_orientation.ipynb"
    nbformat.write(nb, str(path))
    with ThreadPoolExecutor(2) as pool:  # two kernels at once, one per core
        visible, full = pool.map(lambda args: course(*args), [("check", str(path)), ("check", "--full", str(path))])
    assert visible.returncode == 1 and "a tie shares the mass" in visible.stdout, visible.stdout
    assert full.returncode == 1
    assert "✗" in full.stdout and "tie for the top" in full.stdout, full.stdout
    # One rule broken out of many: partial credit, the same the grader would give.
    import re

    earned = re.search(r"tie for the top.*\(([\d.]+) of 3 points\)", full.stdout)
    assert earned and 0 < float(earned.group(1)) < 3, full.stdout


@pytest.mark.slow  # `course check` runs the notebook in a kernel
def test_full_check_needs_a_notebook_named_after_its_assignment(tmp_path):
    path = tmp_path / "my_copy.ipynb"
    path.write_bytes((REPO / "notebooks" / "00_orientation.ipynb").read_bytes())
    result = course("check", "--full", str(path))
    assert result.returncode == 2 and "named after its assignment" in result.stderr, result.stderr


@pytest.mark.slow  # `course check` runs the notebook in a kernel
def test_blank_notebook_reports_each_exercise_not_attempted():
    result = course("check", "notebooks/00_orientation.ipynb")
    assert result.returncode == 1
    assert "· softmax_with_temperature [not attempted]" in result.stdout
    assert "· conversation_cost [not attempted]" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.slow  # `course check` runs the notebook in a kernel
def test_a_wrong_answer_is_reported_with_the_tests_message(tmp_path):
    import nbformat

    nb = nbformat.read(REPO / "notebooks" / "00_orientation.ipynb", as_version=4)
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "softmax_with_temperature")
    answer.source = "def softmax_with_temperature(logits, temperature=1.0):\n    return np.ones(len(logits)) / len(logits)"
    path = tmp_path / "00_orientation.ipynb"
    nbformat.write(nb, str(path))
    result = course("check", str(path))
    assert result.returncode == 1
    line = next(l for l in result.stdout.splitlines() if "softmax_with_temperature" in l)
    assert "[failed]" in line and "expected [0.771, 0.1848, 0.04428]" in line


@pytest.mark.parametrize("content, fragment", [
    (None, "no such file"),
    ('{"cells": [', "corrupt notebook JSON"),
    ("[1, 2, 3]", "not a notebook"),
    ('{"cells": "nope", "metadata": {}, "nbformat": 4, "nbformat_minor": 5}', "not a valid notebook"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, content, fragment):
    path = tmp_path / "broken.ipynb"
    if content is not None:
        path.write_text(content)
    result = course("check", str(path))
    assert result.returncode == 2
    assert fragment in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_a_file_that_is_not_a_notebook_is_refused(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    result = course("check", str(path))
    assert result.returncode == 2 and "not a notebook" in result.stderr


@pytest.mark.slow  # it runs `course grade` (refused before grading)
def test_unknown_assignment_lists_the_known_ones():
    result = course("grade", "99_nope")
    assert result.returncode == 2 and "known: 00_orientation" in result.stderr
