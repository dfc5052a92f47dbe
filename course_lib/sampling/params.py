"""SamplingParams: every knob of the decoding rule in one validated, immutable record.

>>> SamplingParams(temperature=0.7, top_p=0.9).greedy
False
>>> SamplingParams(temperature=0).greedy
True
>>> SamplingParams(top_p=1.5)
Traceback (most recent call last):
...
ValueError: top_p must be in (0, 1] (1.0 keeps every token), got 1.5
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

# OpenAI accepts frequency and presence penalties in this range; outside it text degenerates.
PENALTY_RANGE = (-2.0, 2.0)


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise TypeError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    return value


def check_temperature(value: object) -> float:
    if _number("temperature", value) < 0:
        raise ValueError(f"temperature must be >= 0 (0 means greedy), got {value}")
    return float(value)


def check_top_k(value: object) -> int:
    if _int("top_k", value) < 0:
        raise ValueError(f"top_k must be >= 0 (0 turns it off), got {value}")
    return value


def check_top_p(value: object) -> float:
    if not 0 < _number("top_p", value) <= 1:
        raise ValueError(f"top_p must be in (0, 1] (1.0 keeps every token), got {value}")
    return float(value)


def check_min_p(value: object) -> float:
    if not 0 <= _number("min_p", value) <= 1:
        raise ValueError(f"min_p must be in [0, 1] (0 turns it off), got {value}")
    return float(value)


def check_repetition_penalty(value: object) -> float:
    if _number("repetition_penalty", value) <= 0:
        raise ValueError(f"repetition_penalty must be > 0 (1.0 turns it off, > 1 discourages repeats), got {value}")
    return float(value)


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0         # 0 = greedy (argmax); <1 sharpens, >1 flattens
    top_k: int = 0                   # keep the k most likely tokens; 0 = off
    top_p: float = 1.0               # keep the smallest set reaching this probability; 1.0 = off
    min_p: float = 0.0               # keep tokens with p >= min_p * p_max; 0 = off
    frequency_penalty: float = 0.0   # subtract count x this from a generated token's logit
    presence_penalty: float = 0.0    # subtract this once from any generated token's logit
    repetition_penalty: float = 1.0  # divide positive / multiply negative logits of seen tokens
    max_new_tokens: int = 64         # hard cap on generated tokens ("length" when reached)
    stop: tuple[str, ...] = ()       # stop strings, matched in the text even across tokens
    stop_token_ids: tuple[int, ...] = ()  # extra token IDs that end with "stop"
    seed: int | None = None          # used only when generate() is given no generator

    def __post_init__(self) -> None:
        check_temperature(self.temperature)
        check_top_k(self.top_k)
        check_top_p(self.top_p)
        check_min_p(self.min_p)
        for name in ("frequency_penalty", "presence_penalty"):
            value = _number(name, getattr(self, name))
            if not PENALTY_RANGE[0] <= value <= PENALTY_RANGE[1]:
                raise ValueError(f"{name} must be in [-2, 2] (OpenAI's range; 0 turns it off), got {value}")
        check_repetition_penalty(self.repetition_penalty)
        if _int("max_new_tokens", self.max_new_tokens) < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        for s in stop:
            if not isinstance(s, str) or not s:
                raise ValueError(f"stop sequences must be non-empty strings, got {s!r}")
        object.__setattr__(self, "stop", stop)  # frozen: normalise a str or list to a tuple once
        ids = tuple(self.stop_token_ids)
        for i in ids:
            if _int("stop_token_ids entry", i) < 0:
                raise ValueError(f"stop_token_ids must be non-negative token IDs, got {i}")
        object.__setattr__(self, "stop_token_ids", ids)
        if self.seed is not None:
            _int("seed", self.seed)

    @property
    def greedy(self) -> bool:
        """Temperature 0 means argmax: no randomness is drawn at all."""
        return self.temperature == 0

    @property
    def uses_penalties(self) -> bool:
        return (self.frequency_penalty != 0 or self.presence_penalty != 0
                or self.repetition_penalty != 1)
