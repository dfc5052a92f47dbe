"""`course lab`: JupyterLab on the course, as a learner sees it or as an instructor needs it.

A learner's lab hides nbgrader (no "Nbgrader" menu, no "Create Assignment" panel, no
formgrader): those are tools for making and grading assignments, and a learner checks work
with the notebooks' own test cells or `course check`. An instructor's lab keeps them and
starts the server in ``grading/``, where nbgrader looks for ``nbgrader_config.py``. Both
silence JupyterLab's "get notified about official Jupyter news?" prompt: the course runs
offline and the question is noise on a learner's first screen.

    >>> command = lab_command(Path("/course"), "127.0.0.1", 8888, Path("/s"), instructor=False)
    >>> command[3:6]
    ['lab', '--no-browser', '--ip=127.0.0.1']
    >>> [arg for arg in command if arg.startswith("--ServerApp.jpserver_extensions")][0]
    '--ServerApp.jpserver_extensions=nbgrader.server_extensions.assignment_list=False'

Everything is JupyterLab's own configuration, passed on the command line or written under
``.cache/jupyter/`` (git-ignored); nothing inside the virtual environment changes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from course_lib.pipeline.paths import CoursePaths

# The labextension nbgrader 0.9 installs: its plugins are the Nbgrader menu, the
# "Create Assignment" panel, the assignment and course lists, the formgrader and the
# "Validate" button. Disabling the package disables all of them.
NBGRADER_LABEXTENSION = "@jupyter/nbgrader"

# The server extensions nbgrader enables in jupyter_server_config.d/nbgrader.json; a
# learner's lab does not load them (tests/pipeline/test_lab.py keeps this list in step).
NBGRADER_SERVER_EXTENSIONS = (
    "nbgrader.server_extensions.assignment_list",
    "nbgrader.server_extensions.course_list",
    "nbgrader.server_extensions.formgrader",
    "nbgrader.server_extensions.validate_assignment",
)

# Setting defaults for every lab the course starts. A learner can still switch news on in
# Settings; this only changes the default, so the prompt never asks.
SETTING_OVERRIDES = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false"}}

NOTEBOOKS_URL_PATH = "/lab/tree/notebooks"


@dataclass(frozen=True)
class LabLaunch:
    """Everything needed to start one lab: the command, its environment and folder."""

    command: list[str]
    env: dict[str, str]
    cwd: Path
    url: str  # where the notebooks open; the server prints the same URL with its token


def lab_mode(instructor: bool) -> str:
    return "instructor" if instructor else "learner"


def write_app_settings(settings_dir: Path, instructor: bool) -> Path:
    """Write JupyterLab's app settings for one mode: setting overrides and page config.

    The folder replaces JupyterLab's default app settings folder (``share/jupyter/lab/settings``
    in the environment, empty in a pip install), so it is rewritten whole on every start.
    """
    settings_dir.mkdir(parents=True, exist_ok=True)
    (settings_dir / "overrides.json").write_text(json.dumps(SETTING_OVERRIDES, indent=2) + "\n")
    disabled = [] if instructor else [NBGRADER_LABEXTENSION]
    (settings_dir / "page_config.json").write_text(json.dumps({"disabledExtensions": disabled}, indent=2) + "\n")
    return settings_dir


def lab_command(root: Path, ip: str, port: int, settings_dir: Path, instructor: bool) -> list[str]:
    """The ``jupyter lab`` command line for the course at ``root`` (see the module example)."""
    command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--ip={ip}", f"--port={port}",
               f"--ServerApp.root_dir={root}", f"--LabApp.default_url={NOTEBOOKS_URL_PATH}",
               f"--LabApp.app_settings_dir={settings_dir}"]
    if not instructor:
        # A command-line entry wins over the jupyter_server_config.d file that enables it.
        command += [f"--ServerApp.jpserver_extensions={name}=False" for name in NBGRADER_SERVER_EXTENSIONS]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # containers and CI machines often run as root
    return command


def lab_environment(paths: CoursePaths) -> dict[str, str]:
    """The server's environment, which its kernels inherit."""
    from course_lib.tokenization.offline import prime_tiktoken_cache

    env = dict(os.environ)
    # Kernels inherit this: plain tiktoken.get_encoding works offline inside the notebooks.
    env["TIKTOKEN_CACHE_DIR"] = str(prime_tiktoken_cache(paths.root / ".cache" / "tiktoken"))
    # `jupyter` and the kernels' helpers resolve from this environment even when it is not activated.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def prepare_lab(paths: CoursePaths, ip: str, port: int, instructor: bool = False) -> LabLaunch:
    """Write the mode's settings and return how to start its lab."""
    settings_dir = write_app_settings(paths.root / ".cache" / "jupyter" / f"lab-{lab_mode(instructor)}" / "settings",
                                      instructor)
    return LabLaunch(
        command=lab_command(paths.root, ip, port, settings_dir, instructor),
        env=lab_environment(paths),
        # nbgrader reads nbgrader_config.py from the server's working folder; the course's is
        # in grading/, and its CourseDirectory.root (grading/) lies under the server root.
        cwd=paths.grading if instructor else paths.root,
        url=f"http://{ip}:{port}{NOTEBOOKS_URL_PATH}",
    )


def run_lab(paths: CoursePaths, ip: str, port: int, instructor: bool = False) -> int:
    """Start the lab in the foreground; returns JupyterLab's exit status."""
    launch = prepare_lab(paths, ip, port, instructor)
    view = ("instructor's lab: Nbgrader menu, Create Assignment panel and formgrader for grading/"
            if instructor else "learner's lab; `course lab --instructor` adds nbgrader's tools")
    print(f"Starting JupyterLab on {launch.url} ({view}).\n"
          "The login URL with its token follows; Ctrl-C stops it.", flush=True)
    return subprocess.call(launch.command, env=launch.env, cwd=launch.cwd)
