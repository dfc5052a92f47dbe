"""Run nbgrader's command line inside the course's grading folder."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


class NbgraderFailed(RuntimeError):
    """nbgrader exited non-zero; the message carries the tail of its log."""


def nbgrader_env() -> dict[str, str]:
    env = dict(os.environ)
    # nbgrader runs `alembic` as a subprocess, so the environment's bin/ must be on PATH.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    # Submissions are graded in parallel; torch's default of one thread per core in every
    # kernel oversubscribes the CPU (a 6 s notebook took 70 s with two at once). The course's
    # tensors are small, so one thread each is also the faster choice.
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_nbgrader(grading_dir: Path, *args: str, timeout: float | None = None,
                 check: bool = True) -> subprocess.CompletedProcess:
    """``nbgrader ARGS`` with cwd = the course root; raise NbgraderFailed on failure if check."""
    command = [sys.executable, "-m", "nbgrader", *args]
    # A new session, so that on timeout the whole group (nbgrader and its kernel) is killed.
    process = subprocess.Popen(command, cwd=grading_dir, env=nbgrader_env(), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    result = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    if check and result.returncode != 0:
        raise NbgraderFailed(f"nbgrader {' '.join(args)} failed:\n{log_tail(result)}")
    return result


def log_tail(result: subprocess.CompletedProcess, lines: int = 15) -> str:
    text = (result.stdout or "") + (result.stderr or "")
    return "\n".join(text.strip().splitlines()[-lines:])
