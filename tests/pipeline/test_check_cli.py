"""`course check`: one line per exercise, exit codes, and bad input without a traceback."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.pipeline.conftest import REPO


def course(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "course_lib.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_source_notebook_passes_every_check():
    result = course("check", "grading/source/00_orientation/00_orientation.ipynb")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "✓ softmax_with_temperature (visible + hidden tests)" in result.stdout
    assert "2 of 2 exercise checks pass." in result.stdout


def test_blank_notebook_reports_each_exercise_not_attempted():
    result = course("check", "notebooks/00_orientation.ipynb")
    assert result.returncode == 1
    assert "· softmax_with_temperature [not attempted]" in result.stdout
    assert "· request_cost [not attempted]" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


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
    assert "[failed]" in line and "expected [0.7712, 0.1848, 0.044]" in line


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


def test_unknown_assignment_lists_the_known_ones():
    result = course("grade", "99_nope")
    assert result.returncode == 2 and "known: 00_orientation" in result.stderr
