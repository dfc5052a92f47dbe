"""No callable a student can reach while grading answers an exercise (see tests/hidden/attack.py).

Every exercise's names are answered in turn by every fitting function and class of
``course_lib`` and of the oracles, and run on the hidden test in this process, with nothing
stubbed. Whatever earns points that way must be switched off in that notebook's sandbox:
withheld (the visible checks, the oracles) or stubbed (``REFERENCES``). The graded attack in
tests/pipeline/test_grade.py then grades one delegation per exercise in the real sandbox.
"""
from __future__ import annotations

import pytest

from course_lib.pipeline.hidden import partial_score
from tests.hidden import attack
from tests.hidden.conftest import EXERCISES, notebook_exercises
from tests.pipeline.conftest import ASSIGNMENTS


@pytest.mark.parametrize("name, exercise", EXERCISES)
def test_stand_ins_alone_earn_nothing(name, exercise):
    """The attack's baseline: with every name a stand-in that raises, the exercise scores 0."""
    assert partial_score(attack.baseline(name, exercise), 1.0) == 0


@pytest.mark.slow  # the attack runs every hidden test once per fitting candidate
@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_every_callable_that_answers_is_switched_off_in_the_sandbox(name):
    reachable = [t for t in attack.answering_trials(name) if not attack.switched_off(name, t.candidate)]
    assert not reachable, "these answer an exercise and are reachable while grading; add them to " \
        f"REFERENCES in grading/hidden/{name}.py:\n" + "\n".join(
            f"  {t.exercise}: {t.answer.name} = {t.candidate.dotted}{' (by name)' if t.by_name else ''} earns {t.score:.0%} ({len(t.passed)} checks)"
            for t in reachable)


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_the_attack_tries_candidates_on_every_notebook(name):
    """A guard on the generator itself: a fit rule that matched nothing would prove nothing.
    (Some exercises have no fitting candidate at all, e.g. 05's constrained_decode and
    dispatch: their references are stubbed by REFERENCES all the same.)"""
    tried = [answer.name for exercise in notebook_exercises(name)
             for answer in attack.solution_answers(name, exercise) if attack.candidates(answer)]
    assert tried, f"{name}: no candidate fits any answer"


@pytest.mark.slow  # the attack on 04 and 06
def test_the_known_holes_are_among_the_candidates():
    """The delegations the issue found by hand are generated, and they would score."""
    found = {(t.exercise, t.candidate.dotted) for n in ("04_sampling", "06_serving") for t in attack.answering_trials(n)}
    assert ("schedule_step", "course_lib.checks.serving.reference_schedule") in found
    assert ("block_pool", "course_lib.checks.serving.ReferencePool") in found
    assert ("generate_text", "course_lib.checks.sampling._reference_loop") in found
