"""Reference answers for notebook 00: the last step of the forward pass, and the bill.

The bill of a conversation (``conversation_cost``) counts tokens with tiktoken's cl100k_base,
adds MESSAGE_OVERHEAD_TOKENS per message, and prices a cached prefix at its own rate.

The model's output for the next position is a vector of logits, one per vocabulary entry.
The decoding rule turns it into probabilities with a softmax, sharpened or flattened by a
temperature T:

    p_i = exp(z_i / T) / sum_j exp(z_j / T)

    >>> softmax_with_temperature([2.0, 1.0, 0.0], 0.7).round(3).tolist()
    [0.771, 0.185, 0.044]
"""
from __future__ import annotations

import numpy as np

MESSAGE_OVERHEAD_TOKENS = 4  # role and turn markers around each message (the course's assumption)


def softmax_with_temperature(logits, temperature: float = 1.0) -> np.ndarray:
    """Probabilities from logits at temperature T (float64, sums to 1).

    Numerically stable: subtracting the largest logit first leaves every exponent <= 0, so
    nothing overflows however large the logits are. T = 0 is the limit T -> 0+, which puts
    all the mass on the largest logit (shared equally between exact ties): greedy decoding.
    Logits of -inf (masked tokens) get probability 0.
    """
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim != 1 or z.size == 0:
        raise ValueError(f"logits must be a non-empty 1-D sequence, got shape {z.shape}")
    if np.isnan(z).any() or np.isposinf(z).any():
        raise ValueError("logits must not contain NaN or +inf")
    if temperature < 0 or temperature != temperature:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    top = z.max()
    if top == -np.inf:
        raise ValueError("every logit is -inf: no token can be chosen")
    if temperature == 0:
        winners = (z == top).astype(np.float64)
        return winners / winners.sum()
    weights = np.exp((z - top) / temperature)  # every exponent <= 0: no overflow
    return weights / weights.sum()


def conversation_cost(messages, completion_tokens: int, *, cached_messages: int = 0,
                      input_usd_per_mtok: float, cached_usd_per_mtok: float,
                      output_usd_per_mtok: float) -> dict:
    """The bill for one request carrying a whole conversation: tokens, cached tokens, dollars.

    Each message costs its content's cl100k_base tokens (special-token text counted as plain
    text) plus MESSAGE_OVERHEAD_TOKENS; the first ``cached_messages`` messages are a prefix the
    provider has cached and bills at ``cached_usd_per_mtok``.

    >>> conversation_cost([{"role": "user", "content": "Hi"}], 10, input_usd_per_mtok=3.0,
    ...                   cached_usd_per_mtok=0.3, output_usd_per_mtok=15.0)["prompt_tokens"]
    5
    """
    import tiktoken

    import course_lib.tokenization  # noqa: F401  (puts tiktoken's rank files in place)

    if not isinstance(completion_tokens, int) or isinstance(completion_tokens, bool) or completion_tokens < 0:
        raise ValueError(f"completion_tokens must be a non-negative int, got {completion_tokens!r}")
    if (not isinstance(cached_messages, int) or isinstance(cached_messages, bool)
            or not 0 <= cached_messages <= len(messages)):
        raise ValueError(f"cached_messages must be an int from 0 to {len(messages)}, got {cached_messages!r}")
    encoding = tiktoken.get_encoding("cl100k_base")
    counts = [len(encoding.encode(m["content"], disallowed_special=())) + MESSAGE_OVERHEAD_TOKENS
              for m in messages]
    prompt, cached = sum(counts), sum(counts[:cached_messages])
    usd = (cached * cached_usd_per_mtok + (prompt - cached) * input_usd_per_mtok
           + completion_tokens * output_usd_per_mtok) / 1_000_000
    return {"prompt_tokens": prompt, "cached_tokens": cached, "usd": usd}
