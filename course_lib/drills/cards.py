"""Interview probe cards: one bank, ``probes.toml``, that the notebooks and the drills both read.

A card is one interview question, the points a strong answer makes (each a single idea the
candidate either made or not: the checklist a drill asks them to tick) and the typical weak
answer. A card may name follow-ups, the questions an interviewer asks after it. Each notebook
ends with its own cards, rendered from the bank by ``show_probes("NN_topic")``, so the text
exists only here.

    >>> card = get_card("06.decode-memory-bound")
    >>> card.notebook, card.topic, card.question
    ('06_serving', 'serving', 'Why is decode memory-bound?')
    >>> [follow_up.id for follow_up in follow_ups_of(card)]
    ['06.speculative-decoding']
    >>> len(cards_for("06_serving")) >= 3
    True
    >>> print(render_markdown([card]).splitlines()[0])
    **"Why is decode memory-bound?"**

``load_cards(path)`` reads and checks a bank; a bad bank raises ``CardBankError`` naming the
file and the card. The rules it enforces:

- ``[[card]]`` tables only, each with ``id``, ``notebook``, ``topic``, ``question``,
  ``strong_points`` and ``weak_answer``, and optionally ``follow_ups``; no other keys.
- ``id`` is the notebook's two digits, a dot and a lowercase slug (``06.p99-latency``), unique
  in the bank; ``notebook`` is ``NN_topic``; ``topic`` is one of ``CARD_TOPICS``.
- ``strong_points`` holds 3 to 6 distinct, non-empty points; no two cards ask the same question.
- every follow-up names a card of the bank, and following follow-ups never leads back to a card
  already asked (no cycles), so a chain of follow-ups always ends.
"""
from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

__all__ = ["BANK_NAME", "CARD_TOPICS", "CardBankError", "ProbeCard", "cards_for", "follow_ups_of", "get_card",
           "load_cards", "render_markdown", "show_probes"]

BANK_NAME = "probes.toml"  # package data of course_lib.drills
# Course order. The drill topics of course_lib.drills.problems, plus the notebooks that have
# probes but no numeric problems: 00 (orientation), 02 (attention), 05 (structured output).
CARD_TOPICS: tuple[str, ...] = ("orientation", "tokenization", "attention", "kv_cache", "sampling", "structured",
                                "serving", "context", "operations")
MIN_POINTS, MAX_POINTS = 3, 6

_REQUIRED = ("id", "notebook", "topic", "question", "strong_points", "weak_answer")
_OPTIONAL = ("follow_ups",)
_ID = re.compile(r"^(\d\d)\.[a-z0-9]+(?:-[a-z0-9]+)*$")
_NOTEBOOK = re.compile(r"^(\d\d)_[a-z0-9]+(?:_[a-z0-9]+)*$")


class CardBankError(ValueError):
    """The probe bank breaks one of the rules in the module docstring; the message names the card."""


@dataclass(frozen=True)
class ProbeCard:
    id: str                           # "06.p99-latency": the notebook's two digits, a dot, a slug
    notebook: str                     # "06_serving": the notebook that shows the card
    topic: str                        # one of CARD_TOPICS
    question: str                     # as the interviewer asks it, without quotes
    strong_points: tuple[str, ...]    # the checklist: one checkable idea each
    weak_answer: str                  # the typical answer that falls short, and why
    follow_ups: tuple[str, ...] = ()  # ids of the cards an interviewer asks next


def load_cards(path: str | Path | None = None) -> tuple[ProbeCard, ...]:
    """Every card of the bank at ``path`` (default: the course's own bank), in bank order, checked."""
    if path is None:
        return _course_bank()
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise CardBankError(f"{path}: cannot read the probe bank ({error.strerror or error})") from None
    return _parse(text, str(path))


def cards_for(notebook: str, cards: Iterable[ProbeCard] | None = None) -> tuple[ProbeCard, ...]:
    """The cards a notebook shows (``"06_serving"``), in bank order; empty if it has none."""
    return tuple(card for card in (load_cards() if cards is None else cards) if card.notebook == notebook)


def get_card(card_id: str, cards: Iterable[ProbeCard] | None = None) -> ProbeCard:
    """The card with this id; ``KeyError`` naming the id if the bank has none."""
    for card in load_cards() if cards is None else cards:
        if card.id == card_id:
            return card
    raise KeyError(f"no probe card {card_id!r}")


def follow_ups_of(card: ProbeCard, cards: Iterable[ProbeCard] | None = None) -> tuple[ProbeCard, ...]:
    """The cards an interviewer asks after ``card``, in the order it names them."""
    by_id = {c.id: c for c in (load_cards() if cards is None else cards)}
    return tuple(by_id[card_id] for card_id in card.follow_ups)


def render_markdown(cards: Iterable[ProbeCard], bank: Iterable[ProbeCard] | None = None) -> str:
    """The probes section as a notebook shows it: for each card the question in bold, the strong
    points as a list, the typical weak answer, and its follow-ups by question and id.

    Follow-up questions are looked up in ``bank`` (default: the course's bank); an id the bank
    does not know is shown alone.
    """
    cards = list(cards)
    questions = {card.id: card.question for card in (load_cards() if bank is None else bank)}
    questions.update({card.id: card.question for card in cards})
    blocks = []
    for card in cards:
        lines = [f'**"{card.question}"**', "", "*Strong answer makes these points:*"]
        lines += [f"- {point}" for point in card.strong_points]
        lines += ["", f"*Typical weak answer:* {card.weak_answer}"]
        if card.follow_ups:
            named = [f'"{questions[i]}" (`{i}`)' if i in questions else f"`{i}`" for i in card.follow_ups]
            lines += ["", f"*Follow-up{'s' if len(named) > 1 else ''}:* " + "; ".join(named)]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def show_probes(notebook: str) -> None:
    """Display a notebook's probe cards as Markdown (the last cell before its recap)."""
    from IPython.display import Markdown, display

    cards = cards_for(notebook)
    if not cards:
        known = sorted({card.notebook for card in load_cards()})
        raise ValueError(f"no probe cards for notebook {notebook!r}; notebooks with cards: {', '.join(known)}")
    display(Markdown(render_markdown(cards)))


@lru_cache(maxsize=1)
def _course_bank() -> tuple[ProbeCard, ...]:
    resource = resources.files("course_lib.drills") / BANK_NAME
    return _parse(resource.read_text(encoding="utf-8"), f"course_lib/drills/{BANK_NAME}")


def _parse(text: str, origin: str) -> tuple[ProbeCard, ...]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise CardBankError(f"{origin}: not valid TOML: {error}") from None
    extra = sorted(set(data) - {"card"})
    if extra:
        raise CardBankError(f"{origin}: unexpected top-level key(s) {', '.join(map(repr, extra))}; "
                            "write each card as a [[card]] table")
    tables = data.get("card", [])
    if not isinstance(tables, list) or not tables:
        raise CardBankError(f"{origin}: no cards; write each card as a [[card]] table")
    cards: list[ProbeCard] = []
    where: dict[str, int] = {}  # id -> position, for duplicate ids
    asked: dict[str, str] = {}  # question -> id, for duplicate questions
    for position, table in enumerate(tables, start=1):
        card = _card(table, f"{origin}: card {position}", origin)
        if card.id in where:
            raise CardBankError(f"{origin}: card {card.id!r}: duplicate id (cards {where[card.id]} and {position})")
        if card.question in asked:
            raise CardBankError(f"{origin}: card {card.id!r}: asks the same question as card {asked[card.question]!r}")
        where[card.id], asked[card.question] = position, card.id
        cards.append(card)
    by_id = {card.id: card for card in cards}
    for card in cards:
        for follow_up in card.follow_ups:
            if follow_up not in by_id:
                raise CardBankError(f"{origin}: card {card.id!r}: follow-up {follow_up!r} is not a card in the bank")
    _check_acyclic(cards, by_id, origin)
    return tuple(cards)


def _card(table: object, label: str, origin: str) -> ProbeCard:
    if not isinstance(table, Mapping):
        raise CardBankError(f"{label}: a card must be a [[card]] table")
    card_id = table.get("id")
    if isinstance(card_id, str) and card_id.strip():
        label = f"{origin}: card {card_id!r}"
    missing = [key for key in _REQUIRED if key not in table]
    if missing:
        raise CardBankError(f"{label}: missing field(s) {', '.join(missing)}")
    unknown = sorted(set(table) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise CardBankError(f"{label}: unknown field(s) {', '.join(unknown)}; "
                            f"a card has {', '.join(_REQUIRED + _OPTIONAL)}")
    for key in ("id", "notebook", "topic", "question", "weak_answer"):
        if not isinstance(table[key], str) or not table[key].strip():
            raise CardBankError(f"{label}: {key} must be a non-empty string")
    id_match, notebook_match = _ID.match(card_id), _NOTEBOOK.match(table["notebook"])
    if not id_match:
        raise CardBankError(f"{label}: id must be the notebook's two digits, a dot and a lowercase slug "
                            "such as '06.p99-latency'")
    if not notebook_match:
        raise CardBankError(f"{label}: notebook {table['notebook']!r} is not a notebook name such as '06_serving'")
    if id_match.group(1) != notebook_match.group(1):
        raise CardBankError(f"{label}: id must start with its notebook's number {notebook_match.group(1)!r}")
    if table["topic"] not in CARD_TOPICS:
        raise CardBankError(f"{label}: unknown topic {table['topic']!r}; card topics: {', '.join(CARD_TOPICS)}")
    points = _strings(table["strong_points"], "strong_points", label)
    if not MIN_POINTS <= len(points) <= MAX_POINTS:
        raise CardBankError(f"{label}: strong_points has {len(points)} point(s); give {MIN_POINTS} to {MAX_POINTS}, "
                            "one checkable idea each")
    if len(set(points)) != len(points):
        raise CardBankError(f"{label}: strong_points repeats a point")
    follow_ups = _strings(table.get("follow_ups", []), "follow_ups", label)
    if len(set(follow_ups)) != len(follow_ups):
        raise CardBankError(f"{label}: follow_ups names a card twice")
    return ProbeCard(id=card_id, notebook=table["notebook"], topic=table["topic"], question=_one_line(table["question"]),
                     strong_points=points, weak_answer=_one_line(table["weak_answer"]), follow_ups=follow_ups)


def _strings(value: object, key: str, label: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item.strip() for item in value):
        raise CardBankError(f"{label}: {key} must be a list of non-empty strings")
    return tuple(_one_line(item) for item in value)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _check_acyclic(cards: list[ProbeCard], by_id: Mapping[str, ProbeCard], origin: str) -> None:
    done: set[str] = set()

    def visit(card_id: str, path: list[str]) -> None:
        if card_id in path:
            cycle = " -> ".join(path[path.index(card_id):] + [card_id])
            raise CardBankError(f"{origin}: card {card_id!r}: follow-ups form a cycle: {cycle}")
        if card_id in done:
            return
        for follow_up in by_id[card_id].follow_ups:
            visit(follow_up, path + [card_id])
        done.add(card_id)

    for card in cards:
        visit(card.id, [])
