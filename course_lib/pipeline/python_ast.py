"""``ast.parse`` that survives CPython 3.11's shared AST recursion counter.

On CPython 3.11 the counter that ``ast.parse`` checks while it builds the tree is shared by every
thread of the interpreter (a CPython bug, fixed in later releases). ``course release`` and
the tests grade assignments in parallel threads, and Python code in another thread parses too
(3.11's tracebacks parse their source lines to place the carets), so once in a while a parse fails
with "SystemError: AST constructor recursion depth mismatch". The error is transient (each parse
resets the counter), so the pipeline parses through here and tries again.
"""
from __future__ import annotations

import ast

_ATTEMPTS = 5


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    for attempt in range(_ATTEMPTS):
        try:
            return ast.parse(source, filename=filename)
        except SystemError as err:
            if "AST constructor recursion depth mismatch" not in str(err) or attempt == _ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
