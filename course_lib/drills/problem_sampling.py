"""Sampling drills (notebooks 00 and 04): a softmax probability at a temperature, a nucleus's size.

>>> from random import Random
>>> print(draw_softmax_probability(Random(0)).solution.splitlines()[0])
p_i = exp(z_i / T) / sum_j exp(z_j / T)

Probabilities come from ``orientation.softmax_with_temperature`` and the nucleus from
``sampling.processors.apply_top_p``, the course's reference implementations.
"""
from __future__ import annotations

import random
import string

import numpy as np
import torch

from course_lib.drills.problem_model import Draft, Generator, answer_line, choose_distinct, num, sig
from course_lib.orientation import softmax_with_temperature
from course_lib.sampling.processors import apply_top_p

TEMPERATURES = (0.5, 0.7, 1.0, 1.5, 2.0)
TOP_P = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


def _logits_text(labels: list[str], logits: list[float]) -> str:
    return ", ".join(f"{label}: {z:.1f}" for label, z in zip(labels, logits))


def _vector(values) -> str:
    return "[" + ", ".join(sig(float(v)) for v in values) + "]"


def draw_softmax_probability(rng: random.Random) -> Draft:
    for _ in range(1000):
        n = rng.randint(3, 5)
        logits = choose_distinct(rng, n, -2.0, 4.0)
        temperature = rng.choice(TEMPERATURES)
        asked = rng.randrange(n)
        probs = softmax_with_temperature(logits, temperature)
        if 0.02 <= probs[asked] <= 0.98:
            break
    else:
        raise RuntimeError("no softmax case with a probability between 0.02 and 0.98 in 1,000 draws")
    labels = list(string.ascii_uppercase[:n])
    scaled = np.array(logits) / temperature
    shifted = scaled - scaled.max()
    weights = np.exp(shifted)
    answer = float(probs[asked])
    question = (f"A model's next-token logits are {_logits_text(labels, logits)}.\n"
                f"At temperature T = {num(temperature)}, what probability does sampling give token {labels[asked]}?\n"
                f"Answer as a probability from 0 to 1 (three decimals are enough).")
    steps = [
        "p_i = exp(z_i / T) / sum_j exp(z_j / T)",
        f"z / T = {_vector(scaled)}",
        f"subtract the largest ({sig(scaled.max())}) so no exponent overflows: {_vector(shifted)}",
        f"exp: {_vector(weights)}; sum = {sig(weights.sum())}",
        f"p({labels[asked]}) = {sig(weights[asked])} / {sig(weights.sum())} = {sig(answer)}",
        answer_line(answer, ""),
    ]
    params = {"logits": logits, "labels": labels, "temperature": temperature, "token": labels[asked]}
    return Draft(question, answer, "", "\n".join(steps), params, tolerance=0.02, abs_tolerance=0.001)


def nucleus_size(logits: list[float], p: float) -> int:
    """Tokens the course's top-p filter keeps: the logits it leaves finite."""
    kept = apply_top_p(torch.tensor(logits, dtype=torch.float64), p)  # (V,), -inf where filtered
    return int(torch.isfinite(kept).sum())


def draw_nucleus_set_size(rng: random.Random) -> Draft:
    for _ in range(1000):
        n = rng.randint(5, 8)
        logits = choose_distinct(rng, n, -1.0, 4.0)
        p = rng.choice(TOP_P)
        cumulative = np.cumsum(np.sort(softmax_with_temperature(logits))[::-1])
        # Keep every cumulative sum clear of p, so rounding to 3 decimals cannot change the count.
        if np.abs(cumulative - p).min() >= 0.02:
            break
    else:
        raise RuntimeError("no nucleus case with cumulative sums clear of p in 1,000 draws")
    labels = list(string.ascii_uppercase[:n])
    answer = nucleus_size(logits, p)
    probs = softmax_with_temperature(logits)
    order = np.argsort(-probs)
    question = (f"A model's next-token logits are {_logits_text(labels, logits)}.\n"
                f"Nucleus (top-p) sampling at temperature 1 with p = {num(p)} keeps the smallest set of most likely "
                f"tokens whose total probability reaches p.\nHow many tokens are in that set?\n"
                f"Answer in tokens (a whole number).")
    steps = ["softmax at T = 1, then sort from most to least likely and add up:"]
    total = 0.0
    for rank, index in enumerate(order[:min(n, answer + 1)], start=1):
        total += probs[index]
        mark = f"  <- reaches {num(p)}: stop" if rank == answer else ""
        steps.append(f"  {rank}. {labels[index]}: p = {sig(probs[index])}, cumulative {sig(total)}{mark}")
    steps += [f"the set is the top {answer} tokens", answer_line(answer, "tokens")]
    params = {"logits": logits, "labels": labels, "p": p}
    return Draft(question, answer, "tokens", "\n".join(steps), params, tolerance=0.0)


GENERATORS = (
    Generator("softmax_probability", "sampling", "One token's probability from logits at a temperature",
              draw_softmax_probability),
    Generator("nucleus_set_size", "sampling", "How many tokens a top-p nucleus keeps", draw_nucleus_set_size),
)
