"""Hidden tests are plain functions: run them here against the reference answers and wrong ones.

``answers(name)`` runs a notebook's setup and solution cells (what grading runs) in this
process; ``LocalLearner`` gives the hidden tests the same plain-data contract as grading.
"""
from __future__ import annotations

import functools
from pathlib import Path

import pytest

from course_lib.pipeline.authoring import CHECKS_PREFIX, build_notebook, exercises, parse
from course_lib.pipeline.hidden import LocalLearner, hidden_test, load_hidden, run_hidden_test
from course_lib.pipeline.learner import answer_cells
from tests.pipeline.conftest import ASSIGNMENTS, REPO

AUTHORING = REPO / "grading" / "authoring"
HIDDEN = REPO / "grading" / "hidden"
# Exercises whose hidden test and visible checks decode with the course model, seconds a run:
# every test here of one of them (parametrized by name and exercise) is marked slow, and so is
# every test that runs the generated attack (attack.answering_trials), which runs each hidden
# test once per fitting candidate.
HEAVY = {("03_kv_cache", "cached_greedy_logits"), ("04_sampling", "generate_text"),
         ("05_structured_output", "constrained_decode"), ("06_serving", "accept_or_resample")}


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if Path(item.path).parent == here and (params.get("name"), params.get("exercise")) in HEAVY:
            item.add_marker(pytest.mark.slow)


@functools.lru_cache(maxsize=None)
def hidden_module(name: str):
    """A notebook's hidden-test module, loaded once per test process. Its tests are plain
    functions, and 04's memoises its expected decodes, which the attack would otherwise
    recompute for each of its hundreds of trials."""
    return load_hidden(HIDDEN / f"{name}.py")


@functools.lru_cache(maxsize=None)
def answers(name: str) -> dict:
    """The namespace a notebook's setup and solution cells leave behind (a fresh copy each time)."""
    nb = build_notebook(AUTHORING / f"{name}.py")
    namespace = {"__name__": f"answers_{name}"}
    for index in answer_cells(nb):
        exec(compile(nb.cells[index].source, f"<{name} cell {index}>", "exec"), namespace)
    return namespace


def notebook_exercises(name: str) -> list[str]:
    path = AUTHORING / f"{name}.py"
    return exercises(parse(path.read_text(encoding="utf-8"), origin=str(path)))


def verdict(name: str, exercise: str, **replacements):
    """The hidden test of ``exercise`` run on the reference answers, some of them replaced."""
    learner = LocalLearner({**answers(name), **replacements})
    return run_hidden_test(hidden_test(hidden_module(name), exercise), learner)


def test_cell(name: str, exercise: str) -> str:
    """The source of the exercise's visible test cell, as the learner's notebook has it."""
    nb = build_notebook(AUTHORING / f"{name}.py")
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == f"{exercise}-tests"]
    return cell.source


@functools.lru_cache(maxsize=None)
def visible_checks(name: str) -> dict:
    """What a notebook's [checks] cells define (``check``, ``hint``): grading never runs them,
    the learner's visible test cells need them."""
    nb = build_notebook(AUTHORING / f"{name}.py")
    namespace = {"__name__": f"checks_{name}"}
    for cell in nb.cells:
        if str(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")).startswith(CHECKS_PREFIX):
            exec(compile(cell.source, f"<{name} checks cell>", "exec"), namespace)
    return namespace


def visible_failure(name: str, exercise: str, **replacements) -> str:
    """What the visible test cell raises with some answers replaced ('' when it passes)."""
    namespace = {**answers(name), **visible_checks(name), **replacements}
    try:
        exec(compile(test_cell(name, exercise), f"<{name} {exercise} tests>", "exec"), namespace)
    except Exception as exc:  # the learner would see this exception under the test cell
        return f"{type(exc).__name__}: {exc}"
    return ""


def failures(result) -> str:
    return "\n".join(line for line in result.report().splitlines() if line.startswith("✗"))


EXERCISES = [(name, exercise) for name in ASSIGNMENTS for exercise in notebook_exercises(name)]
