"""The drill history: FSRS card states and the review log, in one local SQLite file.

    >>> import tempfile, pathlib
    >>> from datetime import datetime, timedelta, timezone
    >>> now = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
    >>> store = DrillStore(pathlib.Path(tempfile.mkdtemp()) / "drills.sqlite3")
    >>> store.ensure_cards([("problem:kv_cache_bytes", "kv_memory", "problem"),
    ...                     ("probe:03.why-gqa", "kv_memory", "probe")], now=now)   # how many were new
    2
    >>> store.due(now)                       # new cards are due at once, earliest first
    ['probe:03.why-gqa', 'problem:kv_cache_bytes']
    >>> card = store.record_review("probe:03.why-gqa", score=0.8, answer="fewer KV heads...", elapsed_s=95, now=now)
    >>> card.state.due - now                 # score 0.8 -> Good: the next learning step, ten minutes on
    datetime.timedelta(seconds=600)
    >>> store.due(now)
    ['problem:kv_cache_bytes']
    >>> store.stats(now)["kv_memory"]
    TopicStats(topic='kv_memory', cards=2, new=1, due=1, reviews=1, lapses=0, retention=1.0, recall=1.0)
    >>> store.close()

The file holds four tables: ``schema_version`` (one row), ``cards`` (one row per problem kind and per
probe: topic, kind, the fsrs ``Card.to_dict()`` as JSON and its due time as ISO-8601 UTC text, which
sorts in time order), and ``reviews`` (one row per answer: time, rating 1-4, score, the answer text,
seconds taken). Each review is one transaction that appends the review and rewrites the card, so a
crash, a Ctrl-C or a power cut leaves either both or neither; the file is in WAL mode with
``synchronous=FULL``, so a committed review survives it too. An interrupted session loses at most the
answer being typed.

``stats`` reports, per topic: ``retention``, the share of reviews *not* rated Again (FSRS's own
definition of a successful recall, the quantity its desired retention of 0.9 targets; Hard counts as
recalled), and ``recall``, the mean FSRS retrievability at ``now`` of the topic's reviewed cards (the
predicted chance of recalling them today).

The default file is ``drills.sqlite3`` in the user's data folder (``platformdirs``: on Linux
``~/.local/share/course-llm-serving/``); the environment variable ``COURSE_DRILL_DB`` or the ``path``
argument (``course drill --db FILE``) point elsewhere. A file that is not a drill history (another
program's database, a damaged file, not SQLite at all) is refused with ``DrillStoreError`` and never
written to.
"""
from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal, NamedTuple

import platformdirs
from fsrs import Card, Rating

from course_lib.drills.scheduling import DrillScheduler, rating_for_probe, utc

APP_NAME = "course-llm-serving"
DB_FILENAME = "drills.sqlite3"
DB_ENV = "COURSE_DRILL_DB"
SCHEMA_VERSION = 1
KINDS = ("problem", "probe")

SCHEMA = (  # one statement each: executescript would COMMIT first and run outside our transaction
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
    """CREATE TABLE IF NOT EXISTS cards (
    card_id TEXT PRIMARY KEY,
    topic   TEXT NOT NULL,
    kind    TEXT NOT NULL CHECK (kind IN ('problem', 'probe')),
    state   TEXT NOT NULL,          -- fsrs Card.to_dict() as JSON
    due     TEXT NOT NULL           -- ISO-8601 UTC, microseconds always written, so text order is time order
    )""",
    "CREATE INDEX IF NOT EXISTS cards_due ON cards (due)",
    """CREATE TABLE IF NOT EXISTS reviews (
    id          INTEGER PRIMARY KEY,
    card_id     TEXT NOT NULL REFERENCES cards (card_id),
    reviewed_at TEXT NOT NULL,      -- ISO-8601 UTC, like cards.due
    rating      INTEGER NOT NULL CHECK (rating BETWEEN 1 AND 4),
    score       REAL,               -- the probe's share of strong points, 1.0 / 0.0 for a problem, or NULL
    answer      TEXT NOT NULL,
    elapsed_s   REAL
    )""",
    "CREATE INDEX IF NOT EXISTS reviews_card ON reviews (card_id)",
)

__all__ = ["DB_ENV", "CardSpec", "DrillCard", "DrillStore", "DrillStoreError", "ReviewRecord", "TopicStats",
           "default_db_path", "make_card_id"]


class DrillStoreError(RuntimeError):
    """The drill history file cannot be used; the message names the file and what to do."""


class CardSpec(NamedTuple):
    """One card to schedule: ``("problem:kv_cache_bytes", "kv_memory", "problem")``."""
    card_id: str
    topic: str
    kind: Literal["problem", "probe"]


@dataclass(frozen=True)
class DrillCard:
    card_id: str
    topic: str
    kind: str
    state: Card  # the fsrs card: due, stability, difficulty, learning step, last review

    @property
    def due(self) -> datetime:
        return self.state.due


@dataclass(frozen=True)
class ReviewRecord:
    id: int
    card_id: str
    reviewed_at: datetime
    rating: Rating
    score: float | None
    answer: str
    elapsed_s: float | None


@dataclass(frozen=True)
class TopicStats:
    topic: str
    cards: int                # cards in the topic
    new: int                  # of which never reviewed
    due: int                  # due at `now`, new cards included
    reviews: int              # reviews up to `now`
    lapses: int               # of which rated Again
    retention: float | None   # 1 - lapses / reviews; None before the first review
    recall: float | None      # mean FSRS retrievability at `now` over reviewed cards; None if none reviewed


def make_card_id(kind: Literal["problem", "probe"], name: str) -> str:
    """The card id for a problem kind or a probe: ``make_card_id("probe", "03.why-gqa") -> 'probe:03.why-gqa'``."""
    if kind not in KINDS:
        raise ValueError(f"a card is a 'problem' or a 'probe', not {kind!r}")
    return f"{kind}:{name}"


def default_db_path() -> Path:
    """``$COURSE_DRILL_DB`` when set, else ``drills.sqlite3`` in the user's data folder."""
    override = os.environ.get(DB_ENV, "").strip()
    if override:
        return Path(override).expanduser()
    return platformdirs.user_data_path(APP_NAME, appauthor=False) / DB_FILENAME


def _iso(moment: datetime) -> str:
    return utc(moment).isoformat(timespec="microseconds")


class DrillStore:
    """Card states and reviews in one SQLite file; open it with ``with DrillStore(path) as store:``."""

    def __init__(self, path: str | Path | None = None, *, scheduler: DrillScheduler | None = None) -> None:
        self.path = Path(path).expanduser() if path is not None else default_db_path()
        self.scheduler = scheduler or DrillScheduler()
        if self.path.is_dir():
            raise DrillStoreError(f"{self.path} is a folder; the drill history is a file: pass a file name "
                                  f"such as {self.path / DB_FILENAME}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit mode: every transaction is opened explicitly by _transaction (BEGIN IMMEDIATE).
        self._conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        try:
            self._check_readable()
            self._create_schema()
        except BaseException:
            self._conn.close()
            raise

    # --- opening ------------------------------------------------------------------------------

    def _refuse(self, what: str) -> DrillStoreError:
        return DrillStoreError(
            f"{self.path} {what}. It was left untouched. Move it aside (mv '{self.path}' '{self.path}.bad') to "
            f"start a fresh drill history there, or use another file with --db FILE or ${DB_ENV}.")

    def _check_readable(self) -> None:
        """Read before writing anything: SQLite would happily turn a stray file into a new database."""
        try:
            tables = {row[0] for row in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            problems = [row[0] for row in self._conn.execute("PRAGMA quick_check")]
        except sqlite3.OperationalError as error:  # locked, unreadable, no permission: not the file's fault
            raise DrillStoreError(f"cannot open the drill history {self.path}: {error}. Check that the file is "
                                  f"readable and writable and not held by another program, then try again.") from error
        except sqlite3.DatabaseError as error:  # SQLITE_NOTADB, SQLITE_CORRUPT
            raise self._refuse(f"is not a readable SQLite database ({error})") from error
        if problems != ["ok"]:
            raise self._refuse(f"is a damaged SQLite database (integrity check: {'; '.join(problems[:3])})")
        if tables and "schema_version" not in tables:
            names = ", ".join(sorted(tables))
            raise self._refuse(f"is an SQLite database but not a drill history (its tables: {names})")

    def _create_schema(self) -> None:
        # WAL: a reader (the notebook panel) never blocks the writer (the terminal), and a crash mid-write
        # leaves the last committed state. FULL: a commit reaches the disk before record_review returns.
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = FULL")
        with self._transaction():
            for statement in SCHEMA:
                self._conn.execute(statement)
            versions = [row[0] for row in self._conn.execute("SELECT version FROM schema_version")]
            if not versions:
                self._conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            elif max(versions) > SCHEMA_VERSION:
                raise DrillStoreError(f"{self.path} was written by a newer course_lib (drill schema {max(versions)}, "
                                      f"this one reads {SCHEMA_VERSION}): upgrade course_lib, or use another file "
                                      f"with --db FILE.")

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One all-or-nothing write. IMMEDIATE takes the write lock before the first read, so two stores open
        on the same file cannot both read a card's old state and each write a review that forgets the other."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:  # KeyboardInterrupt too: roll back, then let it end the session
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> DrillStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- cards ----------------------------------------------------------------------------------

    def ensure_cards(self, cards: Iterable[CardSpec | tuple[str, str, str]], now: datetime | None = None) -> int:
        """Add the cards not yet in the file (due at ``now``); update the topic of those that are. Returns how
        many were added. A card's schedule and history survive a bank that moves it to another topic."""
        specs = [CardSpec(*card) for card in cards]
        for spec in specs:
            if spec.kind not in KINDS:
                raise ValueError(f"card {spec.card_id!r}: kind must be 'problem' or 'probe', not {spec.kind!r}")
        moment = utc(now)
        added = 0
        with self._transaction():
            for spec in specs:
                row = self._conn.execute("SELECT topic, kind FROM cards WHERE card_id = ?", (spec.card_id,)).fetchone()
                if row is None:
                    state = self.scheduler.new_card(spec.card_id, moment)
                    self._conn.execute("INSERT INTO cards (card_id, topic, kind, state, due) VALUES (?, ?, ?, ?, ?)",
                                       (spec.card_id, spec.topic, spec.kind, json.dumps(state.to_dict()), _iso(moment)))
                    added += 1
                elif tuple(row) != (spec.topic, spec.kind):
                    self._conn.execute("UPDATE cards SET topic = ?, kind = ? WHERE card_id = ?",
                                       (spec.topic, spec.kind, spec.card_id))
        return added

    def card(self, card_id: str) -> DrillCard:
        """The card's topic, kind and fsrs state; KeyError if ``ensure_cards`` never added it."""
        row = self._conn.execute("SELECT card_id, topic, kind, state FROM cards WHERE card_id = ?",
                                 (card_id,)).fetchone()
        if row is None:
            raise KeyError(f"no card {card_id!r} in {self.path}: add it with ensure_cards first")
        return DrillCard(row[0], row[1], row[2], Card.from_dict(json.loads(row[3])))

    def cards(self, topics: Iterable[str] | None = None) -> list[DrillCard]:
        """Every card (of ``topics`` when given), ordered by topic then id."""
        return [self.card(card_id) for card_id in self._card_ids("1", (), topics, order="topic, card_id")]

    def record_review(self, card_id: str, rating: Rating | int | None = None, *, score: float | None = None,
                      answer: str = "", elapsed_s: float | None = None, now: datetime | None = None) -> DrillCard:
        """Log one answer and reschedule the card, in one transaction; returns the card as it now stands.

        Pass ``rating`` (a numeric problem: see ``rating_for_problem``) or ``score`` (a probe's share of
        strong points, rated by ``rating_for_probe``), or both (a problem's rating with its 1.0 / 0.0 score).
        """
        if rating is None and score is None:
            raise ValueError("record_review needs a rating (Rating.Again..Easy) or a probe score between 0 and 1")
        rating = rating_for_probe(score) if rating is None else Rating(rating)
        if score is not None and not 0 <= score <= 1:
            raise ValueError(f"a score is a share between 0 and 1; got {score!r}")
        moment = utc(now)
        with self._transaction():
            current = self.card(card_id)  # read under the write lock: see _transaction
            state = self.scheduler.review(current.state, rating, now=moment, elapsed_s=elapsed_s)
            self._insert_review(card_id, moment, rating, score, answer, elapsed_s)
            self._write_card(card_id, state)
        return DrillCard(current.card_id, current.topic, current.kind, state)

    def _insert_review(self, card_id: str, moment: datetime, rating: Rating, score: float | None, answer: str,
                       elapsed_s: float | None) -> None:
        self._conn.execute("INSERT INTO reviews (card_id, reviewed_at, rating, score, answer, elapsed_s) "
                           "VALUES (?, ?, ?, ?, ?, ?)", (card_id, _iso(moment), int(rating), score, answer, elapsed_s))

    def _write_card(self, card_id: str, state: Card) -> None:
        self._conn.execute("UPDATE cards SET state = ?, due = ? WHERE card_id = ?",
                           (json.dumps(state.to_dict()), _iso(state.due), card_id))

    def reviews(self, card_id: str | None = None) -> list[ReviewRecord]:
        """The review log (of one card when given), oldest first."""
        query = "SELECT id, card_id, reviewed_at, rating, score, answer, elapsed_s FROM reviews"
        rows = (self._conn.execute(query + " WHERE card_id = ? ORDER BY id", (card_id,)) if card_id is not None
                else self._conn.execute(query + " ORDER BY id"))
        return [ReviewRecord(row[0], row[1], datetime.fromisoformat(row[2]), Rating(row[3]), *row[4:]) for row in rows]

    # --- what to ask, and how it is going ---------------------------------------------------------

    def _card_ids(self, where: str, params: tuple, topics: Iterable[str] | None, *, order: str,
                  limit: int | None = None) -> list[str]:
        query, args = f"SELECT card_id FROM cards WHERE {where}", list(params)
        if topics is not None:
            topics = list(topics)
            query += f" AND topic IN ({', '.join('?' * len(topics))})"
            args += topics
        query += f" ORDER BY {order}"
        if limit is not None:
            query += " LIMIT ?"
            args.append(int(limit))
        return [row[0] for row in self._conn.execute(query, args)]

    def due(self, now: datetime | None = None, topics: Iterable[str] | None = None,
            limit: int | None = None) -> list[str]:
        """Ids of the cards due at ``now`` (of ``topics`` when given), most overdue first."""
        return self._card_ids("due <= ?", (_iso(utc(now)),), topics, order="due, card_id", limit=limit)

    def stats(self, now: datetime | None = None) -> dict[str, TopicStats]:
        """Per topic, in name order: cards, new, due now, reviews and lapses up to ``now``, retention, recall."""
        moment = utc(now)
        counts = {topic: [0, 0] for (topic,) in self._conn.execute("SELECT DISTINCT topic FROM cards")}
        for topic, reviews, lapses in self._conn.execute(
                "SELECT c.topic, count(*), sum(r.rating = ?) FROM reviews r JOIN cards c USING (card_id) "
                "WHERE r.reviewed_at <= ? GROUP BY c.topic", (int(Rating.Again), _iso(moment))):
            counts[topic] = [reviews, lapses]
        report = {}
        for topic in sorted(counts):
            cards = self.cards([topic])
            reviewed = [card for card in cards if card.state.last_review is not None]
            reviews, lapses = counts[topic]
            recall = ([self.scheduler.retrievability(card.state, moment) for card in reviewed] if reviewed else None)
            report[topic] = TopicStats(
                topic=topic, cards=len(cards), new=len(cards) - len(reviewed),
                due=sum(card.due <= moment for card in cards), reviews=reviews, lapses=lapses,
                retention=1 - lapses / reviews if reviews else None,
                recall=sum(recall) / len(recall) if recall else None)
        return report
