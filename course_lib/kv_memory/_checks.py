"""Argument checks shared by the KV-memory helpers: one clear message per kind of mistake."""
from __future__ import annotations

import math
from numbers import Real


def positive_int(name: str, value: object) -> int:
    """Return ``value`` if it is a positive int; otherwise raise with the name and the fix.

    >>> positive_int("n_layers", 32)
    32
    """
    # bool is a subclass of int, and `True` layers is always a typo.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return value


def non_negative_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be zero or more, got {value}")
    return value


def positive_number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive, finite number, got {value}")
    return value


def non_negative_number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be zero or a positive, finite number, got {value}")
    return value
