"""The drill history: round trips through the SQLite file, due dates checked against fsrs itself, all-or-nothing
reviews, refusal of files that are not a drill history, two stores on one file, stats on a hand-built history,
the default path and the rating rules."""
from __future__ import annotations

import json
import sqlite3
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import platformdirs
import pytest
from fsrs import Card, Rating, ReviewLog, Scheduler, State

from course_lib.drills.scheduling import (DrillScheduler, fsrs_card_id, rating_for_probe, rating_for_problem,
                                          weakest_topics)
from course_lib.drills.store import (DB_ENV, SCHEMA_VERSION, DrillStore, DrillStoreError, default_db_path,
                                     make_card_id)

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)
CARDS = [("problem:kv_cache_bytes", "kv_memory", "problem"), ("probe:03.why-gqa", "kv_memory", "probe"),
         ("problem:softmax_temperature", "sampling", "problem"), ("probe:02.top-p", "sampling", "probe")]


@pytest.fixture
def store(tmp_path):
    with DrillStore(tmp_path / "drills.sqlite3") as opened:
        opened.ensure_cards(CARDS, now=T0)
        yield opened


def _oracle() -> Scheduler:
    """fsrs as its own documentation uses it; fuzzing off to match the store's default."""
    return Scheduler(enable_fuzzing=False)


def _fsrs_replay(card_id: str, reviews: list[tuple[Rating, datetime]], created: datetime = T0) -> Card:
    card = Card(card_id=fsrs_card_id(card_id), due=created)
    for rating, moment in reviews:
        card, _ = _oracle().review_card(card, rating, review_datetime=moment)
    return card


# --- round trips --------------------------------------------------------------------------------


def test_cards_and_reviews_survive_closing_and_reopening(tmp_path):
    path = tmp_path / "drills.sqlite3"
    with DrillStore(path) as first:
        assert first.ensure_cards(CARDS, now=T0) == 4
        first.record_review("probe:03.why-gqa", score=0.8, answer="fewer KV heads, smaller cache", elapsed_s=42.5,
                            now=T0 + timedelta(minutes=3))
        first.record_review("problem:kv_cache_bytes", Rating.Again, score=0.0, answer="12.5", elapsed_s=80, now=T0)
        before = {card_id: first.card(card_id) for card_id, _, _ in CARDS}
    with DrillStore(path) as second:
        assert {card_id: second.card(card_id) for card_id, _, _ in CARDS} == before
        reviews = second.reviews()
        assert [(r.card_id, r.rating, r.score, r.answer, r.elapsed_s, r.reviewed_at) for r in reviews] == [
            ("probe:03.why-gqa", Rating.Good, 0.8, "fewer KV heads, smaller cache", 42.5, T0 + timedelta(minutes=3)),
            ("problem:kv_cache_bytes", Rating.Again, 0.0, "12.5", 80.0, T0)]
        assert second.reviews("problem:kv_cache_bytes") == reviews[1:]
        assert second.card("probe:03.why-gqa").topic == "kv_memory" and second.card("probe:02.top-p").kind == "probe"


def test_a_new_card_is_the_fsrs_new_card_due_when_added(store):
    assert store.card("probe:02.top-p").state == Card(card_id=fsrs_card_id("probe:02.top-p"), due=T0)


def test_ensure_cards_adds_only_new_cards_and_keeps_history_when_a_card_changes_topic(store):
    store.record_review("probe:02.top-p", Rating.Good, now=T0)
    state = store.card("probe:02.top-p").state
    assert store.ensure_cards(CARDS, now=T0 + timedelta(days=1)) == 0
    moved = [("probe:02.top-p", "decoding", "probe"), ("probe:04.new", "decoding", "probe")]
    assert store.ensure_cards(moved, now=T0 + timedelta(days=1)) == 1
    assert store.card("probe:02.top-p").topic == "decoding" and store.card("probe:02.top-p").state == state
    assert len(store.reviews("probe:02.top-p")) == 1
    with pytest.raises(ValueError, match="'problem' or 'probe'"):
        store.ensure_cards([("x", "t", "flashcard")])


def test_unknown_cards_naive_times_and_missing_outcomes_are_refused(store):
    with pytest.raises(KeyError, match="ensure_cards"):
        store.record_review("probe:nope", Rating.Good, now=T0)
    with pytest.raises(ValueError, match="time zone"):
        store.due(datetime(2024, 5, 1, 9, 0))
    with pytest.raises(ValueError, match="rating"):
        store.record_review("probe:02.top-p", now=T0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        store.record_review("probe:02.top-p", score=1.5, now=T0)
    assert store.reviews() == []
    assert make_card_id("probe", "03.why-gqa") == "probe:03.why-gqa"
    with pytest.raises(ValueError):
        make_card_id("quiz", "x")


# --- scheduling, checked against fsrs directly ----------------------------------------------------


def test_good_moves_the_card_days_ahead_and_again_brings_it_back_within_minutes(store):
    card_id = "problem:kv_cache_bytes"
    t1, t2 = T0, T0 + timedelta(minutes=10)
    store.record_review(card_id, Rating.Good, now=t1)
    graduated = store.record_review(card_id, Rating.Good, now=t2).state
    assert graduated == _fsrs_replay(card_id, [(Rating.Good, t1), (Rating.Good, t2)])
    assert graduated.state == State.Review and graduated.due - t2 >= timedelta(days=1)

    t3 = graduated.due
    lapsed = store.record_review(card_id, Rating.Again, now=t3).state
    assert lapsed == _fsrs_replay(card_id, [(Rating.Good, t1), (Rating.Good, t2), (Rating.Again, t3)])
    assert lapsed.state == State.Relearning and lapsed.due - t3 <= timedelta(minutes=10)
    assert store.card(card_id).state == lapsed


def test_the_stored_state_is_what_fsrs_reschedule_gives_from_the_stored_log(store):
    """The review log alone rebuilds every card: fsrs's own reschedule_card over our rows."""
    outcomes = [(Rating.Good, 0), (Rating.Hard, 11), (Rating.Good, 60 * 24 * 3), (Rating.Again, 60 * 24 * 9),
                (Rating.Easy, 60 * 24 * 9 + 10)]
    for rating, minutes in outcomes:
        store.record_review("probe:03.why-gqa", rating, now=T0 + timedelta(minutes=minutes))
    logs = [ReviewLog(fsrs_card_id(r.card_id), r.rating, r.reviewed_at, None)
            for r in store.reviews("probe:03.why-gqa")]
    stored = store.card("probe:03.why-gqa").state
    assert _oracle().reschedule_card(Card(card_id=stored.card_id, due=T0), logs) == stored


def test_due_lists_cards_due_at_now_most_overdue_first(store):
    assert store.due(T0) == sorted(card_id for card_id, _, _ in CARDS)  # all new, all due at T0: ties by id
    assert store.due(T0 - timedelta(seconds=1)) == []
    store.record_review("problem:kv_cache_bytes", Rating.Again, now=T0)             # due T0 + 1 min
    store.record_review("probe:03.why-gqa", Rating.Good, now=T0)                    # due T0 + 10 min
    store.record_review("problem:softmax_temperature", Rating.Easy, now=T0)         # due days later
    store.record_review("probe:02.top-p", Rating.Hard, now=T0 + timedelta(minutes=1))  # learning, due within minutes
    later = T0 + timedelta(hours=1)
    expected = sorted((c for c, _, _ in CARDS if store.card(c).due <= later), key=lambda c: store.card(c).due)
    assert store.due(later) == expected == ["problem:kv_cache_bytes", "probe:02.top-p", "probe:03.why-gqa"]
    assert store.due(later, topics=["sampling"]) == ["probe:02.top-p"]
    assert store.due(later, limit=2) == expected[:2]
    assert store.due(T0 + timedelta(seconds=30)) == []
    far = T0 + timedelta(days=400)
    assert store.due(far)[-1] == "problem:softmax_temperature" and len(store.due(far)) == 4


# --- all or nothing -----------------------------------------------------------------------------


@pytest.mark.parametrize("interruption", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_a_review_interrupted_between_its_two_writes_leaves_nothing_behind(tmp_path, interruption):
    path = tmp_path / "drills.sqlite3"
    store = DrillStore(path)
    store.ensure_cards(CARDS, now=T0)
    store.record_review("probe:02.top-p", Rating.Good, answer="committed", now=T0)
    before = store.card("probe:03.why-gqa")

    def crash(*args, **kwargs):  # the review row is already inserted when the card update fails
        raise interruption

    store._write_card = crash
    with pytest.raises(type(interruption)):
        store.record_review("probe:03.why-gqa", Rating.Again, answer="lost", now=T0)
    del store._write_card

    other = sqlite3.connect(path)  # a second connection sees exactly the committed review, nothing half-written
    assert other.execute("SELECT card_id, answer FROM reviews").fetchall() == [("probe:02.top-p", "committed")]
    other.close()
    assert store.card("probe:03.why-gqa") == before
    store.record_review("probe:03.why-gqa", Rating.Good, answer="kept", now=T0)  # the store is still usable
    assert [r.answer for r in store.reviews()] == ["committed", "kept"]
    store.close()


def test_a_committed_review_is_visible_to_another_connection_before_close(store):
    store.record_review("probe:02.top-p", Rating.Good, answer="a", now=T0)
    other = sqlite3.connect(store.path)
    assert other.execute("SELECT count(*) FROM reviews").fetchone() == (1,)
    (state,) = other.execute("SELECT state FROM cards WHERE card_id = 'probe:02.top-p'").fetchone()
    assert json.loads(state)["step"] == 1
    assert other.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    other.close()


def test_two_stores_on_one_file_interleave_reviews_without_losing_any(tmp_path):
    path = tmp_path / "drills.sqlite3"
    terminal, notebook = DrillStore(path), DrillStore(path)
    terminal.ensure_cards(CARDS, now=T0)
    assert notebook.due(T0) == terminal.due(T0)
    card_id, t1, t2, t3 = "problem:kv_cache_bytes", T0, T0 + timedelta(minutes=10), T0 + timedelta(days=3)
    terminal.record_review(card_id, Rating.Good, now=t1)
    notebook.record_review(card_id, Rating.Good, now=t2)  # reads the terminal's state, not a stale copy
    terminal.record_review(card_id, Rating.Hard, now=t3)
    expected = _fsrs_replay(card_id, [(Rating.Good, t1), (Rating.Good, t2), (Rating.Hard, t3)])
    assert terminal.card(card_id).state == notebook.card(card_id).state == expected
    assert len(notebook.reviews()) == 3
    terminal.close()
    notebook.close()


# --- files that are not a drill history ----------------------------------------------------------


def _refused(path: Path) -> str:
    with pytest.raises(DrillStoreError) as raised:
        DrillStore(path)
    return str(raised.value)


def test_a_file_that_is_not_sqlite_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "drills.sqlite3"
    content = b"these are my notes, not a database\n" * 200
    path.write_bytes(content)
    message = _refused(path)
    assert str(path) in message and "Move it aside" in message and "--db" in message
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["drills.sqlite3"]  # no -wal, no -journal left


def test_another_programs_database_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.execute("INSERT INTO users VALUES ('ann')")
    conn.commit()
    conn.close()
    content = path.read_bytes()
    message = _refused(path)
    assert "not a drill history" in message and "users" in message and str(path) in message
    assert path.read_bytes() == content


def test_a_damaged_drill_history_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "drills.sqlite3"
    with DrillStore(path) as store:
        store.ensure_cards([(f"probe:{i:03d}", "t", "probe") for i in range(30)], now=T0)
        for i in range(30):
            store.record_review(f"probe:{i:03d}", Rating.Good, answer="x" * 2000, now=T0)
    damaged = bytearray(path.read_bytes())
    assert len(damaged) > 8 * 4096
    damaged[2 * 4096:6 * 4096] = b"\xff" * (4 * 4096)  # overwrite whole pages in the middle
    path.write_bytes(bytes(damaged))
    message = _refused(path)
    assert str(path) in message and "Move it aside" in message
    assert path.read_bytes() == bytes(damaged)


def test_a_history_from_a_newer_course_lib_is_refused(tmp_path):
    path = tmp_path / "drills.sqlite3"
    DrillStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    assert "newer course_lib" in _refused(path)


def test_a_folder_is_refused_with_the_file_name_to_use(tmp_path):
    assert "drills.sqlite3" in _refused(tmp_path)


# --- where the file lives -----------------------------------------------------------------------


def test_course_drill_db_sets_the_default_file_and_its_folders_are_created(tmp_path, monkeypatch):
    target = tmp_path / "deep" / "er" / "my-drills.sqlite3"
    monkeypatch.setenv(DB_ENV, str(target))
    assert default_db_path() == target
    with DrillStore() as store:
        assert store.path == target
        store.ensure_cards(CARDS[:1], now=T0)
    assert target.is_file()


def test_without_the_variable_the_file_is_in_the_users_data_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(DB_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    expected = platformdirs.user_data_path("course-llm-serving", appauthor=False) / "drills.sqlite3"
    assert default_db_path() == expected
    if sys.platform.startswith("linux"):
        assert expected == tmp_path / "xdg" / "course-llm-serving" / "drills.sqlite3"
        DrillStore().close()
        assert expected.is_file()


# --- stats and weights --------------------------------------------------------------------------


def test_stats_on_a_hand_built_history(store):
    day = timedelta(days=1)
    store.record_review("problem:kv_cache_bytes", Rating.Good, now=T0)
    store.record_review("problem:kv_cache_bytes", Rating.Good, now=T0 + timedelta(minutes=10))
    store.record_review("problem:kv_cache_bytes", Rating.Again, now=T0 + 5 * day)
    store.record_review("probe:03.why-gqa", score=0.6, now=T0)                     # Hard
    store.record_review("problem:softmax_temperature", score=0.2, now=T0)          # Again
    store.record_review("problem:softmax_temperature", Rating.Good, now=T0 + 20 * day)  # after `now` below
    now = T0 + 6 * day
    stats = store.stats(now)
    assert list(stats) == ["kv_memory", "sampling"]

    kv = stats["kv_memory"]
    assert (kv.cards, kv.new, kv.reviews, kv.lapses) == (2, 0, 4, 1)
    assert kv.retention == pytest.approx(3 / 4)
    assert kv.due == sum(store.card(c).due <= now for c in ("problem:kv_cache_bytes", "probe:03.why-gqa")) == 2
    oracle = _oracle()
    expected_recall = [oracle.get_card_retrievability(store.card(c).state, now)
                       for c in ("problem:kv_cache_bytes", "probe:03.why-gqa")]
    assert kv.recall == pytest.approx(sum(expected_recall) / 2)

    sampling = stats["sampling"]
    assert (sampling.cards, sampling.new, sampling.reviews, sampling.lapses, sampling.retention) == (2, 1, 1, 1, 0.0)
    assert stats["sampling"].due == 1  # the never-reviewed probe; the softmax card is due on day 20 + days

    weights = weakest_topics(store, now)
    raw = {"sampling": (1 + 1) / (1 + 2), "kv_memory": (1 + 1) / (4 + 2)}
    assert list(weights) == ["sampling", "kv_memory"]
    assert weights == pytest.approx({t: w / sum(raw.values()) for t, w in raw.items()})


def test_an_untried_course_weighs_every_topic_alike(store):
    assert store.stats(T0)["sampling"].retention is None and store.stats(T0)["sampling"].recall is None
    assert weakest_topics(store, T0) == {"kv_memory": 0.5, "sampling": 0.5}


# --- rating rules -------------------------------------------------------------------------------


@pytest.mark.parametrize("score, rating", [(0.0, Rating.Again), (0.49, Rating.Again), (0.5, Rating.Hard),
                                           (0.74, Rating.Hard), (0.75, Rating.Good), (0.99, Rating.Good),
                                           (1.0, Rating.Easy), (2 / 3, Rating.Hard), (3 / 4, Rating.Good)])
def test_probe_scores_map_to_ratings_at_the_documented_thresholds(score, rating):
    assert rating_for_probe(score) == rating


@pytest.mark.parametrize("score", [-0.1, 1.01, float("nan"), True, "0.5"])
def test_probe_scores_outside_zero_to_one_are_refused(score):
    with pytest.raises(ValueError, match="between 0 and 1"):
        rating_for_probe(score)


def test_problem_ratings_use_correctness_then_time():
    assert rating_for_problem(False, 1) == Rating.Again
    assert rating_for_problem(True, 120) == rating_for_problem(True, None) == Rating.Good
    assert rating_for_problem(True, 121) == Rating.Hard
    assert rating_for_problem(True, 50, par_s=30) == Rating.Hard


def test_the_scheduler_takes_times_in_any_zone_and_refuses_naive_ones():
    scheduler = DrillScheduler()
    card = scheduler.new_card("probe:x", T0)
    paris = timezone(timedelta(hours=2))
    assert scheduler.review(card, Rating.Good, now=T0.astimezone(paris)) == scheduler.review(card, Rating.Good, now=T0)
    with pytest.raises(ValueError, match="time zone"):
        scheduler.review(card, Rating.Good, now=T0.replace(tzinfo=None))
