"""Noise or drift: is a score change between two deployments real?

Two numbers answer it, and they come from different experiments:

- the **spread** of repeated sampled trials of *one* deployment (``sampling_spread``): how far
  the score moves when nothing changed but the random draws;
- the **paired delta** between two deployments replayed on the same inputs with pinned
  decoding (``compare_paired``): each input is scored on both, so the comparison only sees the
  inputs whose outcome flipped. Its standard error is the sample standard deviation of the
  per-input differences over sqrt(n), and the interval delta +/- z*se either excludes 0 (a
  change) or does not (no evidence of one).

    >>> before = [True] * 98 + [False] * 2
    >>> after = [True] * 96 + [False] * 4          # 2 points down: two inputs flipped to wrong
    >>> result = compare_paired(before, after)
    >>> result["delta"], result["verdict"], result["right_to_wrong"], result["wrong_to_right"]
    (-0.02, 'noise', 2, 0)
    >>> compare_paired(before * 5, after * 5)["verdict"]   # the same flips on 500 inputs
    'worse'
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

__all__ = ["VERDICTS", "compare_paired", "sampling_spread"]

VERDICTS = ("worse", "better", "noise")


def compare_paired(before: Sequence[bool], after: Sequence[bool], z: float = 1.96) -> dict:
    """The paired change from ``before`` to ``after`` (one bool per input, same inputs in the same order)."""
    if len(before) != len(after):
        raise ValueError(f"before and after must score the same inputs: got {len(before)} and {len(after)} scores")
    if len(before) < 2:
        raise ValueError("a paired comparison needs at least 2 inputs")
    if not all(isinstance(flag, bool) for flag in (*before, *after)):
        raise ValueError("each score must be a bool (True when the reply was right)")
    if not (isinstance(z, (int, float)) and not isinstance(z, bool) and math.isfinite(z) and z > 0):
        raise ValueError(f"z must be a positive number, got {z!r}")
    diffs = [int(a) - int(b) for b, a in zip(before, after)]
    delta = statistics.fmean(diffs)
    se = statistics.stdev(diffs) / math.sqrt(len(diffs))
    low, high = delta - z * se, delta + z * se
    verdict = "worse" if high < 0 else "better" if low > 0 else "noise"
    return {"delta": delta, "se": se, "low": low, "high": high, "verdict": verdict,
            "right_to_wrong": diffs.count(-1), "wrong_to_right": diffs.count(1)}


def sampling_spread(accuracies: Sequence[float]) -> dict:
    """How much repeated trials of one deployment differ: mean, sample stdev, min, max, range."""
    if len(accuracies) < 2:
        raise ValueError("the spread needs at least 2 trials")
    return {"mean": statistics.fmean(accuracies), "stdev": statistics.stdev(accuracies),
            "min": min(accuracies), "max": max(accuracies), "range": max(accuracies) - min(accuracies)}
