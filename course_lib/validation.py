"""Argument checks for the whole package: one helper per kind of number, one exception type.

Every check raises ValueError naming the argument, what it must be and what it got, so a
caller catches one type whatever the mistake (a float where a count belongs, a bool, zero):

    >>> positive_int("n_layers", 32)
    32
    >>> positive_int("n_layers", 2.0)
    Traceback (most recent call last):
    ...
    ValueError: n_layers must be a positive int, got float 2.0
"""
from __future__ import annotations

import math
from numbers import Real


def positive_int(name: str, value: object) -> int:
    """``value`` if it is an int above zero (bool excluded: `True` layers is always a typo)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {type(value).__name__} {value!r}")
    return value


def non_negative_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int, zero or more, got {type(value).__name__} {value!r}")
    return value


def positive_number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive, finite number, got {type(value).__name__} {value!r}")
    return value


def non_negative_number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be zero or a positive, finite number, got {type(value).__name__} {value!r}")
    return value
