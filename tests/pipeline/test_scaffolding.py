"""Every notebook opens with prerequisites and a time estimate, offers progressive hints for
every exercise, shows its interview probes from the probe bank, and closes with a recap and
self-check questions."""
from __future__ import annotations

import importlib
import re

import pytest

from course_lib.drills.cards import cards_for
from course_lib.pipeline.authoring import exercises, parse
from course_lib.pipeline.estimate import reading_minutes
from tests.pipeline.conftest import ASSIGNMENTS, REPO

# Every notebook's probes live in the bank (course_lib/drills/probes.toml).
PROBED = list(ASSIGNMENTS)
TIME = re.compile(r"\*\*Time:\*\* about (\d+) minutes")


def cells(name):
    path = REPO / "grading" / "authoring" / f"{name}.py"
    return parse(path.read_text(encoding="utf-8"), origin=str(path))


def stated_minutes(text: str) -> int:
    match = TIME.search(text)
    assert match, "state '**Time:** about N minutes' in the notebook's first cell"
    return int(match.group(1))


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_the_notebook_opens_with_prerequisites_and_an_honest_time(name):
    first = cells(name)[0]
    assert first.kind == "markdown" and "**Prerequisites:**" in first.body
    minutes = stated_minutes(first.body)
    assert abs(minutes - reading_minutes(REPO / "grading" / "authoring" / f"{name}.py")) <= 0.25 * minutes


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_the_readme_table_shows_the_same_time(name):
    row = next(line for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines()
               if line.startswith(f"| {name[:2]} "))
    assert f"{stated_minutes(cells(name)[0].body)} min" in row, row


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_every_exercise_has_progressive_hints(name):
    specs = cells(name)
    setup = "\n".join(c.body for c in specs if c.kind == "checks")  # grading does not run these
    assert "hint = Hints(check.HINTS)" in setup
    module = re.search(r"from course_lib\.checks import (\w+) as check", setup).group(1)
    hints = importlib.import_module(f"course_lib.checks.{module}").HINTS
    for exercise in exercises(specs):
        assert len(hints.get(exercise, [])) >= 2, f"{exercise}: give at least two hints, gentlest first"


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_the_notebook_closes_with_a_recap_and_self_check_questions(name):
    last = [c for c in cells(name) if c.kind == "markdown"][-1].body
    assert "## Recap" in last and "**Self-check:**" in last
    questions = last.split("**Self-check:**", 1)[1]
    assert len(re.findall(r"^\s*\d+\.\s", questions, flags=re.M)) >= 3, "ask at least three numbered questions"


@pytest.mark.parametrize("name", PROBED)
def test_the_interview_probes_are_shown_from_the_bank(name):
    specs = cells(name)
    (heading,) = [i for i, c in enumerate(specs) if c.kind == "markdown" and "## Interview probes" in c.body]
    shown = specs[heading + 1]
    assert shown.kind == "code" and f'show_probes("{name}")' in shown.body, \
        f"follow the '## Interview probes' heading with a cell that calls show_probes(\"{name}\")"
    recap = max(i for i, c in enumerate(specs) if c.kind == "markdown" and "## Recap" in c.body)
    assert heading < recap, "the probes come before the recap"
    written = [c.line for c in specs if c.kind == "markdown" and re.search(r"\*(Strong|Weak):\*", c.body)]
    assert not written, f"probes written inline at line(s) {written}: move them to course_lib/drills/probes.toml"
    assert sum("show_probes(" in c.body for c in specs) == 1
    assert len(cards_for(name)) >= 3, f"give {name} at least three probe cards in course_lib/drills/probes.toml"
