"""What notebook test cells call.

Visible test cells use the friendly helpers in ``report`` through one module per notebook
(``orientation`` for 00, ...): each case prints one line saying what was given, what was
expected and what came back. Hidden tests are not here: they live outside the package in
``grading/hidden/`` and run in the grader's process (see ``course_lib.pipeline.hidden``).
"""
from course_lib.checks.report import CheckFailed, expect_close, expect_equal, expect_raises, show

__all__ = ["CheckFailed", "expect_close", "expect_equal", "expect_raises", "show"]
