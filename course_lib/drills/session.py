"""One drill session, independent of the terminal: what to ask next, grading, the record, the report.

    >>> import random, tempfile, pathlib
    >>> from datetime import datetime, timezone
    >>> store = DrillStore(pathlib.Path(tempfile.mkdtemp()) / "drills.sqlite3")
    >>> now = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
    >>> session = DrillSession(store, topics=["sampling"], n=1, probes=[], rng=random.Random(1), clock=lambda: now)
    >>> item = session.next_item()
    >>> item.card_id, item.kind, item.topic
    ('problem:nucleus_set_size', 'problem', 'sampling')
    >>> outcome = session.answer_problem(item, item.problem.answer, str(item.problem.answer))
    >>> outcome.correct, outcome.rating.name, session.next_item() is None
    (True, 'Good', True)
    >>> session.summary().line(store.path).startswith("answered 1, right 1, saved to ")
    True
    >>> store.close()

**Cards.** One card per problem kind (``problem:<kind>``) and one per probe (``probe:<id>``). A problem
card asks a fresh random instance each time it comes up: its seed is drawn from the session's ``rng``,
so ``--seed S`` replays a whole session while two sessions never repeat the same numbers by accident.

**What comes next**, in this order:

1. the follow-ups of the probe just answered, as an interviewer asks them (whatever their topic, each at
   most once per session);
2. ``review=True``: the cards reviewed before and due again now, most overdue first, each once; the
   session ends when none is left (cards never seen are not reviews: they come in the default order);
3. ``mock=timedelta``: a topic drawn with the weights of ``weakest_topics`` (missed topics come up more),
   then a card of that topic not yet asked in this session; no new item starts after the time is up,
   and the one in progress is finished and recorded, as an interviewer lets you finish a sentence;
4. otherwise: the chosen topics' cards never reviewed, shuffled across topics, then those due, then the
   rest, soonest due first; past the end of that list it starts again (problems are fresh numbers).

A session stops after ``n`` items (follow-ups count: they are questions too). ``n=None`` means no limit:
``review`` and ``mock`` end on their own; the default order then goes on until the candidate stops.

**Ratings.** A problem is rated by ``rating_for_problem`` (wrong: Again; right within the par time: Good;
slower: Hard), with score 1.0 or 0.0; a probe by ``rating_for_probe`` of the share of strong points the
candidate ticked. An answer counts as *right* in the summary when it is not rated Again, the store's
definition of a successful recall. The time taken runs from ``next_item`` to the numeric answer, or to
``stop_clock`` once a probe's free-text answer is in (ticking the checklist is not interview time).
"""
from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal, Protocol

from course_lib.drills.cards import CARD_TOPICS, load_cards
from course_lib.drills.problem_model import Problem, sig
from course_lib.drills.problems import KINDS, TOPICS, make_problem
from course_lib.drills.scheduling import Rating, rating_for_probe, rating_for_problem, utc, weakest_topics
from course_lib.drills.store import CardSpec, DrillStore, make_card_id

DEFAULT_N = 10  # items in a plain session: about twenty minutes, the length of one interview round

__all__ = ["DEFAULT_N", "DrillItem", "DrillSession", "NotANumber", "Outcome", "ProbeLike", "SessionSummary", "TopicResult",
           "all_topics", "catalogue", "parse_duration", "parse_number"]


class ProbeLike(Protocol):
    """What the session needs of a probe card (``course_lib.drills.cards.ProbeCard`` has it)."""
    id: str
    notebook: str
    topic: str
    question: str
    strong_points: tuple[str, ...]
    weak_answer: str
    follow_ups: tuple[str, ...]


def load_probe_bank() -> list[ProbeLike]:
    """Every probe card of every notebook, from the one bank the notebooks also read."""
    return list(load_cards())


def catalogue(probes: Iterable[ProbeLike]) -> list[CardSpec]:
    """The cards to schedule: one per problem kind, then one per probe."""
    return ([CardSpec(make_card_id("problem", kind), generator.topic, "problem") for kind, generator in KINDS.items()]
            + [CardSpec(make_card_id("probe", probe.id), probe.topic, "probe") for probe in probes])


def all_topics(probes: Iterable[ProbeLike]) -> tuple[str, ...]:
    """The topics that have cards (a problem kind or one of ``probes``), in course order.

    >>> all_topics([])
    ('tokenization', 'kv_cache', 'sampling', 'serving', 'context', 'operations')
    """
    present = {*TOPICS, *(probe.topic for probe in probes)}
    return tuple(topic for topic in dict.fromkeys([*CARD_TOPICS, *TOPICS, *sorted(present)]) if topic in present)


# --- parsing what the candidate types -------------------------------------------------------------

class NotANumber(ValueError):
    """The typed answer is not a number; the message says why and what to type instead."""


_PLAIN = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_GROUPED = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?([eE][+-]?\d+)?")  # 1,234 or 1,234,567.5


def parse_number(text: str, unit: str = "") -> float:
    """The number in a typed answer; ``NotANumber`` with the reason when there is none.

    Accepted: ``1234``, ``-0.5``, ``.75``, ``1.2e3``, thousands grouped with commas (``1,234,567.5``),
    the problem's own unit after the number (``1.68 GB`` when the answer is in GB), a leading ``$`` for an
    answer in USD, and a percentage (``94%`` = 0.94) when the answer is a bare share such as a probability.
    Refused, each with its reason: empty text, words, a comma that does not group thousands (``1,5``: is it
    1.5 or 15?), another unit, a percentage for an answer with a unit, fractions, NaN and infinity.

    >>> parse_number("1,234"), parse_number("1.2e3"), parse_number("94%"), parse_number("1.68 GB", "GB")
    (1234.0, 1200.0, 0.94, 1.68)
    >>> try:
    ...     parse_number("1,5")
    ... except NotANumber as reason:
    ...     print(reason)
    '1,5': a comma here only groups thousands (1,234); write a decimal point as '.'
    """
    raw = text.strip()
    body = raw
    if not body:
        raise NotANumber("no answer yet: type a number")
    if unit and body.lower().endswith(unit.lower()) and len(body) > len(unit):
        body = body[: -len(unit)].strip()
    if body.startswith("$") and "USD" in unit:
        body = body[1:].strip()
    percent = body.endswith("%")
    if percent:
        if unit:
            raise NotANumber(f"{raw!r}: this answer is in {unit}, not a percentage; type the number of {unit}")
        body = body[:-1].strip()
    if _GROUPED.fullmatch(body):
        body = body.replace(",", "")
    elif "," in body:
        raise NotANumber(f"{raw!r}: a comma here only groups thousands (1,234); write a decimal point as '.'")
    if not _PLAIN.fullmatch(body):
        if "/" in body:
            reason = "type the value as a decimal, e.g. 0.75 rather than 3/4"
        elif re.match(r"[+-]?[\d.]", body):
            reason = f"type just the number{f' (in {unit})' if unit else ''}, e.g. 1234 or 1.2e3"
        else:
            reason = "that is not a number; type digits, e.g. 1234, 0.25 or 1.2e3"
        raise NotANumber(f"{raw!r}: {reason}")
    value = float(body) / (100 if percent else 1)
    if not math.isfinite(value):  # 1e999
        raise NotANumber(f"{raw!r}: too large to be an answer; check the exponent")
    return value


_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def parse_duration(text: str) -> timedelta:
    """``20m``, ``90s``, ``1h``, ``1h30m`` -> a timedelta; ValueError with an example otherwise.

    >>> parse_duration("20m"), parse_duration("1h30m15s")
    (datetime.timedelta(seconds=1200), datetime.timedelta(seconds=5415))
    """
    match = _DURATION.fullmatch(text.strip().lower())
    if not text.strip() or match is None or not any(match.groups()):
        raise ValueError(f"{text!r} is not a duration: write a whole number with a unit, e.g. 20m, 90s or 1h30m")
    hours, minutes, seconds = (int(part or 0) for part in match.groups())
    duration = timedelta(hours=hours, minutes=minutes, seconds=seconds)
    if duration <= timedelta(0):
        raise ValueError(f"{text!r} is no time at all: a mock interview needs a duration above zero, e.g. 20m")
    return duration


# --- what is asked and how it went --------------------------------------------------------------

@dataclass(frozen=True)
class DrillItem:
    card_id: str                       # "problem:<kind>" or "probe:<id>"
    topic: str
    kind: Literal["problem", "probe"]
    problem: Problem | None = None     # a fresh instance, for a problem card
    probe: ProbeLike | None = None     # the card, for a probe
    follow_up_of: str | None = None    # the probe id this one follows up, if it does
    number: int = 0                    # 1 for the session's first item


@dataclass(frozen=True)
class Outcome:
    item: DrillItem
    rating: Rating
    score: float          # 1.0 / 0.0 for a problem; the share of strong points ticked for a probe
    elapsed_s: float

    @property
    def right(self) -> bool:
        return self.rating != Rating.Again

    @property
    def correct(self) -> bool:
        """A problem answered within its tolerance (a probe with every strong point ticked)."""
        return self.score == 1.0


@dataclass
class TopicResult:
    topic: str
    asked: int = 0
    right: int = 0
    score_total: float = 0.0   # problems 1 or 0, probes their share ticked

    @property
    def mean_score(self) -> float:
        return self.score_total / self.asked if self.asked else 0.0


@dataclass(frozen=True)
class SessionSummary:
    answered: int
    right: int
    by_topic: dict[str, TopicResult]   # weakest first: lowest mean score, then name
    elapsed: timedelta

    def line(self, db_path: object) -> str:
        """The one-line summary printed when a session ends, however it ends."""
        return f"answered {self.answered}, right {self.right}, saved to {db_path}"


@dataclass
class DrillSession:
    """Choose, ask, grade and record; see the module docstring for the order of questions."""

    store: DrillStore
    topics: Sequence[str] | None = None            # None: every topic
    n: int | None = DEFAULT_N                      # items at most; None: no limit
    review: bool = False
    mock: timedelta | None = None
    probes: Sequence[ProbeLike] | None = None      # None: the course's probe bank
    rng: random.Random = field(default_factory=random.Random)
    clock: Callable[[], datetime] = utc             # returns an aware datetime; tests pass a fake one
    results: list[Outcome] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if self.review and self.mock is not None:
            raise ValueError("choose --review (the cards due again) or --mock (a timed mix), not both")
        if self.n is not None and self.n < 1:
            raise ValueError(f"n is the number of items to ask, at least 1; got {self.n}")
        self.probes = load_probe_bank() if self.probes is None else list(self.probes)
        known = all_topics(self.probes)
        chosen = list(dict.fromkeys(self.topics)) if self.topics else list(known)
        unknown = [topic for topic in chosen if topic not in known]
        if unknown:
            raise ValueError(f"unknown topic {', '.join(map(repr, unknown))}; topics: {', '.join(known)}")
        self.topics = tuple(chosen)
        self._probe_by_id = {probe.id: probe for probe in self.probes}
        specs = catalogue(self.probes)
        self.store.ensure_cards(specs, now=self.clock())
        self._specs = {spec.card_id: spec for spec in specs}
        self._chosen = [spec.card_id for spec in specs if spec.topic in self.topics]
        self._asked: set[str] = set()         # card ids asked this session
        self._cycle: set[str] = set()         # card ids asked in this round of the default order
        self._plan: list[str] = []             # default order, refilled when it runs out
        self._follow_ups: list[tuple[str, str]] = []  # (card id, parent probe id), asked next
        self._started = self.clock()
        self._deadline = None if self.mock is None else self._started + self.mock
        self._current: tuple[DrillItem, datetime, datetime | None] | None = None  # item, asked, answered

    # --- choosing -----------------------------------------------------------------------------

    @property
    def count(self) -> int:
        """Items answered and recorded so far."""
        return len(self.results)

    def time_left(self) -> timedelta | None:
        """Time left in a mock interview (never negative); None outside one."""
        return None if self._deadline is None else max(self._deadline - self.clock(), timedelta(0))

    def next_item(self) -> DrillItem | None:
        """The next item to ask, or None when the session is over. Starts the item's clock."""
        if self.n is not None and self.count >= self.n:
            return None
        if self._deadline is not None and self.clock() >= self._deadline:
            return None
        parent = None
        card_id = None
        while self._follow_ups and card_id is None:
            candidate, parent = self._follow_ups.pop(0)
            if candidate not in self._asked:
                card_id = candidate
        if card_id is None:
            parent = None
            card_id = (self._next_review() if self.review else
                       self._next_mock() if self.mock is not None else self._next_default())
        if card_id is None:
            return None
        self._asked.add(card_id)
        self._cycle.add(card_id)
        item = self._make_item(card_id, parent)
        self._current = (item, self.clock(), None)
        return item

    def _next_review(self) -> str | None:
        for card_id in self.store.due(self.clock(), self.topics):
            # new cards are due at once too, but a review is of what was learnt before
            if card_id in self._specs and card_id not in self._asked \
                    and self.store.card(card_id).state.last_review is not None:
                return card_id
        return None

    def _next_mock(self) -> str | None:
        weights = {topic: weight for topic, weight in weakest_topics(self.store, self.clock()).items()
                   if topic in self.topics and any(self._specs[c].topic == topic for c in self._chosen)}
        if not weights:
            return None
        topic = self.rng.choices(list(weights), weights=list(weights.values()))[0]
        cards = [card_id for card_id in self._chosen if self._specs[card_id].topic == topic]
        fresh = [card_id for card_id in cards if card_id not in self._asked]
        return self.rng.choice(fresh or cards)

    def _next_default(self) -> str | None:
        for _ in range(3):  # at most: drain the plan, refill it, start a new cycle and refill again
            while self._plan:
                card_id = self._plan.pop(0)
                if card_id not in self._cycle:
                    return card_id
            if set(self._chosen) <= self._cycle:
                self._cycle.clear()  # every card asked: go round again (problems come with fresh numbers)
            self._plan = self._default_order()
        return None

    def _default_order(self) -> list[str]:
        now = self.clock()
        cards = [self.store.card(card_id) for card_id in self._chosen if card_id not in self._cycle]
        new = [card.card_id for card in cards if card.state.last_review is None]
        self.rng.shuffle(new)
        seen = sorted((card for card in cards if card.state.last_review is not None), key=lambda c: (c.due, c.card_id))
        return new + [c.card_id for c in seen if c.due <= now] + [c.card_id for c in seen if c.due > now]

    def _make_item(self, card_id: str, parent: str | None) -> DrillItem:
        spec = self._specs[card_id]
        kind, name = card_id.split(":", 1)
        number = self.count + 1
        if kind == "problem":
            problem = make_problem(name, self.rng.getrandbits(32))
            return DrillItem(card_id, spec.topic, "problem", problem=problem, follow_up_of=parent, number=number)
        return DrillItem(card_id, spec.topic, "probe", probe=self._probe_by_id[name], follow_up_of=parent,
                         number=number)

    # --- grading and recording ----------------------------------------------------------------

    def _elapsed(self, item: DrillItem) -> float:
        """Seconds from ``next_item`` to now, or to ``stop_clock`` when it was called for this item."""
        if self._current is None or self._current[0] is not item:
            raise ValueError(f"{item.card_id} is not the item being asked: answer the item next_item returned")
        _, started, stopped = self._current
        return max(((stopped or self.clock()) - started).total_seconds(), 0.0)

    def stop_clock(self, item: DrillItem) -> float:
        """Stop the item's clock (a probe's free-text answer is in; ticking is not interview time)."""
        elapsed = self._elapsed(item)
        self._current = (item, self._current[1], self.clock())
        return elapsed

    def answer_problem(self, item: DrillItem, given: float, typed: str = "") -> Outcome:
        """Grade a numeric answer (parse it with ``parse_number`` first) and record it."""
        if item.problem is None:
            raise ValueError(f"{item.card_id} is a probe: answer it with answer_probe")
        elapsed = self._elapsed(item)
        correct = item.problem.grade(given)
        rating = rating_for_problem(correct, elapsed)
        # The seed goes into the log so that the exact problem can be rebuilt with make_problem(kind, seed).
        answer = f"{typed or sig(given)} (seed {item.problem.seed})"
        return self._record(item, rating, 1.0 if correct else 0.0, answer, elapsed)

    def answer_probe(self, item: DrillItem, ticked: Sequence[bool], answer: str = "") -> Outcome:
        """Score a probe by the share of its strong points ticked, record it, and queue its follow-ups."""
        if item.probe is None:
            raise ValueError(f"{item.card_id} is a numeric problem: answer it with answer_problem")
        points = item.probe.strong_points
        if len(ticked) != len(points):
            raise ValueError(f"{item.card_id} has {len(points)} strong points; got {len(ticked)} ticks")
        elapsed = self._elapsed(item)
        score = sum(map(bool, ticked)) / len(points) if points else 1.0
        outcome = self._record(item, rating_for_probe(score), score, answer, elapsed)
        self._follow_ups[:0] = [(make_card_id("probe", follow_up), item.probe.id)
                                for follow_up in item.probe.follow_ups if follow_up in self._probe_by_id]
        return outcome

    def _record(self, item: DrillItem, rating: Rating, score: float, answer: str, elapsed: float) -> Outcome:
        self.store.record_review(item.card_id, rating, score=score, answer=answer, elapsed_s=elapsed, now=self.clock())
        outcome = Outcome(item, rating, score, elapsed)
        self.results.append(outcome)
        self._current = None
        return outcome

    # --- the report -----------------------------------------------------------------------------

    def summary(self) -> SessionSummary:
        """Answered, right, and per topic (weakest first), over the items recorded in this session."""
        by_topic: dict[str, TopicResult] = {}
        for outcome in self.results:
            result = by_topic.setdefault(outcome.item.topic, TopicResult(outcome.item.topic))
            result.asked += 1
            result.right += outcome.right
            result.score_total += outcome.score
        ordered = dict(sorted(by_topic.items(), key=lambda entry: (entry[1].mean_score, entry[0])))
        return SessionSummary(len(self.results), sum(o.right for o in self.results), ordered,
                              self.clock() - self._started)
