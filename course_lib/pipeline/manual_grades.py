"""Grades given by hand outlive ``course grade`` run again, while the answer they mark is the same.

``course grade`` removes a student's earlier submission from the gradebook before grading it
afresh (a failed regrade must never leave a stale score). That would also erase what an
instructor typed into formgrader for a written answer. So, before the removal, each
hand-given score and comment is kept with the text of the answer it marks, read from the
autograded notebook; after the new autograde, it is put back on every cell whose answer is
still the same. A changed answer is graded by hand again: its old mark would be for other
words.

    kept = keep(paths, "09_capstone", "alice")     # before the submission is removed
    ...                                            # autograde again
    restore(paths, "09_capstone", "alice", kept)   # -> how many grades were put back
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from course_lib.pipeline.notebook_io import NotebookError, read_notebook
from course_lib.pipeline.paths import CoursePaths


@dataclass(frozen=True)
class HandGrade:
    cell: str                  # the graded cell's grade_id
    answer: str                # the cell's text when the grade was given
    score: float | None        # formgrader's manual score (None: only a comment was given)
    comment: str | None        # formgrader's manual comment


def _answers(path: Path) -> dict[str, str]:
    """{grade_id: source} of an autograded notebook's cells; {} when it is missing or broken."""
    try:
        nb = read_notebook(path)
    except (NotebookError, OSError):
        return {}
    return {cell.metadata["nbgrader"]["grade_id"]: cell.source for cell in nb.cells
            if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")}


def _notebook(paths: CoursePaths, assignment: str, student: str) -> Path:
    return paths.autograded / student / assignment / f"{assignment}.ipynb"


def _db(paths: CoursePaths) -> str:
    return f"sqlite:///{paths.grading / 'gradebook.db'}"


def keep(paths: CoursePaths, assignment: str, student: str) -> list[HandGrade]:
    """The hand-given scores and comments of a student's current submission, with their answers."""
    answers = _answers(_notebook(paths, assignment, student))
    kept = []
    with Gradebook(_db(paths)) as gb:
        try:
            notebook = gb.find_submission_notebook(assignment, assignment, student)
        except MissingEntry:
            return []
        comments = {c.name: c.manual_comment for c in notebook.comments if c.manual_comment}
        scores = {g.name: g.manual_score for g in notebook.grades if g.manual_score is not None}
        for cell in sorted(set(comments) | set(scores)):
            if cell in answers:
                kept.append(HandGrade(cell, answers[cell], scores.get(cell), comments.get(cell)))
    return kept


def restore(paths: CoursePaths, assignment: str, student: str, kept: list[HandGrade]) -> int:
    """Put back each kept grade whose cell holds the same answer after the new autograde."""
    if not kept:
        return 0
    answers = _answers(_notebook(paths, assignment, student))
    restored = 0
    with Gradebook(_db(paths)) as gb:
        for hand in kept:
            if answers.get(hand.cell) != hand.answer:
                continue
            try:
                if hand.score is not None:
                    grade = gb.find_grade(hand.cell, assignment, assignment, student)
                    grade.manual_score = hand.score
                    grade.needs_manual_grade = False  # as formgrader does when a score is entered
                if hand.comment is not None:
                    gb.find_comment(hand.cell, assignment, assignment, student).manual_comment = hand.comment
            except MissingEntry:  # the cell is no longer graded in the released assignment
                continue
            restored += 1
        gb.db.commit()
    return restored
