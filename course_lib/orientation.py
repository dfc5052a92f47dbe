"""Reference answers for notebook 00: the last step of the forward pass, and the bill.

The model's output for the next position is a vector of logits, one per vocabulary entry.
The decoding rule turns it into probabilities with a softmax, sharpened or flattened by a
temperature T:

    p_i = exp(z_i / T) / sum_j exp(z_j / T)

    >>> softmax_with_temperature([2.0, 1.0, 0.0], 0.7).round(3).tolist()
    [0.771, 0.185, 0.044]
"""
from __future__ import annotations

import numpy as np


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


def request_cost(prompt_tokens: int, completion_tokens: int, *,
                 input_usd_per_mtok: float, output_usd_per_mtok: float) -> float:
    """Dollars for one request, priced per million input and output tokens.

    >>> request_cost(1_000, 500, input_usd_per_mtok=3.0, output_usd_per_mtok=15.0)
    0.0105
    """
    for name, value in (("prompt_tokens", prompt_tokens), ("completion_tokens", completion_tokens)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    for name, value in (("input_usd_per_mtok", input_usd_per_mtok), ("output_usd_per_mtok", output_usd_per_mtok)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    return (prompt_tokens * input_usd_per_mtok + completion_tokens * output_usd_per_mtok) / 1_000_000
