"""A green visible check means the exercise is done: every known-wrong answer fails both ways.

Each ``tests/hidden/test_hidden_NN_topic.py`` lists ``WRONG_ANSWERS``: (exercise, the names
it replaces in the learner's namespace, a fragment of the hidden check it must fail). Every
entry must fail that hidden check (graded: no points) and also the notebook's visible test
cell (so a learner who sees only ✓ has not lost the points). A rule an exercise states with
no visible case that catches its wrong answer fails here.
"""
from __future__ import annotations

import importlib

import pytest

from tests.hidden.conftest import failures, notebook_exercises, verdict, visible_failure
from tests.pipeline.conftest import ASSIGNMENTS


def registry(name: str) -> list[tuple]:
    return getattr(importlib.import_module(f"tests.hidden.test_hidden_{name}"), "WRONG_ANSWERS", [])


CASES = [(name, *entry) for name in ASSIGNMENTS for entry in registry(name)]


def _id(case) -> str:
    name, exercise, replacements, fragment = case
    wrong = "+".join(getattr(v, "__name__", type(v).__name__) for v in replacements.values())
    return f"{name}-{exercise}-{wrong}-{fragment[:30]}"  # -k NN_topic selects them with the rest


@pytest.mark.parametrize("name, exercise, replacements, fragment", CASES, ids=[_id(c) for c in CASES])
def test_a_wrong_answer_fails_the_hidden_check_it_breaks(name, exercise, replacements, fragment):
    result = verdict(name, exercise, **replacements)
    assert not result.passed
    assert fragment in failures(result), failures(result)


@pytest.mark.parametrize("name, exercise, replacements, fragment", CASES, ids=[_id(c) for c in CASES])
def test_a_wrong_answer_fails_the_visible_checks_too(name, exercise, replacements, fragment):
    assert visible_failure(name, exercise, **replacements), (
        f"the visible checks of {exercise} pass an answer that breaks '{fragment}': add a visible case for that rule")


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_every_exercise_has_wrong_answers(name):
    covered = {exercise for exercise, _, _ in registry(name)}
    assert set(notebook_exercises(name)) <= covered
