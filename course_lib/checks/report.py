"""Friendly visible checks: one printed line per case, one clear message per failure.

    >>> expect_close("softmax([0, 0])", [0.5, 0.5], [0.5, 0.5])
    ✓ softmax([0, 0]) -> [0.5, 0.5]
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


class CheckFailed(AssertionError):
    """A visible check failed; the message is one line: case, expected, got, hint."""


def _plain(value: Any) -> Any:
    """Arrays and tensors -> nested lists, numpy scalars -> Python numbers."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def show(value: Any, digits: int = 4) -> str:
    """A short, readable rendering: floats to a few significant digits, long lists cut."""
    value = _plain(value)
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    if isinstance(value, list):
        items = [show(v, digits) for v in value[:8]]
        return "[" + ", ".join(items) + (", ..." if len(value) > 8 else "") + "]"
    return repr(value)


def _flatten(value: Any) -> list:
    value = _plain(value)
    if isinstance(value, list):
        return [x for item in value for x in _flatten(item)]
    return [value]


def _close(got: Any, expected: Any, atol: float, rtol: float) -> bool:
    try:
        g, e = _flatten(got), _flatten(expected)
    except TypeError:
        return False
    if len(g) != len(e):
        return False
    for a, b in zip(g, e):
        if not isinstance(a, (int, float)) or isinstance(a, bool):
            return False
        if math.isnan(a) or math.isnan(b):
            return False
        if math.isinf(b) or math.isinf(a):
            if a != b:
                return False
        elif abs(a - b) > atol + rtol * abs(b):
            return False
    return True


def _fail(label: str, expected: str, got: str, hint: str) -> None:
    message = f"{label}: expected {expected}, got {got}"
    raise CheckFailed(message + (f". Hint: {hint}" if hint else ""))


def expect_close(label: str, got: Any, expected: Any, *, atol: float = 1e-6, rtol: float = 1e-6, hint: str = "") -> None:
    """Pass when every number is within atol + rtol*|expected| (shapes must match)."""
    if not _close(got, expected, atol, rtol):
        _fail(label, show(expected), show(got), hint)
    print(f"✓ {label} -> {show(got)}")


def expect_equal(label: str, got: Any, expected: Any, *, hint: str = "") -> None:
    if _plain(got) != _plain(expected):
        _fail(label, show(expected), show(got), hint)
    print(f"✓ {label} -> {show(got)}")


def expect_raises(label: str, call: Callable[[], Any], exception: type[BaseException], *, hint: str = "") -> None:
    try:
        result = call()
    except exception as exc:
        print(f"✓ {label} -> raises {type(exc).__name__}")
        return
    except Exception as exc:  # the wrong kind of error is a failure, with its name
        _fail(label, f"{exception.__name__}", f"{type(exc).__name__}: {exc}", hint)
    _fail(label, f"{exception.__name__}", f"no error (returned {show(result)})", hint)
