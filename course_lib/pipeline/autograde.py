"""nbgrader's Execute step, replaced: answers run sandboxed, verdicts are computed here.

``grading/nbgrader_config.py`` puts ``GradeOutOfProcess`` first in
``Autograde.autograde_preprocessors``, where nbgrader's ``Execute`` used to be. For one
submission it

1. starts the student's kernel in the grading sandbox and runs only the setup and solution
   cells (nbgrader has already restored the locked cells from the gradebook);
2. runs each exercise's hidden test, ``grading/hidden/<assignment>.py``, in this process:
   the test calls the student's functions with plain data and compares plain data;
3. writes each verdict into that exercise's graded test cell as its output, so nbgrader's
   own ``SaveAutoGrades`` scores the cell and its feedback shows every check's message but
   never the test's code or expected values: under ``scoring = "partial"`` (the default) a
   stdout line per check with its share of the points, then an ``execute_result`` holding
   the score (``partial_score`` in hidden.py), which nbgrader records as partial credit;
   under ``"all-or-nothing"`` the same lines, and an error output when any check failed.

The kernel is gone before this step returns, so the gradebook, feedback and CSV are written
by the grader alone. A submission whose answer cells kill or hang the kernel, or that runs
out of total time, raises ``GradingFailed``: the submission is FAILED with that reason.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool, Enum, Float, Integer

from course_lib.pipeline.hidden import (ALL_OR_NOTHING, PARTIAL, SCORING, Checks, feedback, hidden_test, load_hidden,
                                        run_hidden_test, score)
from course_lib.pipeline.learner import (GRADE_CELL_TIMEOUT, GRADE_NOTEBOOK_TIMEOUT, LearnerKernel,
                                         LearnerUnavailable)
from course_lib.pipeline.paths import CoursePaths, find_course
from course_lib.pipeline.sandbox import Limits
from course_lib.pipeline.withheld import sandbox_overlays

TESTS_SUFFIX = "-tests"  # a graded test cell's grade_id is "<exercise>-tests"
MAX_RESTARTS = 3         # fresh kernels after one died inside a hidden test's call


class GradingFailed(RuntimeError):
    """This submission cannot be graded; str(exc) is the reason shown to the instructor."""

    MARKER = "COURSE-GRADING-FAILED:"

    def __str__(self) -> str:
        return f"{self.MARKER} {self.args[0]}"


def graded_exercises(nb) -> list[tuple[int, str]]:
    """(cell index, exercise name) of every graded test cell."""
    found = []
    for index, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        grade_id = meta.get("grade_id", "")
        if cell.cell_type == "code" and meta.get("grade") and grade_id.endswith(TESTS_SUFFIX):
            found.append((index, grade_id[: -len(TESTS_SUFFIX)]))
    return found


def verdict_outputs(checks: Checks, points: float, scoring: str = PARTIAL) -> list:
    """A test cell's outputs, which nbgrader's ``determine_grade`` turns into its score.

    Both rules start with the feedback text on stdout. Partial credit then ends with an
    ``execute_result`` holding the score (nbgrader reads a number there as the points; no
    error output, which would make it 0); all-or-nothing ends with an error when any check
    failed (0 points) and nothing else (full points).
    """
    outputs = [nbformat.v4.new_output("stream", name="stdout", text=feedback(checks, points, scoring) + "\n")]
    if scoring == PARTIAL:
        outputs.append(nbformat.v4.new_output("execute_result", data={"text/plain": f"{score(checks, points):g}"},
                                              execution_count=None))
        return outputs
    failed = [r for r in checks.results if not r.passed]
    if failed:
        first = failed[0]
        outputs.append(nbformat.v4.new_output(
            "error", ename="HiddenTestsFailed", traceback=[],
            evalue=f"{len(failed)} of {len(checks.results)} hidden checks failed; first: {first.label}: {first.message}"))
    return outputs


def grade_answers(nb, paths: CoursePaths, assignment: str, *, limits: Limits | None,
                  cell_timeout: float, notebook_timeout: float, submission_dir: Path | None = None
                  ) -> dict[int, Checks]:
    """Run ``nb``'s answer cells in a (sandboxed) kernel and every exercise's hidden test here.

    Returns {test cell index: its checks}. Raises GradingFailed when the answer cells cannot
    run to the end (the kernel dies or hangs) or the total time runs out.
    """
    tests = load_hidden(paths.hidden / f"{assignment}.py")
    exercises = [(index, hidden_test(tests, name)) for index, name in graded_exercises(nb)]
    deadline = time.monotonic() + notebook_timeout
    verdicts = {}
    with tempfile.TemporaryDirectory(prefix="course-stubs-") as stubs:
        overlays = sandbox_overlays(getattr(tests, "REFERENCES", ()), Path(stubs))
        with LearnerKernel(nb, course_root=paths.root, submission_dir=submission_dir, limits=limits,
                           cell_timeout=cell_timeout, deadline=deadline, overlays=overlays) as learner:
            try:
                learner.run_answer_cells()
            except LearnerUnavailable as exc:
                raise GradingFailed(str(exc)) from None
            for index, test in exercises:
                if learner.dead and learner.starts <= MAX_RESTARTS and time.monotonic() < deadline:
                    try:
                        learner.restart()
                    except LearnerUnavailable:
                        pass  # the checks below record that the kernel is gone
                verdicts[index] = run_hidden_test(test, learner)
    if time.monotonic() > deadline:
        raise GradingFailed(f"grading took longer than {notebook_timeout:g} s in total")
    return verdicts


class GradeOutOfProcess(NbGraderPreprocessor):
    """Run the answers in a sandboxed kernel and the hidden tests here (see the module doc)."""

    sandbox = Bool(True, help="run student kernels in the bubblewrap sandbox").tag(config=True)
    cell_timeout = Integer(GRADE_CELL_TIMEOUT, help="seconds per cell and per hidden-test call").tag(config=True)
    notebook_timeout = Float(GRADE_NOTEBOOK_TIMEOUT, help="seconds for the whole submission").tag(config=True)
    memory_mb = Integer(Limits.memory_mb, help="address-space limit of a student kernel").tag(config=True)
    processes = Integer(Limits.processes, help="tasks allowed in a sandbox").tag(config=True)
    cpu_seconds = Integer(Limits.cpu_seconds, help="CPU seconds per sandboxed process").tag(config=True)
    scoring = Enum(SCORING, default_value=PARTIAL,
                   help=f"'{PARTIAL}': each hidden check earns its share of the points; "
                        f"'{ALL_OR_NOTHING}': every check must pass").tag(config=True)

    def preprocess(self, nb, resources):
        limits = Limits(self.memory_mb, self.processes, self.cpu_seconds) if self.sandbox else None
        submission = Path(resources.get("metadata", {}).get("path") or ".")
        verdicts = grade_answers(nb, find_course(Path.cwd()), resources["nbgrader"]["assignment"],
                                 limits=limits, cell_timeout=self.cell_timeout,
                                 notebook_timeout=self.notebook_timeout, submission_dir=submission)
        for index, checks in verdicts.items():
            points = float(nb.cells[index].metadata["nbgrader"]["points"])
            nb.cells[index].outputs = verdict_outputs(checks, points, self.scoring)
        return nb, resources
