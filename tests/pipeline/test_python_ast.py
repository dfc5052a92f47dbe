"""The pipeline's ast.parse retries CPython 3.11's transient thread race, and nothing else."""
import ast

import pytest

from course_lib.pipeline import python_ast

RACE = SystemError("AST constructor recursion depth mismatch (before=33, after=28)")


def _failing(times, error):
    real, calls = ast.parse, []

    def parse(source, filename="<unknown>"):
        calls.append(filename)
        if len(calls) <= times:
            raise error
        return real(source, filename=filename)
    return parse, calls


def test_a_parse_tripped_by_the_race_is_tried_again(monkeypatch):
    parse, calls = _failing(2, RACE)
    monkeypatch.setattr(python_ast.ast, "parse", parse)
    tree = python_ast.parse("def f(learner, check):\n    pass\n", filename="hidden.py")
    assert [node.name for node in tree.body] == ["f"] and calls == ["hidden.py"] * 3


def test_other_errors_and_a_race_that_never_clears_are_raised(monkeypatch):
    monkeypatch.setattr(python_ast.ast, "parse", _failing(1, SystemError("something else"))[0])
    with pytest.raises(SystemError, match="something else"):
        python_ast.parse("x = 1")
    parse, calls = _failing(99, RACE)
    monkeypatch.setattr(python_ast.ast, "parse", parse)
    with pytest.raises(SystemError, match="recursion depth mismatch"):
        python_ast.parse("x = 1")
    assert len(calls) == 5


def test_a_syntax_error_is_not_retried():
    with pytest.raises(SyntaxError):
        python_ast.parse("def (:")
