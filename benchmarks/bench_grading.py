"""Grading throughput: submissions per minute, measured side by side in one run.

A class of notebook-00 submissions (correct, blank, half right, corrupt, misnamed; the same
mix as tests/pipeline/test_grade_scale.py) is graded four ways in fresh copies of the course:
--jobs 1 and --jobs 2, each with the sandbox on and off. Printed: submissions per minute for
each, the speed-up from a second job, and what the sandbox costs (on / off time).
Goals: the sandbox costs under 1.5x; a second job helps (> 1.2x) on a 2-core machine.

    python benchmarks/bench_grading.py [--size 40]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, for tests.pipeline

from course_lib.pipeline.grade import GradeOptions, grade  # noqa: E402
from course_lib.pipeline.release import release  # noqa: E402
from tests.pipeline import submissions as S  # noqa: E402
from tests.pipeline.conftest import copy_course  # noqa: E402
from tests.pipeline.test_grade import A, load  # noqa: E402


def measure(size: int, jobs: int, sandbox: bool) -> tuple[float, int]:
    """Seconds for one `course grade` of a fresh class, and how many were graded (not FAILED)."""
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as scratch:
        paths = copy_course(Path(scratch))
        release(paths, [A])
        roster = S.write_class(paths, A, *load(paths, A), size=size)
        started = time.perf_counter()
        results = grade(paths, A, GradeOptions(jobs=jobs, sandbox=sandbox))
        seconds = time.perf_counter() - started
    expected = {s for s, kind in roster.items() if S.EXPECTED[kind][0] == "graded"}
    graded = {r.student for r in results if r.status == "graded"}
    if graded != expected:
        raise SystemExit(f"wrong verdicts with jobs={jobs}, sandbox={sandbox}: {sorted(graded ^ expected)}")
    return seconds, len(graded)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=40, help="submissions per run (default 40)")
    args = parser.parse_args()
    seconds = {}
    print(f"{args.size} submissions of {A} per run (kernels run for the honest ones only)")
    print(f"{'jobs':>4}  {'sandbox':>7}  {'seconds':>8}  {'kernels':>7}  {'submissions/min':>15}")
    for jobs in (1, 2):
        for sandbox in (True, False):
            took, kernels = measure(args.size, jobs, sandbox)
            seconds[jobs, sandbox] = took
            print(f"{jobs:>4}  {'on' if sandbox else 'off':>7}  {took:8.1f}  {kernels:>7}  {60 * args.size / took:15.1f}",
                  flush=True)
    for jobs in (1, 2):
        print(f"sandbox cost at --jobs {jobs} (on / off time): {seconds[jobs, True] / seconds[jobs, False]:.2f}x "
              "(goal < 1.5x)")
    print(f"second job speed-up, sandbox on (jobs 1 / jobs 2 time): {seconds[1, True] / seconds[2, True]:.2f}x "
          "(goal > 1.2x)")


if __name__ == "__main__":
    main()
