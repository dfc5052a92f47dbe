"""Visible checks for notebook 00 (orientation): one case per rule the exercise states."""
from __future__ import annotations

import math

from course_lib.checks.report import expect_close, expect_raises


def _softmax(z: list[float], temperature: float) -> list[float]:
    """The definition, written out: what the visible cases expect (T > 0, finite top logit)."""
    top = max(z)
    weights = [math.exp((x - top) / temperature) for x in z]
    return [w / sum(weights) for w in weights]


def softmax_with_temperature(fn) -> None:
    """The worked example, the T -> 0 limit with and without ties, overflow, a masked token."""
    hint_sum = "divide by the sum of the exponentials"
    for T in (0.7, 1.0, 1.5):
        expect_close(f"T={T} on [2, 1, 0]", fn([2.0, 1.0, 0.0], T), _softmax([2.0, 1.0, 0.0], T),
                     atol=1e-6, hint=hint_sum)
    expect_close("T=0 on [1, 3, 2] is argmax", fn([1.0, 3.0, 2.0], 0.0), [0.0, 1.0, 0.0],
                 hint="handle T == 0 before dividing by it: all mass on the largest logit")
    expect_close("T=0 on [5, 5, 1]: a tie shares the mass", fn([5.0, 5.0, 1.0], 0.0), [0.5, 0.5, 0.0],
                 hint="at T = 0 every logit equal to the maximum gets an equal share, not just the first")
    expect_close("T=1e-9 on [1, 3, 2] (no NaN)", fn([1.0, 3.0, 2.0], 1e-9), [0.0, 1.0, 0.0],
                 hint="subtract the largest logit before exponentiating")
    expect_close("T=1 on [1000, 999] (no overflow)", fn([1000.0, 999.0], 1.0), _softmax([1000.0, 999.0], 1.0),
                 atol=1e-6, hint="exp(1000) overflows; exp(1000 - 1000) does not")
    expect_close("a -inf logit gets 0", fn([0.0, float("-inf")], 1.0), [1.0, 0.0])
    expect_raises("negative temperature is rejected", lambda: fn([1.0, 2.0], -1.0), ValueError,
                  hint="raise ValueError for T < 0")


def request_cost(fn) -> None:
    """The bill, and the rule that token counts are non-negative whole numbers."""
    prices = dict(input_usd_per_mtok=3.0, output_usd_per_mtok=15.0)
    expect_close("1,000 in + 500 out at $3 / $15 per M", fn(1_000, 500, **prices),
                 (1_000 * 3.0 + 500 * 15.0) / 1_000_000, atol=1e-12,
                 hint="price per token = price per million / 1,000,000")
    expect_close("no output tokens", fn(2_000_000, 0, input_usd_per_mtok=0.5, output_usd_per_mtok=1.5), 1.0, atol=1e-12)
    expect_raises("negative token counts are rejected", lambda: fn(-1, 0, **prices), ValueError)
    expect_raises("a fractional token count is rejected", lambda: fn(2.5, 1, **prices), ValueError,
                  hint="tokens are whole: check isinstance(n, int)")
