"""Fixtures of the HTTP application's tests: the shipped model, and a real server on a free port."""
from __future__ import annotations

import contextlib
import socket
import threading
import time

import httpx
import pytest
import uvicorn

from tests.conftest import slow_fixture
from tests.serving.conftest import model, tok  # noqa: F401  (the same fixtures as the engine's tests)


@contextlib.contextmanager
def _serve(app, *, ready_path: str = "/health", timeout_s: float = 30.0):
    """Run ``app`` under uvicorn on 127.0.0.1 and a free port, in a background thread; yield
    its base URL once ``ready_path`` answers 200; at exit stop it and check nothing listens."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))  # bound here, handed to uvicorn: no race for the port
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(base_url + ready_path, timeout=1.0).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the server on port {port} did not become ready within {timeout_s} s")
        time.sleep(0.05)
    try:
        yield base_url
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()
        assert not thread.is_alive(), "the server thread did not stop"
        with pytest.raises(httpx.TransportError):
            httpx.get(base_url + ready_path, timeout=1.0)


@slow_fixture(scope="session")
def serve():
    """``with serve(app) as base_url:`` runs an ASGI app on 127.0.0.1 for the block's duration."""
    return _serve
