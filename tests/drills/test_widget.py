"""The JupyterLab drill panel, driven as a learner would but without a browser: type into the inputs
(``.value``), press the buttons (``.click()``), and read what the SQLite file recorded."""
from __future__ import annotations

import re

import ipywidgets as widgets
import pytest
from fsrs import Rating

from course_lib.drills.cards import ProbeCard
from course_lib.drills.store import DrillStore
from course_lib.drills.widget import NOTEBOOK_N, drill_panel, notebook_panel, notebook_topics


FakeProbe = ProbeCard  # hand-made cards: a small bank the tests control


BANK = [
    FakeProbe("02.gqa", "02_attention", "attention", "Why GQA <and not MQA>?",
              ("fewer KV heads", "smaller cache", "quality kept", "bandwidth per token"), "it is faster"),
    FakeProbe("02.mask", "02_attention", "attention", "Why a causal mask?",
              ("no peeking", "training in parallel", "same as decode"), "it is required"),
]


@pytest.fixture
def db(tmp_path):
    return tmp_path / "drills.sqlite3"


def reviews(db):
    with DrillStore(db) as store:
        return store.reviews()


def numeric_panel(db, n=1, seed=0):
    """A started panel of sampling problems only (no probes), on its first item."""
    panel = drill_panel(topics=["sampling"], n=n, db=db, seed=seed, probes=[])
    panel.start.click()
    assert panel.item is not None and panel.item.problem is not None
    return panel


def probe_panel(db, n=1, seed=0):
    panel = drill_panel(topics=["attention"], n=n, db=db, seed=seed, probes=BANK)
    panel.start.click()
    assert panel.item is not None and panel.item.probe is not None
    return panel


def answer_probe(panel, ticks):
    """Type a free answer, open the checklist, tick (``ticks``: one bool for all, or one per point), score."""
    panel.free_answer.value = "fewer heads, so less to read"
    panel.check.click()
    ticks = [ticks] * len(panel.points) if isinstance(ticks, bool) else ticks
    for box, tick in zip(panel.points, ticks, strict=True):
        box.value = tick
    panel.score.click()


def test_it_is_a_vbox_and_nothing_is_opened_before_start(db):
    panel = drill_panel(topics=["sampling"], n=3, db=db)
    assert isinstance(panel, widgets.VBox) and panel.start in panel.children
    assert not db.exists(), "running the cell writes no drill history; Start does"
    panel.start.click()
    assert db.exists() and panel.progress.value == "item 1 of 3 · right so far 0 of 0"


def test_a_right_answer_is_recorded_good_and_shows_the_worked_solution(db):
    panel = numeric_panel(db)
    problem = panel.item.problem
    panel.answer.value = str(problem.answer)
    panel.submit.click()
    [review] = reviews(db)
    assert (review.card_id, review.rating, review.score) == (panel.item.card_id, Rating.Good, 1.0)
    assert "Right" in panel.feedback.value and "Worked solution" in panel.feedback.value
    assert problem.solution.splitlines()[-1] in panel.feedback.value
    assert panel.next in panel.children and panel.answer.disabled
    assert panel.progress.value == "item 1 of 1 · right so far 1 of 1"


def test_a_wrong_answer_is_recorded_again_with_the_expected_answer(db):
    panel = numeric_panel(db)
    panel.answer.value = str(panel.item.problem.answer * 2 + 1)
    panel.submit.click()
    [review] = reviews(db)
    assert (review.rating, review.score) == (Rating.Again, 0.0)
    assert "Wrong" in panel.feedback.value and "Expected:" in panel.feedback.value


def test_a_non_number_shows_the_reason_keeps_the_item_and_records_nothing(db):
    panel = numeric_panel(db)
    item = panel.item
    for typed in ("about ten", "1,5", ""):
        panel.answer.value = typed
        panel.submit.click()
        assert "Not a number" in panel.message.value and panel.message in panel.children
        assert panel.item is item and not panel.answer.disabled and panel.next not in panel.children
    assert "a comma here only groups thousands" not in panel.message.value  # the last reason shown: empty text
    assert reviews(db) == []
    panel.answer.value = str(item.problem.answer)
    panel.submit.click()
    assert [r.rating for r in reviews(db)] == [Rating.Good] and panel.message.value == ""


def test_stray_clicks_neither_record_twice_nor_skip_an_item(db):
    panel = numeric_panel(db, n=1)
    session, item = panel.session, panel.item
    panel.start.click()   # a round is open: no second session
    panel.next.click()    # not graded yet: the item stays
    assert panel.session is session and panel.item is item
    panel.answer.value = str(item.problem.answer)
    panel.submit.click()
    panel.submit.click()
    assert len(reviews(db)) == 1
    panel.next.click()    # "Finish"
    panel.next.click()    # again, on a closed round
    assert panel.report in panel.children and "answered 1, right 1" in panel.report.value


def test_a_probe_with_two_of_four_points_ticked_scores_half(db):
    panel = probe_panel(db, n=2)
    if panel.item.probe.id != "02.gqa":  # the order is shuffled: answer the other one first
        answer_probe(panel, True)
        panel.next.click()
    assert "Why GQA &lt;and not MQA&gt;?" in panel.question.value, "course text is escaped, not markup"
    answer_probe(panel, [True, False, True, False])
    review = [r for r in reviews(db) if r.card_id == "probe:02.gqa"][0]
    assert review.score == 0.5 and review.rating == Rating.Hard
    assert review.answer.startswith("fewer heads")
    assert "Score 2/4 = 50%" in panel.feedback.value and "it is faster" in panel.feedback.value
    assert all(box.disabled for box in panel.points) and panel.next in panel.children


def test_the_checklist_comes_only_after_the_free_answer(db):
    panel = probe_panel(db)
    assert panel.checklist not in panel.children
    panel.score.click()  # not yet offered: ignored
    assert reviews(db) == []
    panel.check.click()
    assert panel.checklist in panel.children and panel.free_answer.disabled
    assert len(panel.points) == len(panel.item.probe.strong_points)


def test_the_end_shows_the_per_topic_report_and_offers_another_round(db):
    panel = drill_panel(topics=["sampling", "attention"], n=3, db=db, seed=4, probes=BANK)
    panel.start.click()
    for number, right in enumerate([True, False, True], start=1):
        if panel.item.problem is not None:
            panel.answer.value = str(panel.item.problem.answer if right else -1)
            panel.submit.click()
        else:
            answer_probe(panel, right)
        assert panel.next.description == ("Finish" if number == 3 else "Next")
        panel.next.click()
    assert panel.report in panel.children and panel.start in panel.children and panel.next not in panel.children
    assert panel.start.description == "Another round" and panel.store is None, "the file is closed between rounds"
    assert re.search(r"answered 3, right 2, saved to .*drills\.sqlite3", panel.report.value)
    for topic in {outcome.item.topic for outcome in panel.session.results}:
        assert f"<td>{topic}</td>" in panel.report.value
    assert len(reviews(db)) == 3
    panel.start.click()  # another round on the same file
    assert panel.item is not None and panel.progress.value.startswith("item 1 of 3")


@pytest.mark.parametrize("notebook, topics", [
    ("00_orientation", ("orientation", "tokenization", "sampling", "context")),
    ("01_tokenization", ("tokenization",)),
    ("02_attention", ("attention",)),
    ("03_kv_cache", ("kv_cache",)),
    ("04_sampling", ("sampling",)),
    ("05_structured_output", ("structured",)),
    ("06_serving", ("serving",)),
    ("07_context", ("context",)),
    ("08_operations", ("operations",)),
    ("09_capstone", ("orientation", "tokenization", "attention", "kv_cache", "sampling", "structured", "serving",
                     "context", "operations")),
])
def test_notebook_panel_drills_the_notebooks_own_topics(notebook, topics, db):
    assert notebook_topics(notebook) == notebook_topics(f"{notebook}.ipynb") == topics
    panel = notebook_panel(notebook, db=db)
    assert panel.topics == topics and 1 <= panel.n <= NOTEBOOK_N
    assert not db.exists()


def test_a_notebook_with_no_topic_is_refused_by_name():
    with pytest.raises(ValueError, match="99_epilogue"):
        notebook_topics("99_epilogue")


def test_an_unknown_topic_is_refused_when_the_panel_is_made(db):
    with pytest.raises(ValueError, match="unknown topic 'kv_memory'"):
        drill_panel(topics=["kv_memory"], db=db)


def test_two_panels_on_one_file_see_each_others_reviews(db):
    first = probe_panel(db, n=1)
    second = probe_panel(db, n=1)  # open at the same time, same seed: both ask the same new card
    card_id = first.item.card_id
    assert second.item.card_id == card_id
    answer_probe(first, True)
    answer_probe(second, False)
    assert [(r.card_id, r.rating) for r in reviews(db)] == [(card_id, Rating.Easy), (card_id, Rating.Again)]
    first.next.click()
    second.next.click()
    # Same seed again, but this panel reads the reviews above: the card is no longer new, the other one is.
    third = probe_panel(db, n=1)
    assert third.item.card_id != card_id
