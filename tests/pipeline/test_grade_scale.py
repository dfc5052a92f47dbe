"""A class of 200: `course grade` finishes, prints every row, and never fails an honest notebook.

Submissions are graded two at a time; the honest ones among them (60 kernels) must all be
graded with their exact score, which is the guard against false FAILED verdicts from
kernels started at once.
"""
from __future__ import annotations

import subprocess
import sys

from tests.pipeline import submissions as S
from tests.pipeline.test_grade import A, load


def test_two_hundred_submissions_graded_in_parallel_with_no_false_failure(releases, tmp_path):
    paths = releases.copy(tmp_path, [A])
    roster = S.write_class(paths, A, *load(paths, A), size=200)
    result = subprocess.run([sys.executable, "-m", "course_lib.cli", "grade", A, "--jobs", "2"],
                            cwd=paths.root, capture_output=True, text=True, timeout=1500)
    assert result.returncode == 1, result.stderr  # the broken ones are FAILED
    lines = result.stdout.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("student ")) + 1:]  # after the headers
    rows = {line.split()[0]: line.split() for line in table if line.strip() and not line.startswith("grades:")}
    assert set(rows) == set(roster), result.stdout[-2000:]
    honest = [s for s, kind in roster.items() if S.EXPECTED[kind][0] == "graded"]
    assert len(honest) >= 20
    for student, kind in roster.items():
        status, score = S.EXPECTED[kind]
        row = rows[student]
        assert row[1] == status, f"{student}: {' '.join(row)}"
        if score is not None:
            assert row[2] == f"{score:g}/5", f"{student}: {' '.join(row)}"
        else:
            assert len(row) > 3, f"{student} is FAILED without a reason"
