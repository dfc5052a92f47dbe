"""Hidden tests: plain functions in ``grading/hidden/NN_topic.py``, run in the grader's process.

One function per exercise, named after it, taking the learner and a ``Checks`` recorder:

    def softmax_with_temperature(learner, check):
        f = learner.function("softmax_with_temperature")
        check.close("softmax of [2, 1, 0] at T=0.7", lambda: f([2.0, 1.0, 0.0], 0.7),
                    expected=[0.7710, 0.1848, 0.0443], atol=1e-4)
        check.raises("a negative temperature raises ValueError", lambda: f([1.0], -0.5), "ValueError")
        check.equal("an empty list of logits gives an empty list", lambda: f([], 1.0), [], edge=True)

Each check carries a share of the exercise's points: ``weight=`` (default 1) over the weights
of all its checks. A ``check.raises`` is an error-path check and ``edge=True`` marks any other
check that a do-nothing answer could pass (one expecting None, [], False); those count only
beside an ordinary check that passes (``partial_score`` states the rule).

``learner`` is a ``LearnerKernel`` when grading (the answers run sandboxed; only plain data
comes back) and a ``LocalLearner`` under pytest (the same contract, in-process, for testing
the hidden tests themselves against the reference answers and against wrong ones). Every
comparison happens here, on values the decoder built, so nothing the student defines ever
runs or compares in the grader. A module may also list ``REFERENCES``: the dotted names of
the course_lib functions that answer its exercises, stubbed out inside the grading sandbox.
"""
from __future__ import annotations

import importlib.util
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from course_lib.pipeline.learner import LearnerAPI, LearnerRaised, LearnerRefused, LearnerUnavailable
from course_lib.pipeline.plain_data import decode, encode

MAX_SHOWN = 120  # characters of a learner's value quoted in a failure message


class HiddenTestsMissing(ValueError):
    """A notebook's hidden-test file is absent or lacks an exercise; the message names it."""


def load_hidden(path: Path):
    """Import a hidden-test file by path (its folder first on sys.path, for shared oracles)."""
    path = Path(path)
    if not path.is_file():
        raise HiddenTestsMissing(f"no hidden tests at {path} (a notebook is named after its assignment, '00_orientation.ipynb'; an author writes one function per exercise there)")
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(f"course_hidden_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hidden_test(module, exercise: str):
    test = getattr(module, exercise, None)
    if not callable(test):
        raise HiddenTestsMissing(f"{module.__file__} has no hidden test `def {exercise}(learner, check)`")
    return test


ORDINARY, ERROR_PATH, EDGE = "ordinary", "error path", "edge"  # the kinds of check


@dataclass
class CheckResult:
    label: str
    passed: bool
    message: str = ""
    weight: float = 1.0
    kind: str = ORDINARY

    @property
    def guard(self) -> bool:
        """An error-path or edge check: one a do-nothing answer could pass, so it counts only
        beside an ordinary check that passed."""
        return self.kind != ORDINARY


_UNSET = object()


def _kind(edge: bool | None, default: str = ORDINARY, *, expected=_UNSET) -> str:
    """EDGE when marked so, or (unmarked) when an ``expected`` value is blank; else ``default``."""
    if edge is None:
        edge = expected is not _UNSET and blank(expected)
    return EDGE if edge else default


def blank(value) -> bool:
    """Whether ``value`` is built only of None, False, zeros and empty containers: what an
    answer that does nothing returns (None, 0, [], a list of zeros), so a check expecting
    it is an edge check unless marked ``edge=False``.

    >>> [blank(v) for v in (None, 0, 0.0, False, "", [], {}, [0, 0], {"a": None}, [[], ()])]
    [True, True, True, True, True, True, True, True, True, True]
    >>> [blank(v) for v in (1, "a", [0, 1], {"a": 1}, True, float("nan"))]
    [False, False, False, False, False, False]
    """
    if value is None:
        return True
    if isinstance(value, (bool, int, float, np.number, np.bool_)):
        return value == 0
    if isinstance(value, (str, bytes)):
        return len(value) == 0
    if isinstance(value, dict):
        return all(blank(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(blank(v) for v in value)
    if isinstance(value, np.ndarray):
        return not np.any(value) if value.dtype.kind in "biufc" else all(blank(v) for v in value.ravel().tolist())
    return False


@dataclass
class Checks:
    """Records each hidden check: its label, pass or fail, a message without the answer, its
    weight and its kind. ``finished`` is False when the test stopped before its last check."""

    results: list[CheckResult] = field(default_factory=list)
    finished: bool = True

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    def _record(self, label: str, ok: bool, message: str = "", *, weight: float = 1, kind: str = ORDINARY) -> bool:
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight < math.inf:
            # An authoring mistake: stop the test, so the reference answers fail loudly in tests/hidden.
            raise TypeError(f"check {label!r}: weight must be a number above 0, got {weight!r}")
        self.results.append(CheckResult(label, ok, "" if ok else message, float(weight), kind))
        return ok

    def _get(self, label: str, call, weight: float, kind: str):
        """(True, value) or (False, None) after recording why the call gave no value."""
        try:
            return True, call()
        except LearnerRaised as exc:
            self._record(label, False, f"raised {exc}", weight=weight, kind=kind)
        except (LearnerRefused, LearnerUnavailable) as exc:
            self._record(label, False, str(exc), weight=weight, kind=kind)
        except Exception as exc:  # the getter could not use the learner's value: this check fails, the rest still run
            self._record(label, False, f"gave a value this check could not use ({type(exc).__name__})",
                         weight=weight, kind=kind)
        return False, None

    def close(self, label: str, call, expected, *, atol: float = 1e-6, rtol: float = 0.0,
              weight: float = 1, edge: bool | None = None) -> bool:
        """The learner's numbers match ``expected`` (same shape) within atol + rtol * |expected|.

        An edge check when ``edge=True``, or when unmarked and ``expected`` is blank (zeros)."""
        spec = {"weight": weight, "kind": _kind(edge, expected=expected)}
        ok, got = self._get(label, call, **spec)
        if not ok:
            return False
        want = np.asarray(expected, dtype=np.float64)
        try:
            have = np.asarray(got, dtype=np.float64)
        except (TypeError, ValueError):
            return self._record(label, False, f"returned {_show(got)}, not numbers", **spec)
        if have.shape != want.shape:
            return self._record(label, False, f"returned shape {have.shape}, expected shape {want.shape}", **spec)
        if not np.allclose(have, want, atol=atol, rtol=rtol, equal_nan=True):
            with np.errstate(invalid="ignore"):  # inf - inf where an infinity is misplaced
                worst = np.nanmax(np.abs(np.where(np.isnan(have) | np.isnan(want), np.inf, have - want)))
            return self._record(label, False, f"values are off (largest error {worst:.3g}, allowed {atol:g})", **spec)
        return self._record(label, True, **spec)

    def equal(self, label: str, call, expected, *, weight: float = 1, edge: bool | None = None) -> bool:
        """The learner's value equals ``expected`` exactly (lists and tuples alike).

        An edge check when ``edge=True``, or when unmarked and ``expected`` is blank (None, [], 0...)."""
        spec = {"weight": weight, "kind": _kind(edge, expected=expected)}
        ok, got = self._get(label, call, **spec)
        if not ok:
            return False
        if not same(got, expected):
            return self._record(label, False, f"returned {_show(got)}, which is not the right value", **spec)
        return self._record(label, True, **spec)

    def raises(self, label: str, call, *exceptions: str, weight: float = 1, edge: bool | None = None) -> bool:
        """Calling raises one of ``exceptions`` (by class name, subclasses included).

        Always an error-path check (an answer that raises on everything passes it); ``edge``
        is accepted for symmetry and makes it an edge check instead."""
        spec = {"weight": weight, "kind": _kind(edge, ERROR_PATH)}
        try:
            got = call()
        except LearnerRaised as exc:
            if any(name in exc.names for name in exceptions):
                return self._record(label, True, **spec)
            return self._record(label, False, f"raised {exc.names[0]}, expected {' or '.join(exceptions)}", **spec)
        except (LearnerRefused, LearnerUnavailable) as exc:
            return self._record(label, False, str(exc), **spec)
        except Exception as exc:  # the getter could not use the learner's value
            return self._record(label, False, f"gave a value this check could not use ({type(exc).__name__})", **spec)
        return self._record(label, False, f"returned {_show(got)} instead of raising {' or '.join(exceptions)}", **spec)

    def that(self, label: str, call, predicate, failure: str, *, weight: float = 1, edge: bool | None = None) -> bool:
        """``predicate(value)`` holds; otherwise ``failure`` (which names the rule) is shown."""
        spec = {"weight": weight, "kind": _kind(edge)}
        ok, got = self._get(label, call, **spec)
        if not ok:
            return False
        try:
            holds = bool(predicate(got))
        except Exception:  # a value of the wrong shape or type breaks the predicate: a wrong answer
            holds = False
        return self._record(label, holds, failure, **spec)

    def report(self) -> str:
        lines = [f"{'✓' if r.passed else '✗'} {r.label}" + (f": {r.message}" if r.message else "")
                 for r in self.results]
        return "\n".join(lines)


# -- scoring: one rule, used by `course grade` (autograde.py) and `course check --full` -----------
PARTIAL, ALL_OR_NOTHING = "partial", "all-or-nothing"
SCORING = (PARTIAL, ALL_OR_NOTHING)
RULES = {
    PARTIAL: ("partial credit: an exercise earns points × (weight of its passed checks) / (weight of all its "
              "checks), rounded to 0.01; error-path and edge checks count only when at least one ordinary check "
              "passed; 0 when its hidden test could not finish on the answer"),
    ALL_OR_NOTHING: "all-or-nothing: an exercise earns its points only when every hidden check passes",
}


def partial_score(checks: Checks, points: float) -> float:
    """An exercise's score under partial credit, the one rule (stated in ``RULES[PARTIAL]``).

    score = points × (weight of the passed checks that count) / (weight of all checks),
    rounded to 0.01, where an error-path check (``check.raises``) or an edge check
    (``edge=True``, or an unmarked ``equal``/``close`` expecting a ``blank`` value) counts
    only when at least one ordinary check passed, and a hidden test that could not finish
    (it stopped before its last check) earns 0. So an answer that gets nothing right
    (returns None or a constant, always raises) earns 0, however many of the checks about
    errors and empty inputs it happens to pass; tests/hidden/test_partial_credit.py checks
    that for every exercise.

    >>> check = Checks()
    >>> _ = check.equal("softmax of [0, 0]", lambda: [0.5, 0.5], [0.5, 0.5])
    >>> _ = check.equal("softmax of [0, 1]", lambda: [0.5, 0.5], [0.269, 0.731])
    >>> _ = check.equal("an empty list gives []", lambda: [], [], edge=True)
    >>> _ = check.equal("the worked example (counts twice)", lambda: [0.5, 0.5], [0.5, 0.5], weight=2)
    >>> partial_score(check, 5)   # 5 × (1 + 1 + 2) / 5
    4.0
    >>> lucky = Checks()
    >>> _ = lucky.equal("softmax of [0, 1]", lambda: [], [0.269, 0.731])
    >>> _ = lucky.equal("an empty list gives []", lambda: [], [], edge=True)
    >>> partial_score(lucky, 5)   # the edge check passed, but no ordinary one did
    0.0
    """
    total = sum(r.weight for r in checks.results)
    earned = sum(r.weight for r in counted(checks))
    if not checks.finished or total == 0 or earned == 0:
        return 0.0
    if earned == total:
        return float(points)
    return min(float(points), round(points * earned / total, 2))


def counted(checks: Checks) -> list[CheckResult]:
    """The passed checks that earn their share under ``partial_score``."""
    ordinary_passed = any(r.passed and not r.guard for r in checks.results)
    return [r for r in checks.results if r.passed and (ordinary_passed or not r.guard)]


def score(checks: Checks, points: float, scoring: str = PARTIAL) -> float:
    """The exercise's points under ``scoring`` (PARTIAL or ALL_OR_NOTHING)."""
    if scoring not in SCORING:
        raise ValueError(f"scoring must be one of {', '.join(SCORING)}, got {scoring!r}")
    if scoring == ALL_OR_NOTHING:
        return float(points) if checks.passed else 0.0
    return partial_score(checks, points)


def feedback(checks: Checks, points: float, scoring: str = PARTIAL) -> str:
    """What the learner reads under the graded test cell: the score, every check (✓ or ✗, its
    label, its message, its share of the points) and the rule; never code or expected values.

    >>> check = Checks()
    >>> _ = check.equal("softmax of [0, 0]", lambda: [0.5, 0.5], [0.5, 0.5])
    >>> _ = check.raises("a negative temperature raises ValueError", lambda: None, "ValueError")
    >>> print(feedback(check, 3))
    Hidden tests: 1.5 of 3 points
    ✓ softmax of [0, 0] (1.5 of 3 points)
    ✗ a negative temperature raises ValueError: returned None instead of raising ... (error path, 1.5 of 3 points)
    Rule: partial credit: ...
    """
    earned = score(checks, points, scoring)
    lines = [f"Hidden tests: {earned:g} of {points:g} points"]
    if scoring == ALL_OR_NOTHING:
        lines += checks.report().splitlines()
    else:
        total = sum(r.weight for r in checks.results) or 1.0
        counts = {id(r) for r in counted(checks)}
        for r in checks.results:
            lines.append(f"{'✓' if r.passed else '✗'} {r.label}" + (f": {r.message}" if r.message else "")
                         + f" ({_share(r, points * r.weight / total, points, id(r) in counts)})")
        if not checks.finished:
            lines.append("The hidden test stopped before its last check, so this exercise earns 0.")
    lines.append(f"Rule: {RULES[scoring]}.")
    return "\n".join(lines)


def _share(result: CheckResult, worth: float, points: float, counts: bool) -> str:
    parts = [result.kind] if result.guard else []
    if result.weight != 1:
        parts.append(f"weight {result.weight:g}")
    parts.append(f"{worth:.3g} of {points:g} points")
    if result.passed and not counts:
        parts.append("not counted: no ordinary check passed")
    return ", ".join(parts)


def same(a, b) -> bool:
    """Structural equality over plain data; arrays compare by shape and values."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        try:
            a, b = np.asarray(a), np.asarray(b)
        except (TypeError, ValueError):
            return False
        return a.shape == b.shape and bool(np.array_equal(a, b))
    if type(a) in (list, tuple) and type(b) in (list, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if type(a) is dict and type(b) is dict:
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    numbers = (bool, int, float)
    if type(a) in numbers and type(b) in numbers:
        return a == b or (type(a) is type(b) is float and math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and a == b


def _show(value) -> str:
    text = repr(value).replace("\n", " ")
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."


class Once:
    """A learner call made once and shared by the checks that read it (its error too):
    several rules checked on one answer cost one round trip to the kernel."""

    def __init__(self, call) -> None:
        self.call, self.done, self.value, self.error = call, False, None, None

    def __call__(self):
        if not self.done:
            self.done = True
            try:
                self.value = self.call()
            except Exception as exc:  # LearnerRaised and friends: every check that reads it reports it
                self.error = exc
        if self.error is not None:
            raise self.error
        return self.value


def item(index, replay):
    """A check's getter for ``replay()[index]``: one part of a shared (``Once``) answer, or the
    answer itself when it cannot be indexed, so the check that reads it fails with what came back."""
    def get():
        value = replay()
        try:
            return value[index]
        except Exception:  # a wrong kind of value
            return value
    return get


def message_of(call):
    """A check's getter for the message of the error the learner's ``call`` raises, or None when
    it returns: for rules about what an error message says (a check.raises only sees its type)."""
    def get():
        try:
            call()
        except LearnerRaised as exc:
            return str(exc)
        return None
    return get


class LocalLearner(LearnerAPI):
    """The grading contract in-process: the answers live in ``namespace``; values cross
    through the same plain-data codec as in grading, so tests here mean the same there."""

    def __init__(self, namespace: dict) -> None:
        self.namespace = namespace

    def call(self, name: str, *args, **kwargs):
        return self._run(self.namespace, name, args, kwargs)

    def call_script(self, script: str, name: str, *args, **kwargs):
        scope = dict(self.namespace)
        exec(compile(script, "<hidden-test script>", "exec"), scope)
        return self._run(scope, name, args, kwargs)

    @staticmethod
    def _run(scope: dict, name: str, args, kwargs):
        if not callable(scope.get(name)):
            raise LearnerRefused(f"`{name}` is not defined")
        args = decode(encode(list(args)), tensors=True)
        kwargs = decode(encode(dict(kwargs)), tensors=True)
        try:
            result = scope[name](*args, **kwargs)
        except Exception as exc:
            raise LearnerRaised([c.__name__ for c in type(exc).__mro__], str(exc)) from None
        try:
            return decode(encode(result))
        except TypeError as exc:
            raise LearnerRefused(f"`{name}` returned something that is not plain data: {exc}") from None


def run_hidden_test(test, learner) -> Checks:
    """One exercise's hidden test; an error inside the test itself is a failed check too."""
    check = Checks()
    try:
        test(learner, check)
    except (LearnerRaised, LearnerRefused, LearnerUnavailable) as exc:  # a call outside a check
        check.finished = False  # the checks it never reached would be missing from the total
        check._record("the hidden test's calls", False, str(exc))
    except Exception as exc:  # a learner's value the test could not handle; the code stays private
        check.finished = False
        check._record("the hidden test", False, f"could not finish on your answer ({type(exc).__name__})")
    if not check.results:
        check._record("the hidden test", False, "made no checks (an error in the test itself)")
    return check
