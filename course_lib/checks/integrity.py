"""Hidden tests' defences: independent comparison, no reference calls, no patched tools.

Test cells run in the learner's kernel, so a learner could replace ``numpy.allclose`` with
``lambda *a: True``, swap the check helpers for no-ops, or answer with a one-line call to the
course_lib reference. A hidden test cell defends itself like this:

    import sys; sys.modules.pop("course_lib.checks.integrity", None)   # re-read from disk
    from course_lib.checks.integrity import Guard
    guard = Guard()                       # fails if numpy, math, builtins... were replaced
    got = guard.call(softmax, [2.0, 1.0], 0.5)   # fails if course_lib reference code runs
    guard.assert_close("softmax([2, 1], T=0.5)", got, expected_from_pure_python)

Popping the module from ``sys.modules`` means the guard is a fresh copy read from disk, so
patching an earlier copy changes nothing. This stops casual and accidental tampering; it is
no sandbox against a determined attacker, who can still run arbitrary code as the grader's
user (see the README's note for instructors).
"""
from __future__ import annotations

import builtins
import math
import sys
import types
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # .../course_lib
CHECKS_DIR = PACKAGE_DIR / "checks"

_BUILTINS = ("abs", "all", "any", "float", "int", "isinstance", "len", "list", "max", "min",
             "range", "round", "sum", "zip", "sorted", "enumerate", "getattr", "repr", "type",
             "__import__", "print")
_MATH = ("exp", "log", "sqrt", "isnan", "isinf", "isclose", "fsum")
_NUMPY = ("allclose", "isclose", "array_equal", "asarray", "array", "exp", "max", "sum", "argmax")
_TORCH = ("allclose", "equal", "isclose", "tensor", "softmax", "as_tensor")


class TamperingDetected(AssertionError):
    """Something a hidden test relies on was replaced, or the reference answered for you."""


def _module_dir(module: types.ModuleType) -> str:
    return str(Path(module.__file__).resolve().parent)


def _genuine(obj, name: str, home: str | None) -> bool:
    """True when ``obj`` looks like the library's own ``name`` (not a learner's stand-in)."""
    if getattr(obj, "__name__", None) != name:
        return False
    code = getattr(obj, "__code__", None)
    if code is not None:  # a Python function: it must live in the library's own files
        return home is not None and str(Path(code.co_filename).resolve()).startswith(home)
    if isinstance(obj, type):
        return obj.__module__ in ("builtins", "numpy", "torch") or obj.__module__.startswith(("numpy.", "torch."))
    return type(obj).__name__ in ("builtin_function_or_method", "ufunc", "_ArrayFunctionDispatcher", "function")


class Guard:
    """Checks the environment at construction; then guards calls and compares results."""

    def __init__(self, *, allow: tuple[str, ...] = (), trust: tuple[str, ...] = ()) -> None:
        """``allow``: course_lib modules the learner may call (e.g. "course_lib.tokenization.offline").
        ``trust``: dotted names of oracles the hidden test uses, checked like numpy's
        (e.g. "torch.nn.functional.scaled_dot_product_attention", "tiktoken.Encoding.encode").
        """
        self._allowed_dirs = [str(CHECKS_DIR)] + [
            str(PACKAGE_DIR.joinpath(*m.split(".")[1:])) for m in allow
        ]
        self._trusted = trust
        self.check_environment()

    # -- the environment -----------------------------------------------------------------
    def check_environment(self) -> None:
        problems = [f"builtins.{n}" for n in _BUILTINS if not _genuine(getattr(builtins, n), n, None)]
        problems += [f"math.{n}" for n in _MATH if not _genuine(getattr(math, n), n, None)]
        if getattr(sys.setprofile, "__name__", None) != "setprofile" or not isinstance(sys.setprofile, types.BuiltinFunctionType):
            problems.append("sys.setprofile")
        for module_name, names in (("numpy", _NUMPY), ("torch", _TORCH)):
            module = sys.modules.get(module_name)
            if module is None:
                continue
            home = _module_dir(module)
            problems += [f"{module_name}.{n}" for n in names
                         if hasattr(module, n) and not _genuine(getattr(module, n), n, home)]
        problems += [name for name in self._trusted if not self._genuine_dotted(name)]
        report = sys.modules.get("course_lib.checks.report")
        if report is not None:
            for n in ("expect_close", "expect_equal", "expect_raises", "show", "_close"):
                fn = getattr(report, n, None)
                if fn is None or not _genuine(fn, n, str(CHECKS_DIR)):
                    problems.append(f"course_lib.checks.report.{n}")
        if problems:
            raise TamperingDetected(
                "these were replaced in the notebook, so the tests cannot trust them: "
                + ", ".join(problems) + ". Remove the cell that replaces them and restart the kernel."
            )

    @staticmethod
    def _genuine_dotted(dotted: str) -> bool:
        """``package.module.attr[.attr]``: import the longest module prefix, walk the rest."""
        import importlib

        parts = dotted.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            top = sys.modules[parts[0]]
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                return False
            return _genuine(obj, parts[-1], _module_dir(top))
        return False

    # -- guarded calls -------------------------------------------------------------------
    def _is_reference(self, filename: str) -> bool:
        path = str(Path(filename).resolve()) if filename and not filename.startswith("<") else ""
        return path.startswith(str(PACKAGE_DIR)) and not any(path.startswith(d) for d in self._allowed_dirs)

    def call(self, fn, *args, **kwargs):
        """Call the learner's ``fn``; fail if any course_lib reference code runs inside it."""
        hits: list[str] = []

        def profiler(frame, event, arg):
            if event == "call" and not hits and self._is_reference(frame.f_code.co_filename):
                hits.append(f"{frame.f_code.co_name} ({Path(frame.f_code.co_filename).name})")

        previous = sys.getprofile()
        sys.setprofile(profiler)
        try:
            result = fn(*args, **kwargs)
        finally:
            still_ours = sys.getprofile() is profiler
            sys.setprofile(previous)
        if not still_ours:
            raise TamperingDetected("the function switched off the call profiler the tests use")
        if hits:
            raise TamperingDetected(
                f"the answer calls the course_lib reference ({hits[0]}); write it yourself"
            )
        return result

    # -- comparisons in plain Python -----------------------------------------------------
    @staticmethod
    def as_floats(value) -> list[float]:
        if hasattr(value, "tolist"):
            value = value.tolist()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return [float(value)]
        if isinstance(value, (list, tuple)):
            return [x for item in value for x in Guard.as_floats(item)]
        raise TamperingDetected(f"expected numbers, got {type(value).__name__}")

    def assert_close(self, label: str, got, expected, *, tol: float = 1e-6) -> None:
        g, e = self.as_floats(got), self.as_floats(expected)
        if len(g) != len(e):
            raise AssertionError(f"{label}: expected {len(e)} values, got {len(g)}")
        for a, b in zip(g, e):
            if a != a or (b == b and not (a - b <= tol and b - a <= tol) and a != b):
                raise AssertionError(f"{label}: a value differs from the expected result by more than {tol}")
