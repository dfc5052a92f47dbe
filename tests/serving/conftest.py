"""Fixtures shared by the serving tests."""
from __future__ import annotations

import contextlib
import socket
import threading
import time

import httpx
import pytest
import torch
import uvicorn

from course_lib.model import load_model, load_tokenizer


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread per test: the engines here are small, and the suite shares 2 cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def model():
    """The shipped tinychat on the CPU (a fresh copy per test module)."""
    return load_model("tinychat", device="cpu")


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tinychat")


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


@pytest.fixture(scope="session")
def serve():
    """``with serve(app) as base_url:`` runs an ASGI app on 127.0.0.1 for the block's duration."""
    return _serve
