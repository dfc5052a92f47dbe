"""Apply resource limits to this process, then exec the given command (the sandbox).

    python -m course_lib.pipeline.limits --memory-mb 2048 --cpu-seconds 600 \
        --processes 64 --cgroup /sys/fs/cgroup/pids/course-1 -- bwrap ...

Limits set before ``exec`` hold for the sandbox and everything it starts: address space
(a runaway allocation gets MemoryError instead of taking the machine), CPU seconds, the
largest file it may write, and the number of processes: through the sandbox's cgroups when
they were made (cgroups.py; they count only this sandbox), else RLIMIT_NPROC (which the
kernel ignores for root).
Kept free of heavy imports: it runs once per graded notebook.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys

MB = 2**20


def apply(memory_mb: int, cpu_seconds: int, processes: int, file_mb: int, groups: list[str]) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * MB, memory_mb * MB))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb * MB, file_mb * MB))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for group in groups:
        with open(os.path.join(group, "cgroup.procs"), "w") as handle:
            handle.write(str(os.getpid()))
    if not groups and os.geteuid() != 0:
        # RLIMIT_NPROC counts every task of this user, the sandbox's and all others, so the
        # allowance is added to what the user runs already.
        allowance = _tasks_of(os.getuid()) + processes
        resource.setrlimit(resource.RLIMIT_NPROC, (allowance, allowance))


def _tasks_of(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                count += len(os.listdir(f"/proc/{entry}/task"))
        except OSError:  # the process ended while we looked
            continue
    return count


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course_lib.pipeline.limits")
    parser.add_argument("--memory-mb", type=int, required=True)
    parser.add_argument("--cpu-seconds", type=int, required=True)
    parser.add_argument("--processes", type=int, required=True)
    parser.add_argument("--file-mb", type=int, default=256)
    parser.add_argument("--cgroup", action="append", default=[], help="a cgroup folder to join")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run after --")
    apply(args.memory_mb, args.cpu_seconds, args.processes, args.file_mb, args.cgroup)
    os.execv(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
