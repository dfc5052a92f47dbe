"""Visible checks for notebook 00 (orientation): one case per rule the exercise states."""
from __future__ import annotations

import math

from course_lib.checks.report import expect_close, expect_equal, expect_raises


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


def _cl100k_tokens(text: str) -> int:
    import tiktoken

    import course_lib.tokenization  # noqa: F401  (puts tiktoken's rank files in place)

    return len(tiktoken.get_encoding("cl100k_base").encode(text, disallowed_special=()))


OVERHEAD = 4  # the per-message overhead the exercise text states
PRICES = dict(input_usd_per_mtok=3.0, cached_usd_per_mtok=0.3, output_usd_per_mtok=15.0)
CHAT = [{"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3 + 3?"}]


def conversation_cost(fn) -> None:
    """Token counts with the per-message overhead, the cached prefix, the bill, and bad inputs."""
    one = [{"role": "user", "content": "Hello, world!"}]
    expect_equal("one message: its cl100k_base tokens + 4", fn(one, 0, **PRICES)["prompt_tokens"],
                 _cl100k_tokens("Hello, world!") + OVERHEAD,
                 hint="count tokens with tiktoken's cl100k_base, not words or characters, then add 4")
    every = sum(_cl100k_tokens(m["content"]) + OVERHEAD for m in CHAT)
    expect_equal("four messages: the overhead is paid per message", fn(CHAT, 0, **PRICES)["prompt_tokens"],
                 every, hint="add the 4-token overhead once for every message, not once per conversation")
    cached = sum(_cl100k_tokens(m["content"]) + OVERHEAD for m in CHAT[:2])
    expect_equal("cached_messages=2: the FIRST two messages are the cached prefix",
                 fn(CHAT, 0, cached_messages=2, **PRICES)["cached_tokens"], cached,
                 hint="the cache holds the start of the conversation: messages[:cached_messages]")
    expect_equal("no cached_messages: nothing is cached", fn(CHAT, 0, **PRICES)["cached_tokens"], 0)
    expect_close("the bill, no cache: prompt at the input price, 20 completion tokens at the output price",
                 fn(CHAT, 20, **PRICES)["usd"], (every * 3.0 + 20 * 15.0) / 1_000_000, atol=1e-12, rtol=1e-9,
                 hint="prices are dollars per MILLION tokens")
    expect_close("the bill with 2 cached messages: the prefix at the cached price",
                 fn(CHAT, 20, cached_messages=2, **PRICES)["usd"],
                 (cached * 0.3 + (every - cached) * 3.0 + 20 * 15.0) / 1_000_000, atol=1e-12, rtol=1e-9,
                 hint="cached tokens are billed at cached_usd_per_mtok, the rest of the prompt at input_usd_per_mtok")
    special = [{"role": "user", "content": "What does <|endoftext|> mean?"}]
    expect_equal("special-token text in a message is counted as ordinary text",
                 fn(special, 0, **PRICES)["prompt_tokens"], _cl100k_tokens(special[0]["content"]) + OVERHEAD,
                 hint="encode with disallowed_special=() so tiktoken neither raises nor emits a special ID")
    for bad, rule in ((2.5, "a fractional"), (20.0, "a float"), (-1, "a negative"), ("20", "a text")):
        expect_raises(f"{rule} completion count ({bad!r}) is rejected", lambda: fn(CHAT, bad, **PRICES), ValueError,
                      hint="completion_tokens must be an int >= 0: check isinstance(n, int)")
    for bad in (5, -1, 1.0):
        expect_raises(f"cached_messages={bad!r} for 4 messages is rejected (an int from 0 to 4)",
                      lambda: fn(CHAT, 0, cached_messages=bad, **PRICES), ValueError,
                      hint="cached_messages must be an int between 0 and len(messages)")


HINTS = {
    "softmax_with_temperature": [
        "Work with a NumPy float array: z = np.asarray(logits, dtype=np.float64). Check the "
        "temperature first: negative raises, zero is its own case.",
        "Subtracting the same number from every logit leaves the softmax unchanged; subtract "
        "z.max(), and every exponent is at most 0, so nothing overflows.",
        "For T == 0, mark every position equal to the maximum (z == z.max()), turn the marks "
        "into floats and divide by how many there are; a -inf logit already gets exp(-inf) = 0.",
    ],
    "conversation_cost": [
        "Start with the token count: one message costs len(encoding.encode(content, "
        "disallowed_special=())) + 4, with encoding = cl100k (the setup cell made it).",
        "Make a list with one count per message; the prompt is its sum, and the cached tokens "
        "are the sum of its first cached_messages entries.",
        "Check the inputs before counting (completion_tokens an int >= 0, cached_messages an "
        "int from 0 to len(messages)), then usd = (cached * cached price + (prompt - cached) * "
        "input price + completion * output price) / 1,000,000; return the three in a dict.",
    ],
}
