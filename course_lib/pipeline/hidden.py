"""Hidden tests: plain functions in ``grading/hidden/NN_topic.py``, run in the grader's process.

One function per exercise, named after it, taking the learner and a ``Checks`` recorder:

    def softmax_with_temperature(learner, check):
        f = learner.function("softmax_with_temperature")
        check.close("softmax of [2, 1, 0] at T=0.7", lambda: f([2.0, 1.0, 0.0], 0.7),
                    expected=[0.7710, 0.1848, 0.0443], atol=1e-4)
        check.raises("a negative temperature raises ValueError", lambda: f([1.0], -0.5), "ValueError")

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


@dataclass
class CheckResult:
    label: str
    passed: bool
    message: str = ""


@dataclass
class Checks:
    """Records each hidden check: its label, pass or fail, and a message without the answer."""

    results: list[CheckResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    def _record(self, label: str, ok: bool, message: str = "") -> bool:
        self.results.append(CheckResult(label, ok, "" if ok else message))
        return ok

    def _get(self, label: str, call):
        """(True, value) or (False, None) after recording why the call gave no value."""
        try:
            return True, call()
        except LearnerRaised as exc:
            self._record(label, False, f"raised {exc}")
        except (LearnerRefused, LearnerUnavailable) as exc:
            self._record(label, False, str(exc))
        return False, None

    def close(self, label: str, call, expected, *, atol: float = 1e-6, rtol: float = 0.0) -> bool:
        """The learner's numbers match ``expected`` (same shape) within atol + rtol * |expected|."""
        ok, got = self._get(label, call)
        if not ok:
            return False
        want = np.asarray(expected, dtype=np.float64)
        try:
            have = np.asarray(got, dtype=np.float64)
        except (TypeError, ValueError):
            return self._record(label, False, f"returned {_show(got)}, not numbers")
        if have.shape != want.shape:
            return self._record(label, False, f"returned shape {have.shape}, expected shape {want.shape}")
        if not np.allclose(have, want, atol=atol, rtol=rtol, equal_nan=True):
            with np.errstate(invalid="ignore"):  # inf - inf where an infinity is misplaced
                worst = np.nanmax(np.abs(np.where(np.isnan(have) | np.isnan(want), np.inf, have - want)))
            return self._record(label, False, f"values are off (largest error {worst:.3g}, allowed {atol:g})")
        return self._record(label, True)

    def equal(self, label: str, call, expected) -> bool:
        """The learner's value equals ``expected`` exactly (lists and tuples alike)."""
        ok, got = self._get(label, call)
        if not ok:
            return False
        if not same(got, expected):
            return self._record(label, False, f"returned {_show(got)}, which is not the right value")
        return self._record(label, True)

    def raises(self, label: str, call, *exceptions: str) -> bool:
        """Calling raises one of ``exceptions`` (by class name, subclasses included)."""
        try:
            got = call()
        except LearnerRaised as exc:
            if any(name in exc.names for name in exceptions):
                return self._record(label, True)
            return self._record(label, False, f"raised {exc.names[0]}, expected {' or '.join(exceptions)}")
        except (LearnerRefused, LearnerUnavailable) as exc:
            return self._record(label, False, str(exc))
        return self._record(label, False, f"returned {_show(got)} instead of raising {' or '.join(exceptions)}")

    def that(self, label: str, call, predicate, failure: str) -> bool:
        """``predicate(value)`` holds; otherwise ``failure`` (which names the rule) is shown."""
        ok, got = self._get(label, call)
        if not ok:
            return False
        try:
            holds = bool(predicate(got))
        except Exception:  # a value of the wrong shape or type breaks the predicate: a wrong answer
            holds = False
        return self._record(label, holds, failure)

    def report(self) -> str:
        lines = [f"{'✓' if r.passed else '✗'} {r.label}" + (f": {r.message}" if r.message else "")
                 for r in self.results]
        return "\n".join(lines)


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
        check._record("the hidden test's calls", False, str(exc))
    except Exception as exc:  # a learner's value the test could not handle; the code stays private
        check._record("the hidden test", False, f"could not finish on your answer ({type(exc).__name__})")
    if not check.results:
        check._record("the hidden test", False, "made no checks (an error in the test itself)")
    return check
