"""`course lab` really serves JupyterLab with the course notebooks, offline tokenizers included."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from tests.pipeline.conftest import REPO


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str, patience: float = 60.0):
    """The server prints its URL a moment before it accepts connections: retry briefly."""
    deadline = time.time() + patience
    while True:
        try:
            return json.load(urllib.request.urlopen(url, timeout=30))
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.5)


def test_course_lab_serves_the_notebooks(tmp_path):
    port = _free_port()
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), TIKTOKEN_CACHE_DIR="")
    process = subprocess.Popen([sys.executable, "-m", "course_lib.cli", "lab", "--port", str(port)],
                               cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        url, seen, deadline = None, [], time.time() + 90
        while url is None and time.time() < deadline:
            line = process.stdout.readline()
            seen.append(line)
            match = re.search(rf"http://127\.0\.0\.1:{port}/lab[^\s]*\?token=(\w+)", line)
            if match:
                url = match.group(0)
                token = match.group(1)
        assert url, "JupyterLab printed no URL:\n" + "".join(seen[-20:])
        assert any("/lab/tree/notebooks" in line for line in seen)
        api = f"http://127.0.0.1:{port}/api/contents/notebooks?token={token}"
        listing = _get_json(api)
        names = {item["name"] for item in listing["content"]}
        assert "00_orientation.ipynb" in names
        primed = REPO / ".cache" / "tiktoken"
        assert len(list(primed.iterdir())) >= 2, "the kernels' tiktoken cache was not primed"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
