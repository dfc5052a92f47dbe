"""From a drill outcome to an FSRS rating, and the scheduler that turns ratings into due dates.

    >>> from datetime import datetime, timezone
    >>> rating_for_problem(correct=True, elapsed_s=40), rating_for_problem(correct=True, elapsed_s=400)
    (<Rating.Good: 3>, <Rating.Hard: 2>)
    >>> rating_for_problem(correct=False, elapsed_s=5)
    <Rating.Again: 1>
    >>> [rating_for_probe(score).name for score in (0.0, 0.5, 0.74, 0.75, 1.0)]
    ['Again', 'Hard', 'Hard', 'Good', 'Easy']
    >>> scheduler = DrillScheduler()
    >>> now = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
    >>> card = scheduler.new_card("problem:kv_cache_bytes", now)
    >>> scheduler.review(card, Rating.Again, now=now).due - now     # a miss comes back within minutes
    datetime.timedelta(seconds=60)
    >>> card = scheduler.review(card, Rating.Good, now=now)           # learning step 1 of 2
    >>> scheduler.review(card, Rating.Good, now=card.due).due - card.due  # graduated: days away
    datetime.timedelta(days=2)

**Numeric problems** are graded right or wrong within their stated tolerance, so the rating also uses
the time taken: right within ``par_s`` seconds (``PROBLEM_PAR_S`` = 120 unless the problem states its
own) is ``Good``; right but slower is ``Hard`` (you can do it, not yet at interview speed); wrong is
``Again``. A problem is never ``Easy``: a fresh random instance every time is the point, and ``Easy``
would push the kind months away after one lucky answer.

**Probe cards** are scored by the share of a strong answer's points the candidate ticked:

    score < 0.5            Again   (fewer than half of the points: the answer would not pass)
    0.5  <= score < 0.75   Hard
    0.75 <= score < 1.0    Good
    score == 1.0           Easy    (every point made)

``DrillScheduler`` is a thin wrapper over ``fsrs.Scheduler`` (FSRS-6, default parameters, desired
retention 0.9) that takes ``now`` from the caller, so tests and replays are exact, and keeps fuzzing
off by default, so the same review history always gives the same due dates.

``weakest_topics`` gives each topic the weight ``(lapses + 1) / (reviews + 2)``: its share of reviews
rated ``Again``, smoothed by one imaginary lapse and one imaginary pass (a uniform prior), so an
untried topic weighs 0.5, a topic always missed tends to 1 and a topic always recalled tends to 0
without ever reaching it. The weights are normalised to sum to 1; a mock interview draws topics in
those proportions.
"""
from __future__ import annotations

import hashlib
import math
from datetime import datetime, timedelta, timezone
from collections.abc import Mapping
from typing import Any, Protocol

from fsrs import Card, Rating, Scheduler

PROBLEM_PAR_S = 120.0  # seconds a prepared candidate needs for one numeric problem, pen and paper
PROBE_THRESHOLDS = ((1.0, Rating.Easy), (0.75, Rating.Good), (0.5, Rating.Hard))  # lowest score for each rating
DESIRED_RETENTION = 0.9  # FSRS schedules each card so that it is recalled with this probability when due

__all__ = ["DESIRED_RETENTION", "PROBE_THRESHOLDS", "PROBLEM_PAR_S", "DrillScheduler", "Rating", "rating_for_probe",
           "rating_for_problem", "utc", "weakest_topics"]


def rating_for_problem(correct: bool, elapsed_s: float | None = None, *, par_s: float = PROBLEM_PAR_S) -> Rating:
    """``Again`` when wrong; ``Good`` when right within ``par_s`` seconds (or the time is unknown); else ``Hard``."""
    if not correct:
        return Rating.Again
    if elapsed_s is not None and elapsed_s > par_s:
        return Rating.Hard
    return Rating.Good


def rating_for_probe(score: float) -> Rating:
    """The rating for a probe card whose strong points were ticked in the share ``score`` (0 to 1)."""
    if not isinstance(score, (int, float)) or isinstance(score, bool) or math.isnan(score) or not 0 <= score <= 1:
        raise ValueError(f"a probe score is the share of strong points ticked, between 0 and 1; got {score!r}")
    for lowest, rating in PROBE_THRESHOLDS:
        if score >= lowest:
            return rating
    return Rating.Again


def utc(now: datetime | None = None) -> datetime:
    """``now`` as an aware UTC datetime (the current time when None); fsrs accepts no other form."""
    if now is None:
        return datetime.now(timezone.utc)
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"{now!r} has no time zone: pass an aware datetime, e.g. datetime.now(timezone.utc)")
    return now.astimezone(timezone.utc)


def fsrs_card_id(card_id: str) -> int:
    """A stable integer for fsrs's own ``card_id`` field (ours are strings such as ``probe:03.why-gqa``)."""
    return int.from_bytes(hashlib.sha256(card_id.encode("utf-8")).digest()[:6], "big")


class DrillScheduler:
    """FSRS with the time passed in: ``new_card``, ``review`` and ``retrievability``."""

    def __init__(self, *, desired_retention: float = DESIRED_RETENTION, enable_fuzzing: bool = False,
                 learning_steps: tuple[timedelta, ...] = (timedelta(minutes=1), timedelta(minutes=10))) -> None:
        self.fsrs = Scheduler(desired_retention=desired_retention, enable_fuzzing=enable_fuzzing,
                              learning_steps=learning_steps)

    def new_card(self, card_id: str, now: datetime | None = None) -> Card:
        """A card never reviewed, due at ``now`` (a new card is due at once)."""
        return Card(card_id=fsrs_card_id(card_id), due=utc(now))

    def review(self, card: Card, rating: Rating | int, *, now: datetime | None = None,
               elapsed_s: float | None = None) -> Card:
        """The card after one review rated ``rating`` at ``now``; the input card is left unchanged."""
        duration_ms = None if elapsed_s is None else int(round(elapsed_s * 1000))
        updated, _log = self.fsrs.review_card(card, Rating(rating), review_datetime=utc(now),
                                              review_duration=duration_ms)
        return updated

    def retrievability(self, card: Card, now: datetime | None = None) -> float:
        """FSRS's probability that the card is recalled at ``now``; 0 for a card never reviewed."""
        return float(self.fsrs.get_card_retrievability(card, utc(now)))


class TopicHistory(Protocol):
    """What ``weakest_topics`` reads: per-topic review counts (a ``DrillStore`` is one; the
    store builds on this module, so it is named by shape, not imported)."""

    def stats(self, now: datetime | None = None) -> Mapping[str, Any]: ...


def weakest_topics(store: TopicHistory, now: datetime | None = None) -> dict[str, float]:
    """Topic weights for a mock interview, heaviest first, summing to 1 (see the module docstring).

    Reviews after ``now`` are not counted, so a replay at an earlier time sees the history as it was.
    """
    raw = {topic: (s.lapses + 1) / (s.reviews + 2) for topic, s in store.stats(now).items() if s.cards}
    total = sum(raw.values())
    return {topic: weight / total for topic, weight in sorted(raw.items(), key=lambda item: (-item[1], item[0]))}
