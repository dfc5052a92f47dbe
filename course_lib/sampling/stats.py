"""Comparing distributions instead of single samples: repeated trials and a chi-square test.

A sampler is right when, over many draws, tokens come up as often as their probabilities say.
Pearson's goodness-of-fit statistic sums (observed - expected)^2 / expected over the outcomes;
under the null hypothesis it follows a chi-square law with (bins - 1) degrees of freedom, whose
upper tail is the regularised incomplete gamma function Q(dof/2, x/2) (torch.special.gammaincc),
so no scipy is needed.

>>> round(chi_square_p_value(3.841, 1), 3)        # the textbook 5% critical value, 1 dof
0.05
>>> result = chi_square_gof([18, 22, 60], [0.2, 0.2, 0.6])
>>> round(result.statistic, 3), result.dof, result.p_value > 0.5
(0.4, 2, True)
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import torch

from course_lib.sampling.params import SamplingParams
from course_lib.sampling.sampler import next_token_probs, sample_from_probs
from course_lib.validation import positive_int


def chi_square_p_value(statistic: float, dof: int) -> float:
    """P(X >= statistic) for X ~ chi-square(dof)."""
    positive_int("dof", dof)
    if math.isnan(statistic) or statistic < 0:
        raise ValueError(f"a chi-square statistic is >= 0, got {statistic}")
    if math.isinf(statistic):
        return 0.0
    a = torch.tensor(dof / 2, dtype=torch.float64)
    x = torch.tensor(statistic / 2, dtype=torch.float64)
    return float(torch.special.gammaincc(a, x))


@dataclass(frozen=True)
class ChiSquareResult:
    statistic: float
    dof: int
    p_value: float
    n: int                  # total observations
    bins: int               # bins after pooling the rare ones
    impossible_hits: int    # observations that fell on outcomes of probability 0

    def consistent(self, alpha: float = 0.001) -> bool:
        """True unless the data reject the expected distribution at level alpha."""
        return self.p_value >= alpha


def chi_square_gof(observed: Sequence[float] | torch.Tensor, expected_probs: Sequence[float] | torch.Tensor,
                   *, min_expected: float = 5.0) -> ChiSquareResult:
    """Pearson's goodness-of-fit test of observed counts against expected probabilities.

    Outcomes whose expected count is below ``min_expected`` are pooled into one bin (the usual
    rule of thumb, so the chi-square approximation holds). Any observation of an outcome with
    probability 0 makes the statistic infinite and the p-value 0.
    """
    obs = torch.as_tensor(observed, dtype=torch.float64).flatten()
    probs = torch.as_tensor(expected_probs, dtype=torch.float64).flatten()
    if obs.shape != probs.shape or obs.numel() == 0:
        raise ValueError(f"observed and expected_probs need the same non-zero length, got "
                         f"{obs.numel()} and {probs.numel()}")
    if (obs < 0).any() or (probs < 0).any() or not torch.isfinite(probs).all():
        raise ValueError("counts and probabilities must be finite and non-negative")
    if abs(float(probs.sum()) - 1) > 1e-6:
        raise ValueError(f"expected_probs must sum to 1, got {float(probs.sum()):.6f}")
    n = float(obs.sum())
    if n <= 0:
        raise ValueError("no observations: every count is zero")
    impossible = int(obs[probs == 0].sum())
    if impossible:
        return ChiSquareResult(math.inf, max(1, int((probs > 0).sum()) - 1), 0.0, int(n), int(obs.numel()), impossible)
    keep = probs > 0
    obs, expected = obs[keep], probs[keep] * n
    small = expected < min_expected
    if small.any():
        # Pool the rare outcomes; if even the pool is rare, fold it into the rarest big bin.
        pooled_obs, pooled_exp = obs[small].sum(), expected[small].sum()
        obs, expected = obs[~small], expected[~small]
        if pooled_exp >= min_expected or obs.numel() == 0:
            obs, expected = torch.cat([obs, pooled_obs[None]]), torch.cat([expected, pooled_exp[None]])
        else:
            rarest = int(expected.argmin())
            obs[rarest] += pooled_obs
            expected[rarest] += pooled_exp
    bins = int(obs.numel())
    statistic = float(((obs - expected) ** 2 / expected).sum())
    if bins < 2:  # one outcome: nothing can disagree
        return ChiSquareResult(statistic, 0, 1.0, int(n), bins, 0)
    return ChiSquareResult(statistic, bins - 1, chi_square_p_value(statistic, bins - 1), int(n), bins, 0)


def sample_counts(logits: torch.Tensor, params: SamplingParams, n_trials: int,
                  generator: torch.Generator, *, max_chunk_elements: int = 2**22) -> torch.Tensor:
    """Draw ``n_trials`` tokens from one distribution (logits (V,)); counts per token (V,).

    The draws go through the real sampler, batched: each chunk samples many copies of the same
    row at once, with at most ``max_chunk_elements`` probabilities in flight.
    """
    positive_int("n_trials", n_trials)
    if logits.dim() != 1:
        raise ValueError(f"sample_counts takes one distribution, logits of shape (V,), got {tuple(logits.shape)}")
    probs = next_token_probs(logits, params)  # (V,)
    if params.greedy:
        counts = torch.zeros(probs.shape[-1], dtype=torch.long)
        counts[int(probs.argmax())] = n_trials
        return counts
    counts = torch.zeros(probs.shape[-1], dtype=torch.long)
    chunk = max(1, max_chunk_elements // probs.shape[-1])
    done = 0
    while done < n_trials:
        size = min(chunk, n_trials - done)
        draws = sample_from_probs(probs.expand(size, -1), generator)  # (size,)
        counts += torch.bincount(draws.cpu(), minlength=probs.shape[-1])
        done += size
    return counts


def frequencies(outcomes: Iterable[Hashable]) -> list[tuple[Hashable, int, float]]:
    """(outcome, count, share) rows, most frequent first; ties keep first-seen order.

    >>> frequencies(["4", "4", "5", "4"])
    [('4', 3, 0.75), ('5', 1, 0.25)]
    """
    counter = Counter(outcomes)
    total = sum(counter.values())
    return [(key, count, count / total) for key, count in counter.most_common()]
