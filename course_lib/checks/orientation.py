"""Visible checks for notebook 00 (orientation)."""
from __future__ import annotations

from course_lib.checks.report import expect_close, expect_raises


def softmax_with_temperature(fn) -> None:
    """The worked example, the T -> 0 limit, overflow, and a masked token."""
    hint_sum = "divide by the sum of the exponentials"
    expect_close("T=0.7 on [2, 1, 0]", fn([2.0, 1.0, 0.0], 0.7), [0.7712, 0.1848, 0.0440], atol=5e-4, hint=hint_sum)
    expect_close("T=1.0 on [2, 1, 0]", fn([2.0, 1.0, 0.0], 1.0), [0.6652, 0.2447, 0.0900], atol=5e-4, hint=hint_sum)
    expect_close("T=1.5 on [2, 1, 0]", fn([2.0, 1.0, 0.0], 1.5), [0.5630, 0.2888, 0.1482], atol=5e-4, hint=hint_sum)
    expect_close("T=0 on [1, 3, 2] is argmax", fn([1.0, 3.0, 2.0], 0.0), [0.0, 1.0, 0.0],
                 hint="handle T == 0 before dividing by it: all mass on the largest logit")
    expect_close("T=1e-9 on [1, 3, 2] (no NaN)", fn([1.0, 3.0, 2.0], 1e-9), [0.0, 1.0, 0.0],
                 hint="subtract the largest logit before exponentiating")
    expect_close("T=1 on [1000, 999] (no overflow)", fn([1000.0, 999.0], 1.0), [0.7311, 0.2689], atol=5e-4,
                 hint="exp(1000) overflows; exp(1000 - 1000) does not")
    expect_close("a -inf logit gets 0", fn([0.0, float("-inf")], 1.0), [1.0, 0.0])
    expect_raises("negative temperature is rejected", lambda: fn([1.0, 2.0], -1.0), ValueError,
                  hint="raise ValueError for T < 0")


def request_cost(fn) -> None:
    expect_close("1,000 in + 500 out at $3 / $15 per M", fn(1_000, 500, input_usd_per_mtok=3.0, output_usd_per_mtok=15.0),
                 0.0105, atol=1e-12, hint="price per token = price per million / 1,000,000")
    expect_close("no output tokens", fn(2_000_000, 0, input_usd_per_mtok=0.5, output_usd_per_mtok=1.5), 1.0, atol=1e-12)
    expect_raises("negative token counts are rejected",
                  lambda: fn(-1, 0, input_usd_per_mtok=1.0, output_usd_per_mtok=1.0), ValueError)
