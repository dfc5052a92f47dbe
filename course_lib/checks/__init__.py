"""What notebook test cells call.

Visible test cells use the friendly helpers in ``report`` through one module per notebook
(``orientation`` for 00, ...): each case prints one line saying what was given, what was
expected and what came back. Hidden test cells use ``integrity.Guard``, which compares
against expectations computed independently and refuses answers that merely call the
course_lib reference or that patched the tools the comparison relies on.
"""
from course_lib.checks.report import CheckFailed, expect_close, expect_equal, expect_raises, show

__all__ = ["CheckFailed", "expect_close", "expect_equal", "expect_raises", "show"]
