"""Fixtures for the browser tests: the system Chromium, a running `course lab`, screenshots.

The tests skip, with one line saying what to install, where Playwright or Chromium is
missing; Playwright's own browser download is never used (it needs the network).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import slow_fixture

REPO = Path(__file__).resolve().parents[2]
SERVER_START_SECONDS = 90  # a cold start on a busy 2-core machine takes tens of seconds


def system_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass(frozen=True)
class RunningLab:
    """A `course lab` server started by a test, and how to reach it."""

    base_url: str  # http://127.0.0.1:PORT
    token: str

    def url(self, path: str, reset_workspace: bool = False) -> str:
        """``path`` under the server, logged in; a reset workspace opens only what the URL names."""
        query = ("reset&" if reset_workspace else "") + f"token={self.token}"
        return f"{self.base_url}/{path.lstrip('/')}?{query}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _isolated_jupyter_env(home: Path) -> dict[str, str]:
    """Per-server runtime, config, settings and workspace folders, so nothing of the user's
    (an open tab, a saved setting) leaks in, and nothing of the test leaks out."""
    folders = {name: home / name.lower() for name in
               ("JUPYTER_RUNTIME_DIR", "JUPYTER_CONFIG_DIR", "JUPYTERLAB_SETTINGS_DIR", "JUPYTERLAB_WORKSPACES_DIR")}
    # Autosave off: the lab must never write executed outputs into the committed notebooks/.
    docmanager = folders["JUPYTERLAB_SETTINGS_DIR"] / "@jupyterlab" / "docmanager-extension"
    docmanager.mkdir(parents=True)
    (docmanager / "plugin.jupyterlab-settings").write_text(json.dumps({"autosave": False}))
    # Opening a notebook makes a checkpoint copy; keep it here rather than in notebooks/.
    folders["JUPYTER_CONFIG_DIR"].mkdir(parents=True)
    (folders["JUPYTER_CONFIG_DIR"] / "jupyter_server_config.json").write_text(
        json.dumps({"FileCheckpoints": {"checkpoint_dir": str(home / "checkpoints")}}))
    return dict(os.environ, **{name: str(path) for name, path in folders.items()})


def _wait_for_login_url(process: subprocess.Popen, log: Path, port: int) -> str:
    """The token from the URL the server prints once it listens."""
    pattern = re.compile(rf"http://127\.0\.0\.1:{port}/lab[^\s]*\?token=(\w+)")
    deadline = time.monotonic() + SERVER_START_SECONDS
    while time.monotonic() < deadline:
        match = pattern.search(log.read_text(errors="replace"))
        if match:
            return match.group(1)
        if process.poll() is not None:
            break
        time.sleep(0.2)
    tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-25:])
    raise AssertionError(f"`course lab` printed no login URL (exit status {process.poll()}); see {log}:\n{tail}")


def _wait_until_serving(lab: RunningLab) -> None:
    """The URL is printed a moment before the server accepts requests: retry briefly."""
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{lab.base_url}/api/status?token={lab.token}", timeout=10).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM lets the server shut its kernels down (they run in sessions of their own);
    SIGKILL follows if it hangs."""
    for sig, patience in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=patience)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    """Where screenshots and server logs go: $COURSE_ARTIFACTS/browser, else a pytest tmp folder."""
    configured = os.environ.get("COURSE_ARTIFACTS")
    folder = Path(configured) / "browser" if configured else tmp_path_factory.mktemp("browser-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"browser test artefacts: {folder}")
    return folder


@slow_fixture(scope="module")
def browser():
    playwright_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
    chromium = system_chromium()
    if chromium is None:
        pytest.skip("Chromium is not installed (apt-get install chromium); browser tests skipped")
    with playwright_api.sync_playwright() as playwright:
        # --no-sandbox: CI containers run as root, where Chromium's sandbox refuses to start;
        # --disable-dev-shm-usage: containers often have a 64 MB /dev/shm, too small for tabs.
        launched = playwright.chromium.launch(executable_path=chromium,
                                              args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield launched
        finally:
            launched.close()


@dataclass(frozen=True)
class _Launched:
    process: subprocess.Popen
    port: int
    log: Path


def _launch(mode: str, home: Path, log: Path) -> _Launched:
    port = _free_port()
    command = [sys.executable, "-m", "course_lib.cli", "lab", "--port", str(port)]
    command += ["--instructor"] if mode == "instructor" else []
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=REPO, env=_isolated_jupyter_env(home), stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    return _Launched(process, port, log)


def _ready(launched: _Launched) -> RunningLab:
    lab = RunningLab(f"http://127.0.0.1:{launched.port}",
                     _wait_for_login_url(launched.process, launched.log, launched.port))
    _wait_until_serving(lab)
    return lab


@slow_fixture(scope="module")
def labs(browser, tmp_path_factory, artifacts) -> dict[str, RunningLab]:
    """`course lab` and `course lab --instructor`, started together so that their start-ups
    overlap; both stop at module end, whatever happened."""
    launched: dict[str, _Launched] = {}
    try:
        for mode in ("learner", "instructor"):
            launched[mode] = _launch(mode, tmp_path_factory.mktemp(f"jupyter-{mode}"), artifacts / f"lab-{mode}.log")
        yield {mode: _ready(one) for mode, one in launched.items()}
    finally:
        for one in launched.values():
            _stop(one.process)


@pytest.fixture
def page(browser, artifacts, request):
    """A fresh browser page; its last state is saved as <test>-final.png, pass or fail."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(30_000)
    opened = context.new_page()
    try:
        yield opened
    finally:
        try:
            opened.screenshot(path=str(artifacts / f"{request.node.name}-final.png"))
        except Exception as exc:  # a crashed page has no picture; the test's own error says why
            print(f"no final screenshot for {request.node.name}: {exc}")
        finally:
            context.close()
