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

# A written answer's rubric sits in its question cell, a locked markdown cell (authoring.py),
# between nbgrader's mark-scheme markers. nbgrader records that cell, rubric included, in the
# gradebook before ClearMarkScheme strips the rubric from the learner's copy, and restores it at
# autograding, so formgrader shows it above the answer. ClearMarkScheme would insist on a
# "manually graded task" cell instead, but a task carries a grade of its own that always waits
# for the grader (a second score box per question); the authoring rules keep every rubric in
# such a locked, recorded cell, which is what that check protects.
c.ClearMarkScheme.enforce_metadata = False
