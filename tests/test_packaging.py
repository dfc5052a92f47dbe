"""The package's own promises: dependencies in step, torch bounded, the console script."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _normal(requirement: str) -> tuple[str, str]:
    parsed = Requirement(requirement)
    return parsed.name.lower().replace("_", "-"), str(parsed.specifier)


def test_environment_yml_lists_exactly_the_pyproject_dependencies():
    declared = PYPROJECT["dependencies"] + PYPROJECT["optional-dependencies"]["dev"]
    environment = yaml.safe_load((REPO / "environment.yml").read_text())
    pip_section = next(item["pip"] for item in environment["dependencies"] if isinstance(item, dict))
    conda_side = sorted(_normal(r) for r in pip_section if not r.startswith("-e"))
    assert conda_side == sorted(_normal(r) for r in declared), "update environment.yml to match pyproject.toml"
    assert "-e ." in pip_section


def test_torch_is_bounded_below_the_cuda_builds():
    (torch,) = [Requirement(r) for r in PYPROJECT["dependencies"] if r.startswith("torch")]
    assert Version("2.13.0") in torch.specifier
    assert Version("2.14.0") not in torch.specifier, "an open range pulls a multi-GB CUDA build"


def test_the_course_command_is_installed_and_answers_help():
    assert PYPROJECT["scripts"]["course"] == "course_lib.cli:main"
    course = Path(sys.executable).parent / "course"
    result = subprocess.run([str(course), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for command in ("lab", "check", "release", "grade", "train", "eval"):
        assert command in result.stdout


def test_ci_runs_the_readme_test_command():
    assert "make test" in (REPO / ".ci" / "run").read_text()
    assert "make test" in (REPO / "README.md").read_text()
    assert "make lab" in (REPO / "README.md").read_text()


def test_the_environment_leaves_out_rfc3987_syntax():
    """jupyter-events pulls it in; importing it builds Earley parsers for 2-3 s in every process
    that imports jsonschema (each kernel, nbgrader step and `course` command), so make install
    removes it (see the Makefile) and jsonschema checks every other format without it."""
    import importlib.util

    assert importlib.util.find_spec("rfc3987_syntax") is None, \
        "run `make install` again, or `pip uninstall rfc3987-syntax` in this environment"
