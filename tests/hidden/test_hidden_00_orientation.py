"""Known-wrong answers to notebook 00, each with the rule it breaks (run by test_wrong_answers.py)."""
from __future__ import annotations

import numpy as np


def _argmax_one_hot(logits, temperature=1.0):  # T = 0 puts all mass on the first top logit only
    z = np.asarray(logits, dtype=np.float64)
    if temperature < 0:
        raise ValueError("negative")
    if temperature == 0:
        return np.eye(len(z))[int(np.argmax(z))]
    w = np.exp((z - z.max()) / temperature)
    return w / w.sum()


def _no_max_shift(logits, temperature=1.0):  # overflows on large logits or small T
    if temperature < 0:
        raise ValueError("negative")
    z = np.asarray(logits, dtype=np.float64) / max(temperature, 1e-300)
    with np.errstate(all="ignore"):
        return np.exp(z) / np.exp(z).sum()


def _accepts_negative_t(logits, temperature=1.0):
    z = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        w = (z == z.max()).astype(float)
        return w / w.sum()
    w = np.exp((z - z.max()) / abs(temperature))
    return w / w.sum()


def _plain_division(logits, temperature=1.0):  # ignores the temperature entirely
    z = np.asarray(logits, dtype=np.float64)
    w = np.exp(z - z.max())
    return w / w.sum()


def _cost_accepts_floats(prompt_tokens, completion_tokens, *, input_usd_per_mtok, output_usd_per_mtok):
    if prompt_tokens < 0 or completion_tokens < 0:
        raise ValueError("negative")
    return (prompt_tokens * input_usd_per_mtok + completion_tokens * output_usd_per_mtok) / 1e6


def _cost_per_thousand(prompt_tokens, completion_tokens, *, input_usd_per_mtok, output_usd_per_mtok):
    for n in (prompt_tokens, completion_tokens):
        if not isinstance(n, int) or n < 0:
            raise ValueError("bad count")
    return (prompt_tokens * input_usd_per_mtok + completion_tokens * output_usd_per_mtok) / 1e3


def _text_answer(logits, temperature=1.0):
    return "0.77, 0.18, 0.04"


def _uniform(logits, temperature=1.0):
    return [1.0 / len(logits)] * len(logits)


# (exercise, replaced names, fragment of the hidden check it breaks): see test_wrong_answers.py
WRONG_ANSWERS = [
    ("softmax_with_temperature", {"softmax_with_temperature": _argmax_one_hot}, "tie for the top"),
    ("softmax_with_temperature", {"softmax_with_temperature": _no_max_shift}, "overflow"),
    ("softmax_with_temperature", {"softmax_with_temperature": _accepts_negative_t}, "negative temperature"),
    ("softmax_with_temperature", {"softmax_with_temperature": _plain_division}, "worked example"),
    ("softmax_with_temperature", {"softmax_with_temperature": _uniform}, "worked example"),
    ("softmax_with_temperature", {"softmax_with_temperature": _text_answer}, "worked example"),
    ("request_cost", {"request_cost": _cost_accepts_floats}, "fractional token count"),
    ("request_cost", {"request_cost": _cost_per_thousand}, "the price of"),
]
