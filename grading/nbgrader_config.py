"""nbgrader configuration for the course (run nbgrader from this folder, or use `course`)."""
import os
from pathlib import Path

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

c.CourseDirectory.root = str(Path(__file__).resolve().parent)
c.CourseDirectory.course_id = "after-you-press-enter"

# Every cell's run time is bounded; `course grade --cell-timeout N` overrides it.
c.Execute.timeout = int(os.environ.get("COURSE_CELL_TIMEOUT", "30"))

# A student who deletes a graded test cell gets it back (and graded), not a free pass.
c.OverwriteCells.add_missing_cells = True

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Feedback never shows hidden-test code, not even in tracebacks.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "course_lib.pipeline.feedback.HideHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
