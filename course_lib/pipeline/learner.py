"""The student's answers, running in their own kernel, callable by name with plain data.

    with LearnerKernel(notebook, course_root=root, limits=Limits()) as learner:
        learner.run_answer_cells()                  # [setup] and [solution] cells, in order
        learner.call("softmax", [2.0, 1.0], 0.5)    # -> a list, array, number... or raises

The kernel runs in the grading sandbox (``limits``; None runs it unsandboxed) and speaks
Jupyter's IPC transport, so kernels started at once never race for TCP ports. A call sends
plain data in and decodes plain data out (plain_data.py); whatever the kernel does, the
caller receives only built-in values and NumPy arrays, or one of the exceptions below.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from course_lib.pipeline.authoring import CHECKS_PREFIX
from course_lib.pipeline.plain_data import NotPlainData, decode, encode
from course_lib.pipeline.remote_call import MIME
from course_lib.pipeline.sandbox import Limits, Sandbox

GRADE_CELL_TIMEOUT = 30      # seconds per cell and per hidden-test call, unless told otherwise
GRADE_NOTEBOOK_TIMEOUT = 900  # seconds for one whole submission
MAX_CELL_OUTPUT = 64 * 1024  # characters of output kept per cell; the rest is dropped
MAX_TIMEOUTS = 2             # calls in a row past the time limit before the kernel counts as hung
KERNEL_NAME = "course-grading"


class LearnerRaised(Exception):
    """The learner's function raised; ``names`` is its exception class and their bases."""

    def __init__(self, names: list[str], message: str) -> None:
        super().__init__(f"{names[0]}: {message}" if message else names[0])
        self.names = names


class LearnerRefused(Exception):
    """No usable answer: the name is undefined, or the result is not plain data."""


class LearnerUnavailable(Exception):
    """The kernel died, hung past an interrupt, or ran out of time; the message says which."""


class CappedClient(NotebookClient):
    """nbclient, keeping at most MAX_CELL_OUTPUT characters of output per cell.

    A cell that prints megabytes would otherwise grow the grader's memory and the feedback.
    """

    def forget_output(self, cell_index: int) -> None:
        """Start counting afresh for a cell index that is being reused."""
        self.__dict__.setdefault("_output_chars", {}).pop(cell_index, None)

    def output(self, outs, msg, display_id, cell_index):
        if MIME in (msg.get("content", {}).get("data") or {}):
            # A call's reply is bounded by parse_reply, not by this cap; keep only the latest.
            outs[:] = [o for o in outs if MIME not in o.get("data", {})]
            return super().output(outs, msg, display_id, cell_index)
        sizes = self.__dict__.setdefault("_output_chars", {})
        used = sizes.get(cell_index, 0)
        if used > MAX_CELL_OUTPUT:
            return None
        sizes[cell_index] = used + len(json.dumps(msg.get("content", {})))
        if sizes[cell_index] > MAX_CELL_OUTPUT:
            note = f"... (output beyond {MAX_CELL_OUTPUT} characters dropped)\n"
            outs.append(nbformat.v4.new_output("stream", name="stderr", text=note))
            return None
        return super().output(outs, msg, display_id, cell_index)


class LearnerFunction:
    """``learner.function(name)``: call it like the learner's own function."""

    def __init__(self, learner, name: str, script: str | None = None) -> None:
        self.learner, self.name, self.script = learner, name, script

    def __call__(self, *args, **kwargs):
        if self.script is None:
            return self.learner.call(self.name, *args, **kwargs)
        return self.learner.call_script(self.script, self.name, *args, **kwargs)


class LearnerAPI:
    """What hidden tests use on either kind of learner."""

    def function(self, name: str) -> LearnerFunction:
        return LearnerFunction(self, name)

    def script(self, source: str, name: str) -> LearnerFunction:
        """A helper defined in the learner's namespace (sees their names), called by name."""
        return LearnerFunction(self, name, source)


def ipc_kernel_manager(prefix: Path, kernel_name: str = "python3", specs: KernelSpecManager | None = None):
    """A kernel manager on Jupyter's IPC transport (Unix sockets named ``prefix``-N).

    Kernels started at once on TCP each pick "free" ports before binding them, and two can
    pick the same one; sockets in a private folder cannot collide.
    """
    extra = {"kernel_spec_manager": specs} if specs is not None else {}
    return AsyncKernelManager(kernel_name=kernel_name, transport="ipc", ip=str(prefix),
                              connection_file=f"{prefix}.json", **extra)


def answer_cells(nb) -> list[int]:
    """Indices of the cells grading runs: nbgrader's locked setup cells and solution cells."""
    picked = []
    for index, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if str(meta.get("grade_id", "")).startswith(CHECKS_PREFIX):
            continue  # the visible checks' imports: not in the grading sandbox, not needed there
        if cell.cell_type == "code" and not meta.get("grade") and (meta.get("solution") or meta.get("locked")):
            picked.append(index)
    return picked


class LearnerKernel(LearnerAPI):
    def __init__(self, nb, *, course_root: Path, submission_dir: Path | None = None,
                 limits: Limits | None = Limits(), cell_timeout: float = GRADE_CELL_TIMEOUT,
                 deadline: float | None = None, overlays: dict[Path, Path] | None = None) -> None:
        self.nb = nb
        self.course_root = Path(course_root)
        self.submission_dir = submission_dir
        self.limits = limits
        self.cell_timeout = cell_timeout
        self.deadline = deadline if deadline is not None else time.monotonic() + 3600
        self.overlays = overlays or {}
        self.dead = ""  # why the kernel can no longer answer
        self.starts = 0

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> "LearnerKernel":
        self.scratch = Path(tempfile.mkdtemp(prefix="course-grade-"))
        if self.submission_dir is not None:
            shutil.copytree(self.submission_dir, self.scratch / "submission", symlinks=True)
        else:
            (self.scratch / "submission").mkdir()
        self._start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _start(self) -> None:
        self.starts += 1
        self.sandbox = Sandbox(self.course_root, self.scratch, self.limits, self.overlays) if self.limits else None
        run_dir = self.scratch / "run"
        run_dir.mkdir(exist_ok=True)
        spec_dir = self.scratch / "kernels" / KERNEL_NAME
        spec_dir.mkdir(parents=True, exist_ok=True)
        argv = self.sandbox.kernel_argv() if self.sandbox else [
            sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
            "--HistoryManager.hist_file=:memory:"]
        # Interrupts travel as messages: a signal to the sandbox's launcher would not reach
        # a kernel in another PID namespace and session.
        (spec_dir / "kernel.json").write_text(json.dumps({
            "argv": argv, "display_name": "course grading", "language": "python",
            "interrupt_mode": "message"}))
        manager = ipc_kernel_manager(run_dir / f"kernel{self.starts}", KERNEL_NAME,
                                     KernelSpecManager(kernel_dirs=[str(spec_dir.parent)]))
        self.client = CappedClient(
            self.nb, km=manager, timeout=self.cell_timeout, allow_errors=True, interrupt_on_timeout=True,
            record_timing=False, iopub_timeout=4, raise_on_iopub_timeout=True, startup_timeout=60,
            error_on_timeout={"ename": "CellTimeoutError", "traceback": [],
                              "evalue": f"the cell ran longer than {self.cell_timeout:g} s and was interrupted"},
            resources={"metadata": {"path": str(self.scratch / "submission")}})
        self.client.reset_execution_trackers()
        try:
            self.client.start_new_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.client.start_new_kernel_client()
        except Exception as exc:
            self._stop()
            raise LearnerUnavailable(f"the kernel did not start ({type(exc).__name__}: {exc})") from None
        self.dead = ""
        self._timeouts = 0

    def _stop(self) -> None:
        client = getattr(self, "client", None)
        if client is not None and client.km is not None:
            try:
                if client.kc is not None:
                    client.kc.stop_channels()
                run_sync(client.km.shutdown_kernel)(now=True)
            except Exception:  # the kernel may be long gone; the sandbox cleanup below still runs
                pass
        if getattr(self, "sandbox", None) is not None:
            self.sandbox.close()
            self.sandbox = None

    def restart(self) -> None:
        """A fresh kernel with the answer cells run again (after a death in a call)."""
        self._stop()
        self._start()
        self.run_answer_cells()

    # -- running cells ---------------------------------------------------------------------
    def _remaining(self) -> float:
        return self.deadline - time.monotonic()

    def _execute(self, cell, index: int) -> None:
        remaining = self._remaining()
        if remaining <= 0:
            raise LearnerUnavailable("grading ran out of its total time")
        self.client.timeout = max(1, int(min(self.cell_timeout, remaining)))
        try:
            self.client.execute_cell(cell, index, store_history=False)
        except DeadKernelError:
            self.dead = "the kernel died (os._exit, a crash, or a limit such as memory or CPU time)"
        except CellTimeoutError:
            self.dead = "a cell hung and the kernel did not respond to an interrupt"
        if self.dead:
            self._stop()
            raise LearnerUnavailable(self.dead)

    def run_answer_cells(self) -> None:
        """Run the setup and solution cells in order; their outputs land in the notebook."""
        for index in answer_cells(self.nb):
            cell = self.nb.cells[index]
            cell.outputs = []
            self._execute(cell, index)

    # -- calls -----------------------------------------------------------------------------
    def call(self, name: str, *args, **kwargs):
        """learner_function(*args, **kwargs) in the kernel; plain data back."""
        return self._request(name, None, args, kwargs)

    def call_script(self, script: str, name: str, *args, **kwargs):
        """Define ``script`` beside the learner's names in the kernel, then call its ``name``."""
        return self._request(name, script, args, kwargs)

    def _request(self, name: str, script: str | None, args, kwargs):
        if self.dead:
            raise LearnerUnavailable(self.dead)
        request = json.dumps({"name": name, "script": script, "args": encode(list(args)),
                              "kwargs": encode(dict(kwargs))})
        code = ("from course_lib.pipeline.remote_call import answer as _course_answer\n"
                f"_course_answer(globals(), {request!r})")
        cell = nbformat.v4.new_code_cell(code)
        # nbclient files each executed cell under its index, so the call borrows one slot.
        self.nb.cells.append(cell)
        self.client.forget_output(len(self.nb.cells) - 1)
        started = time.monotonic()
        try:
            self._execute(cell, len(self.nb.cells) - 1)
        finally:
            self.nb.cells.pop()
        # An interrupted call may still answer (with KeyboardInterrupt): the clock decides.
        if time.monotonic() - started >= self.client.timeout:
            self._timeouts += 1
            if self._timeouts >= MAX_TIMEOUTS:  # the rest of this exercise fails fast
                self.dead = f"{MAX_TIMEOUTS} calls in a row ran past {self.client.timeout} s"
            raise LearnerRaised(["TimeoutError"], f"took longer than {self.client.timeout} s and was interrupted")
        self._timeouts = 0
        replies = [o for o in cell.outputs if o.get("output_type") == "display_data" and MIME in o.get("data", {})]
        if not replies:
            raise LearnerRefused("no answer came back from the kernel")
        return parse_reply(replies[-1]["data"][MIME])


def parse_reply(text) -> object:
    """The kernel's reply -> the value, or LearnerRaised / LearnerRefused. Trusts nothing."""
    try:
        if type(text) is not str or len(text) > 96 * 2**20:
            raise ValueError("oversized reply")
        reply = json.loads(text)
        if type(reply) is not dict or len(reply) not in (1, 2):
            raise ValueError("malformed reply")
        if "ok" in reply and len(reply) == 1:
            return decode(reply["ok"])
        if "refused" in reply and len(reply) == 1 and type(reply["refused"]) is str:
            raise LearnerRefused(reply["refused"][:500])
        names, message = reply.get("raised"), reply.get("message")
        if type(names) is list and names and all(type(n) is str for n in names) and type(message) is str:
            raise LearnerRaised([n[:100] for n in names[:20]], message[:500])
        raise ValueError("malformed reply")
    except (ValueError, NotPlainData, RecursionError) as exc:
        raise LearnerRefused(f"the kernel's answer was not plain data ({exc})") from None
