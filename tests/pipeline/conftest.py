"""The pipeline tests' names for the course; its copies and releases are tests/conftest.py's
(``scratch_course``, ``releases``, ``released_course``), so no test touches the repository's folders."""
from __future__ import annotations

from course_lib.pipeline.paths import CoursePaths
from tests.conftest import REPO, copy_course  # noqa: F401  (imported from here by the pipeline tests)

ASSIGNMENTS = CoursePaths(REPO).assignments()
