"""Where the course lives on disk: the repository root, its grading course and notebooks."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_MARKER = Path("grading") / "nbgrader_config.py"


class CourseNotFound(RuntimeError):
    """No course repository around the current directory."""


@dataclass(frozen=True)
class CoursePaths:
    root: Path

    @property
    def grading(self) -> Path:  # the nbgrader course root
        return self.root / "grading"

    @property
    def authoring(self) -> Path:  # readable sources of the notebooks, one .py per notebook
        return self.grading / "authoring"

    @property
    def source(self) -> Path:  # nbgrader's source/<assignment>/<assignment>.ipynb
        return self.grading / "source"

    @property
    def hidden(self) -> Path:  # hidden tests, one .py per notebook, run in the grader's process
        return self.grading / "hidden"

    @property
    def release(self) -> Path:
        return self.grading / "release"

    @property
    def submitted(self) -> Path:
        return self.grading / "submitted"

    @property
    def autograded(self) -> Path:
        return self.grading / "autograded"

    @property
    def feedback(self) -> Path:
        return self.grading / "feedback"

    @property
    def grades(self) -> Path:
        return self.grading / "grades"

    @property
    def notebooks(self) -> Path:  # the learner copies, committed
        return self.root / "notebooks"

    def assignments(self) -> list[str]:
        """Names of the source assignments, in course order (00_..., 01_..., ...)."""
        if not self.source.is_dir():
            return []
        return sorted(p.name for p in self.source.iterdir() if (p / f"{p.name}.ipynb").is_file())


def find_course(start: Path | None = None) -> CoursePaths:
    """The course around ``start`` (default: the current directory), else beside this package."""
    start = (start or Path.cwd()).resolve()
    for candidate in (start, *start.parents):
        if (candidate / _MARKER).is_file():
            return CoursePaths(candidate)
    beside_package = Path(__file__).resolve().parents[2]  # an editable install lives in the repo
    if (beside_package / _MARKER).is_file():
        return CoursePaths(beside_package)
    raise CourseNotFound(
        f"no course found at or above {start} (looked for {_MARKER}); "
        "run the command from inside the course repository"
    )
