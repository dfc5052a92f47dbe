"""`course drill` as a candidate uses it: the real command with answers piped to it, and under tmux, typed at a
terminal. What each run asks is replayed in-process first (same seed, a scratch history), so every test knows the
right answers; the drill history is then read back with DrillStore to check what was recorded."""
from __future__ import annotations

import os
import random
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from fsrs import Rating

from course_lib.drills.cli import main
from course_lib.drills.problem_model import sig
from course_lib.drills.problems import kinds_for
from course_lib.drills.session import DrillItem, DrillSession, catalogue, load_probe_bank
from course_lib.drills.store import DrillStore

REPO = Path(__file__).resolve().parents[2]
COURSE = Path(sys.executable).with_name("course")  # the console script, as a person runs it
COURSE_CMD = [str(COURSE)] if COURSE.exists() else [sys.executable, "-m", "course_lib.cli"]


def drill(tmp_path: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "COURSE_DRILL_DB": str(tmp_path / "not-this-one.sqlite3"), "COLUMNS": "100"}
    return subprocess.run([*COURSE_CMD, "drill", *args], input=stdin, capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=180)


def replay(tmp_path: Path, seed: int, topic: str, n: int, right: list[bool]) -> list[DrillItem]:
    """The items `course drill --seed SEED --topic TOPIC --n N` asks when answered right/wrong in turn."""
    scratch = tmp_path / f"replay-{uuid.uuid4().hex}.sqlite3"
    items = []
    with DrillStore(scratch) as store:
        session = DrillSession(store, topics=[topic], n=n, rng=random.Random(seed))
        for ok in right:
            item = session.next_item()
            if item is None:
                break
            items.append(item)
            if item.problem is not None:
                session.answer_problem(item, item.problem.answer if ok else _wrong(item))
            else:
                session.answer_probe(item, [ok] * len(item.probe.strong_points))
    return items


def _wrong(item: DrillItem) -> float:
    return item.problem.answer * 3 + 7


def typed(item: DrillItem, right: bool) -> list[str]:
    """The lines a candidate types for one item: a number, or an answer, an empty line and a tick per point."""
    if item.problem is not None:
        return [repr(item.problem.answer if right else _wrong(item))]
    return ["Two costs: prefill compute and cache memory.", "Levers: GQA, paging.", ""] + \
        ["y" if right else "n"] * len(item.probe.strong_points)


def find_seed(tmp_path: Path, topic: str, n: int, want) -> tuple[int, list[DrillItem]]:
    """The first seed from 1 whose replayed items satisfy ``want`` (so the bank can grow without breaking tests)."""
    for seed in range(1, 200):
        items = replay(tmp_path, seed, topic, n, [True] * n)
        if want(items):
            return seed, items
    raise AssertionError(f"no seed up to 200 gives the items this test needs for topic {topic!r}")


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


# --- piped input ----------------------------------------------------------------------------------

def test_a_right_answer_is_recorded_good_a_wrong_one_again_and_a_non_number_is_asked_again(tmp_path):
    seed, items = find_seed(tmp_path, "kv_cache", 2, lambda items: all(i.problem is not None for i in items))
    db = tmp_path / "drills.sqlite3"
    stdin = "\n".join(["abc", "1,5", *typed(items[0], True), *typed(items[1], False)]) + "\n"
    result = drill(tmp_path, "--db", str(db), "--seed", str(seed), "--n", "2", "--topic", "kv_cache", stdin=stdin)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "Not a number, try again: 'abc': that is not a number" in out
    assert "Not a number, try again: '1,5': a comma here only groups thousands" in out
    assert "✓ Right (Good)." in out and "✗ Wrong: you said" in out
    for item in items:
        assert f"Expected: {sig(item.problem.answer)} {item.problem.unit}" in out
    assert out.count("Worked solution") == 2 and out.count("Answer: ") == 2
    assert last_line(out) == f"answered 2, right 1, saved to {db}"
    with DrillStore(db) as store:
        reviews = store.reviews()
    assert [(r.card_id, r.rating, r.score) for r in reviews] == [
        (items[0].card_id, Rating.Good, 1.0), (items[1].card_id, Rating.Again, 0.0)]
    assert reviews[0].answer == f"{typed(items[0], True)[0]} (seed {items[0].problem.seed})"


def test_a_probe_is_answered_in_free_text_ticked_point_by_point_and_followed_up(tmp_path):
    seed, items = find_seed(tmp_path, "kv_cache", 2,
                            lambda items: items[0].probe is not None and items[1].follow_up_of == items[0].probe.id)
    first, follow_up = items
    db = tmp_path / "drills.sqlite3"
    answer_lines = typed(first, True)
    stdin_lines = answer_lines[:3] + ["maybe"] + answer_lines[3:] + typed(follow_up, False)
    result = drill(tmp_path, "--db", str(db), "--seed", str(seed), "--n", "2", "--topic", "kv_cache",
                   stdin="\n".join(stdin_lines) + "\n")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert f"probe {first.probe.id}" in out and f"follow-up to {first.probe.id}" in out
    assert "'maybe': type y (your answer made this point) or n." in out
    points = len(first.probe.strong_points)
    assert f"Score {points}/{points} = 100%: Easy." in out and "Typical weak answer" in out
    assert last_line(out) == f"answered 2, right 1, saved to {db}"
    with DrillStore(db) as store:
        reviews = store.reviews()
    assert [(r.card_id, r.rating, r.score) for r in reviews] == [
        (first.card_id, Rating.Easy, 1.0), (follow_up.card_id, Rating.Again, 0.0)]
    assert reviews[0].answer == "\n".join(answer_lines[:2])


def test_end_of_input_mid_session_saves_what_was_answered_and_exits_0(tmp_path):
    seed, items = find_seed(tmp_path, "kv_cache", 3, lambda items: items[1].probe is not None)
    db = tmp_path / "drills.sqlite3"
    # the first item answered; the second, a probe, cut off halfway through its free-text answer
    stdin = "\n".join([*typed(items[0], True), "Two costs: prefill"]) + "\n"
    result = drill(tmp_path, "--db", str(db), "--seed", str(seed), "--n", "3", "--topic", "kv_cache", stdin=stdin)
    assert result.returncode == 0, result.stdout + result.stderr
    assert last_line(result.stdout) == f"stopped: answered 1, right 1, saved to {db}"
    assert "Traceback" not in result.stdout + result.stderr
    with DrillStore(db) as store:
        assert [r.card_id for r in store.reviews()] == [items[0].card_id]


def test_stats_shows_cards_reviewed_due_and_retention_per_topic(tmp_path):
    db = tmp_path / "drills.sqlite3"
    now = datetime.now(timezone.utc)
    missed, recalled = (f"problem:{kind}" for kind in kinds_for("sampling"))
    with DrillStore(db) as store:
        store.ensure_cards(catalogue(load_probe_bank()), now=now - timedelta(hours=1))
        store.record_review(missed, Rating.Again, now=now - timedelta(minutes=30))  # due again a minute later
        store.record_review(recalled, Rating.Good, now=now)                         # due in ten minutes
        cards = len(store.cards(["sampling"]))
    result = drill(tmp_path, "--db", str(db), "--stats")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {}
    for line in result.stdout.splitlines():
        if line.startswith("│"):
            topic, *cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
            rows[topic] = cells
    # cards, reviewed, due now (the new ones and the missed one), reviews, retention
    assert rows["sampling"] == [str(cards), "2", str(cards - 1), "2", "50%"]
    assert rows["kv_cache"][1] == "0" and rows["kv_cache"][4] == "–"
    assert list(rows)[:2] == ["orientation", "tokenization"], "topics in course order"
    assert "retention: the share of reviews not rated Again" in result.stdout
    assert result.stdout.startswith(f"Drill history: {db}\n")


def test_stats_for_chosen_topics_only(tmp_path, capsys):
    assert main(["--db", str(tmp_path / "d.sqlite3"), "--stats", "--topic", "serving", "context"]) == 0
    out = capsys.readouterr().out
    assert "serving" in out and "context" in out and "kv_cache" not in out


def test_bad_arguments_exit_2_with_the_reason_and_no_traceback(tmp_path):
    result = drill(tmp_path, "--topic", "kv_cache", "nope")
    assert result.returncode == 2 and "unknown topic 'nope'; topics: orientation" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "not-this-one.sqlite3").exists()


@pytest.mark.parametrize("args, message", [
    (["--mock", "20"], "'20' is not a duration"),
    (["--mock", "0s"], "no time at all"),
    (["--n", "0"], "above 0"),
    (["--n", "two"], "expected a whole number"),
    (["--review", "--mock", "5m"], "not allowed with argument"),
    (["--stats", "--review"], "not allowed with argument"),
])
def test_bad_arguments_in_process(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as stopped:
        main(["--db", str(tmp_path / "d.sqlite3"), *args])
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_a_file_that_is_not_a_drill_history_is_refused_untouched(tmp_path, capsys):
    other = tmp_path / "other.sqlite3"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    before = other.read_bytes()
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all, just some notes\n" * 20)
    for path, message in ((other, "not a drill history"), (text, "not a readable SQLite database"),
                          (tmp_path, "is a folder")):
        assert main(["--db", str(path), "--stats"]) == 2
        assert message in capsys.readouterr().err
    assert other.read_bytes() == before


def test_help_lists_the_topics_and_examples(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--help"])
    out = capsys.readouterr().out
    assert stopped.value.code == 0 and "course drill --mock 20m" in out
    assert "topics: orientation, tokenization, attention, kv_cache" in out


# --- at a terminal, under tmux ---------------------------------------------------------------------

class Tmux:
    """A private tmux server (its own socket) running one command in a 120 x 40 pane.

    The command runs under ``sh``, which writes its exit status to ``status_file``: tmux can leave a pane's
    exited process unreaped (a zombie, no ``pane_dead_status``) when the terminal closes first. ``trap : INT``
    keeps that shell alive through the Ctrl-C meant for the command, and a trap (unlike an ignored signal) is
    not inherited, so the command still gets its SIGINT.
    """

    def __init__(self, command: list[str], status_file: Path) -> None:
        self.socket = f"course-drill-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.status_file = status_file
        script = f"trap : INT; {shlex.join(command)}; echo $? > {shlex.quote(str(status_file))}"
        # several arguments: tmux runs them directly, with no user shell in between; remain-on-exit keeps the
        # pane, and so the screen, after the command ends
        self.tmux("new-session", "-d", "-s", "drill", "-x", "120", "-y", "40", "/bin/sh", "-c", script,
                  ";", "set-option", "-t", "drill", "remain-on-exit", "on")

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True, capture_output=True, text=True,
                              timeout=30).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-t", "drill", "-S", "-500")

    def wait_for(self, predicate, what: str, timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if predicate(screen):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"waited {timeout:.0f} s for {what}; the screen shows:\n{self.screen()}")

    def exit_status(self) -> int | None:
        """The command's exit status once the shell has written it; None while it runs."""
        text = self.status_file.read_text() if self.status_file.exists() else ""
        return int(text) if text.endswith("\n") else None

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)


@pytest.mark.slow  # it starts tmux
@pytest.mark.skipif(shutil.which("tmux") is None,
                    reason="tmux is not installed; this test types at `course drill` in a tmux pane "
                           "(apt-get install tmux; .ci/run installs it)")
def test_a_person_at_a_terminal_answers_reads_the_solution_and_presses_ctrl_c(tmp_path):
    # seed 3 starts with a numeric problem on today's bank; searching keeps that true if the bank grows
    seed, items = find_seed(tmp_path, "sampling", 2, lambda items: items[0].problem is not None)
    problem = items[0].problem
    db = tmp_path / "drills.sqlite3"
    terminal = Tmux([*COURSE_CMD, "drill", "--db", str(db), "--seed", str(seed), "--n", "2", "--topic", "sampling"],
                    tmp_path / "exit-status")
    try:
        terminal.wait_for(lambda screen: "Your answer" in screen, "the first question")
        terminal.tmux("send-keys", "-t", "drill", "-l", "twelve")
        terminal.tmux("send-keys", "-t", "drill", "Enter")
        terminal.wait_for(lambda screen: "Not a number, try again: 'twelve'" in screen, "the reason to answer again")
        terminal.tmux("send-keys", "-t", "drill", "-l", f"{problem.answer:.6g}")
        terminal.tmux("send-keys", "-t", "drill", "Enter")
        screen = terminal.wait_for(lambda screen: "Worked solution" in screen and "2/2 ·" in screen,
                                   "the worked solution and the second question")
        assert "✓ Right (Good)." in screen and f"Expected: {sig(problem.answer)}" in screen
        assert problem.solution.splitlines()[-1] in screen
        terminal.tmux("send-keys", "-t", "drill", "C-c")
        terminal.wait_for(lambda screen: terminal.exit_status() is not None, "course drill to exit after Ctrl-C")
        assert terminal.exit_status() == 0, terminal.screen()
        lines = [line for line in terminal.screen().splitlines() if line.strip()]
        assert f"stopped: answered 1, right 1, saved to {db}" in lines[-3:], "\n".join(lines[-5:])
        assert "Traceback" not in terminal.screen()
    finally:
        terminal.close()
    with DrillStore(db) as store:
        assert [(r.card_id, r.rating) for r in store.reviews()] == [(items[0].card_id, Rating.Good)]
