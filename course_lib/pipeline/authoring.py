"""Readable notebook sources -> nbgrader source notebooks.

A notebook is written as a plain Python file in ``grading/authoring/NN_topic.py`` (diffable,
reviewable, greppable) and turned into ``grading/source/NN_topic/NN_topic.ipynb`` with the
nbgrader metadata that release and autograding need. Cells start with a ``# %%`` line:

    # %% [markdown]          prose; each line starts with "# "
    # %%                     ordinary code the learner may edit
    # %% [setup]             code the learner cannot change (imports, data); restored at grading
    # %% [checks]            locked too, but never run at grading: it imports the visible
    #                        checks and hints, which the grading sandbox does not hold
    # %% [solution] softmax  the learner's answer cell; put the answer between
    #                        ### BEGIN SOLUTION / ### END SOLUTION
    # %% [tests] softmax points=3
    #                        visible tests that teach (what `course check` runs); the cell
    #                        is the exercise's graded cell and carries all its points
    # %% [written] probes=09_capstone points=2
    #                        interview probes as written answers, graded by hand: for each
    #                        card (a notebook's cards, a card topic, or card ids separated
    #                        by commas) a locked question cell and a markdown answer cell
    #                        worth N points; the text comes from the probe bank (see below)

The hidden tests are not in the notebook at all: they are the function ``softmax`` in
``grading/hidden/NN_topic.py``, run in the grader's process (see pipeline/hidden.py). At
grading the test cell's verdict is that function's; the visible tests teach and let a
learner check themselves. Every solution needs a [tests] cell with its name and points.

A [written] cell has no body: ``written_cells`` expands it, per probe card, into

- a locked markdown question cell (``written-NN-slug-question``): the card's question, then
  the rubric between nbgrader's mark-scheme markers: each strong point with its share of the
  points (equal shares) and the typical weak answer. nbgrader records the cell in the
  gradebook with the rubric (SaveCells runs before ClearMarkScheme), strips the rubric from
  the learner's copy, and at autograding restores the locked cell from the gradebook, so
  formgrader (and the feedback) show the rubric right above the answer (release.py lets
  nbgrader take a mark scheme outside a "manually graded task" cell);
- a manually graded answer cell (``written-NN-slug``: markdown, ``solution`` and ``grade``,
  N points): the card's strong points as the model answer, between ### BEGIN SOLUTION /
  ### END SOLUTION, so the learner's copy says "YOUR ANSWER HERE". Autograding leaves it
  to the grader (nbgrader's ``needs_manual_grade``); an untouched one scores 0 at once.

It is no exercise: no hidden test, never run at grading (it is markdown).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from course_lib.pipeline import python_ast
from course_lib.pipeline.notebook_io import write_notebook

KINDS = ("markdown", "code", "setup", "checks", "solution", "tests", "written")
HEADER = re.compile(r"^# %%(?:\s+\[(?P<kind>\w+)\])?(?P<args>.*)$")
NAME = re.compile(r"^[a-z0-9][a-z0-9_]*$")
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
COURSE_METADATA = "course"  # the cell metadata key this course adds beside nbgrader's
CHECKS_PREFIX = "checks-"  # grade_id of a [checks] cell, which grading skips
TESTS_NOTE = "# Graded by hidden tests too, which try more cases of the rules stated above.\n"
ARGUMENTS = {"tests": ("points",), "written": ("probes", "points")}  # the key=value each kind takes
WRITTEN_PREFIX = "written-"  # grade_id of a written answer cell; its question cell adds "-question"
# nbgrader's ClearMarkScheme removes every line from the one holding BEGIN MARK SCHEME to the one
# holding END MARK SCHEME; as HTML comments the markers themselves stay invisible in formgrader.
MARK_SCHEME = ("<!-- === BEGIN MARK SCHEME === -->", "<!-- === END MARK SCHEME === -->")


class AuthoringError(ValueError):
    """The authoring file breaks one of the rules above; the message names file and line."""


@dataclass
class CellSpec:
    kind: str
    line: int  # 1-based line of the header, for error messages
    name: str = ""
    points: float = 0.0
    lines: list[str] = field(default_factory=list)
    probes: tuple[str, ...] = ()  # [written]: notebook names, card topics or card ids

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
            if key not in ARGUMENTS.get(kind, ()):
                raise AuthoringError(f"{origin}:{number}: unexpected '{arg}' (only [tests] takes points=N, "
                                     "and [written] probes=... points=N)")
            if key == "probes":
                spec.probes = tuple(part for part in value.split(",") if part)
                continue
            try:
                spec.points = float(value)
            except ValueError:
                raise AuthoringError(f"{origin}:{number}: points must be a number, got {value!r}") from None
        if kind == "tests" and spec.points <= 0:
            raise AuthoringError(f"{origin}:{number}: [tests] {spec.name} needs points=N with N > 0")
        if kind == "written" and (not spec.probes or spec.points <= 0):
            raise AuthoringError(f"{origin}:{number}: [written] needs probes=NN_topic (or a card topic, or card ids "
                                 "separated by commas) and points=N with N > 0, the points of each answer")
        cells.append(spec)
    _check_rules(cells, origin)
    return cells


def _check_rules(cells: list[CellSpec], origin: str) -> None:
    seen: dict[tuple[str, str], int] = {}
    asked: dict[str, int] = {}  # probe card id -> line of the [written] cell that asks it
    for cell in cells:
        if cell.kind == "markdown":
            for offset, line in enumerate(cell.lines, start=1):
                if line.strip() and not (line.startswith("# ") or line.strip() == "#"):
                    raise AuthoringError(f"{origin}:{cell.line + offset}: markdown lines must start with '# '")
        if cell.kind == "written":
            if cell.body.strip():
                raise AuthoringError(f"{origin}:{cell.line}: a [written] cell takes no text (its questions come "
                                     "from course_lib/drills/probes.toml); put any prose in a [markdown] cell above it")
            for card in _written_cards(cell, origin):  # unknown cards are refused here, with the line
                if card.id in asked:
                    raise AuthoringError(f"{origin}:{cell.line}: probe card {card.id} is already asked at line "
                                         f"{asked[card.id]}")
                asked[card.id] = cell.line
            continue
        if not cell.body.strip():
            raise AuthoringError(f"{origin}:{cell.line}: empty cell")
        if any(marker in cell.body for marker in ("BEGIN MARK SCHEME", "END MARK SCHEME")):
            # nbgrader is told not to insist on task cells (release.py): only the question cells a
            # [written] cell makes are locked and recorded, so a rubric anywhere else would be lost.
            raise AuthoringError(f"{origin}:{cell.line}: mark-scheme markers belong to [written] cells only; "
                                 "a rubric comes from the probe card's strong points")
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


def _written_cards(spec: CellSpec, origin: str = "<authoring>") -> list:
    """The probe cards a [written] cell asks: each selector is a notebook (``09_capstone``), a
    card topic (``serving``) or a card id (``09.debug-from-trace``); bank order within one."""
    # Imported here: the drills package pulls in torch, which notebooks without probes never need.
    from course_lib.drills.cards import CARD_TOPICS, cards_for, load_cards

    bank = load_cards()
    by_id = {card.id: card for card in bank}
    found: list = []
    for selector in spec.probes:
        if selector in CARD_TOPICS:
            chosen = [card for card in bank if card.topic == selector]
        elif re.match(r"^\d\d_\w+$", selector):
            chosen = list(cards_for(selector, bank))
        else:
            chosen = [by_id[selector]] if selector in by_id else []
        if not chosen:
            raise AuthoringError(f"{origin}:{spec.line}: no probe cards for {selector!r} in course_lib/drills/probes.toml; "
                                 f"name a notebook (09_capstone), a card topic ({', '.join(CARD_TOPICS)}) or "
                                 "card ids such as 09.debug-from-trace, separated by commas")
        found += [card for card in chosen if card not in found]
    return found


def _number(value: float) -> str:
    return f"{round(value, 2):g}"


def _points(value: float) -> str:
    return f"{_number(value)} point{'' if value == 1 else 's'}"


def rubric(card, points: float) -> list[tuple[str, float]]:
    """(strong point, its share of ``points``) for each of the card's strong points: equal shares."""
    share = points / len(card.strong_points)
    return [(point, share) for point in card.strong_points]


def written_question(card, points: float) -> str:
    """The question cell's source: the question, then the rubric inside the mark-scheme markers."""
    lines = [f'**Written answer, {_points(points)}:** "{card.question}"', "",
             "Answer in the cell below in your own words, as you would to an interviewer: a few sentences "
             "or a short list. It is graded by hand, a share of the points for each point a strong answer makes.",
             MARK_SCHEME[0], "",
             f"**Rubric** (probe card `{card.id}`; shown to the grader and in the feedback, never in the "
             f"notebook the learner answers in). {_points(points)} in equal shares:", ""]
    lines += [f"- **{_number(share)}** {point}" for point, share in rubric(card, points)]
    lines += ["", f"*Typical weak answer (on its own it makes none of the points):* {card.weak_answer}", MARK_SCHEME[1]]
    return "\n".join(lines)


def written_cells(spec: CellSpec, origin: str = "<authoring>") -> list[NotebookNode]:
    """A [written] cell -> per probe card a locked question cell and a hand-graded answer cell."""
    points = int(spec.points) if spec.points.is_integer() else spec.points
    cells = []
    for card in _written_cards(spec, origin):
        answer_id = WRITTEN_PREFIX + card.id.replace(".", "-")
        question_id = f"{answer_id}-question"
        if len(question_id) > 64:  # nbformat's limit on a cell id
            raise AuthoringError(f"{origin}:{spec.line}: probe card id {card.id!r} is too long for a cell id; "
                                 "shorten its slug in course_lib/drills/probes.toml")
        question = nbformat.v4.new_markdown_cell(written_question(card, spec.points), id=question_id)
        question.metadata["nbgrader"] = _nbgrader(question_id, locked=True)
        question.metadata["editable"] = False
        question.metadata["deletable"] = False
        question.metadata[COURSE_METADATA] = {"role": "written-question", "probe": card.id}
        model = ["### BEGIN SOLUTION", "A strong answer makes these points:", ""]
        model += [f"- {point}" for point in card.strong_points] + ["### END SOLUTION"]
        answer = nbformat.v4.new_markdown_cell("\n".join(model), id=answer_id)
        answer.metadata["nbgrader"] = _nbgrader(answer_id, grade=True, solution=True, points=points)
        answer.metadata[COURSE_METADATA] = {"role": "written", "probe": card.id}
        cells += [question, answer]
    return cells


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
    grade_id = {"code": "", "setup": f"setup-{index:02d}", "checks": f"{CHECKS_PREFIX}{index:02d}",
                "solution": spec.name, "tests": f"{spec.name}-tests"}[spec.kind]
    if spec.kind == "tests":
        source = TESTS_NOTE + source
    cell = nbformat.v4.new_code_cell(source, id=grade_id or f"code-{index:02d}")
    if spec.kind in ("setup", "checks"):
        cell.metadata["nbgrader"] = _nbgrader(grade_id, locked=True)
    elif spec.kind == "solution":
        cell.metadata["nbgrader"] = _nbgrader(grade_id, solution=True)
    elif spec.kind == "tests":
        points = int(spec.points) if spec.points.is_integer() else spec.points
        cell.metadata["nbgrader"] = _nbgrader(grade_id, grade=True, locked=True, points=points)
        cell.metadata[COURSE_METADATA] = {"role": "tests", "exercise": spec.name}
    if spec.kind in ("setup", "checks", "tests"):
        cell.metadata["editable"] = False
        cell.metadata["deletable"] = False
    return cell


def build_notebook(authoring_file: Path) -> NotebookNode:
    text = Path(authoring_file).read_text(encoding="utf-8")
    specs = parse(text, origin=str(authoring_file))
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}}
    nb.cells = [cell for i, spec in enumerate(specs)
                for cell in (written_cells(spec, str(authoring_file)) if spec.kind == "written" else [to_cell(spec, i)])]
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
    tree = python_ast.parse(hidden_file.read_text(encoding="utf-8"), filename=str(hidden_file))
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    missing = [name for name in names if name not in defined]
    if missing:
        raise AuthoringError(f"{hidden_file}: no hidden test for {', '.join(missing)}; "
                             f"add `def {missing[0]}(learner, check):`")
