"""The authoring format: its rules, its errors, and sources that match their authoring files."""
from __future__ import annotations

import pytest

from course_lib.pipeline.authoring import AuthoringError, build_notebook, parse
from tests.pipeline.conftest import ASSIGNMENTS, REPO

GOOD = """# %% [markdown]
# # Title
#
# Some prose.

# %% [setup]
import math

# %% [solution] double
def double(x):
    ### BEGIN SOLUTION
    return 2 * x
    ### END SOLUTION

# %% [tests] double points=2
assert double(2) == 4
"""


def test_a_good_file_gives_one_graded_cell_per_exercise(tmp_path):
    path = tmp_path / "99_demo.py"
    path.write_text(GOOD)
    nb = build_notebook(path)
    kinds = [(c.cell_type, c.metadata.get("nbgrader", {}).get("grade_id")) for c in nb.cells]
    assert kinds == [("markdown", None), ("code", "setup-01"), ("code", "double"), ("code", "double-tests")]
    tests = nb.cells[3]
    assert tests.metadata["nbgrader"]["points"] == 2 and tests.metadata["nbgrader"]["grade"] is True
    assert tests.source.endswith("assert double(2) == 4") and "hidden tests" in tests.source
    assert "BEGIN HIDDEN" not in tests.source
    assert nb.cells[0].source == "# Title\n\nSome prose."


@pytest.mark.parametrize("mutation, message", [
    (lambda s: s.replace("[tests] double points=2", "[tests] double"), "points=N"),
    (lambda s: s.replace("# %% [tests] double points=2\nassert double(2) == 4\n", ""), "solutions without [tests]"),
    (lambda s: s + "\n# %% [tests] triple points=1\nassert True\n", "without a [solution]"),
    (lambda s: s.replace("[setup]", "[hidden] double points=1"), "unknown cell kind"),
    (lambda s: s.replace("    ### END SOLUTION\n", ""), "BEGIN SOLUTION"),
    (lambda s: s.replace("[setup]", "[setpu]"), "unknown cell kind"),
    (lambda s: s.replace("# Some prose.", "Some prose."), "must start with '# '"),
    (lambda s: "print(1)\n" + s, "before the first"),
    (lambda s: s.replace("[solution] double", "[solution] Double!"), "exercise name"),
    (lambda s: s + "\n# %% [solution] double\n### BEGIN SOLUTION\n### END SOLUTION\n", "second [solution]"),
])
def test_broken_files_are_refused_with_the_line(mutation, message):
    with pytest.raises(AuthoringError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse(mutation(GOOD), origin="demo.py")


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_committed_source_matches_its_authoring_file(name):
    built = build_notebook(REPO / "grading" / "authoring" / f"{name}.py")
    committed = (REPO / "grading" / "source" / name / f"{name}.ipynb").read_text(encoding="utf-8")
    import nbformat

    assert nbformat.writes(built) + "\n" == committed, f"run `course release {name}` and commit the result"


def test_release_refuses_a_notebook_whose_hidden_test_is_missing(tmp_path):
    from course_lib.pipeline.authoring import build_sources

    (tmp_path / "authoring").mkdir()
    (tmp_path / "authoring" / "99_demo.py").write_text(GOOD)
    with pytest.raises(AuthoringError, match="hidden tests belong in"):
        build_sources(tmp_path / "authoring", tmp_path / "source")
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / "99_demo.py").write_text("def triple(learner, check):\n    pass\n")
    with pytest.raises(AuthoringError, match="no hidden test for double"):
        build_sources(tmp_path / "authoring", tmp_path / "source")
    (tmp_path / "hidden" / "99_demo.py").write_text("def double(learner, check):\n    pass\n")
    assert build_sources(tmp_path / "authoring", tmp_path / "source") == [tmp_path / "source" / "99_demo" / "99_demo.ipynb"]
