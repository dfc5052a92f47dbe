"""The drill session without a terminal: the order of questions, follow-up chains, review and mock modes,
ratings recorded in the store, the per-topic report, and the parsing of typed numbers and durations.
A small fake probe bank and a hand-stepped clock make every case exact."""
from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest
from fsrs import Rating

from course_lib.drills.problems import KINDS, kinds_for
from course_lib.drills.session import DrillSession, NotANumber, all_topics, parse_duration, parse_number
from course_lib.drills.cards import ProbeCard
from course_lib.drills.store import DrillStore

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)


FakeProbe = ProbeCard  # hand-made cards: a small bank the tests control


BANK = [
    FakeProbe("03.long", "03_kv_cache", "kv_cache", "Why is long context expensive?", ("prefill", "memory", "levers",
              "numbers"), "attention is quadratic", ("03.o1", "02.gqa")),
    FakeProbe("03.o1", "03_kv_cache", "kv_cache", "Is decode O(1)?", ("no", "reads t keys", "bandwidth"), "yes",
              ("03.flops",)),
    FakeProbe("03.flops", "03_kv_cache", "kv_cache", "FLOPs per token?", ("2N", "bandwidth", "batching"), "peak"),
    FakeProbe("02.gqa", "02_attention", "attention", "Why GQA?", ("fewer KV heads", "smaller cache", "quality"),
              "faster"),
]


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def store(tmp_path):
    with DrillStore(tmp_path / "drills.sqlite3") as opened:
        yield opened


def make(store, clock=None, **options) -> DrillSession:
    options.setdefault("probes", BANK)
    options.setdefault("rng", random.Random(0))
    return DrillSession(store, clock=clock or Clock(), **options)


def answer(session: DrillSession, item, right: bool = True):
    """Answer any item: the exact number (or half of it), or every strong point ticked (or none)."""
    if item.problem is not None:
        value = item.problem.answer if right else item.problem.answer * 2 + 1
        return session.answer_problem(item, value, str(value))
    return session.answer_probe(item, [right] * len(item.probe.strong_points), "my answer")


def drain(session: DrillSession, right: bool = True) -> list:
    items = []
    while (item := session.next_item()) is not None:
        items.append(item)
        answer(session, item, right)
    return items


# --- choosing what to ask ---------------------------------------------------------------------

def test_new_cards_come_first_each_once_across_the_chosen_topics(store):
    topics = ["sampling", "serving"]
    expected = {f"problem:{kind}" for topic in topics for kind in kinds_for(topic)}
    session = make(store, topics=topics, n=len(expected), probes=[])
    items = drain(session)
    assert [item.card_id for item in items if item.card_id in expected] == [item.card_id for item in items]
    assert {item.card_id for item in items} == expected and len(items) == len(expected)
    assert [item.number for item in items] == list(range(1, len(items) + 1))


def test_the_same_seed_replays_the_session_and_each_asking_draws_fresh_numbers(store, tmp_path):
    first = [(item.card_id, item.problem.seed) for item in drain(make(store, topics=["sampling"], n=6, probes=[]))]
    with DrillStore(tmp_path / "other.sqlite3") as other:
        again = [(item.card_id, item.problem.seed) for item in drain(make(other, topics=["sampling"], n=6, probes=[]))]
    assert first == again
    # two kinds, six items: the order cycles through both kinds three times, with new numbers every time
    assert len({card_id for card_id, _ in first}) == 2 and len({seed for _, seed in first}) == 6


def test_after_new_cards_the_due_ones_come_before_the_rest(store):
    clock = Clock()
    session = make(store, clock=clock, topics=["sampling"], n=2, probes=[])
    missed, passed = session.next_item(), None
    answer(session, missed, right=False)               # Again: due in a minute
    passed = session.next_item()
    answer(session, passed, right=True)                 # Good: due in ten minutes
    clock.advance(120)
    later = make(store, clock=clock, topics=["sampling"], n=2, probes=[])
    assert [item.card_id for item in drain(later)] == [missed.card_id, passed.card_id]


def test_a_probe_is_followed_by_its_follow_ups_depth_first_whatever_their_topic(store):
    session = make(store, topics=["kv_cache"], n=8, rng=random.Random(2))   # 4 problems, 3 probes, 02.gqa
    asked = drain(session)
    ids = [item.card_id for item in asked]
    start = ids.index("probe:03.long")
    assert start > 0 and ids[start - 1].startswith("problem:"), "seed 2 asks problems first: the chain cuts in"
    # 03.long -> 03.o1 -> 03.flops (03.o1's own follow-up), then 02.gqa, although attention was not chosen
    assert ids[start:start + 4] == ["probe:03.long", "probe:03.o1", "probe:03.flops", "probe:02.gqa"]
    assert asked[start + 1].follow_up_of == "03.long" and asked[start + 2].follow_up_of == "03.o1"
    assert len(ids) == len(set(ids)), "no card asked twice in one pass"


def test_a_follow_up_already_asked_is_not_asked_again(store):
    session = make(store, topics=["kv_cache"], n=7, probes=BANK[:3], rng=random.Random(3))
    ids = [item.card_id for item in drain(session)]
    assert ids.count("probe:03.o1") == 1 and ids.count("probe:03.flops") == 1


def test_review_asks_only_the_due_cards_most_overdue_first_then_ends(store):
    clock = Clock()
    first = make(store, clock=clock, topics=["kv_cache"], n=None, probes=[])
    assert len(kinds_for("kv_cache")) == 4
    for right in (False, True, True, True):
        item = first.next_item()
        answer(first, item, right)
        clock.advance(1)
    # a minute later the missed card is due again; nothing else, as the others were Good (ten minutes)
    clock.advance(90)
    missed = [r.card_id for r in store.reviews() if r.rating == Rating.Again]
    review = make(store, clock=clock, topics=["kv_cache"], review=True, n=None)  # the bank's probes: new, not due
    assert [item.card_id for item in drain(review)] == missed
    clock.advance(3600)
    later = [item.card_id for item in drain(make(store, clock=clock, topics=["kv_cache"], review=True, n=None))]
    assert sorted(later) == sorted(f"problem:{kind}" for kind in kinds_for("kv_cache"))


def test_mock_stops_starting_items_when_the_time_is_up_and_records_the_one_in_progress(store):
    clock = Clock()
    session = make(store, clock=clock, mock=timedelta(minutes=5), n=None)
    done = []
    while (item := session.next_item()) is not None:
        clock.advance(110)   # the third item starts at 220 s, inside the five minutes, and ends at 330 s
        done.append(answer(session, item))
    assert len(done) == 3 and len(store.reviews()) == 3
    assert session.time_left() == timedelta(0) and session.summary().elapsed == timedelta(seconds=330)


def test_mock_draws_the_weakest_topics_most(store):
    clock = Clock()
    make(store, clock=clock, probes=[])  # adds the cards
    for _ in range(5):  # a history: sampling always missed, serving always right
        for topic, rating in (("sampling", Rating.Again), ("serving", Rating.Good)):
            for kind in kinds_for(topic):
                store.record_review(f"problem:{kind}", rating, now=clock())
    drawn = {"sampling": 0, "serving": 0}
    mock = make(store, clock=clock, topics=["sampling", "serving"], mock=timedelta(hours=1), n=40, probes=[],
                rng=random.Random(7))
    for item in drain(mock):
        drawn[item.topic] += 1
    # weights (lapses + 1) / (reviews + 2) start at 11/12 against 1/22: sampling should dominate
    assert drawn["sampling"] > 3 * drawn["serving"], drawn


# --- grading and recording -----------------------------------------------------------------------

def test_a_problem_is_rated_good_when_right_hard_when_slow_again_when_wrong(store):
    clock = Clock()
    session = make(store, clock=clock, topics=["serving"], n=3, probes=[])
    ratings = []
    for right, seconds in ((True, 30), (True, 500), (False, 10)):
        item = session.next_item()
        clock.advance(seconds)
        ratings.append(answer(session, item, right).rating)
    assert ratings == [Rating.Good, Rating.Hard, Rating.Again]
    logged = store.reviews()
    assert [r.rating for r in logged] == ratings and [r.score for r in logged] == [1.0, 1.0, 0.0]
    assert [r.elapsed_s for r in logged] == [30, 500, 10]
    assert "(seed " in logged[0].answer, "the seed is logged so the exact problem can be rebuilt"


def test_a_probe_scores_the_share_ticked_and_its_clock_stops_before_the_checklist(store):
    clock = Clock()
    session = make(store, clock=clock, topics=["kv_cache"], probes=BANK[:1], n=None)
    item = session.next_item()
    while item.probe is None:   # answer the problems until the probe comes up
        answer(session, item)
        item = session.next_item()
    clock.advance(40)
    assert session.stop_clock(item) == 40
    clock.advance(300)          # ticking the checklist takes a while: not interview time
    outcome = session.answer_probe(item, [True, True, True, False], "prefill and memory")
    assert outcome.score == 0.75 and outcome.rating == Rating.Good and outcome.elapsed_s == 40
    assert store.reviews("probe:03.long")[0].answer == "prefill and memory"


def test_the_summary_counts_right_answers_per_topic_weakest_first(store):
    session = make(store, topics=["sampling", "context"], n=3, probes=[], rng=random.Random(2))
    outcomes = []
    while (item := session.next_item()) is not None:
        outcomes.append(answer(session, item, right=item.topic == "context"))
    summary = session.summary()
    assert summary.answered == 3 and summary.right == sum(o.right for o in outcomes)
    assert list(summary.by_topic)[0] == "sampling" and summary.by_topic["sampling"].mean_score == 0
    assert summary.line("/tmp/x.sqlite3") == f"answered 3, right {summary.right}, saved to /tmp/x.sqlite3"


def test_misuse_is_refused_with_the_reason(store):
    with pytest.raises(ValueError, match="unknown topic 'nope'.*kv_cache"):
        make(store, topics=["nope"])
    with pytest.raises(ValueError, match="--review.*--mock"):
        make(store, review=True, mock=timedelta(minutes=1))
    with pytest.raises(ValueError, match="at least 1"):
        make(store, n=0)
    session = make(store, topics=["sampling"], probes=[])
    item = session.next_item()
    with pytest.raises(ValueError, match="is a numeric problem"):
        session.answer_probe(item, [])
    answer(session, item)
    with pytest.raises(ValueError, match="not the item being asked"):
        answer(session, item)


def test_topics_are_in_course_order_and_only_those_with_cards():
    assert all_topics([]) == ("tokenization", "kv_cache", "sampling", "serving", "context", "operations")
    assert all_topics(BANK) == ("tokenization", "attention", "kv_cache", "sampling", "serving", "context",
                                "operations")
    assert set(all_topics([])) == {generator.topic for generator in KINDS.values()}


# --- what the candidate types --------------------------------------------------------------------

@pytest.mark.parametrize("typed, unit, value", [
    ("1234", "", 1234.0), (" -0.5 ", "", -0.5), (".75", "", 0.75), ("1.2e3", "tokens", 1200.0),
    ("1,234", "tokens", 1234.0), ("1,234,567.5", "", 1234567.5), ("1.68 GB", "GB", 1.68), ("1.68gb", "GB", 1.68),
    ("23 sequences", "sequences", 23.0), ("$2,832.50", "USD per day", 2832.5), ("94%", "", 0.94),
    ("12.5 %", "", 0.125), ("+3", "", 3.0), ("2.", "", 2.0),
])
def test_numbers_are_read_in_the_forms_people_type(typed, unit, value):
    assert parse_number(typed, unit) == pytest.approx(value)


@pytest.mark.parametrize("typed, unit, reason", [
    ("", "", "no answer yet"), ("   ", "GB", "no answer yet"), ("abc", "", "not a number"),
    ("1,5", "", "groups thousands"), ("12,34", "", "groups thousands"), ("3/4", "", "as a decimal"),
    ("12%", "tokens", "in tokens, not a percentage"), ("1.6 GiB", "GB", "type just the number"),
    ("nan", "", "not a number"), ("inf", "", "not a number"), ("1e999", "", "too large"),
    ("1.2.3", "", "just the number"),
    ("1_000", "", "just the number"), ("1.2k", "tokens", "just the number"),
])
def test_anything_else_is_refused_with_the_reason(typed, unit, reason):
    with pytest.raises(NotANumber, match=reason):
        parse_number(typed, unit)


def test_durations():
    assert parse_duration("20m") == timedelta(minutes=20) and parse_duration("90s") == timedelta(seconds=90)
    assert parse_duration(" 1H30M ") == timedelta(minutes=90)
    for bad in ("", "20", "m", "0m", "1.5m", "20 minutes", "-5m"):
        with pytest.raises(ValueError, match="duration|no time"):
            parse_duration(bad)
