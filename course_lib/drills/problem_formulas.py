"""The back-of-envelope formulas the drills need that no other course module exports.

Everything else the drills use comes from its own module (``kv_memory`` for KV bytes and
capacity, ``orientation`` for softmax, ``sampling.processors`` for top-p, ``serving.speculative``
for speculative decoding, ``context.budget`` for the window budget). Units follow the course:
GB and GB/s are decimal (10**9), prices are USD per million tokens, times are seconds.

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
"""
from __future__ import annotations

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
