"""``course serve`` in a child process, for a notebook or a script that wants the real thing.

    with child_server("--max-num-seqs", "8") as base_url:   # e.g. "http://127.0.0.1:53117"
        ...  # talk to base_url + "/v1" with any OpenAI client

The server gets a free port on 127.0.0.1, is waited for until ``/health`` answers, and is always
stopped when the block ends, even when it raised. A server that exits or does not answer within
``timeout_s`` raises ``RuntimeError`` with the end of its error output.
"""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

__all__ = ["child_server", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def child_server(*args: str, timeout_s: float = 60.0) -> Iterator[str]:
    """Run ``course serve --port P *args``; yield its base URL; stop it at the end."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "course_lib.cli", "serve", "--port", str(port), *args],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(base_url + "/health", timeout=1, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError(f"course serve did not start: {server.stderr.read().decode()[-500:]}")
            time.sleep(0.1)
        yield base_url
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
