"""The grounded question-answering task: answer from the passages in the prompt, cite one, or decline.

A conversation is a user message holding a question about one entity, a fenced block of short
passages and the question again (``course_lib.data.passages.user_with_passages``, the same layout the
packer writes). Three cases, drawn at random:

- ``new``: one passage states a fact about a made-up entity the weights cannot know;
- ``contradict``: one passage states a *false* fact about an entity the model was trained on
  ("The capital of France is Lima."): the right answer follows the passage, not the weights;
- ``absent``: no passage is about the entity asked for; the answer is ``GROUNDED_ABSTAIN``.

The other passages are distractors: facts about other entities, often of the same kind, so the
model must match the entity, not the question's shape. Passage ids are distinct digits in a
random order, so a citation must be copied, not counted. The reply repeats the supporting
passage's statement and gives its id in brackets:

    >>> import random
    >>> messages, expected = grounded_conversation(random.Random(3))
    >>> expected["mode"], messages[-1]["content"] == cited_answer(
    ...     statement(expected["kind"], expected["entity"], expected["value"]), expected["passage_id"])
    ('new', True)
    >>> cited_answer("The capital of France is Lima.", "4")
    'The capital of France is Lima. [4]'
"""
from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from course_lib.data import facts
from course_lib.data.facts import article, made_up_name
from course_lib.data.passages import Passage, render_passage, user_with_passages

GROUNDED_ABSTAIN = "The passages do not say."
MODES: dict[str, float] = {"new": 0.45, "contradict": 0.25, "absent": 0.30}
MAX_PASSAGES = 5

# kind -> (passage templates, question templates); {x} entity, {y} value, {a}/{A} its article
# One statement per kind, and the reply repeats it: the model writes "The capital of Velmora is",
# finds the passage that says the same words and copies what follows (the copying that small
# transformers learn first), then the id of the passage it copied from.
STATEMENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "capital": ("The capital of {x} is {y}.",
                ("What is the capital of {x}?", "Which city is the capital of {x}?", "Name the capital of {x}.")),
    "symbol": ("The chemical symbol for {x} is {y}.",
               ("What is the chemical symbol for {x}?", "Which symbol stands for {x}?")),
    "legs": ("{A} {x} has {y} legs.", ("How many legs does {a} {x} have?", "Count the legs of {a} {x}.")),
}
_KNOWN = {"capital": facts.CAPITALS, "symbol": facts.SYMBOLS, "legs": facts.LEGS}
_LETTERS = "ABCDEFGHIKLMNOPRSTUVWXZ"


def cited_answer(statement: str, passage_id: str) -> str:
    """The reply to a question that a passage answers: the passage's statement, then its id."""
    return f"{statement} [{passage_id}]"


def statement(kind: str, entity: str, value: str) -> str:
    """The one sentence that states ``entity``'s ``kind`` is ``value``.

    >>> statement("legs", "ant", "6")
    'An ant has 6 legs.'
    """
    a = article(entity)
    return STATEMENTS[kind][0].format(x=entity, y=value, a=a, A=a.capitalize())


def expected_reply(expected: Mapping) -> str:
    """The one right reply to a grounded conversation."""
    if expected["passage_id"] is None:
        return GROUNDED_ABSTAIN
    return cited_answer(statement(expected["kind"], expected["entity"], expected["value"]), expected["passage_id"])


def score_grounded(reply: str, expected: Mapping) -> bool:
    """Right value and right citation, or the exact abstention when no passage says.

    >>> score_grounded("The capital of France is Lima. [4]",
    ...                {"kind": "capital", "entity": "France", "value": "Lima", "passage_id": "4"})
    True
    """
    return reply.strip() == expected_reply(expected)


def _made_up_value(rng: random.Random, kind: str, avoid: str | None = None) -> str:
    """A value of the kind's shape: a city-like name, a one- or two-letter symbol, a leg count."""
    while True:
        if kind == "capital":
            value = "".join(rng.choice(facts.SYLLABLES) for _ in range(2)).capitalize()
        elif kind == "symbol":
            value = rng.choice(_LETTERS) + (rng.choice("abcdeghiklmnorstuy") if rng.random() < 0.7 else "")
        else:
            value = str(rng.choice((1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12)))
        if value != avoid:
            return value


def _distractor(rng: random.Random, avoid: set[str], asked: str, *, same_kind: bool = False) -> str:
    """A fact about some other entity, known or made up, true or not: noise to be ignored.
    Most are of the kind asked about, so only the entity tells the right passage apart;
    ``same_kind=True`` makes it one of them (and draws nothing to decide)."""
    kind = asked if same_kind or rng.random() < 0.6 else rng.choice(list(STATEMENTS))
    while True:
        entity = rng.choice(list(_KNOWN[kind])) if rng.random() < 0.5 else made_up_name(rng, kind)
        if entity.lower() not in avoid:
            break
    avoid.add(entity.lower())
    value = str(_KNOWN[kind][entity]) if entity in _KNOWN[kind] and rng.random() < 0.5 else _made_up_value(rng, kind)
    return statement(kind, entity, value)


def grounded_conversation(rng: random.Random, *, mode: str | None = None, n_passages: int | None = None,
                          position: int | None = None) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """One grounded conversation: ([user, assistant], expected).

    ``mode``, ``n_passages`` (1..MAX_PASSAGES) and ``position`` (0-based index of the supporting
    passage) are drawn when not given; evaluations fix them to measure one effect at a time.
    ``expected``: ``{"mode", "kind", "entity", "value", "passage_id", "weights_value",
    "n_passages", "position"}``; value and passage_id are None when the passages do not say, and
    weights_value is what the training facts say (None for a made-up entity).
    """
    mode = mode or rng.choices(list(MODES), list(MODES.values()))[0]
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    n = n_passages or rng.randint(1, MAX_PASSAGES)
    if not 1 <= n <= 9:
        raise ValueError(f"n_passages must be 1..9 (ids are single digits), got {n}")
    kind = rng.choice(list(STATEMENTS))
    if mode == "contradict" or (mode == "absent" and rng.random() < 0.4):
        entity = rng.choice(list(_KNOWN[kind]))
    else:
        entity = made_up_name(rng, kind)
    weights_value = str(_KNOWN[kind][entity]) if entity in _KNOWN[kind] else None
    ids = [str(i) for i in rng.sample(range(1, 10), n)]
    avoid = {entity.lower()}
    texts = [_distractor(rng, avoid, kind) for _ in range(n)]
    value = passage_id = None
    if mode != "absent":
        value = _made_up_value(rng, kind, avoid=weights_value)
        position = rng.randrange(n) if position is None else position
        if not 0 <= position < n:
            raise ValueError(f"position must be in 0..{n - 1}, got {position}")
        texts[position] = statement(kind, entity, value)
        passage_id = ids[position]
    else:
        position = None
    question = rng.choice(STATEMENTS[kind][1]).format(x=entity, a=article(entity))
    passages = [Passage(pid, text, 0.0) for pid, text in zip(ids, texts)]
    reply = GROUNDED_ABSTAIN if passage_id is None else cited_answer(texts[position], passage_id)
    expected = {"mode": mode, "kind": kind, "entity": entity, "value": value, "passage_id": passage_id,
                "weights_value": weights_value, "n_passages": n, "position": position}
    return [{"role": "user", "content": user_with_passages(question, passages)},
            {"role": "assistant", "content": reply}], expected


def absent_twin(rng: random.Random, messages: Sequence[Mapping[str, str]],
                expected: Mapping[str, Any]) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """The minimal pair of an answered grounded conversation: the supporting passage becomes a
    statement of the same kind about another entity, so no passage says and the reply declines.

    The two prompts differ in one entity name, which is exactly what decides between answering
    and declining: trained side by side, they teach the model to match the entity asked about,
    where the question's shape alone would let it copy a same-kind distractor's value.
    ``messages`` end with the user message and its reply (a system message may come first).

    >>> messages, expected = grounded_conversation(random.Random(3))
    >>> twin, twin_expected = absent_twin(random.Random(0), messages, expected)
    >>> twin[-1]["content"], twin_expected["mode"], twin_expected["entity"] == expected["entity"]
    ('The passages do not say.', 'absent', True)
    >>> expected["value"] in messages[-2]["content"], expected["value"] in twin[-2]["content"]
    (True, False)
    """
    if expected.get("passage_id") is None:
        raise ValueError("only a conversation that a passage answers has an absent twin")
    *before, user, _reply = (dict(m) for m in messages)
    support = render_passage(Passage(expected["passage_id"], statement(expected["kind"], expected["entity"],
                                                                       expected["value"]), 0.0))
    if user["content"].count(support) != 1:
        raise ValueError("the supporting passage is not in the user message once; is this a grounded conversation?")
    asked = expected["entity"].lower()
    while True:  # another entity of the kind asked about, one the prompt does not already name
        avoid = {asked}
        other = _distractor(rng, avoid, expected["kind"], same_kind=True)  # adds its entity to avoid
        if not any(name in user["content"].lower() for name in avoid - {asked}):
            break
    user["content"] = user["content"].replace(
        support, render_passage(Passage(expected["passage_id"], other, 0.0)))
    twin_expected = {**expected, "mode": "absent", "value": None, "passage_id": None, "position": None}
    return [*before, user, {"role": "assistant", "content": GROUNDED_ABSTAIN}], twin_expected
