"""What a drill problem is: a question, an answer graded with a stated tolerance, a worked solution.

>>> p = Problem("demo", "serving", 7, "6 x 7 = ?", 42.0, "", 0.0, "6 x 7 = 42\\nAnswer: 42")
>>> p.grade(42), p.grade(41.9), p.grade(float("nan")), p.tolerance_text
(True, False, False, 'exactly')
>>> Problem("demo", "serving", 7, "?", 200.0, "ms", 0.02, "...").grade(203.9)   # within 2% of 200
True

A ``Generator`` turns a seed into a ``Problem``: ``draw(random.Random(seed))`` picks the
numbers and works the solution with the course's reference code, and the generator stamps the
kind, topic and seed on the result, so ``(kind, seed)`` is all it takes to ask it again.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from numbers import Real
from typing import Any


@dataclass(frozen=True)
class Problem:
    kind: str            # the generator's name, e.g. "kv_cache_bytes_real"
    topic: str           # one of TOPICS, e.g. "kv_cache"
    seed: int            # make_problem(kind, seed) rebuilds this problem exactly
    question: str        # every number the candidate needs, units stated, and the tolerance
    answer: float        # exact (unrounded) answer in `unit`
    unit: str            # e.g. "GiB", "ms", "tokens"; "" for a probability
    tolerance: float     # relative: 0.02 accepts answers within 2% of `answer`
    solution: str        # formula, numbers substituted, each step, and a last line "Answer: ..."
    abs_tolerance: float = 0.0   # absolute slack in `unit`; 0 with tolerance 0 means exact
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)  # the drawn inputs, as the question states them

    def __post_init__(self) -> None:
        if not math.isfinite(self.answer):
            raise ValueError(f"{self.kind}: answer must be finite, got {self.answer}")
        if not (self.tolerance >= 0 and self.abs_tolerance >= 0):
            raise ValueError(f"{self.kind}: tolerances must be >= 0, got {self.tolerance} and {self.abs_tolerance}")

    @property
    def allowed_error(self) -> float:
        """The largest |given - answer| that still passes."""
        return max(self.abs_tolerance, self.tolerance * abs(self.answer))

    @property
    def tolerance_text(self) -> str:
        """The tolerance in words, as the question states it: 'within 2%', 'exactly', ..."""
        return tolerance_text(self.tolerance, self.abs_tolerance)

    def grade(self, given: float) -> bool:
        """True when ``given`` is within the tolerance of the answer; False for NaN or infinity.

        Parse the candidate's text first (``float(text)``): a str is a TypeError, not a wrong answer.
        """
        if isinstance(given, bool) or not isinstance(given, Real):
            raise TypeError(f"grade takes a number, got {type(given).__name__} {given!r}; parse the answer "
                            "with float(text) first")
        given = float(given)
        if not math.isfinite(given):
            return False
        # The tiny relative slack absorbs float noise in an answer that is a whole number.
        return abs(given - self.answer) <= self.allowed_error + 1e-12 * max(1.0, abs(self.answer))


@dataclass(frozen=True)
class Draft:
    """What a draw function returns: a Problem without its kind, topic and seed."""

    question: str
    answer: float
    unit: str
    solution: str
    params: Mapping[str, Any]
    tolerance: float = 0.02
    abs_tolerance: float = 0.0


@dataclass(frozen=True)
class Generator:
    kind: str
    topic: str
    summary: str                                  # one line, for menus and reports
    draw: Callable[[random.Random], Draft]        # all randomness comes from this rng

    def from_seed(self, seed: int) -> Problem:
        """The problem for ``seed``: the same seed always gives the same problem."""
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
        d = self.draw(random.Random(seed))
        rule = tolerance_text(d.tolerance, d.abs_tolerance)
        accepted = "Only the exact answer is accepted." if rule == "exactly" else f"Accepted {rule} of the exact answer."
        question = f"{d.question}\n{accepted}"
        return Problem(self.kind, self.topic, seed, question, float(d.answer), d.unit, d.tolerance,
                       d.solution, d.abs_tolerance, dict(d.params))

    def __call__(self, rng: random.Random) -> Problem:
        """A fresh problem whose seed is drawn from ``rng`` (and recorded, so it can be asked again)."""
        if not isinstance(rng, random.Random):
            raise TypeError(f"rng must be a random.Random, got {type(rng).__name__}")
        return self.from_seed(rng.getrandbits(32))


def tolerance_text(tolerance: float, abs_tolerance: float) -> str:
    """The tolerance in words: 'within 2%', 'within 2% or within ±0.001', 'exactly'."""
    parts = []
    if tolerance:
        parts.append(f"within {tolerance:.0%}")
    if abs_tolerance:
        parts.append(f"within ±{num(abs_tolerance)}")
    return " or ".join(parts) if parts else "exactly"


# -- formatting: inputs are printed exactly; results to 4 significant figures ------------------

def num(value: float) -> str:
    """An input number as a question prints it, exactly: 8192 -> '8,192', 0.85 -> '0.85', 2.0 -> '2'.

    >>> num(8192), num(0.85), num(2.0), num(1234.5)
    ('8,192', '0.85', '2', '1,234.5')
    """
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.12g}"


def sig(value: float, digits: int = 4) -> str:
    """A computed number to ``digits`` significant figures (from 1,000 up: the whole number).

    >>> sig(19327352832), sig(18.000000001), sig(0.0441842), sig(1.75), sig(12345.678)
    ('19,327,352,832', '18', '0.04418', '1.75', '12,346')
    """
    if abs(value) >= 10 ** (digits - 1):
        return f"{round(value):,}"
    rounded = float(f"{value:.{digits}g}")
    if rounded.is_integer():
        return f"{int(rounded):,}"
    decimals = digits - 1 - math.floor(math.log10(abs(rounded)))
    return f"{rounded:.{decimals}f}".rstrip("0").rstrip(".")


def count(n: float, noun: str) -> str:
    """A number with its noun, singular for exactly one: count(1, "byte") -> '1 byte'.

    >>> count(1, "sequence"), count(0.5, "byte"), count(8192, "token")
    ('1 sequence', '0.5 bytes', '8,192 tokens')
    """
    return f"{num(n)} {noun if n == 1 else noun + 's'}"


def answer_line(answer: float, unit: str) -> str:
    """The last line of every worked solution."""
    return f"Answer: {sig(answer)} {unit}".rstrip()


def choose_distinct(rng: random.Random, count: int, low: float, high: float) -> list[float]:
    """``count`` different values, one decimal each, uniformly from [low, high]."""
    values: list[float] = []
    while len(values) < count:
        value = round(rng.uniform(low, high), 1)
        if value not in values:
            values.append(value)
    return values


def floor_is_clear(ratio: float, margin: float = 0.05) -> bool:
    """True when floor(ratio) is not within ``margin`` of a whole number, so rounding the inputs
    a little (as one does in one's head) cannot change the whole-number answer."""
    fraction = ratio - math.floor(ratio)
    return margin <= fraction <= 1 - margin
