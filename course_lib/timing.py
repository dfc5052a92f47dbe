"""Timing a call the way every measurement in the course does: warm up, repeat, take the median.

>>> median_seconds(lambda: sum(range(1000)), repeats=3) >= 0
True
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

__all__ = ["median_seconds"]


def median_seconds(fn: Callable[[], object], repeats: int, *, warm_up: bool = True) -> float:
    """The median wall time of ``repeats`` calls of ``fn``, after one untimed call (first calls
    allocate memory and pick kernels) unless ``warm_up`` is False."""
    if warm_up:
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
