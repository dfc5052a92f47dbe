"""The interview drills in JupyterLab: an ipywidgets panel over the same ``DrillSession`` as ``course drill``.

    drill_panel(topics=["kv_cache", "serving"], n=10)   # any cell: ten items on two topics
    notebook_panel("03_kv_cache")                       # the last cell of a notebook: five on its own topic

One session logic, two front ends: the panel only shows and collects. What comes next, the grading, the
parsing of a typed number (``parse_number``: the same answers accepted and the same reasons given as in the
terminal) and the scheduling are ``DrillSession``'s; every graded answer is written at once through
``DrillStore`` to the same SQLite file as the terminal (``db=`` else ``$COURSE_DRILL_DB`` else the user data
folder), so a card reviewed in one is scheduled in the other.

The panel opens on a Start button. Nothing is opened, written or timed before it is pressed: running every
cell of a notebook (a grader, nbconvert) leaves no drill history behind, and the first item's clock, which
rates a slow right answer Hard, starts when the learner starts, not when the cell ran.

A numeric problem takes one number and Submit; a bad number shows the reason under the input and keeps the
item. Then: right or wrong, the expected answer and the worked solution, and Next. A probe takes a free-text
answer and "Check my answer" (which stops its clock), then a checkbox per point a strong answer makes and
Score (the share ticked), then the typical weak answer and Next. The end shows the report per topic, weakest
first, and a button for another round.

``notebook_panel`` maps a notebook to its own topics (``notebook_topics``): the topic most of its probe
cards carry; when they tie, all the tied ones (00_orientation previews the course, one card per later
topic); a notebook without cards, the topic its name names (07_context: "context"). The capstone
(``CAPSTONE``) ties the whole course together, so it drills every topic.

    >>> notebook_topics("03_kv_cache"), notebook_topics("05_structured_output"), notebook_topics("07_context")
    (('kv_cache',), ('structured',), ('context',))
    >>> notebook_topics("00_orientation")
    ('orientation', 'tokenization', 'sampling', 'context')
    >>> notebook_topics("09_capstone") == all_topics(load_probe_bank())
    True
"""
from __future__ import annotations

import html
import random
import sqlite3
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

import ipywidgets as widgets

from course_lib.drills.problem_model import sig
from course_lib.drills.session import (DEFAULT_N, DrillItem, DrillSession, NotANumber, ProbeLike, all_topics,
                                       catalogue, load_probe_bank, parse_number)
from course_lib.drills.store import DrillStore, DrillStoreError

NOTEBOOK_N = 5  # items in a notebook's own panel: a few minutes, after an hour of reading
CAPSTONE = "09_capstone"  # the last notebook: its panel drills every topic of the course

__all__ = ["CAPSTONE", "NOTEBOOK_N", "DrillPanel", "drill_panel", "notebook_panel", "notebook_topics"]


def drill_panel(topics: Sequence[str] | None = None, n: int | None = DEFAULT_N, db: str | Path | None = None,
                seed: int | None = None, *, probes: Sequence[ProbeLike] | None = None,
                clock: Callable[[], datetime] | None = None) -> DrillPanel:
    """A drill panel (an ``ipywidgets.VBox``): up to ``n`` items on ``topics`` (None: every topic).

    ``db``: the drill history file (default as ``course drill``); ``seed`` replays the items and numbers.
    ``probes`` and ``clock`` are for tests: a small bank instead of the course's, a fake clock.
    """
    return DrillPanel(topics, n, db, seed, probes=probes, clock=clock)


def notebook_panel(notebook_name: str, db: str | Path | None = None) -> DrillPanel:
    """The panel at the end of a notebook: ``NOTEBOOK_N`` items on the notebook's own topics.

    Fewer when those topics have fewer cards, so that a short round never asks a probe twice.
    """
    topics = notebook_topics(notebook_name)
    cards = sum(spec.topic in topics for spec in catalogue(load_probe_bank()))
    return drill_panel(topics, n=min(NOTEBOOK_N, cards), db=db)


def notebook_topics(notebook_name: str) -> tuple[str, ...]:
    """The drill topics of one notebook ("03_kv_cache" or "03_kv_cache.ipynb"), in course order."""
    name = Path(notebook_name).stem
    bank = load_probe_bank()
    known = all_topics(bank)
    if name == CAPSTONE:
        return known
    counts = Counter(card.topic for card in bank if card.notebook == name)
    if counts:
        most = max(counts.values())
        return tuple(topic for topic in known if counts[topic] == most)
    # No cards yet (a new notebook): "07_context" -> "context", "05_structured_output" -> "structured".
    words = name.split("_", 1)[-1]
    named = [topic for topic in known if words.startswith(topic)]
    if not named:
        notebooks = sorted({card.notebook for card in bank})
        raise ValueError(f"no drill topic for notebook {notebook_name!r}: it has no probe cards and its name "
                         f"names none of the topics ({', '.join(known)}); notebooks with cards: {', '.join(notebooks)}")
    return (max(named, key=len),)


def _block(text: str, tag: str = "div") -> str:
    """Plain course text as HTML: escaped (a ``<`` in a formula is not markup), line breaks kept."""
    return f'<{tag} style="white-space: pre-wrap; margin: 0.3em 0">{html.escape(text)}</{tag}>'


class DrillPanel(widgets.VBox):
    """The panel; its controls are attributes so that tests (and curious learners) can drive it from code."""

    def __init__(self, topics: Sequence[str] | None, n: int | None, db: str | Path | None, seed: int | None, *,
                 probes: Sequence[ProbeLike] | None = None, clock: Callable[[], datetime] | None = None) -> None:
        super().__init__()
        self.probes = load_probe_bank() if probes is None else list(probes)
        known = all_topics(self.probes)
        # Checked here, not at Start: a misspelt topic is an error in the cell that names it.
        unknown = [topic for topic in topics or () if topic not in known]
        if unknown:
            raise ValueError(f"unknown topic {', '.join(map(repr, unknown))}; topics: {', '.join(known)}")
        self.topics, self.n, self.db = tuple(topics or known), n, db
        self.rng = random.Random(seed)  # one for every round: a seed replays the rounds in order
        self.clock = clock
        self.store: DrillStore | None = None
        self.session: DrillSession | None = None
        self.item: DrillItem | None = None

        self.header = widgets.HTML(f"<b>Interview drill</b> · {html.escape(', '.join(self.topics))}"
                                   + (f" · {n} item{'s' if n != 1 else ''}" if n else ""))
        self.progress = widgets.HTML()
        self.question = widgets.HTML()
        self.answer = widgets.Text(placeholder="a number, e.g. 1234, 1.2e3 or 94%",
                                   layout=widgets.Layout(width="22em"))
        self.submit = widgets.Button(description="Submit", button_style="primary")
        self.free_answer = widgets.Textarea(placeholder="Answer as you would in the interview, then check it.",
                                            layout=widgets.Layout(width="95%", height="8em"))
        self.check = widgets.Button(description="Check my answer", button_style="primary")
        self.points: list[widgets.Checkbox] = []
        self.checklist = widgets.VBox()
        self.score = widgets.Button(description="Score", button_style="primary")
        self.message = widgets.HTML()   # a reason to retype, or a file that could not be written
        self.feedback = widgets.HTML()  # the verdict, expected answer and solution; or the weak answer
        self.next = widgets.Button(description="Next")
        self.start = widgets.Button(description="Start", button_style="success")
        self.report = widgets.HTML()

        self.start.on_click(lambda _: self._start())
        self.submit.on_click(lambda _: self._submit())
        self.check.on_click(lambda _: self._check())
        self.score.on_click(lambda _: self._score())
        self.next.on_click(lambda _: self._next())
        self._show(self.start)

    # --- what is on screen ------------------------------------------------------------------------

    def _show(self, *body: widgets.Widget) -> None:
        self.children = (self.header, self.progress, *body)

    def _update_progress(self) -> None:
        session = self.session
        number = self.item.number if self.item is not None else session.count
        of = f" of {session.n}" if session.n is not None else ""
        right = sum(outcome.right for outcome in session.results)
        self.progress.value = f"item {number}{of} · right so far {right} of {session.count}"

    def _title(self, item: DrillItem) -> str:
        label = "numeric problem" if item.problem is not None else f"probe {item.probe.id}"
        after = f" · follow-up to {item.follow_up_of}" if item.follow_up_of else ""
        return f"<b>{html.escape(item.topic)} · {html.escape(label)}{html.escape(after)}</b>"

    # --- the steps ------------------------------------------------------------------------------

    def _start(self) -> None:
        if self.store is not None:  # a round is open already (a double click): one session per panel at a time
            return
        self.item = None
        try:
            self.store = DrillStore(self.db)
            options = {} if self.clock is None else {"clock": self.clock}
            self.session = DrillSession(self.store, topics=self.topics, n=self.n, probes=self.probes,
                                        rng=self.rng, **options)
        except (DrillStoreError, sqlite3.Error) as error:  # the learner can fix the file and press Start again
            self._close()
            self.message.value = _block(f"Cannot open the drill history: {error}")
            self._show(self.message, self.start)
            return
        self._next()

    def _next(self) -> None:
        # Only from a graded item: a stray click must neither skip an item unrecorded nor end a closed round.
        if self.store is None or (self.item is not None and self.session.count < self.item.number):
            return
        self.item = self.session.next_item()
        self.message.value = self.feedback.value = ""
        if self.item is None:
            self._finish()
            return
        self._update_progress()
        self.question.value = self._title(self.item) + _block(
            self.item.problem.question if self.item.problem is not None else self.item.probe.question)
        if self.item.problem is not None:
            unit = self.item.problem.unit
            self.answer.value, self.answer.disabled, self.submit.disabled = "", False, False
            self.answer.description = f"in {unit}" if unit else ""
            self._show(self.question, widgets.HBox([self.answer, self.submit]), self.message)
        else:
            self.free_answer.value, self.free_answer.disabled, self.check.disabled = "", False, False
            self._show(self.question, self.free_answer, self.check)

    def _submit(self) -> None:
        item, problem = self.item, self.item and self.item.problem
        if problem is None or self.submit.disabled:  # a second click on a graded item changes nothing
            return
        typed = self.answer.value
        try:
            given = parse_number(typed, problem.unit)
        except NotANumber as reason:  # the item stays; nothing is recorded
            self.message.value = _block(f"Not a number, try again: {reason}")
            return
        outcome = self._saved(lambda: self.session.answer_problem(item, given, typed.strip()))
        if outcome is None:
            return
        self.answer.disabled = self.submit.disabled = True
        expected = f"{sig(problem.answer)} {problem.unit}".rstrip()
        verdict = (f'<b style="color: green">✓ Right ({outcome.rating.name}).</b>' if outcome.correct else
                   f'<b style="color: #c00">✗ Wrong: you said {html.escape(typed.strip())}.</b>')
        accepted = problem.tolerance_text + ("" if problem.tolerance_text == "exactly" else " of it")
        self.feedback.value = (verdict + _block(f"Expected: {expected} (accepted {accepted}); "
                                                f"took {outcome.elapsed_s:.0f} s.")
                               + "<b>Worked solution</b>" + _block(problem.solution, "pre"))
        self._after()

    def _check(self) -> None:
        if self.item is None or self.item.probe is None or self.check.disabled:
            return
        self.session.stop_clock(self.item)  # ticking the checklist is not interview time
        self.free_answer.disabled = self.check.disabled = True
        self.points = [widgets.Checkbox(value=False, indent=False, layout=widgets.Layout(width="2em"))
                       for _ in self.item.probe.strong_points]
        # A checkbox's own description is cut to one line; the point beside it in HTML wraps.
        self.checklist.children = [widgets.HBox([box, widgets.HTML(_block(point))])
                                   for box, point in zip(self.points, self.item.probe.strong_points)]
        self.score.disabled = False
        intro = widgets.HTML(f"A strong answer makes these {len(self.points)} points. Tick each that yours made.")
        self._show(self.question, self.free_answer, intro, self.checklist, self.score, self.message)

    def _score(self) -> None:
        item = self.item
        if item is None or item.probe is None or self.score.disabled or not self.check.disabled:
            return
        ticked = [box.value for box in self.points]
        outcome = self._saved(lambda: self.session.answer_probe(item, ticked, self.free_answer.value.strip()))
        if outcome is None:
            return
        self.score.disabled = True
        for box in self.points:
            box.disabled = True
        color = "green" if outcome.right else "#c00"
        verdict = f"Score {sum(ticked)}/{len(ticked)} = {outcome.score:.0%}: {outcome.rating.name}."
        self.feedback.value = (f'<b style="color: {color}">{verdict}</b><br><b>Typical weak answer</b>'
                               + _block(item.probe.weak_answer))
        self._after()

    def _saved(self, record: Callable[[], object]) -> object | None:
        """Grade and record; a file that cannot be written (locked, gone) keeps the item to try again."""
        try:
            return record()
        except (DrillStoreError, sqlite3.Error) as error:
            self.message.value = _block(f"Not saved ({error}); press the button again to retry.")
            return None

    def _after(self) -> None:
        self.message.value = ""
        self._update_progress()
        last = self.session.n is not None and self.session.count >= self.session.n
        self.next.description = "Finish" if last else "Next"
        self._show(*self.children[2:], self.feedback, self.next)  # the item stays in view above its verdict

    def _finish(self) -> None:
        summary = self.session.summary()
        rows = "".join(f"<tr><td>{html.escape(r.topic)}</td><td>{r.asked}</td><td>{r.right}</td>"
                       f"<td>{r.mean_score:.0%}</td></tr>" for r in summary.by_topic.values())
        table = ("<table><tr><th>topic</th><th>asked</th><th>right</th><th>mean score</th></tr>"
                 f"{rows}</table>" if rows else "")
        self.report.value = ("<b>This session, weakest topic first</b>" + table
                             + _block(summary.line(self.store.path)))
        self.progress.value = ""
        self.item = None
        self._close()
        self.start.description = "Another round"
        self._show(self.report, self.start)

    def _close(self) -> None:
        # Closed after each round: a notebook left open holds no connection to the file between rounds.
        if self.store is not None:
            self.store.close()
        self.store = None
