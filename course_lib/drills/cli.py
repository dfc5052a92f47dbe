"""``course drill``: interview drills in the terminal, numeric problems and probe cards, scheduled by FSRS.

    course drill                          10 items across every topic, new cards first
    course drill --topic kv_cache --n 5   five items on one topic (--topic takes several names)
    course drill --review                 only the cards due again now, most overdue first
    course drill --mock 20m               a timed mix weighted to your weakest topics, then a report
    course drill --stats                  per topic: cards, reviewed, due now, retention

A numeric problem takes one number: ``1234``, ``1,234``, ``1.2e3``, the problem's own unit after it
(``1.68 GB``), ``$`` before a USD amount, and ``94%`` for an answer that is a bare probability or share.
Anything else is asked again with the reason (``session.parse_number`` has the rules). The answer is
graded within the tolerance the question states; then the expected answer and the worked solution.

A probe card takes a free-text answer, one or more lines ended by an empty line; then each point a
strong answer makes is shown and you tick it (y/n) if your answer made it. The share ticked is the
score (all: Easy, 75%: Good, 50%: Hard, less: Again); the typical weak answer comes last, and the
card's follow-ups are asked next, as an interviewer would.

Every answer is saved the moment it is graded (``DrillStore``, one SQLite file: ``--db FILE``, else
``$COURSE_DRILL_DB``, else the user data folder). Ctrl-C or end of input (Ctrl-D) ends the session at
once with exit status 0 and one line, ``answered N, right M, saved to FILE``; the item on screen is
not recorded. Exit status 2: bad arguments, or a --db file that is not a drill history.
"""
from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from course_lib.drills.cards import CardBankError
from course_lib.drills.problem_model import sig
from course_lib.drills.session import (DEFAULT_N, DrillItem, DrillSession, NotANumber, all_topics, catalogue,
                                       load_probe_bank, parse_duration, parse_number)
from course_lib.drills.store import DrillStore, DrillStoreError, default_db_path

YES, NO = {"y", "yes"}, {"n", "no"}  # a tick, case-insensitive; anything else is asked again

ReadLine = Callable[[], str]  # returns one line without its newline; raises EOFError at end of input


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number above 0, got {text!r}")
    return value


def duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser(topics: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="course drill", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Interview drills: numeric problems and probe cards, scheduled by FSRS (spaced repetition).",
        epilog="examples:\n" + __doc__.split("\n\n")[1] + f"\n\ntopics: {', '.join(topics)}")
    parser.add_argument("--topic", nargs="+", action="extend", metavar="NAME",
                        help="drill only these topics (default: all; see the list below)")
    parser.add_argument("--n", type=positive_int, metavar="N",
                        help=f"ask at most N items (default {DEFAULT_N}; with --review or --mock: no limit)")
    parser.add_argument("--seed", type=int, metavar="S",
                        help="seed the choice of items and numbers (a replayable session)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--review", action="store_true",
                      help="only cards seen before and due again now, most overdue first")
    mode.add_argument("--mock", type=duration, metavar="DURATION",
                      help="a timed mock interview (e.g. 20m, 90s, 1h30m) weighted to your weakest topics")
    mode.add_argument("--stats", action="store_true", help="per topic: cards, reviewed, due now, retention; then exit")
    parser.add_argument("--db", metavar="FILE",
                        help=f"the drill history file (default: $COURSE_DRILL_DB, else {default_db_path()})")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        probes = load_probe_bank()
    except CardBankError as error:  # the course's own bank is broken: not the user's input
        print(f"course drill: {error}", file=sys.stderr)
        return 1
    topics = all_topics(probes)
    parser = build_parser(topics)
    args = parser.parse_args(argv)
    unknown = [topic for topic in args.topic or () if topic not in topics]
    if unknown:
        parser.error(f"unknown topic {', '.join(map(repr, unknown))}; topics: {', '.join(topics)}")
    console = Console()
    try:
        store = DrillStore(args.db)
    except DrillStoreError as error:
        print(f"course drill: {error}", file=sys.stderr)
        return 2
    with store:
        if args.stats:
            store.ensure_cards(catalogue(probes))  # so that topics never drilled show their cards too
            show_stats(console, store, args.topic or topics)
            return 0
        n = args.n if args.n is not None or args.review or args.mock else DEFAULT_N
        session = DrillSession(store, topics=args.topic, n=n, review=args.review, mock=args.mock, probes=probes,
                               rng=random.Random(args.seed))
        return run(session, console, input)


# --- a session at the terminal -------------------------------------------------------------------

def run(session: DrillSession, console: Console, read_line: ReadLine) -> int:
    """Ask until the session ends, Ctrl-C or end of input; every graded answer is already saved."""
    what = ("the cards due again now" if session.review else
            f"a {_clock(session.mock)} mock interview" if session.mock else
            f"up to {session.n} item{'s' if session.n != 1 else ''}")
    console.print(Text(f"Drill: {what}; topics: {', '.join(session.topics)}.\n"
                       "Ctrl-C or Ctrl-D stops at any time; every graded answer is saved at once.", style="dim"))
    try:
        while (item := session.next_item()) is not None:
            _header(console, session, item)
            if item.problem is not None:
                ask_problem(console, session, item, read_line)
            else:
                ask_probe(console, session, item, read_line)
    except (KeyboardInterrupt, EOFError):
        console.print()
        console.print(Text("stopped: " + session.summary().line(session.store.path)), soft_wrap=True)
        return 0
    if session.count == 0 and session.review:
        console.print(Text("Nothing is due now in these topics. `course drill` without --review asks new items."))
    show_report(console, session)
    console.print(Text(session.summary().line(session.store.path)), soft_wrap=True)
    return 0


def _clock(span: timedelta | None) -> str:
    seconds = int((span or timedelta(0)).total_seconds())
    return f"{seconds // 60}:{seconds % 60:02d}"


def _header(console: Console, session: DrillSession, item: DrillItem) -> None:
    total = f"/{session.n}" if session.n is not None else ""
    label = "numeric problem" if item.problem is not None else f"probe {item.probe.id}"
    title = f"{item.number}{total} · {item.topic} · {label}"
    if item.follow_up_of:
        title += f" · follow-up to {item.follow_up_of}"
    if session.mock is not None:
        title += f" · {_clock(session.time_left())} left"
    console.rule(Text(title))


def ask_problem(console: Console, session: DrillSession, item: DrillItem, read_line: ReadLine) -> None:
    problem = item.problem
    console.print(Panel(Text(problem.question), title="Question", title_align="left"))
    prompt = f"Your answer{f' (in {problem.unit})' if problem.unit else ''}: "
    while True:
        console.print(Text(prompt, style="bold"), end="")
        typed = read_line()
        try:
            given = parse_number(typed, problem.unit)
            break
        except NotANumber as reason:
            console.print(Text(f"Not a number, try again: {reason}", style="yellow"), soft_wrap=True)
    outcome = session.answer_problem(item, given, typed.strip())
    expected = f"{sig(problem.answer)} {problem.unit}".rstrip()
    verdict = (Text(f"✓ Right ({outcome.rating.name}).", style="bold green") if outcome.correct else
               Text(f"✗ Wrong: you said {typed.strip()}.", style="bold red"))
    console.print(verdict, soft_wrap=True)
    console.print(Text(f"Expected: {expected} (accepted {problem.tolerance_text}"
                       f"{'' if problem.tolerance_text == 'exactly' else ' of it'}); "
                       f"took {outcome.elapsed_s:.0f} s."), soft_wrap=True)
    console.print(Panel(Text(problem.solution), title="Worked solution", title_align="left"))


def ask_probe(console: Console, session: DrillSession, item: DrillItem, read_line: ReadLine) -> None:
    probe = item.probe
    console.print(Panel(Text(probe.question), title="Interviewer", title_align="left"))
    console.print(Text("Your answer (one or more lines; an empty line ends it):", style="bold"))
    lines = []
    while True:
        console.print(Text("> "), end="")
        line = read_line()
        if not line.strip():
            break
        lines.append(line.rstrip())
    session.stop_clock(item)
    console.print(Text(f"A strong answer makes these {len(probe.strong_points)} points. "
                       "Did yours? Type y or n for each.", style="bold"), soft_wrap=True)
    ticked = []
    for number, point in enumerate(probe.strong_points, start=1):
        console.print(Text(f"{number}. {point}"))
        ticked.append(_yes_no(console, read_line))
    outcome = session.answer_probe(item, ticked, "\n".join(lines))
    made = sum(ticked)
    style = "bold green" if outcome.right else "bold red"
    console.print(Text(f"Score {made}/{len(ticked)} = {outcome.score:.0%}: {outcome.rating.name}.", style=style))
    console.print(Panel(Text(probe.weak_answer), title="Typical weak answer", title_align="left"))


def _yes_no(console: Console, read_line: ReadLine) -> bool:
    while True:
        console.print(Text("   made it? [y/n] "), end="")
        answer = read_line().strip().lower()
        if answer in YES | NO:
            return answer in YES
        console.print(Text(f"   {answer!r}: type y (your answer made this point) or n.", style="yellow"))


# --- reports ------------------------------------------------------------------------------------

def show_report(console: Console, session: DrillSession) -> None:
    """Per topic, weakest first: items asked, right, and mean score."""
    summary = session.summary()
    if not summary.answered:
        return
    title = "This session, weakest topic first"
    if session.mock is not None:
        title = f"Mock interview ({_clock(min(summary.elapsed, session.mock))} of {_clock(session.mock)}), " \
                "weakest topic first"
    table = Table(title=title, title_justify="left")
    for column in ("topic", "asked", "right", "mean score"):
        table.add_column(column, justify="left" if column == "topic" else "right")
    for result in summary.by_topic.values():
        table.add_row(result.topic, str(result.asked), str(result.right), f"{result.mean_score:.0%}")
    console.print(table)


def show_stats(console: Console, store: DrillStore, topics: Sequence[str]) -> None:
    """``--stats``: one row per topic of ``topics``, in that order, from ``DrillStore.stats``."""
    by_topic = store.stats()
    stats = [by_topic[topic] for topic in topics if topic in by_topic]
    console.print(Text(f"Drill history: {store.path}", style="bold"), soft_wrap=True)
    table = Table()
    for column in ("topic", "cards", "reviewed", "due now", "reviews", "retention"):
        table.add_column(column, justify="left" if column == "topic" else "right")
    for s in stats:
        table.add_row(s.topic, str(s.cards), str(s.cards - s.new), str(s.due), str(s.reviews),
                      "–" if s.retention is None else f"{s.retention:.0%}")
    console.print(table)
    # printed whole (not as the table's caption, which would wrap), so it can be read at any width
    console.print(Text("due now counts new cards too; retention: the share of reviews not rated Again "
                       "(FSRS schedules for 90%)", style="dim"), soft_wrap=True)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
