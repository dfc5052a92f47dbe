"""nbgrader configuration for the course (run nbgrader from this folder, or use `course`)."""
from pathlib import Path

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

c.CourseDirectory.root = str(Path(__file__).resolve().parent)
c.CourseDirectory.course_id = "after-you-press-enter"

# Autograding never runs a test in the student's kernel: the answer cells run in a sandboxed
# kernel and the hidden tests (grading/hidden/) run in nbgrader's own process, talking to
# the student's functions with plain data (course_lib/pipeline/autograde.py). The steps
# after it are nbgrader's own, so scores, the gradebook and feedback work as usual.
c.Autograde.autograde_preprocessors = [
    "course_lib.pipeline.autograde.GradeOutOfProcess",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
# Sandbox, limits and time allowances: `course grade --help` sets them per run.
c.GradeOutOfProcess.sandbox = True

# A student who deletes a graded test cell gets it back (and graded), not a free pass.
c.OverwriteCells.add_missing_cells = True

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Written answers keep their rubric in the locked question cell above them, between mark-scheme
# markers: stripped from the learner's copy, restored for formgrader and the feedback. nbgrader
# accepts mark schemes only in task cells unless told otherwise (see pipeline/authoring.py).
c.ClearMarkScheme.enforce_metadata = False
