"""Under partial credit an answer that gets nothing right earns exactly 0, in every exercise.

    .venv/bin/python -m pytest tests/hidden/test_partial_credit.py -q          # every exercise
    .venv/bin/python -m pytest tests/hidden/test_partial_credit.py -q -m "not slow"

For each exercise of every notebook, every name its solution cell defines is replaced by a
do-nothing answer, and its hidden test runs in this process (``LocalLearner``, no kernel):

- a function that returns None, or one constant (0, 0.0, "", [], {}, False), or always raises
  ValueError (so it "passes" every ``check.raises``);
- for a class, a class whose methods do the same;
- the answer cell as released (``raise NotImplementedError()`` where the solution was), which
  still defines whatever the cell sets up before it (08's ``{key: None for key in ...}``).

Each must score exactly 0 with ``partial_score``. A check that such an answer passes (one
expecting None or [], "the input is unchanged", "returns a Python int") has to be an edge
check: ``edge=True``, or left unmarked with a blank expected value. Those, and the error-path
checks, count only beside an ordinary check that passed, which a do-nothing answer never has.
"""
from __future__ import annotations

import ast
import copy

import pytest

from course_lib.pipeline.authoring import parse
from course_lib.pipeline.hidden import (EDGE, ERROR_PATH, LocalLearner, hidden_test, load_hidden, partial_score,
                                        run_hidden_test)
from tests.hidden.conftest import AUTHORING, EXERCISES, HEAVY, HIDDEN, answers

CONSTANTS = (0, 0.0, "", [], {}, False)
CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"  # grading/nbgrader_config.py's ClearSolutions stub
# HEAVY (tests/hidden/conftest.py): a hidden test whose own expectations take seconds to compute
# (the course model decoding): every do-nothing variant pays for them again, so `-m "not slow"`
# leaves these out.


def solution_source(name: str, exercise: str) -> str:
    path = AUTHORING / f"{name}.py"
    (cell,) = [c for c in parse(path.read_text(encoding="utf-8"), origin=str(path))
               if c.kind == "solution" and c.name == exercise]
    return cell.body


def defined_names(source: str) -> list[str]:
    """The top-level functions, classes and assigned names of a cell (its imports are not answers)."""
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)]
    return list(dict.fromkeys(names))


def released(source: str) -> str:
    """The answer cell as nbgrader's ClearSolutions leaves it for the learner."""
    lines, skipping = [], False
    for line in source.splitlines():
        if "### BEGIN SOLUTION" in line:
            indent = line[: len(line) - len(line.lstrip())]
            lines += [indent + stub for stub in CODE_STUB.splitlines()]
            skipping = True
        elif "### END SOLUTION" in line:
            skipping = False
        elif not skipping:
            lines.append(line)
    return "\n".join(lines)


def returning(value):
    return lambda *args, **kwargs: copy.deepcopy(value)  # a fresh copy: the grader may keep what it gets


def refusing(*args, **kwargs):
    raise ValueError("not done")


def do_nothing_class(original: type, act):
    """A class of the same name whose every method (and property) is ``act``; any other
    attribute is ``act`` too, so a test that calls a method the solution lacks still gets it."""
    methods = {n for klass in original.__mro__[:-1] for n, v in vars(klass).items()
               if callable(v) or isinstance(v, (property, staticmethod, classmethod))}
    body = {"__init__": lambda self, *a, **k: None, "__getattr__": lambda self, _name: act}
    for method in methods - {"__init__", "__new__", "__init_subclass__", "__class_getitem__", "__getattr__"}:
        is_property = isinstance(getattr(original, method, None), property)
        body[method] = property(lambda self: act()) if is_property else (lambda self, *a, **k: act(*a, **k))
    return type(original.__name__, (), body)


def do_nothing_answers(name: str, exercise: str) -> dict[str, dict]:
    """{what the answer does: the names it replaces} for every do-nothing answer to ``exercise``."""
    namespace, source = answers(name), solution_source(name, exercise)
    names = defined_names(source)
    classes = [n for n in names if isinstance(namespace.get(n), type)]
    behaviours = {"returns None": (returning(None), None), "always raises ValueError": (refusing, None)}
    behaviours.update({f"returns {value!r}": (returning(value), value) for value in CONSTANTS})
    variants = {}
    for label, (act, data) in behaviours.items():
        as_functions = {n: act if callable(namespace.get(n)) else copy.deepcopy(data) for n in names}
        variants[f"every name {label}"] = as_functions
        if classes:
            variants[f"a class whose methods {label.replace('returns', 'return').replace('raises', 'raise')}"] = {
                **as_functions, **{n: do_nothing_class(namespace[n], act) for n in classes}}
    scope = {k: v for k, v in namespace.items() if k not in names}
    try:
        exec(compile(released(source), f"<{name} {exercise} as released>", "exec"), scope)
    except NotImplementedError:
        pass  # the learner's copy stops there; what it defined before stays
    variants["the answer cell as released"] = {n: scope.get(n) for n in names}
    return variants


def _param(name: str, exercise: str):
    marks = [pytest.mark.slow] if (name, exercise) in HEAVY else []
    return pytest.param(name, exercise, marks=marks, id=f"{name}-{exercise}")


@pytest.mark.parametrize("name, exercise", [_param(*case) for case in EXERCISES])
def test_an_answer_that_does_nothing_earns_zero(name, exercise):
    test = hidden_test(load_hidden(HIDDEN / f"{name}.py"), exercise)
    scored, lucky = [], []
    for label, replacements in do_nothing_answers(name, exercise).items():
        checks = run_hidden_test(test, LocalLearner({**answers(name), **replacements}))
        if partial_score(checks, 10) != 0:
            passed = [r.label for r in checks.results if r.passed and not r.guard]
            scored.append(f"{label}: {partial_score(checks, 10)} of 10, passing {passed[:5]}")
        if checks.finished and not any(not r.guard for r in checks.results):
            lucky.append(label)
    assert not scored, ("a do-nothing answer scored: mark the checks it passes edge=True in "
                        f"grading/hidden/{name}.py\n" + "\n".join(scored))
    assert not lucky, f"{exercise} has no ordinary check, so no answer could earn its points"


def test_the_do_nothing_answers_replace_every_name_a_solution_defines():
    variants = do_nothing_answers("02_attention", "split_merge_heads")
    assert set(variants["every name returns None"]) == {"split_heads", "merge_heads"}
    assert variants["every name returns None"]["split_heads"](1, 2) is None
    with pytest.raises(ValueError):
        variants["every name always raises ValueError"]["merge_heads"]()
    cache = do_nothing_answers("03_kv_cache", "simple_kv_cache")["a class whose methods return []"]["SimpleKVCache"]
    instance = cache(n_layers=2)
    assert instance.append(1, 2, 3) == [] and instance.anything_else() == []
    owners = do_nothing_answers("09_capstone", "guarantee_owners")["the answer cell as released"]["guarantee_owners"]
    assert owners and set(owners.values()) == {None}  # the learner's starting dict, every owner None


def test_checks_a_do_nothing_answer_passes_are_marked():
    """The kinds these tests rely on: raises is error path; a blank expected value or edge=True is edge."""
    checks = run_hidden_test(lambda learner, check: (
        check.raises("raises", lambda: learner.call("f"), "ValueError"),
        check.equal("expects []", lambda: learner.call("f"), []),
        check.equal("expects [] but marked ordinary", lambda: learner.call("f"), [], edge=False),
        check.that("the input is unchanged", lambda: True, bool, "changed", edge=True)),
        LocalLearner({"f": refusing}))
    assert [r.kind for r in checks.results] == [ERROR_PATH, EDGE, "ordinary", EDGE]

