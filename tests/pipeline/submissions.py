"""Build the submissions the grading tests feed to `course grade`, honest and broken."""
from __future__ import annotations

import copy

import nbformat


def _cells(nb, role=None, solution=None):
    for cell in nb.cells:
        meta = cell.get("metadata", {})
        if role and meta.get("course", {}).get("role") != role:
            continue
        if solution is not None and bool(meta.get("nbgrader", {}).get("solution")) != solution:
            continue
        yield cell


def correct(source_nb):
    """The instructor's solutions in the learner's notebook."""
    return copy.deepcopy(source_nb)


def blank(released_nb):
    return copy.deepcopy(released_nb)


def with_answer(released_nb, source_nb, exercise, code):
    """The released notebook, all answers from the source except ``exercise`` = ``code``."""
    nb = copy.deepcopy(released_nb)
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in _cells(source_nb, solution=True)}
    for cell in _cells(nb, solution=True):
        grade_id = cell.metadata["nbgrader"]["grade_id"]
        cell.source = code if grade_id == exercise else answers[grade_id]
    return nb


def prepend_to_first_answer(nb, code):
    nb = copy.deepcopy(nb)
    first = next(_cells(nb, solution=True))
    first.source = code + "\n" + first.source
    return nb


def edit_test_cells(nb, new_source="pass  # tests edited away"):
    nb = copy.deepcopy(nb)
    for cell in _cells(nb, role="tests"):
        cell.source = new_source
    return nb


def delete_test_cells(nb):
    nb = copy.deepcopy(nb)
    nb.cells = [c for c in nb.cells
                if c.get("metadata", {}).get("course", {}).get("role") != "tests"]
    return nb


def write(nb, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


def append_to_last_answer(nb, code):
    """``code`` runs after every answer cell (so it can replace or spy on the answers)."""
    nb = copy.deepcopy(nb)
    last = list(_cells(nb, solution=True))[-1]
    last.source = last.source + "\n\n" + code
    return nb


def replace_answers(released_nb, code_by_exercise):
    """The released notebook with the given answer cells' code (others stay unanswered)."""
    nb = copy.deepcopy(released_nb)
    for cell in _cells(nb, solution=True):
        grade_id = cell.metadata["nbgrader"]["grade_id"]
        if grade_id in code_by_exercise:
            cell.source = code_by_exercise[grade_id]
    return nb


WRONG_SOFTMAX = "def softmax_with_temperature(logits, temperature=1.0):\n    return [0.5]"
CLASS_MIX = {"correct": 0.15, "blank": 0.05, "half_right": 0.10, "corrupt_json": 0.35, "misnamed": 0.35}
EXPECTED = {"correct": ("graded", 5.0), "blank": ("graded", 0.0), "half_right": ("graded", 2.0),
            "corrupt_json": ("FAILED", None), "misnamed": ("FAILED", None)}


def write_class(paths, assignment, source_nb, released_nb, size, mix=CLASS_MIX):
    """``size`` submissions of notebook 00 named kind-NNN, in the proportions of ``mix``;
    returns {student: kind}. Kinds: see EXPECTED for what each must be graded as."""
    notebooks = {"correct": correct(source_nb), "blank": blank(released_nb),
                 "half_right": with_answer(released_nb, source_nb, "softmax_with_temperature", WRONG_SOFTMAX)}
    kinds = [kind for kind, share in mix.items() for _ in range(round(share * size))]
    kinds = (kinds + ["correct"] * size)[:size]
    roster = {}
    for number, kind in enumerate(kinds):
        student = f"{kind}-{number:03d}"
        folder = paths.submitted / student / assignment
        if kind == "corrupt_json":
            folder.mkdir(parents=True)
            (folder / f"{assignment}.ipynb").write_text('{"cells": [{"cell_type": "code", "sour')
        elif kind == "misnamed":
            write(notebooks["correct"], folder / "final_v2.ipynb")
        else:
            write(notebooks[kind], folder / f"{assignment}.ipynb")
        roster[student] = kind
    return roster
