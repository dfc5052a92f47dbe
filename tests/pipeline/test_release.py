"""Released notebooks: what the learner gets, exactly what `course release` makes, nothing hidden."""
from __future__ import annotations

import json

import nbformat
import pytest
from nbgrader.nbgraderformat import MetadataValidator

from course_lib.pipeline.release import release
from tests.pipeline.conftest import ASSIGNMENTS, REPO

SOLUTION = ("### BEGIN SOLUTION", "### END SOLUTION")
MARK_SCHEME = ("<!-- === BEGIN MARK SCHEME === -->", "<!-- === END MARK SCHEME === -->")  # written answers' rubrics


def regions(source: str, markers: tuple[str, str]) -> list[str]:
    """Meaningful lines between begin/end markers."""
    inside, lines = False, []
    for line in source.splitlines():
        if line.strip() == markers[0]:
            inside = True
        elif line.strip() == markers[1]:
            inside = False
        elif inside and len(line.strip()) > 12:
            lines.append(line.strip())
    return lines


def test_the_course_has_notebooks():
    assert ASSIGNMENTS[0] == "00_orientation"
    assert sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb")) == ASSIGNMENTS


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_committed_notebooks_equal_what_release_generates(released_course, name):
    generated = (released_course.notebooks / f"{name}.ipynb").read_bytes()
    committed = (REPO / "notebooks" / f"{name}.ipynb").read_bytes()
    assert generated == committed, f"notebooks/{name}.ipynb is stale: run `course release {name}`"


def test_releasing_twice_changes_nothing(released_course):
    # Two notebooks, released again over their own output: every notebook's release is already
    # compared with its committed copy (the release before) by the test above, so a second pass
    # over all of them would check the same thing again, for over a minute.
    again = release(released_course, [ASSIGNMENTS[0], ASSIGNMENTS[-1]])
    assert [name for name, _ in again] == [ASSIGNMENTS[0], ASSIGNMENTS[-1]]
    assert all(not changed for _, changed in again)


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_released_notebook_holds_no_solution_and_no_hidden_test(name):
    source = nbformat.read(REPO / "grading" / "source" / name / f"{name}.ipynb", as_version=4)
    released_text = (REPO / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8")
    released = nbformat.reads(released_text, as_version=4)
    secret = [line for cell in source.cells for line in regions(cell.source, SOLUTION)]
    assert secret, "the source notebook should carry solutions"
    secret += [line for cell in source.cells for line in regions(cell.source, MARK_SCHEME)]
    hidden = (REPO / "grading" / "hidden" / f"{name}.py").read_text(encoding="utf-8")
    secret += [line.strip() for line in hidden.splitlines() if len(line.strip()) > 30
               and not line.strip().startswith(("#", '"""', "def ", "import ", "from "))]
    released_code = "\n".join(c.source for c in released.cells)
    leaked = [line for line in secret if line in released_code]
    assert not leaked, f"released {name} leaks: {leaked[:3]}"
    for marker in SOLUTION:
        assert marker not in released_text
    stubs = [c for c in released.cells if c.metadata.get("nbgrader", {}).get("solution")]
    code_stubs = [c for c in stubs if c.cell_type == "code"]
    assert code_stubs and all("raise NotImplementedError()" in c.source for c in code_stubs)
    assert all(c.source == "YOUR ANSWER HERE" for c in stubs if c.cell_type == "markdown")  # written answers


@pytest.mark.parametrize("path", sorted(REPO.glob("notebooks/*.ipynb")) + sorted(REPO.glob("grading/source/*/*.ipynb")),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_committed_notebooks_carry_no_outputs_and_valid_metadata(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    MetadataValidator().validate_nb(nbformat.read(path, as_version=4))

