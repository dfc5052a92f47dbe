"""The back-of-envelope formulas the drills need that no other course module exports.

Everything else the drills use comes from its own module (``kv_memory`` for KV bytes and
capacity, ``orientation`` for softmax, ``sampling.processors`` for top-p, ``serving.speculative``
for speculative decoding, ``context.budget`` for the window budget). Units follow the course:
GB and GB/s are decimal (10**9), prices are USD per million tokens, times are seconds. The
operations rules (notebook 08) take rates and shares as fractions (0.02 for 2%).

>>> request_cost_usd(12_000, 800, input_usd_per_mtok=3.0, output_usd_per_mtok=15.0)   # 0.036 + 0.012
0.048
>>> time_to_first_token_s(4_000, 8_000, queue_s=0.1)            # 0.1 s queue + 0.5 s prefill
0.6
>>> request_latency_s(4_000, 501, 8_000, 0.025)                 # 0.5 s + 500 decode steps x 25 ms
13.0
>>> forward_flops(8e9) / 1e9                                    # about 2 x parameters per token
16.0
>>> round(decode_step_floor_s(16e9, 3350) * 1e3, 2)             # 16 GB read at 3,350 GB/s, in ms
4.78
>>> round(paired_delta_half_width(200, 12, 4), 4)               # 95% half-width of a paired accuracy delta
0.0389
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from course_lib.orientation import MESSAGE_OVERHEAD_TOKENS
from course_lib.validation import non_negative_int, non_negative_number, positive_int, positive_number


def prompt_tokens_from_words(words_per_message: Sequence[int], words_per_token: float, *,
                             overhead_per_message: int = MESSAGE_OVERHEAD_TOKENS) -> float:
    """Estimated prompt tokens of a chat: each message's words / words_per_token, plus the
    template's tokens around each message (the course assumes 4, as ``conversation_cost`` does).

    An estimate for planning; count with the model's own tokenizer when the text is at hand.

    >>> prompt_tokens_from_words([300, 900], 0.75)    # 400 + 1,200 content tokens + 2 x 4
    1608.0
    """
    positive_number("words_per_token", words_per_token)
    non_negative_int("overhead_per_message", overhead_per_message)
    for i, words in enumerate(words_per_message):
        non_negative_int(f"words_per_message[{i}]", words)
    return sum(words / words_per_token for words in words_per_message) + overhead_per_message * len(words_per_message)


def request_cost_usd(input_tokens: int, output_tokens: int, *, input_usd_per_mtok: float,
                     output_usd_per_mtok: float, cached_tokens: int = 0, cached_usd_per_mtok: float = 0.0) -> float:
    """USD for one request: the pricing step of ``orientation.conversation_cost`` on token counts.

    ``cached_tokens`` of the ``input_tokens`` are a cached prefix billed at ``cached_usd_per_mtok``;
    the rest of the input at ``input_usd_per_mtok``; the output at ``output_usd_per_mtok``.

    >>> request_cost_usd(10_000, 0, cached_tokens=8_000, input_usd_per_mtok=3.0,
    ...                  cached_usd_per_mtok=0.3, output_usd_per_mtok=15.0)   # 2,000 x $3 + 8,000 x $0.3, per 1M
    0.0084
    """
    non_negative_int("input_tokens", input_tokens)
    non_negative_int("output_tokens", output_tokens)
    non_negative_int("cached_tokens", cached_tokens)
    if cached_tokens > input_tokens:
        raise ValueError(f"cached_tokens ({cached_tokens}) cannot exceed input_tokens ({input_tokens}): "
                         "the cached prefix is part of the input")
    for name, price in (("input_usd_per_mtok", input_usd_per_mtok), ("output_usd_per_mtok", output_usd_per_mtok),
                        ("cached_usd_per_mtok", cached_usd_per_mtok)):
        non_negative_number(name, price)
    return ((input_tokens - cached_tokens) * input_usd_per_mtok + cached_tokens * cached_usd_per_mtok
            + output_tokens * output_usd_per_mtok) / 1_000_000


def time_to_first_token_s(prompt_tokens: int, prefill_tokens_per_s: float, *, queue_s: float = 0.0) -> float:
    """TTFT = time in the queue + prompt tokens / prefill rate; prefill yields the first token."""
    positive_int("prompt_tokens", prompt_tokens)
    positive_number("prefill_tokens_per_s", prefill_tokens_per_s)
    non_negative_number("queue_s", queue_s)
    return queue_s + prompt_tokens / prefill_tokens_per_s


def request_latency_s(prompt_tokens: int, output_tokens: int, prefill_tokens_per_s: float,
                      decode_s_per_token: float, *, queue_s: float = 0.0) -> float:
    """End-to-end time: TTFT, then one decode step for each output token after the first.

    The same split as notebook 06's TPOT, (latency - TTFT) / (output_tokens - 1).
    """
    positive_int("output_tokens", output_tokens)
    positive_number("decode_s_per_token", decode_s_per_token)
    ttft = time_to_first_token_s(prompt_tokens, prefill_tokens_per_s, queue_s=queue_s)
    return ttft + (output_tokens - 1) * decode_s_per_token


def forward_flops(n_params: float, tokens: int = 1) -> float:
    """FLOPs of a dense forward pass over ``tokens`` tokens: about 2 x parameters each (one
    multiply and one add per weight), leaving out attention's own arithmetic over the cache."""
    positive_number("n_params", n_params)
    positive_int("tokens", tokens)
    return 2 * n_params * tokens


def decode_step_floor_s(bytes_read: float, bandwidth_gb_s: float) -> float:
    """The fastest a memory-bound decode step can be: bytes it must read / memory bandwidth.

    At batch 1 a step reads every weight once and the sequence's whole KV cache; 1 GB/s is
    10**9 bytes per second (the vendors' decimal unit). Its inverse caps tokens per second.
    """
    positive_number("bytes_read", bytes_read)
    positive_number("bandwidth_gb_s", bandwidth_gb_s)
    return bytes_read / (bandwidth_gb_s * 1e9)


def _fraction(name: str, value: object) -> float:
    """A share or a rate, from 0 to 1 inclusive."""
    non_negative_number(name, value)
    if value > 1:
        raise ValueError(f"{name} must be a fraction from 0 to 1, got {value!r}")
    return value


def paired_delta(n_items: int, right_to_wrong: int, wrong_to_right: int) -> float:
    """The paired accuracy delta, new - old, as a fraction: the mean of the per-item differences.

    Both stacks answer the same ``n_items``; an item the old one got right and the new one wrong
    counts -1, the other way round +1, and an item they agree on 0, so the delta is
    (wrong_to_right - right_to_wrong) / n_items. Only the discordant items move it.

    >>> paired_delta(200, 12, 4)    # 8 more items lost than gained: 4 points down
    -0.04
    """
    positive_int("n_items", n_items)
    non_negative_int("right_to_wrong", right_to_wrong)
    non_negative_int("wrong_to_right", wrong_to_right)
    if right_to_wrong + wrong_to_right > n_items:
        raise ValueError(f"right_to_wrong + wrong_to_right ({right_to_wrong + wrong_to_right}) cannot exceed "
                         f"n_items ({n_items}): each item flips at most once")
    return (wrong_to_right - right_to_wrong) / n_items


def paired_delta_half_width(n_items: int, right_to_wrong: int, wrong_to_right: int, *, z: float = 1.96) -> float:
    """Half-width of the confidence interval of ``paired_delta``, as a fraction (1.96: 95%).

    With d_i in {-1, 0, +1} per item and mean m = ``paired_delta``:

        sample variance s^2 = (sum d_i^2 - n m^2) / (n - 1),   sum d_i^2 = right_to_wrong + wrong_to_right
        half-width = z x s / sqrt(n)                          (s / sqrt(n): the standard error of m)

    A drop larger than the half-width is outside the interval: more than run-to-run noise.

    >>> round(paired_delta_half_width(200, 12, 4), 5)      # a 4-point drop against +-3.9 points
    0.0389
    >>> paired_delta_half_width(500, 0, 0)                  # the stacks agree on every item
    0.0
    """
    positive_number("z", z)
    mean = paired_delta(n_items, right_to_wrong, wrong_to_right)
    if n_items < 2:
        raise ValueError(f"n_items must be at least 2 for a sample standard deviation, got {n_items}")
    variance = (right_to_wrong + wrong_to_right - n_items * mean**2) / (n_items - 1)
    return z * math.sqrt(max(variance, 0.0)) / math.sqrt(n_items)


def canary_requests_needed(stable_error_rate: float, canary_error_rate: float, stable_to_canary: float = 1.0, *,
                           z_alpha: float = 1.645, z_beta: float = 0.8416) -> float:
    """Requests the canary arm needs (unrounded) for a two-proportion z-test to detect its error
    rate p_c above the stable arm's p_s, when the stable arm serves k = ``stable_to_canary`` times
    as many requests (n_s = k n_c).

    The estimate p_c - p_s has variance p_c(1 - p_c)/n_c + p_s(1 - p_s)/(k n_c). Detecting the
    difference delta = p_c - p_s at one-sided level alpha with power 1 - beta needs
    delta = (z_alpha + z_beta) x sqrt(variance), so

        n_c = (z_alpha + z_beta)^2 x (p_c(1 - p_c) + p_s(1 - p_s) / k) / (p_c - p_s)^2

    (defaults: alpha = 0.05 one-sided, 80% power). A bigger stable arm shrinks only its own term:
    the small canary's noise dominates, so n_c never drops below the k -> infinity limit.
    Round up for a whole number of requests.

    >>> round(canary_requests_needed(0.02, 0.03, 4))        # 2% -> 3%, stable arm 4x the canary
    2102
    >>> round(canary_requests_needed(0.02, 0.03, 1))        # equal arms need more canary requests
    3011
    """
    _fraction("stable_error_rate", stable_error_rate)
    _fraction("canary_error_rate", canary_error_rate)
    positive_number("stable_to_canary", stable_to_canary)
    positive_number("z_alpha", z_alpha)
    positive_number("z_beta", z_beta)
    if canary_error_rate <= stable_error_rate:
        raise ValueError(f"canary_error_rate ({canary_error_rate}) must be above stable_error_rate "
                         f"({stable_error_rate}): the test detects an increase")
    spread = (canary_error_rate * (1 - canary_error_rate)
              + stable_error_rate * (1 - stable_error_rate) / stable_to_canary)
    return (z_alpha + z_beta) ** 2 * spread / (canary_error_rate - stable_error_rate) ** 2


def cost_per_successful_task(small_share: float, small_cost: float, small_success: float, fallback_rate: float,
                             large_cost: float, large_success: float) -> float:
    """Cost per successful task of a routed mix: ``small_share`` of the requests go to a small model,
    the rest to a large one; ``fallback_rate`` of the small model's requests (a timeout, a reply that
    fails its schema) are sent again to the large model, paying both calls.

        cost per request      = s (c_small + f c_large) + (1 - s) c_large
        successes per request = s ((1 - f) q_small + f q_large) + (1 - s) q_large
        cost per success      = cost per request / successes per request

    ``small_success`` is the share of the small model's valid (not fallen back) replies that solve
    the task; ``large_success`` the large model's, on fallbacks too. Costs are per request, in any
    one currency unit; the result is in that unit.

    >>> round(cost_per_successful_task(0.7, 0.3, 0.9, 0.1, 4.0, 0.95), 4)   # 1.69 / 0.9185, per 1,000 requests
    1.84
    >>> cost_per_successful_task(0.0, 0.3, 0.9, 0.1, 4.0, 0.8)              # everything to the large model
    5.0
    """
    for name, value in (("small_share", small_share), ("small_success", small_success),
                        ("fallback_rate", fallback_rate), ("large_success", large_success)):
        _fraction(name, value)
    non_negative_number("small_cost", small_cost)
    non_negative_number("large_cost", large_cost)
    cost = small_share * (small_cost + fallback_rate * large_cost) + (1 - small_share) * large_cost
    successes = (small_share * ((1 - fallback_rate) * small_success + fallback_rate * large_success)
                 + (1 - small_share) * large_success)
    if successes <= 0:
        raise ValueError("no request succeeds, so the cost per successful task is unbounded")
    return cost / successes
