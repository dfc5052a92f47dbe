"""Partial credit: the one rule, what the test cell's outputs make of it in nbgrader, the option.

    .venv/bin/python -m pytest tests/pipeline/test_partial_credit.py -q

The rule is ``hidden.partial_score``; ``verdict_outputs`` writes it into the graded test
cell, where nbgrader's own ``determine_grade`` (what SaveAutoGrades stores in the gradebook)
must read back the same number. The grading run itself is in test_grade.py.
"""
from __future__ import annotations

import json

import nbformat
import pytest
from nbgrader.utils import determine_grade

from course_lib.cli import build_parser
from course_lib.pipeline.autograde import GradeOutOfProcess, verdict_outputs
from course_lib.pipeline.grade import GradeOptions
from course_lib.pipeline.hidden import (ALL_OR_NOTHING, EDGE, ERROR_PATH, ORDINARY, PARTIAL, RULES, Checks,
                                        LocalLearner, feedback, partial_score, run_hidden_test, score)


def recorded(*outcomes) -> Checks:
    """Checks from (passed, kind, weight) triples, labelled c0, c1, ..."""
    checks = Checks()
    for index, (passed, kind, weight) in enumerate(outcomes):
        checks._record(f"c{index}", passed, "" if passed else "wrong", weight=weight, kind=kind)
    return checks


def graded_cell(outputs, points: float):
    cell = nbformat.v4.new_code_cell("check.softmax(softmax)")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": points,
                                 "grade_id": "softmax-tests", "schema_version": 3}
    cell.outputs = outputs
    return cell


def test_each_check_earns_an_equal_share_by_default():
    checks = recorded(*[(True, ORDINARY, 1)] * 103, (False, ORDINARY, 1))
    assert partial_score(checks, 5) == round(5 * 103 / 104, 2) == 4.95
    assert score(checks, 5, ALL_OR_NOTHING) == 0


def test_weights_set_the_shares():
    checks = recorded((True, ORDINARY, 3), (False, ORDINARY, 1))
    assert partial_score(checks, 4) == 3.0
    assert partial_score(recorded((False, ORDINARY, 3), (True, ORDINARY, 1)), 4) == 1.0


def test_error_path_and_edge_checks_count_only_beside_a_passing_ordinary_check():
    lucky = recorded((False, ORDINARY, 1), (True, ERROR_PATH, 1), (True, EDGE, 1))
    assert partial_score(lucky, 3) == 0
    with_one_right = recorded((True, ORDINARY, 1), (True, ERROR_PATH, 1), (True, EDGE, 1), (False, ORDINARY, 1))
    assert partial_score(with_one_right, 4) == 3.0


def test_full_marks_are_exactly_the_points_and_nothing_right_is_exactly_zero():
    assert partial_score(recorded(*[(True, ORDINARY, 1)] * 7), 3) == 3.0
    assert partial_score(recorded(*[(False, ORDINARY, 1)] * 7), 3) == 0.0
    assert partial_score(Checks(), 3) == 0.0


def test_a_hidden_test_that_stops_early_earns_zero():
    """Its remaining checks never ran, so a share of what ran would overstate the answer."""
    def test(learner, check):
        check.equal("one right", lambda: learner.call("f"), 1)
        learner.call("g")  # outside any check: the test cannot go on
        check.equal("never reached", lambda: learner.call("f"), 2)

    checks = run_hidden_test(test, LocalLearner({"f": lambda: 1}))
    assert not checks.finished and partial_score(checks, 2) == 0
    assert "stopped before its last check" in feedback(checks, 2)


def test_a_value_a_check_cannot_use_fails_that_check_only():
    def test(learner, check):
        check.equal("the usd field", lambda: learner.call("f")["usd"], 1.5)  # f returns a number
        check.equal("a later case", lambda: learner.call("g"), 2)

    checks = run_hidden_test(test, LocalLearner({"f": lambda: 0.0, "g": lambda: 2}))
    assert checks.finished and [r.passed for r in checks.results] == [False, True]
    assert "could not use (TypeError)" in checks.results[0].message
    assert partial_score(checks, 2) == 1.0


def test_check_kinds_and_weights_are_recorded():
    learner = LocalLearner({"f": lambda x=None: [] if x is None else x})
    check = Checks()
    check.equal("ordinary", lambda: learner.call("f", 3), 3, weight=2)
    check.equal("a blank expected value is an edge check", lambda: learner.call("f"), [])
    check.equal("unless marked ordinary", lambda: learner.call("f"), [], edge=False)
    check.close("all zeros expected", lambda: learner.call("f", [0.0, 0.0]), [0.0, 0.0])
    check.that("marked edge", lambda: learner.call("f"), lambda v: v == [], "not empty", edge=True)
    check.raises("raises", lambda: learner.call("f", 1), "ValueError")
    assert [(r.kind, r.weight) for r in check.results] == [
        (ORDINARY, 2.0), (EDGE, 1.0), (ORDINARY, 1.0), (EDGE, 1.0), (EDGE, 1.0), (ERROR_PATH, 1.0)]
    with pytest.raises(TypeError, match="weight must be a number above 0"):
        check.equal("a bad weight", lambda: 1, 1, weight=0)


def test_feedback_lists_every_check_with_its_points_and_the_rule():
    checks = recorded((True, ORDINARY, 1), (False, ORDINARY, 2), (True, ERROR_PATH, 1))
    text = feedback(checks, 4)
    assert text.splitlines() == [
        "Hidden tests: 2 of 4 points",
        "✓ c0 (1 of 4 points)",
        "✗ c1: wrong (weight 2, 2 of 4 points)",
        "✓ c2 (error path, 1 of 4 points)",
        f"Rule: {RULES[PARTIAL]}.",
    ]
    lucky = feedback(recorded((False, ORDINARY, 1), (True, EDGE, 1)), 2)
    assert "✓ c1 (edge, 1 of 2 points, not counted: no ordinary check passed)" in lucky
    assert lucky.startswith("Hidden tests: 0 of 2 points")


@pytest.mark.parametrize("outcomes, points", [
    ([(True, ORDINARY, 1)] * 2 + [(False, ORDINARY, 1)], 3),
    ([(True, ORDINARY, 1)] * 103 + [(False, ORDINARY, 1)], 5),
    ([(True, ORDINARY, 1)] * 4, 2.5),
    ([(False, ORDINARY, 1), (True, ERROR_PATH, 1)], 2),
    ([(True, ORDINARY, 1), (False, ORDINARY, 1), (False, ORDINARY, 1)], 1),  # 1/3 of a point, rounded
])
def test_nbgrader_reads_the_partial_score_from_the_test_cell(outcomes, points):
    checks = recorded(*outcomes)
    auto_score, max_score = determine_grade(graded_cell(verdict_outputs(checks, points, PARTIAL), points))
    assert (auto_score, max_score) == (partial_score(checks, points), points)
    assert auto_score <= max_score


def test_all_or_nothing_keeps_the_old_outputs():
    some_wrong = recorded((True, ORDINARY, 1), (False, ORDINARY, 1))
    outputs = verdict_outputs(some_wrong, 3, ALL_OR_NOTHING)
    assert [o.output_type for o in outputs] == ["stream", "error"]
    assert "1 of 2 hidden checks failed" in outputs[1].evalue
    assert determine_grade(graded_cell(outputs, 3)) == (0, 3)
    all_right = recorded((True, ORDINARY, 1))
    assert determine_grade(graded_cell(verdict_outputs(all_right, 3, ALL_OR_NOTHING), 3)) == (3, 3)
    assert RULES[ALL_OR_NOTHING] in outputs[0].text


def test_partial_outputs_never_hold_an_error():
    """An error output would make nbgrader give 0 whatever the execute_result says."""
    outputs = verdict_outputs(recorded((True, ORDINARY, 1), (False, ORDINARY, 1)), 2, PARTIAL)
    assert [o.output_type for o in outputs] == ["stream", "execute_result"]
    assert outputs[0].name == "stdout" and outputs[1].data["text/plain"] == "1"


def test_the_option_reaches_the_grading_worker_and_the_table_header():
    assert GradeOptions().scoring == PARTIAL
    assert json.loads(GradeOptions(scoring=ALL_OR_NOTHING).worker_options())["scoring"] == ALL_OR_NOTHING
    assert GradeOutOfProcess().scoring == PARTIAL
    assert GradeOutOfProcess(scoring=ALL_OR_NOTHING).scoring == ALL_OR_NOTHING
    header = GradeOptions(scoring=ALL_OR_NOTHING).describe().splitlines()
    assert header[0].startswith("sandbox: on (") and header[1] == f"scoring: {RULES[ALL_OR_NOTHING]}"
    assert GradeOptions().describe().splitlines()[1].startswith("scoring: partial credit: an exercise earns points ×")
    with pytest.raises(ValueError, match="scoring must be one of partial, all-or-nothing"):
        GradeOptions(scoring="generous")


def test_the_grade_command_takes_scoring():
    parser = build_parser()
    assert parser.parse_args(["grade", "00_orientation"]).scoring == PARTIAL
    assert parser.parse_args(["grade", "00_orientation", "--scoring", "all-or-nothing"]).scoring == ALL_OR_NOTHING
    with pytest.raises(SystemExit):
        parser.parse_args(["grade", "00_orientation", "--scoring", "generous"])
