"""Per-sandbox cgroups: a process count and a CPU share that one student cannot exceed.

RLIMIT_NPROC counts every process of a user (and the kernel ignores it for root), and a
fork bomb of busy processes would starve the honest students graded beside it. Where this
process may write a cgroup hierarchy (cgroup v1's pids and cpu controllers, or v2 with them
enabled), each sandbox gets its own group: ``pids.max`` bounds its tasks and a CFS quota
gives it at most ``cpus`` cores. Where none is writable, the limits are reported as not
enforced and the rlimits in limits.py are all there is.

    groups = SandboxCgroups("course-grade-123-0", processes=64, cpus=1.0)
    groups.paths       # folders whose cgroup.procs the sandbox's launcher joins
    groups.close()     # kill what is left inside, remove the folders
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


def _writable(folder: Path) -> bool:
    return (folder / "cgroup.procs").exists() and os.access(folder, os.W_OK)


def _v2_controllers() -> set[str]:
    try:
        return set((ROOT / "cgroup.subtree_control").read_text().split()) if _writable(ROOT) else set()
    except OSError:
        return set()


def available() -> set[str]:
    """Which of "processes" and "cpu" this process can enforce per sandbox."""
    found = set()
    v2 = _v2_controllers()
    if _writable(ROOT / "pids") or "pids" in v2:
        found.add("processes")
    if _writable(ROOT / "cpu") or "cpu" in v2:
        found.add("cpu")
    return found


class SandboxCgroups:
    def __init__(self, name: str, *, processes: int, cpus: float) -> None:
        self.paths: list[Path] = []
        self.enforced: set[str] = set()
        quota = f"{int(cpus * PERIOD_US)} {PERIOD_US}"
        v2 = _v2_controllers()
        if v2 & {"pids", "cpu"}:
            group = self._make(ROOT / name)
            if group and "pids" in v2 and self._set(group / "pids.max", str(processes)):
                self.enforced.add("processes")
            if group and "cpu" in v2 and self._set(group / "cpu.max", quota):
                self.enforced.add("cpu")
            return
        if _writable(ROOT / "pids"):
            group = self._make(ROOT / "pids" / name)
            if group and self._set(group / "pids.max", str(processes)):
                self.enforced.add("processes")
        if _writable(ROOT / "cpu"):
            group = self._make(ROOT / "cpu" / name)
            if group and self._set(group / "cpu.cfs_period_us", str(PERIOD_US)) \
                    and self._set(group / "cpu.cfs_quota_us", str(int(cpus * PERIOD_US))):
                self.enforced.add("cpu")

    def _make(self, path: Path) -> Path | None:
        try:
            path.mkdir()
        except OSError:
            return None
        self.paths.append(path)
        return path

    @staticmethod
    def _set(path: Path, value: str) -> bool:
        try:
            path.write_text(value)
            return True
        except OSError:
            return False

    def close(self) -> None:
        """SIGKILL every task still inside, then remove the groups (they must be empty)."""
        for path in self.paths:
            for _ in range(100):
                try:
                    pids = (path / "cgroup.procs").read_text().split()
                except OSError:
                    break
                for pid in pids:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                try:
                    path.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)
        self.paths = []
