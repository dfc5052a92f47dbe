"""The sandbox around a student kernel: what is inside, what is not, and when it cannot start."""
from __future__ import annotations

import nbformat
import pytest

from course_lib.pipeline import sandbox
from course_lib.pipeline.learner import LearnerKernel
from course_lib.pipeline.sandbox import Limits, SandboxUnavailable, check_available
from tests.conftest import slow_fixture
from tests.pipeline.conftest import REPO

PROBE = '''
def probe():
    import os, socket
    seen = {"course": os.path.exists(COURSE), "home": os.listdir(os.path.expanduser("~")),
            "cwd": os.getcwd(), "package": os.path.exists(PACKAGE)}
    for name, action in {"system": lambda: open("/usr/lib/x", "w"), "course": lambda: open(COURSE + "/x", "w"),
                         "network": lambda: socket.create_connection(("127.0.0.1", 9), timeout=1),
                         "memory": lambda: bytearray(3 * 2**30)}.items():
        try:
            action()
            seen[name + "_error"] = ""
        except (OSError, MemoryError) as exc:
            seen[name + "_error"] = type(exc).__name__
    open("/tmp/scratch", "w").write("the private /tmp is writable")
    seen["pid"] = os.getpid()
    return seen
'''


@slow_fixture(scope="module")
def inside():
    check_available()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    with LearnerKernel(nb, course_root=REPO, limits=Limits(memory_mb=2048)) as learner:
        learner.run_answer_cells()
        script = PROBE.replace("COURSE", repr(str(REPO / "grading"))).replace("PACKAGE", repr(str(REPO / "course_lib")))
        return learner.call_script(script, "probe")


def test_the_course_folder_is_gone_but_the_package_is_there(inside):
    assert inside["course"] is False and inside["package"] is True
    assert inside["cwd"] == sandbox.WORK and inside["home"] == []


@pytest.mark.parametrize("what, error", [
    ("system", "OSError"),                   # EROFS: the system is mounted read-only
    ("course", "FileNotFoundError"),         # the course folder is not there at all
    ("network", "ConnectionRefusedError"),   # its own network namespace: nobody listens
    ("memory", "MemoryError"),               # 3 GiB is over the 2 GiB address-space limit
])
def test_writes_the_network_and_big_allocations_fail(inside, what, error):
    assert inside[f"{what}_error"] == error


def test_the_kernel_has_its_own_process_namespace(inside):
    assert inside["pid"] < 10


def test_a_machine_without_bubblewrap_gets_a_reason_and_the_way_out(monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_binary", lambda: "/bin/false")
    with pytest.raises(SandboxUnavailable, match="--no-sandbox"):
        check_available()


def test_a_venv_under_tmp_is_bound_back_into_the_private_tmp(tmp_path, monkeypatch):
    """CI may clone the course under /tmp: the sandbox's own /tmp must not hide Python."""
    venv = "/tmp/some-checkout/.venv"
    monkeypatch.setattr(sandbox.sys, "prefix", venv)
    box = sandbox.Sandbox(tmp_path, tmp_path / "scratch", Limits())
    try:
        args = box.bwrap_args()
    finally:
        box.close()
    binds = [args[i + 1] for i, arg in enumerate(args) if arg == "--ro-bind"]
    assert venv in binds
    assert args.index("--ro-bind", args.index("/tmp")) > args.index("/tmp")  # bound after the tmpfs
