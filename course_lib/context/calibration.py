"""Calibration: does a model's stated confidence match how often it is right?

    >>> confidences = [0.95, 0.9, 0.85, 0.8, 0.6, 0.55, 0.3, 0.2]
    >>> correct     = [True, True, True, False, True, False, False, False]
    >>> [(b.count, b.accuracy) for b in reliability_bins(confidences, correct, n_bins=2)]
    [(2, 0.0), (6, 0.6666666666666666)]
    >>> round(expected_calibration_error(confidences, correct, n_bins=2), 4)
    0.1437
    >>> accuracy_coverage(confidences, correct)[:3]   # (threshold, coverage, accuracy), strictest first
    [(0.95, 0.125, 1.0), (0.9, 0.25, 1.0), (0.85, 0.375, 1.0)]
    >>> choose_threshold(confidences, correct, target_accuracy=0.8)
    0.6
    >>> apply_threshold(confidences, correct, 0.6)
    Selective(threshold=0.6, coverage=0.625, accuracy_answered=0.8, answered=5, abstained=3, wrong_answered=1)

A model is *calibrated* when, among the answers it gives with confidence about p, a fraction
about p is right. The reliability diagram groups answers into ``n_bins`` equal-width bins of
confidence over [0, 1] and compares each bin's accuracy with its mean confidence; the
expected calibration error (ECE) is the gap averaged over answers:

    ECE = sum over non-empty bins b of  count(b) / N * |accuracy(b) - mean_confidence(b)|

Bin i holds ``lower_i <= confidence < upper_i`` with ``lower_i = i / n_bins``; a confidence of
exactly 1.0 goes in the last bin. ECE depends on ``n_bins`` (few bins hide gaps that cancel
inside a bin; many bins leave each with too few answers to estimate its accuracy), so compare
ECEs only at the same ``n_bins``.

Selective answering turns confidence into a policy: answer when ``confidence >= threshold``,
abstain ("I don't know", hand over to a person) otherwise. A higher threshold answers fewer
questions (lower *coverage*) and, for a useful confidence, gets more of them right.
``choose_threshold`` picks the threshold that answers the most questions while keeping the
answered ones at a target accuracy, measured on held-out data you then apply it to.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Bin:
    lower: float            # lower <= confidence < upper (the last bin also holds 1.0)
    upper: float
    count: int              # answers in the bin
    mean_confidence: float  # nan for an empty bin
    accuracy: float         # fraction of the bin's answers that were right; nan for an empty bin


@dataclass(frozen=True)
class Selective:
    threshold: float          # answer when confidence >= threshold
    coverage: float           # fraction of questions answered
    accuracy_answered: float  # fraction right among the answered; nan when none were answered
    answered: int
    abstained: int
    wrong_answered: int       # the answers a user actually sees go wrong


def _as_arrays(confidences: Any, correct: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate once at the boundary: 1-D, same non-zero length, confidences finite in [0, 1],
    correct all booleans (or 0/1)."""
    for name, values in (("confidences", confidences), ("correct", correct)):
        if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
            raise TypeError(f"{name} must be a list or 1-D numpy array, got {type(values).__name__}")
    try:
        conf = np.asarray(confidences, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"confidences must be numbers in [0, 1]; converting them failed: {error}") from None
    right = np.asarray(correct)
    if conf.ndim != 1 or right.ndim != 1:
        raise ValueError(f"confidences and correct must be 1-D, got shapes {conf.shape} and {right.shape}; "
                         "flatten them, one entry per answer")
    if len(conf) != len(right):
        raise ValueError(f"confidences has {len(conf)} entries but correct has {len(right)}; "
                         "pass one confidence and one correct flag per answer")
    if len(conf) == 0:
        raise ValueError("no answers given: confidences and correct are empty")
    bad = ~((conf >= 0.0) & (conf <= 1.0))  # also catches NaN, for which every comparison is False
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"confidences must lie in [0, 1]; confidences[{i}] = {conf[i]!r}. "
                         "Pass probabilities (e.g. a softmax output), not logits or percentages")
    if right.dtype != np.bool_:
        # Accept 0/1 ints, but not 0.7 or "yes": a silent cast would count them as right.
        if right.dtype.kind not in "iuf" or not np.isin(right, (0, 1)).all():
            raise TypeError("correct must hold booleans (True/False, or 0/1), one per answer; "
                            f"got dtype {right.dtype} with values like {right[:3].tolist()}")
        right = right.astype(np.bool_)
    return conf, right


def _check_n_bins(n_bins: Any) -> int:
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)):
        raise TypeError(f"n_bins must be an int, got {n_bins!r}")
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}; 10 or 15 is usual")
    return int(n_bins)


def reliability_bins(confidences: Sequence[float], correct: Sequence[bool], n_bins: int = 10) -> list[Bin]:
    """The reliability diagram's bins: ``n_bins`` equal-width bins over [0, 1], empty ones included.

    >>> [(b.lower, b.upper, b.count) for b in reliability_bins([0.0, 0.5, 1.0], [False, True, True], n_bins=2)]
    [(0.0, 0.5, 1), (0.5, 1.0, 2)]
    """
    conf, right = _as_arrays(confidences, correct)
    n_bins = _check_n_bins(n_bins)
    # i / n_bins exactly as the Bin reports it, so lower <= c < upper holds for every member;
    # floor(c * n_bins) can disagree at an edge (1/49 * 49 == 0.9999999999999999).
    edges = np.arange(n_bins + 1) / n_bins
    index = np.minimum(np.searchsorted(edges, conf, side="right") - 1, n_bins - 1)  # 1.0 -> last bin
    counts = np.bincount(index, minlength=n_bins)
    conf_sums = np.bincount(index, weights=conf, minlength=n_bins)
    right_sums = np.bincount(index, weights=right.astype(np.float64), minlength=n_bins)
    bins = []
    for i in range(n_bins):
        n = int(counts[i])
        bins.append(Bin(lower=float(edges[i]), upper=float(edges[i + 1]), count=n,
                        mean_confidence=float(conf_sums[i] / n) if n else math.nan,
                        accuracy=float(right_sums[i] / n) if n else math.nan))
    return bins


def expected_calibration_error(confidences: Sequence[float], correct: Sequence[bool], n_bins: int = 10) -> float:
    """ECE: the bins' ``|accuracy - mean_confidence|``, weighted by the share of answers in each.

    0 is perfectly calibrated; a model always 90% sure and right half the time scores 0.4:

    >>> expected_calibration_error([0.9] * 4, [True, False, True, False])
    0.4
    """
    bins = reliability_bins(confidences, correct, n_bins)
    total = sum(b.count for b in bins)
    return float(sum(b.count / total * abs(b.accuracy - b.mean_confidence) for b in bins if b.count))


def accuracy_coverage(confidences: Sequence[float], correct: Sequence[bool]) -> list[tuple[float, float, float]]:
    """``(threshold, coverage, accuracy)`` for each distinct confidence used as the threshold.

    Answering when ``confidence >= threshold``: coverage is the fraction answered, accuracy
    the fraction right among them. Sorted by threshold descending, so coverage ascends; the
    last row (the lowest confidence) answers everything.
    """
    conf, right = _as_arrays(confidences, correct)
    order = np.argsort(-conf, kind="stable")
    conf_sorted = conf[order]
    right_cumulative = np.cumsum(right[order])
    # The answered set for threshold t is everything up to the last position holding t.
    last_of_run = np.flatnonzero(np.append(conf_sorted[1:] != conf_sorted[:-1], True))
    n = len(conf)
    return [(float(conf_sorted[i]), (i + 1) / n, int(right_cumulative[i]) / (i + 1)) for i in last_of_run.tolist()]


def choose_threshold(confidences: Sequence[float], correct: Sequence[bool], *, target_accuracy: float) -> float:
    """The lowest threshold (most questions answered) whose answered questions reach ``target_accuracy``.

    Candidates are the distinct confidences; the answered set for a threshold is everything
    with ``confidence >= threshold``. Accuracy need not rise with the threshold, so this is
    the lowest threshold that meets the target, even if a stricter one happens not to.

    When no threshold reaches the target, it returns ``math.inf``: answer nothing, abstain on
    every question (``apply_threshold(..., math.inf)`` then reports coverage 0). Check for it
    before showing a threshold to a user.

    >>> choose_threshold([0.9, 0.8, 0.7], [True, False, False], target_accuracy=0.6)
    0.9
    >>> choose_threshold([0.9, 0.8], [False, False], target_accuracy=0.5)
    inf
    """
    if isinstance(target_accuracy, bool) or not isinstance(target_accuracy, Real):
        raise TypeError(f"target_accuracy must be a number in (0, 1], got {target_accuracy!r}")
    if not 0.0 < target_accuracy <= 1.0:  # NaN fails this too
        raise ValueError(f"target_accuracy must lie in (0, 1], got {target_accuracy!r}; "
                         "for 90% accuracy pass 0.9 (a target of 0 answers everything, no threshold needed)")
    reaching = [threshold for threshold, _, accuracy in accuracy_coverage(confidences, correct)
                if accuracy >= target_accuracy]
    return min(reaching) if reaching else math.inf


def apply_threshold(confidences: Sequence[float], correct: Sequence[bool], threshold: float) -> Selective:
    """What answering only when ``confidence >= threshold`` does to these answers.

    ``threshold`` may be ``math.inf`` (what ``choose_threshold`` returns when no threshold
    reaches the target): nothing is answered, and ``accuracy_answered`` is nan.
    """
    conf, right = _as_arrays(confidences, correct)
    if isinstance(threshold, bool) or not isinstance(threshold, Real):
        raise TypeError(f"threshold must be a number, got {threshold!r}")
    if math.isnan(threshold):
        raise ValueError("threshold is nan; pass a confidence in [0, 1], or math.inf to abstain on everything")
    answered = conf >= threshold
    n_answered = int(answered.sum())
    n_right = int(right[answered].sum())
    return Selective(threshold=float(threshold), coverage=n_answered / len(conf),
                     accuracy_answered=n_right / n_answered if n_answered else math.nan,
                     answered=n_answered, abstained=len(conf) - n_answered, wrong_answered=n_answered - n_right)


def plot_reliability(bins: Sequence[Bin], ax: Any = None, title: str = "Reliability diagram") -> Any:
    """A reliability diagram: each bin's accuracy as a bar, against the diagonal of perfect
    calibration, with the bin's count above it. Returns the matplotlib Axes.

    Bars below the diagonal are overconfident bins, bars above it underconfident ones. An
    empty bin draws no bar and is labelled ``n=0``.
    """
    bins = list(bins)
    if not bins or not all(isinstance(b, Bin) for b in bins):
        raise TypeError("bins must be a non-empty list of Bin, as returned by reliability_bins(...)")
    import matplotlib.pyplot as plt  # lazily: importing this module must not need a display or pyplot

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 5))
    centers = [(b.lower + b.upper) / 2 for b in bins]
    widths = [b.upper - b.lower for b in bins]
    heights = [0.0 if b.count == 0 else b.accuracy for b in bins]
    ax.bar(centers, heights, width=widths, edgecolor="black", color="tab:blue", alpha=0.7, label="accuracy")
    filled = [b for b in bins if b.count]
    ax.plot([b.mean_confidence for b in filled], [b.accuracy for b in filled], "o", color="tab:orange",
            label="(mean confidence, accuracy)")
    ax.plot([0, 1], [0, 1], "--", color="gray", label="perfect calibration")
    for center, height, b in zip(centers, heights, bins):
        ax.annotate(f"n={b.count}", (center, height), xytext=(0, 2), textcoords="offset points",
                    ha="center", va="bottom", fontsize=7)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.08)  # headroom for the count labels on a bar of accuracy 1
    ax.set_xlabel("confidence")
    ax.set_ylabel("accuracy")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    return ax
