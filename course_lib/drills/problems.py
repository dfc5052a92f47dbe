"""Generated numeric interview problems: one registry of kinds, each a seeded generator.

>>> p = make_problem("speculative_tokens_per_pass", 7)
>>> p == make_problem("speculative_tokens_per_pass", 7), p.topic
(True, 'serving')
>>> p.grade(p.answer), p.grade(p.answer * 1.1)
(True, False)
>>> kinds_for("sampling")
('softmax_probability', 'nucleus_set_size')

Each problem states every number it needs, with units, and how close an answer must be; its
worked solution is computed by the course's own reference code (the KV formula and capacity
planner, the softmax and top-p filter, the speculative-decoding expectation, the context
budget), and by ``problem_formulas`` where the course has no function for a rule (among them
the operations rules: a paired eval delta's interval, a canary's size, cost per successful task).
The generators live by topic in ``problem_kv``, ``problem_sampling``, ``problem_cost``,
``problem_serving``, ``problem_context`` and ``problem_operations``.
"""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from course_lib.drills import (problem_context, problem_cost, problem_kv, problem_operations, problem_sampling,
                               problem_serving)
from course_lib.drills.problem_model import Generator, Problem

# Course order: the notebook that teaches each topic comes first.
TOPICS: tuple[str, ...] = ("tokenization", "kv_cache", "sampling", "serving", "context", "operations")

KINDS: Mapping[str, Generator] = MappingProxyType({
    generator.kind: generator
    for module in (problem_cost, problem_kv, problem_sampling, problem_serving, problem_context, problem_operations)
    for generator in module.GENERATORS
})


def make_problem(kind: str, seed: int) -> Problem:
    """The problem of ``kind`` for ``seed``; the same kind and seed always give the same problem."""
    if not isinstance(kind, str):
        raise TypeError(f"kind must be a str, got {type(kind).__name__} {kind!r}")
    if kind not in KINDS:
        raise ValueError(f"unknown problem kind {kind!r}; known kinds: {', '.join(KINDS)}")
    return KINDS[kind].from_seed(seed)


def kinds_for(topic: str) -> tuple[str, ...]:
    """The kinds of one topic, in registry order."""
    if topic not in TOPICS:
        raise ValueError(f"unknown topic {topic!r}; known topics: {', '.join(TOPICS)}")
    return tuple(kind for kind, generator in KINDS.items() if generator.topic == topic)
