"""`course lab` really serves JupyterLab with the course notebooks, offline tokenizers included;
a learner's lab hides nbgrader and an instructor's shows it (tests/browser checks both on screen)."""
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

import pytest

from course_lib.lab import NBGRADER_LABEXTENSION, NBGRADER_SERVER_EXTENSIONS, lab_command, write_app_settings
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


@pytest.mark.slow  # it starts `course lab`
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


def test_learner_and_instructor_labs_differ_only_in_nbgrader(tmp_path):
    learner = lab_command(tmp_path, "127.0.0.1", 8888, tmp_path / "settings", instructor=False)
    instructor = lab_command(tmp_path, "127.0.0.1", 8888, tmp_path / "settings", instructor=True)
    disabled = [f"--ServerApp.jpserver_extensions={name}=False" for name in NBGRADER_SERVER_EXTENSIONS]
    assert [arg for arg in learner if arg not in instructor] == disabled
    assert [arg for arg in instructor if arg not in learner] == []

    write_app_settings(tmp_path / "learner", instructor=False)
    write_app_settings(tmp_path / "instructor", instructor=True)
    for mode, hidden in (("learner", [NBGRADER_LABEXTENSION]), ("instructor", [])):
        page_config = json.loads((tmp_path / mode / "page_config.json").read_text())
        assert page_config == {"disabledExtensions": hidden}
        overrides = json.loads((tmp_path / mode / "overrides.json").read_text())
        assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"


def test_the_hidden_extensions_are_the_ones_nbgrader_installs():
    from jupyter_core.paths import jupyter_config_path, jupyter_path
    from jupyter_server.extension.config import ExtensionConfigManager
    from jupyterlab_server.config import get_federated_extensions

    enabled = ExtensionConfigManager(read_config_path=jupyter_config_path()).get_jpserver_extensions()
    assert sorted(name for name in enabled if name.startswith("nbgrader.")) == sorted(NBGRADER_SERVER_EXTENSIONS)
    assert NBGRADER_LABEXTENSION in get_federated_extensions(jupyter_path("labextensions"))

