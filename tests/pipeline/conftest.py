"""A scratch copy of the course, so pipeline tests never touch the repository's folders."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from course_lib.pipeline.paths import CoursePaths
from course_lib.pipeline.release import release

REPO = Path(__file__).resolve().parents[2]
ASSIGNMENTS = CoursePaths(REPO).assignments()


def copy_course(target: Path) -> CoursePaths:
    (target / "grading").mkdir(parents=True)
    for name in ("authoring", "source", "hidden"):
        shutil.copytree(REPO / "grading" / name, target / "grading" / name)
    shutil.copy(REPO / "grading" / "nbgrader_config.py", target / "grading")
    return CoursePaths(target)


@pytest.fixture(scope="session")
def released_course(tmp_path_factory) -> CoursePaths:
    """A copy of the course with every assignment released into its notebooks/."""
    paths = copy_course(tmp_path_factory.mktemp("course"))
    release(paths)
    return paths


@pytest.fixture
def scratch_course(tmp_path) -> CoursePaths:
    return copy_course(tmp_path)
