"""``ast.parse`` and ``ast.unparse`` behind one lock.

``course release`` builds assignments in parallel threads, and each parses Python (the hidden
tests' names, the reference stubs). On CPython 3.11 two threads converting ASTs at once can
trip the interpreter's shared recursion counter ("SystemError: AST constructor recursion depth
mismatch"), so every AST conversion in the pipeline goes through here, one at a time; each
takes milliseconds.
"""
from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    with _LOCK:
        return ast.parse(source, filename=filename)


def unparse(tree: ast.AST) -> str:
    with _LOCK:
        return ast.unparse(tree)
