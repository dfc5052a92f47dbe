"""What the whole suite shares: the two tiers of tests, the shipped model and tokenizer, and
one copy of the course for the session, each assignment released into it at most once.

Tiers. ``make test`` runs everything; ``make test-fast`` (``pytest -m "not slow"``) leaves out
the tests marked ``slow``: those that start a kernel, a sandbox, a browser, tmux, a server
(a subprocess or uvicorn), or that release or grade a course. A test is marked slow when

- it uses a fixture declared with :func:`slow_fixture` (directly or through other fixtures), or
- it says so itself (``@pytest.mark.slow``, or ``pytestmark = pytest.mark.slow`` per module).

The rule is checked on every run: a test that is not marked slow and still starts one of
those things (a process running ipykernel, bwrap, nbgrader's release or autograde, tmux,
Playwright or Chromium, ``course lab/serve/grade/release``, or a uvicorn server in this
process) fails, saying what it started. Unmarked tests that took long anyway are listed at
the end of the run.
"""
from __future__ import annotations

import os
import shutil
import shlex
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------- the slow tier
SLOW_FIXTURES: set[str] = set()  # filled by @slow_fixture as the conftests and test modules load


def slow_fixture(function=None, **options):
    """``@pytest.fixture`` for a fixture that starts a kernel, a server, a browser or tmux, or
    releases or grades a course: every test that uses it is marked ``slow``."""
    def declare(fn):
        SLOW_FIXTURES.add(options.get("name") or fn.__name__)
        return pytest.fixture(**options)(fn)
    return declare(function) if function is not None else declare


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


# What an unmarked test must not start. Seen by argv, in this process: a kernel or server
# that a child process starts in turn (`course check` runs a kernel) is out of sight, so such
# tests carry the mark by hand; the list of slow unmarked tests at the end catches the rest.
_HEAVY_PROGRAMS = {"tmux", "bwrap", "chromium", "chromium-browser", "chrome", "nbgrader", "jupyter-lab"}
_HEAVY_MODULES = {"ipykernel_launcher", "ipykernel", "jupyterlab", "nbgrader", "course_lib.pipeline.grade_worker"}
_HEAVY_NBGRADER = {"generate_assignment", "autograde", "generate_feedback", "release_assignment", "collect"}
_HEAVY_COURSE = {"lab", "serve", "grade", "release"}
_started: list[str] = []  # what the current test phase started


def heavy_start(argv) -> str:
    """What ``argv`` starts that only a slow test may, or ''.

    >>> heavy_start(["/usr/bin/tmux", "-L", "x", "new-session"]), heavy_start(["python", "-m", "pytest"])
    ('tmux', '')
    >>> heavy_start(["python", "-m", "course_lib.cli", "grade", "00"]), heavy_start(["python", "-m", "course_lib.cli", "check", "x"])
    ('course grade', '')
    >>> heavy_start(["python", "-m", "nbgrader", "export"]), heavy_start(["python", "-m", "nbgrader", "autograde", "A"])
    ('', 'nbgrader autograde')
    """
    if isinstance(argv, (str, bytes)):
        try:
            argv = shlex.split(os.fsdecode(argv))
        except ValueError:
            return ""
    elif isinstance(argv, os.PathLike):
        argv = [argv]
    args = [os.fsdecode(a) for a in argv]
    if not args:
        return ""
    program, rest = Path(args[0]).name, args[1:]
    if program.startswith("python") and "-m" in rest[:-1]:  # python -m MODULE ...
        at = rest.index("-m") + 1
        program, rest = rest[at], rest[at + 1:]
    elif program.startswith("python") and rest and rest[0].endswith(".py"):  # python SCRIPT.py ...
        program, rest = Path(rest[0]).stem, rest[1:]
    if any("playwright" in a and "driver" in a for a in args):
        return "playwright (a browser)"
    command = next((a for a in rest if not a.startswith("-")), "")
    if program == "nbgrader":
        return f"nbgrader {command}" if command in _HEAVY_NBGRADER else ""
    if program in ("course", "course_lib.cli"):
        return f"course {command}" if command in _HEAVY_COURSE else ""
    if program in _HEAVY_PROGRAMS or program in _HEAVY_MODULES:
        return program
    return ""


def _watch_process_starts() -> None:
    original = subprocess.Popen.__init__

    def recording_init(self, *args, **options):
        what = heavy_start(args[0] if args else options.get("args", ()))
        if what:
            _started.append(what)
        original(self, *args, **options)

    subprocess.Popen.__init__ = recording_init
    try:
        import uvicorn
    except ImportError:
        return
    startup = uvicorn.Server.startup

    async def recording_startup(self, *args, **kwargs):
        _started.append("a uvicorn server")
        return await startup(self, *args, **kwargs)

    uvicorn.Server.startup = recording_startup


def pytest_configure(config):
    _watch_process_starts()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    started, _started[:] = list(dict.fromkeys(_started)), []
    if started and report.passed and item.get_closest_marker("slow") is None:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} started {', '.join(started)} ({report.when}) but is not marked slow: "
                           "mark it @pytest.mark.slow, or get that from a fixture declared with "
                           "tests.conftest.slow_fixture")
    return report


_UNMARKED_TOOK: dict[str, float] = {}  # nodeid -> seconds of setup and call, for tests not marked slow
LONG_UNMARKED_S = 10.0


def pytest_runtest_logreport(report):
    """Kept from the reports, not the items: under pytest-xdist (``make test`` runs two workers)
    the tests run in the workers, and only their reports reach the process that prints the summary."""
    if report.when in ("setup", "call") and "slow" not in report.keywords:
        _UNMARKED_TOOK[report.nodeid] = _UNMARKED_TOOK.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The unmarked tests that took long all the same (a module fixture counts in its first test)."""
    long = sorted(((s, nodeid) for nodeid, s in _UNMARKED_TOOK.items() if s > LONG_UNMARKED_S), reverse=True)
    if long:
        terminalreporter.write_sep("-", f"not marked slow, yet over {LONG_UNMARKED_S:g} s (setup + call)")
        for seconds, nodeid in long:
            terminalreporter.write_line(f"{seconds:7.1f} s  {nodeid}")


# ---------------------------------------------------------------------------- torch threads
@pytest.fixture(autouse=True)
def _one_torch_thread():
    """One torch thread in this process for every test. The course's models and tensors are
    small, and the suite shares two cores with the kernels, servers and graders it starts: with
    two threads a decoding test ran 15x slower (58 s, not 3.8 s) while another process had a
    core. Set before each test, as the notebooks' setup cells that tests/hidden runs here set
    their own (``use_reference_threads()`` in 06, 07 and 08: two, or OMP_NUM_THREADS)."""
    import torch

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


# ---------------------------------------------------------------------------- the shipped model
@pytest.fixture(scope="session")
def tinychat_model():
    """The shipped tinychat on the CPU, loaded once. Shared, so read-only: every test that
    uses it is checked afterwards to have left its weights, structure and mode as loaded."""
    from course_lib.model import load_model

    return load_model("tinychat", device="cpu")


@pytest.fixture(scope="session")
def tinychat_tokenizer():
    from course_lib.model import load_tokenizer

    return load_tokenizer("tinychat")


@pytest.fixture(scope="session")
def tinychat(tinychat_model, tinychat_tokenizer):
    """(model, tokenizer): the shipped model on CPU, so greedy outputs match on every machine."""
    return tinychat_model, tinychat_tokenizer


def _model_state(model) -> tuple:
    return (model.training, [(name, type(m).__name__) for name, m in model.named_modules()],
            {k: v.detach().clone() for k, v in model.state_dict().items()})


@pytest.fixture(scope="session")
def _tinychat_as_loaded(tinychat_model):
    return _model_state(tinychat_model)


@pytest.fixture(autouse=True)
def _shared_model_left_unchanged(request):
    if "tinychat_model" not in request.fixturenames:
        yield
        return
    model, loaded = request.getfixturevalue("tinychat_model"), request.getfixturevalue("_tinychat_as_loaded")
    yield
    training, modules, state = _model_state(model)
    assert (training, modules) == loaded[:2], "a test changed the shared tinychat's mode or modules"
    changed = [k for k, v in loaded[2].items() if k not in state or not state[k].equal(v)]
    assert not changed and state.keys() == loaded[2].keys(), f"a test changed the shared tinychat's weights: {changed[:5]}"


# ---------------------------------------------------------------------------- the course
COURSE_FOLDERS = ("authoring", "source", "hidden")


def copy_course(target: Path):
    """A scratch copy of the course (authoring files, sources, hidden tests, nbgrader config),
    nothing released, so a test never touches the repository's folders."""
    from course_lib.pipeline.paths import CoursePaths

    (target / "grading").mkdir(parents=True)
    for name in COURSE_FOLDERS:
        shutil.copytree(REPO / "grading" / name, target / "grading" / name)
    shutil.copy(REPO / "grading" / "nbgrader_config.py", target / "grading")
    return CoursePaths(target)


def release_each(paths, names, workers: int = 2) -> list[tuple[str, bool]]:
    """``release(paths, [name])`` for each name, ``workers`` at a time: each is one nbgrader
    process on one core, so two cores release two at once. The same as ``release(paths, names)``:
    each assignment's release reads and writes only its own files."""
    from concurrent.futures import ThreadPoolExecutor

    from course_lib.pipeline.release import release

    with ThreadPoolExecutor(max(1, workers)) as pool:
        return [pair for pairs in pool.map(lambda name: release(paths, [name]), names) for pair in pairs]


class Releases:
    """One course copy for the session; each assignment is released into it (``course
    release``'s own function) the first time a test needs it. ``copy`` gives a test its own
    course with those assignments released, as ``copy_course`` followed by ``release`` would,
    without running nbgrader again."""

    def __init__(self, root: Path) -> None:
        self.paths = copy_course(root)
        self.done: set[str] = set()

    def released(self, names=None):
        """The session's course with ``names`` (default: every assignment) released."""
        wanted = [n for n in (names or self.paths.assignments()) if n not in self.done]
        release_each(self.paths, wanted)
        self.done.update(wanted)
        return self.paths

    def copy(self, target: Path, names):
        """A course at ``target`` with ``names`` released (grading/release/ and notebooks/)."""
        self.released(names)
        paths = copy_course(target)
        paths.notebooks.mkdir()
        for name in names:  # what release(paths, names) writes: the source it rebuilt, and its two outputs
            shutil.copytree(self.paths.source / name, paths.source / name, dirs_exist_ok=True)
            shutil.copytree(self.paths.release / name, paths.release / name)
            shutil.copy2(self.paths.notebooks / f"{name}.ipynb", paths.notebooks)
        return paths


@slow_fixture(scope="session")
def releases(tmp_path_factory) -> Releases:
    return Releases(tmp_path_factory.mktemp("course"))


@slow_fixture(scope="session")
def released_course(releases):
    """The session's course copy with every assignment released. Read only: a test that changes
    a course takes ``releases.copy(tmp_path, [names])``."""
    return releases.released()


@pytest.fixture
def scratch_course(tmp_path):
    return copy_course(tmp_path)
