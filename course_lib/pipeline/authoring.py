"""Readable notebook sources -> nbgrader source notebooks.

A notebook is written as a plain Python file in ``grading/authoring/NN_topic.py`` (diffable,
reviewable, greppable) and turned into ``grading/source/NN_topic/NN_topic.ipynb`` with the
nbgrader metadata that release and autograding need. Cells start with a ``# %%`` line:

    # %% [markdown]          prose; each line starts with "# "
    # %%                     ordinary code the learner may edit
    # %% [setup]             code the learner cannot change (imports, data); restored at grading
    # %% [solution] softmax  the learner's answer cell; put the answer between
    #                        ### BEGIN SOLUTION / ### END SOLUTION
    # %% [tests] softmax points=3
    #                        visible tests that teach (what `course check` runs); the cell
    #                        is the exercise's graded cell and carries all its points

The hidden tests are not in the notebook at all: they are the function ``softmax`` in
``grading/hidden/NN_topic.py``, run in the grader's process (see pipeline/hidden.py). At
grading the test cell's verdict is that function's; the visible tests teach and let a
learner check themselves. Every solution needs a [tests] cell with its name and points.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from course_lib.pipeline.notebook_io import write_notebook

KINDS = ("markdown", "code", "setup", "solution", "tests")
HEADER = re.compile(r"^# %%(?:\s+\[(?P<kind>\w+)\])?(?P<args>.*)$")
NAME = re.compile(r"^[a-z0-9][a-z0-9_]*$")
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
COURSE_METADATA = "course"  # the cell metadata key this course adds beside nbgrader's
TESTS_NOTE = "# Graded by hidden tests too, which try more cases of the rules stated above.\n"


class AuthoringError(ValueError):
    """The authoring file breaks one of the rules above; the message names file and line."""


@dataclass
class CellSpec:
    kind: str
    line: int  # 1-based line of the header, for error messages
    name: str = ""
    points: float = 0.0
    lines: list[str] = field(default_factory=list)

    @property
    def body(self) -> str:
        text = "\n".join(self.lines).strip("\n")
        if self.kind == "markdown":
            text = "\n".join(_unmark(line) for line in text.split("\n"))
        return text


def _unmark(line: str) -> str:
    if line.startswith("# "):
        return line[2:]
    if line.strip() in ("#", ""):
        return ""
    raise AuthoringError(f"markdown line does not start with '# ': {line!r}")


def parse(text: str, origin: str = "<authoring>") -> list[CellSpec]:
    """Split an authoring file into cell specs, checking the header syntax."""
    cells: list[CellSpec] = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = HEADER.match(line)
        if match is None:
            if not cells:
                if line.strip():
                    raise AuthoringError(f"{origin}:{number}: text before the first '# %%' cell header")
                continue
            cells[-1].lines.append(line)
            continue
        kind = match["kind"] or "code"
        if kind not in KINDS:
            raise AuthoringError(f"{origin}:{number}: unknown cell kind [{kind}]; use one of {', '.join(KINDS)}")
        args = match["args"].split()
        spec = CellSpec(kind=kind, line=number)
        if kind in ("solution", "tests"):
            if not args or not NAME.match(args[0]):
                raise AuthoringError(f"{origin}:{number}: [{kind}] needs an exercise name like 'softmax'")
            spec.name = args.pop(0)
        for arg in args:
            key, _, value = arg.partition("=")
            if kind != "tests" or key != "points":
                raise AuthoringError(f"{origin}:{number}: unexpected '{arg}' (only [tests] takes points=N)")
            try:
                spec.points = float(value)
            except ValueError:
                raise AuthoringError(f"{origin}:{number}: points must be a number, got {value!r}") from None
        if kind == "tests" and spec.points <= 0:
            raise AuthoringError(f"{origin}:{number}: [tests] {spec.name} needs points=N with N > 0")
        cells.append(spec)
    _check_rules(cells, origin)
    return cells


def _check_rules(cells: list[CellSpec], origin: str) -> None:
    seen: dict[tuple[str, str], int] = {}
    for cell in cells:
        if cell.kind == "markdown":
            for offset, line in enumerate(cell.lines, start=1):
                if line.strip() and not (line.startswith("# ") or line.strip() == "#"):
                    raise AuthoringError(f"{origin}:{cell.line + offset}: markdown lines must start with '# '")
        if not cell.body.strip():
            raise AuthoringError(f"{origin}:{cell.line}: empty cell")
        if cell.name:
            key = (cell.kind, cell.name)
            if key in seen:
                raise AuthoringError(f"{origin}:{cell.line}: second [{cell.kind}] {cell.name} (first at line {seen[key]})")
            seen[key] = cell.line
        if cell.kind == "solution" and not ("### BEGIN SOLUTION" in cell.body and "### END SOLUTION" in cell.body):
            raise AuthoringError(f"{origin}:{cell.line}: [solution] {cell.name} needs ### BEGIN SOLUTION / ### END SOLUTION")
    solutions = {name for kind, name in seen if kind == "solution"}
    tested = {name for kind, name in seen if kind == "tests"}
    if solutions - tested:
        raise AuthoringError(f"{origin}: solutions without [tests]: {', '.join(sorted(solutions - tested))}")
    if tested - solutions:
        raise AuthoringError(f"{origin}: [tests] without a [solution]: {', '.join(sorted(tested - solutions))}")


def exercises(cells: list[CellSpec]) -> list[str]:
    """The exercise names, in notebook order."""
    return [cell.name for cell in cells if cell.kind == "tests"]


def _nbgrader(grade_id: str, *, grade=False, solution=False, locked=False, points=None) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3,
            "solution": solution, "task": False}
    if points is not None:
        meta["points"] = points
    return meta


def to_cell(spec: CellSpec, index: int) -> NotebookNode:
    """One cell spec -> one notebook cell with nbgrader's metadata."""
    if spec.kind == "markdown":
        return nbformat.v4.new_markdown_cell(spec.body, id=f"md-{index:02d}")
    source = spec.body
    grade_id = {"code": "", "setup": f"setup-{index:02d}", "solution": spec.name, "tests": f"{spec.name}-tests"}[spec.kind]
    if spec.kind == "tests":
        source = TESTS_NOTE + source
    cell = nbformat.v4.new_code_cell(source, id=grade_id or f"code-{index:02d}")
    if spec.kind == "setup":
        cell.metadata["nbgrader"] = _nbgrader(grade_id, locked=True)
    elif spec.kind == "solution":
        cell.metadata["nbgrader"] = _nbgrader(grade_id, solution=True)
    elif spec.kind == "tests":
        points = int(spec.points) if spec.points.is_integer() else spec.points
        cell.metadata["nbgrader"] = _nbgrader(grade_id, grade=True, locked=True, points=points)
        cell.metadata[COURSE_METADATA] = {"role": "tests", "exercise": spec.name}
    if spec.kind in ("setup", "tests"):
        cell.metadata["editable"] = False
        cell.metadata["deletable"] = False
    return cell


def build_notebook(authoring_file: Path) -> NotebookNode:
    text = Path(authoring_file).read_text(encoding="utf-8")
    specs = parse(text, origin=str(authoring_file))
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}}
    nb.cells = [to_cell(spec, i) for i, spec in enumerate(specs)]
    nbformat.validate(nb)
    return nb


def build_sources(authoring_dir: Path, source_dir: Path, names: list[str] | None = None) -> list[Path]:
    """Write source/<name>/<name>.ipynb for every (or each named) authoring file; return them."""
    files = sorted(Path(authoring_dir).glob("[0-9][0-9]_*.py"))
    if names:
        wanted = set(names)
        unknown = wanted - {f.stem for f in files}
        if unknown:
            known = ", ".join(f.stem for f in files) or "none"
            raise AuthoringError(f"no authoring file for {', '.join(sorted(unknown))}; known: {known}")
        files = [f for f in files if f.stem in wanted]
    written = []
    for file in files:
        check_hidden_tests(file, Path(authoring_dir).parent / "hidden" / file.name)
        target = Path(source_dir) / file.stem / f"{file.stem}.ipynb"
        write_notebook(build_notebook(file), target)
        written.append(target)
    return written


def check_hidden_tests(authoring_file: Path, hidden_file: Path) -> None:
    """Every exercise of the notebook has its hidden test, ``def NAME(learner, check)``."""
    names = exercises(parse(Path(authoring_file).read_text(encoding="utf-8"), origin=str(authoring_file)))
    if not hidden_file.is_file():
        raise AuthoringError(f"{authoring_file}: its hidden tests belong in {hidden_file}, which is missing")
    tree = ast.parse(hidden_file.read_text(encoding="utf-8"), filename=str(hidden_file))
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    missing = [name for name in names if name not in defined]
    if missing:
        raise AuthoringError(f"{hidden_file}: no hidden test for {', '.join(missing)}; "
                             f"add `def {missing[0]}(learner, check):`")
