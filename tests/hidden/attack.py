"""A generated attack on the grading contract: answers that only delegate to code in reach.

For every exercise, every name its solution cell defines (a function or a class) is answered
by each candidate callable in turn: every top-level function and class of every module of
``course_lib`` (checks included, public or private) and of every oracle the tests compare
against, whose name or signature fits the answer's:

    >>> fits_by_name("schedule_step", "reference_schedule"), fits_by_name("block_pool", "BlockPool")
    (True, True)
    >>> fits_by_name("stop_at", "apply_top_k")
    False

A candidate *answers* when the hidden test, run in-process on it (``LocalLearner``, the other
names of the exercise left as stubs that raise), passes a check that those stubs alone fail.
Each such candidate must be switched off inside the sandbox: its module withheld
(``course_lib.pipeline.withheld``) or its name stubbed (the notebook's ``REFERENCES``).
``tests/hidden/test_no_importable_answer.py`` asserts that, and ``tests/pipeline/test_grade.py``
grades a delegating submission per notebook with ``course grade`` to show it scores 0 in the real sandbox.
"""
from __future__ import annotations

import ast
import functools
import importlib
import inspect
import logging
import pkgutil
import re
import signal
import sysconfig
from dataclasses import dataclass

import course_lib
from course_lib.pipeline.authoring import parse
from course_lib.pipeline.hidden import Checks, LocalLearner, hidden_test, partial_score, run_hidden_test
from course_lib.pipeline.withheld import VISIBLE_CHECKS, withheld_modules
from tests.hidden.conftest import AUTHORING, answers, hidden_module

# Words that say nothing about what a function does, so sharing one is no fit.
GENERIC = {"get", "set", "apply", "make", "run", "the", "of", "to", "from", "with", "by", "for",
           "is", "and", "reference", "ref", "my", "do", "compute", "build", "new", "all", "one", "an",
           "as", "at", "in", "on", "or", "per", "main", "test", "check", "checks", "show", "print",
           "until", "value", "values"}
TRIAL_SECONDS = 10  # one candidate's run of a hidden test; a slow wrong call is cut off
# Oracles the tests compare against that setup cells need too, so they cannot be withheld as
# packages; their fitting functions are tried like the package's own.
RUNTIME_ORACLES = ("torch.nn.functional", "jsonschema", "tiktoken")
# Withheld too, but test runners rather than oracles: calling their functions (pytest.set_trace)
# would drive the runner this attack itself runs under.
NOT_TRIED = ("pytest", "_pytest", "py", "_hypothesis_pytestplugin", "playwright")


@dataclass(frozen=True)
class Candidate:
    dotted: str       # "course_lib.serving.scheduler.Scheduler"
    kind: str         # "function" or "class"
    obj: object

    @property
    def module(self) -> str:
        return self.dotted.rpartition(".")[0]


def words(name: str) -> set[str]:
    """'BlockPool' -> {'block', 'pool'}; 'top_k_filter' -> {'top', 'k', 'filter'} less GENERIC."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name.strip("_"))
    return {w.lower() for w in re.split(r"[_\W]+", spaced) if w} - GENERIC


def fits_by_name(answer: str, candidate: str) -> bool:
    shared = words(answer) & words(candidate)
    return any(len(w) > 1 for w in shared) or (bool(shared) and shared == words(answer))


def _parameters(obj):
    try:
        return [p for p in inspect.signature(obj).parameters.values() if p.name != "self"]
    except (TypeError, ValueError):  # no signature to read (some builtins): treat as (*args)
        return None


def takes(params: list[str], obj) -> bool:
    """The candidate can be called with the answer's positional arguments."""
    taken = _parameters(obj)
    if taken is None:
        return True
    positional = [p for p in taken if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    star = any(p.kind == p.VAR_POSITIONAL for p in taken)
    return len(required) <= len(params) and (star or len(params) <= len(positional))


def fits_by_signature(params: list[str], obj) -> bool:
    """The candidate takes the answer's positional arguments and shares half their names."""
    taken = _parameters(obj) or []
    names = {p.name for p in taken}
    return bool(params) and takes(params, obj) and len(set(params) & names) * 2 >= len(params)


@dataclass(frozen=True)
class Answer:
    name: str           # a name the solution cell defines
    kind: str           # "function" or "class"
    params: tuple       # a function's positional parameter names
    header: str = ""    # a function's `def` line, for an answer that forwards by name
    named: tuple = ()   # every parameter name of a function, keyword-only ones included


def solution_answers(notebook: str, exercise: str) -> list[Answer]:
    """The callables an exercise's solution cell defines (data answers have no delegate)."""
    path = AUTHORING / f"{notebook}.py"
    (cell,) = [c for c in parse(path.read_text(encoding="utf-8"), origin=str(path))
               if c.kind == "solution" and c.name == exercise]
    found = []
    for node in ast.parse(cell.body).body:
        if isinstance(node, ast.FunctionDef):
            header = f"def {node.name}({ast.unparse(node.args)}):"
            every = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            found.append(Answer(node.name, "function", tuple(a.arg for a in node.args.posonlyargs + node.args.args),
                                header, tuple(a.arg for a in every)))
        elif isinstance(node, ast.ClassDef):
            found.append(Answer(node.name, "class", ()))
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            found.append(Answer(node.targets[0].id, "data", ()))  # nothing to delegate to
    return found


def _module_callables(module) -> list[Candidate]:
    found = []
    for name, obj in vars(module).items():
        kind = "class" if inspect.isclass(obj) else "function" if inspect.isfunction(obj) or inspect.isbuiltin(obj) else ""
        if kind and getattr(obj, "__module__", None) == module.__name__:
            found.append(Candidate(f"{module.__name__}.{name}", kind, obj))
    return found


@functools.lru_cache(maxsize=1)
def package_candidates() -> tuple[Candidate, ...]:
    """Every top-level function and class of every course_lib module, public or private."""
    found = []
    for info in pkgutil.walk_packages(course_lib.__path__, "course_lib."):
        try:
            module = importlib.import_module(info.name)
        except Exception:  # a module that cannot import here cannot answer in the sandbox either
            continue
        found.extend(_module_callables(module))
    return tuple(found)


@functools.lru_cache(maxsize=1)
def oracle_modules() -> tuple:
    modules = []
    for name in [*[m for m in withheld_modules() if m not in (VISIBLE_CHECKS, *NOT_TRIED)], *RUNTIME_ORACLES]:
        try:
            modules.append(importlib.import_module(name))
        except Exception:
            continue
    return tuple(modules)


def oracle_candidates(answer: Answer) -> list[Candidate]:
    """The oracles' top-level callables whose names fit (their modules are too big to try whole)."""
    found = []
    for module in oracle_modules():
        for name in dir(module):
            if name.startswith("__") or not fits_by_name(answer.name, name):
                continue
            try:
                obj = getattr(module, name)
            except Exception:  # a lazy attribute whose import fails here
                continue
            kind = "class" if inspect.isclass(obj) else "function" if callable(obj) else ""
            if kind:
                found.append(Candidate(f"{module.__name__}.{name}", kind, obj))
    return found


def candidates(answer: Answer) -> list[Candidate]:
    """What an answer that delegates might delegate to: same kind, and its name or signature fits."""
    if answer.kind == "data":
        return []
    fitting = [c for c in package_candidates()
               if fits_by_name(answer.name, c.dotted.rpartition(".")[2])
               or (answer.kind == "function" and fits_by_signature(list(answer.params), c.obj))]
    fitting += oracle_candidates(answer)
    fitting += [c for c in package_candidates() if forwards_by_name(answer, c)]
    if answer.kind == "class":
        fitting = [c for c in fitting if c.kind == "class"]
    else:  # a delegate stands a chance only when it takes the answer's arguments
        fitting = [c for c in fitting if takes(list(answer.params), c.obj) or forwards_by_name(answer, c)]
    return list({c.dotted: c for c in fitting}.values())


def forwards_by_name(answer: Answer, candidate: Candidate) -> bool:
    """The candidate takes every one of the answer's parameters by name (in any order)."""
    taken = _parameters(candidate.obj)
    return answer.kind == "function" and taken is not None and bool(answer.named) and \
        set(answer.named) <= {p.name for p in taken if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def forwarding_source(answer: Answer, target: str) -> str:
    """An answer with the exercise's own signature that hands every argument on by name."""
    arguments = ", ".join(f"{n}={n}" for n in answer.named)
    return f"{answer.header}\n    return {target}({arguments})\n"


def stand_in(answer: Answer):
    """A do-nothing answer: what the exercise's other names are while one is attacked."""
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"{answer.name} is not under attack")

    if answer.kind == "data":
        return None
    if answer.kind == "class":
        return type(answer.name, (), {"__init__": refuse})
    refuse.__name__ = answer.name
    return refuse


class TrialTimeout(Exception):
    pass


# The standard library's own code, where a timeout is deferred (see run_with_deadline).
_STDLIB = sysconfig.get_paths()["stdlib"]
DEFER_SECONDS = 0.01   # how long a deferred timeout waits before it tries again
MAX_DEFERRAL = 1.0     # after this much deferring it lands wherever the trial is


def in_stdlib(frame) -> bool:
    """The frame runs the standard library's Python code (not a site package's)."""
    filename = frame.f_code.co_filename
    return filename.startswith("<frozen") or (filename.startswith(_STDLIB) and "site-packages" not in filename)


def holds_logging_lock() -> bool:
    """This thread holds the logging module's lock (RLock's private ``_is_owned``; False where
    a Python lacks it, which leaves only the deferral cap)."""
    is_owned = getattr(getattr(logging, "_lock", None), "_is_owned", None)
    return bool(is_owned and is_owned())


def run_with_deadline(fn, seconds: float):
    """``fn()``, or TrialTimeout once it has run ``seconds``.

    The timeout is an exception raised by a SIGALRM handler, so it lands between any two
    bytecodes of whatever the trial is running. Landing inside the standard library can leave
    a lock held for good: ``logging.getLogger`` acquires the logging module's lock one line
    before its ``try``, and a timeout in that gap never releases it, so every later thread that
    logs (the graded attack's gradings run in threads) waits forever. So while the trial is in
    the standard library's code the timeout is deferred, a few milliseconds at a time, for up
    to MAX_DEFERRAL seconds (a trial blocked inside it for good is still cut off). That cap alone
    is a gamble for a trial that logs in a loop (it can run out inside the gap), so while this
    thread holds the logging lock the timeout always waits."""
    deferred = 0.0

    def alarm(signum, frame):
        nonlocal deferred
        if frame is not None and in_stdlib(frame) and (deferred < MAX_DEFERRAL or holds_logging_lock()):
            deferred += DEFER_SECONDS
            signal.setitimer(signal.ITIMER_REAL, DEFER_SECONDS)
            return
        raise TrialTimeout()

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def hidden_verdict(notebook: str, exercise: str, replacements: dict) -> Checks:
    """The exercise's hidden test run on the reference namespace with ``replacements``."""
    learner = LocalLearner({**answers(notebook), **replacements})
    test = hidden_test(hidden_module(notebook), exercise)
    try:
        return run_with_deadline(lambda: run_hidden_test(test, learner), TRIAL_SECONDS)
    except TrialTimeout:
        return Checks(finished=False)


@dataclass(frozen=True)
class Trial:
    exercise: str
    answer: Answer
    candidate: Candidate
    by_name: bool       # True: it forwards each argument by name; False: it is the candidate
    score: float        # its share of the exercise's points under partial credit
    passed: tuple       # labels of the checks it passed

    @property
    def answers(self) -> bool:
        return self.score > 0


def baseline(notebook: str, exercise: str) -> Checks:
    """Every name of the exercise a stand-in that raises: what a delegation adds to."""
    return hidden_verdict(notebook, exercise, {a.name: stand_in(a) for a in solution_answers(notebook, exercise)})


def attack(notebook: str, exercise: str) -> list[Trial]:
    """Every fitting candidate for every name of the exercise, run on its hidden test."""
    answers_ = solution_answers(notebook, exercise)
    stand_ins = {a.name: stand_in(a) for a in answers_}
    trials = []
    for answer in answers_:
        for candidate in candidates(answer):
            forms = [(False, candidate.obj)]
            if forwards_by_name(answer, candidate):
                scope = {"_target": candidate.obj}
                exec(forwarding_source(answer, "_target"), scope)
                forms.append((True, scope[answer.name]))
            for by_name, delegate in forms:
                result = hidden_verdict(notebook, exercise, {**stand_ins, answer.name: delegate})
                trials.append(Trial(exercise, answer, candidate, by_name, partial_score(result, 1.0),
                                    tuple(r.label for r in result.results if r.passed)))
    return trials


def switched_off(notebook: str, candidate: Candidate) -> bool:
    """Inside this notebook's grading sandbox, the candidate cannot run: withheld or stubbed."""
    references = set(getattr(hidden_module(notebook), "REFERENCES", ()))
    withheld = any(candidate.dotted == m or candidate.dotted.startswith(m + ".") for m in withheld_modules())
    return withheld or candidate.dotted in references


@functools.lru_cache(maxsize=None)
def answering_trials(notebook: str) -> tuple[Trial, ...]:
    """The trials of every exercise of the notebook whose candidate passes a check (cached:
    the in-process proof and the graded attack share one run)."""
    from tests.hidden.conftest import notebook_exercises

    return tuple(t for exercise in notebook_exercises(notebook) for t in attack(notebook, exercise) if t.answers)


def delegating_submission(notebook: str) -> dict[str, str]:
    """Answer-cell code by exercise for the graded attack: every exercise that has an answering
    candidate delegates to its first one. One submission per notebook is graded in the real
    sandbox (each costs a whole notebook's run); that every other answering candidate is
    switched off there too is the in-process proof of test_no_importable_answer.py, which
    reads the same withheld modules and ``REFERENCES`` the sandbox applies."""
    first: dict[str, Trial] = {}
    for trial in answering_trials(notebook):
        first.setdefault(trial.exercise, trial)
    return {exercise: delegation(trial) for exercise, trial in first.items()}


def delegation(trial: Trial) -> str:
    """The answer cell of a student who only imports the candidate under the answer's name."""
    module, _, name = trial.candidate.dotted.rpartition(".")
    if trial.by_name:
        return f"from {module} import {name} as _target\n\n\n" + forwarding_source(trial.answer, "_target")
    return f"from {module} import {name} as {trial.answer.name}\n"


# Values that claim to equal anything: they must not cross the plain-data boundary as such.
ANYTHING = '''class _Anything(float):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __abs__(self): return _Anything(0.0)
    def __sub__(self, other): return _Anything(0.0)
    __rsub__ = __sub__
    __hash__ = float.__hash__


class _AnythingAtAll:
    def __init__(self, *args, **kwargs): pass
    def __getattr__(self, name): return lambda *args, **kwargs: _Anything(0.0)
'''


def equal_to_anything(notebook: str) -> dict[str, str]:
    """Answer-cell code by exercise: every function returns a value equal to anything, every
    class is one whose methods all do (the same hostile kind on every notebook)."""
    from tests.hidden.conftest import notebook_exercises

    code = {}
    for exercise in notebook_exercises(notebook):
        parts = [ANYTHING]
        for answer in solution_answers(notebook, exercise):
            if answer.kind == "function":
                parts.append(f"def {answer.name}(*args, **kwargs):\n    return _Anything(0.0)\n")
            elif answer.kind == "class":
                parts.append(f"{answer.name} = _AnythingAtAll\n")
            else:
                parts.append(f"{answer.name} = _Anything(0.0)\n")
        code[exercise] = "\n".join(parts)
    return code
