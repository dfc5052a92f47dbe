"""Written answers: interview probes asked as hand-graded answer cells, with the rubric for the grader only.

    # %% [written] probes=09_capstone points=2

expands, per probe card, into a locked question cell (the rubric between mark-scheme markers)
and a markdown answer cell worth 2 points. The learner's copy holds the question and "YOUR
ANSWER HERE"; formgrader and the feedback show the rubric; `course grade` leaves the answers
to the grader, and the total adds the hand-given points to the automatic ones.
"""
from __future__ import annotations

import re
import shutil

import nbformat
import pytest
from nbgrader.api import Gradebook

from course_lib.drills.cards import cards_for, get_card, load_cards
from course_lib.pipeline.authoring import (MARK_SCHEME, AuthoringError, build_notebook, check_hidden_tests,
                                           exercises, parse)
from course_lib.pipeline.autograde import graded_exercises
from course_lib.pipeline.grade import GradeOptions, grade
from course_lib.pipeline.learner import answer_cells
from course_lib.pipeline.nbgrader_run import NbgraderFailed, run_nbgrader
from tests.pipeline import submissions as S
from tests.conftest import slow_fixture
from tests.pipeline.conftest import REPO

A = "09_capstone"
RUBRIC_LINE = re.compile(r"^- \*\*(?P<share>[\d.]+)\*\* (?P<point>.+)$")

DEMO = """# %% [markdown]
# # Demo

# %% [written] probes=09.debug-from-trace,serving points=3
"""


def role(cell) -> str:
    return cell.get("metadata", {}).get("course", {}).get("role", "")


def written(nb) -> list[tuple]:
    """(question cell, answer cell, card) for each written answer, in notebook order."""
    questions = [c for c in nb.cells if role(c) == "written-question"]
    answers = [c for c in nb.cells if role(c) == "written"]
    assert len(questions) == len(answers)
    return [(q, a, get_card(a.metadata["course"]["probe"])) for q, a in zip(questions, answers)]


def rubric_of(question_source: str) -> list[tuple[float, str]]:
    """(share, point) of each rubric line between the mark-scheme markers."""
    inside = question_source.split(MARK_SCHEME[0], 1)[1].split(MARK_SCHEME[1], 1)[0]
    return [(float(m["share"]), m["point"]) for m in map(RUBRIC_LINE.match, inside.splitlines()) if m]


# ---------------------------------------------------------------- the authoring format


def test_a_written_cell_parses_to_its_probes_and_points():
    (_, spec) = parse(DEMO, origin="demo.py")
    assert (spec.kind, spec.probes, spec.points, spec.body) == ("written", ("09.debug-from-trace", "serving"), 3.0, "")


def test_it_expands_into_a_locked_question_and_a_hand_graded_answer_per_card(tmp_path):
    path = tmp_path / "99_demo.py"
    path.write_text(DEMO)
    nb = build_notebook(path)
    serving = [card.id for card in load_cards() if card.topic == "serving" and card.id != "09.debug-from-trace"]
    assert [card.id for _, _, card in written(nb)] == ["09.debug-from-trace", *serving]
    assert len(nb.cells) == 1 + 2 * len(written(nb))
    for question, answer, card in written(nb):
        assert question.cell_type == answer.cell_type == "markdown"
        slug = "written-" + card.id.replace(".", "-")
        assert question.metadata["nbgrader"] == {"grade": False, "grade_id": f"{slug}-question", "locked": True,
                                                 "schema_version": 3, "solution": False, "task": False}
        assert answer.metadata["nbgrader"] == {"grade": True, "grade_id": slug, "locked": False, "points": 3,
                                               "schema_version": 3, "solution": True, "task": False}
        assert question.metadata["editable"] is False and question.metadata["deletable"] is False
        assert f'"{card.question}"' in question.source.split(MARK_SCHEME[0])[0]
        assert answer.source.startswith("### BEGIN SOLUTION") and answer.source.endswith("### END SOLUTION")


def test_a_written_answer_is_no_exercise_and_never_runs_at_grading(tmp_path):
    nb = build_notebook(REPO / "grading" / "authoring" / f"{A}.py")
    cells = {id(cell) for q, a, _ in written(nb) for cell in (q, a)}
    assert cells, "08 asks its probes as written answers"
    run = {id(nb.cells[i]) for i in answer_cells(nb)}
    graded = {id(nb.cells[i]) for i, _ in graded_exercises(nb)}
    assert not cells & run and not cells & graded
    path = tmp_path / "99_demo.py"
    path.write_text(DEMO)
    assert exercises(parse(DEMO)) == []
    (tmp_path / "hidden.py").write_text('"""no exercises, so no hidden tests"""\n')
    check_hidden_tests(path, tmp_path / "hidden.py")  # a written answer needs no hidden test


@pytest.mark.parametrize("mutation, message", [
    (lambda s: s.replace(" points=3", ""), "points=N"),
    (lambda s: s.replace("probes=09.debug-from-trace,serving ", ""), "needs probes="),
    (lambda s: s.replace("09.debug-from-trace", "09.no-such-card"), "no probe cards for '09.no-such-card'"),
    (lambda s: s.replace("09.debug-from-trace,serving", "99_nothing"), "no probe cards for '99_nothing'"),
    (lambda s: s.replace("points=3", "points=3 name=x"), "unexpected 'name=x'"),
    (lambda s: s + "# Some prose.\n", "takes no text"),
    (lambda s: s + "\n# %% [written] probes=09_capstone points=1\n", "is already asked at line 4"),
    (lambda s: s.replace("# # Demo", "# <!-- BEGIN MARK SCHEME -->"), "mark-scheme markers belong to"),
])
def test_broken_written_cells_are_refused_with_the_line(mutation, message):
    with pytest.raises(AuthoringError, match=re.escape(message)):
        parse(mutation(DEMO), origin="demo.py")


# ---------------------------------------------------------------- 08: source and learner copy


def test_08_asks_the_cards_it_shows():
    source = nbformat.read(REPO / "grading" / "source" / A / f"{A}.ipynb", as_version=4)
    assert [card.id for _, _, card in written(source)] == [card.id for card in cards_for(A)]


def test_the_rubric_is_the_probe_banks_strong_points_in_equal_shares():
    source = nbformat.read(REPO / "grading" / "source" / A / f"{A}.ipynb", as_version=4)
    for question, answer, card in written(source):
        points = answer.metadata["nbgrader"]["points"]
        rubric = rubric_of(question.source)
        assert [point for _, point in rubric] == list(card.strong_points)
        assert all(share == round(points / len(card.strong_points), 2) for share, _ in rubric)
        assert abs(sum(share for share, _ in rubric) - points) <= 0.01 * len(rubric)
        assert card.weak_answer in question.source.split(MARK_SCHEME[0], 1)[1]
        assert [line[2:] for line in answer.source.splitlines() if line.startswith("- ")] == list(card.strong_points)


def test_the_learner_copy_has_each_question_an_empty_answer_and_no_rubric():
    text = (REPO / "notebooks" / f"{A}.ipynb").read_text(encoding="utf-8")
    released = nbformat.reads(text, as_version=4)
    asked = written(released)
    assert [card.id for _, _, card in asked] == [card.id for card in cards_for(A)]
    for question, answer, card in asked:
        assert f'"{card.question}"' in question.source
        assert answer.source == "YOUR ANSWER HERE"
        for secret in (*card.strong_points, card.weak_answer):
            assert secret not in text
    for marker in ("MARK SCHEME", "Rubric", "BEGIN SOLUTION"):
        assert marker not in text


# ---------------------------------------------------------------- 08 graded: one run for all


def formgrader_html(paths, student: str) -> str:
    """The page formgrader shows for this student's autograded 08 (its own exporter and template)."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers
    from traitlets.config import Config

    config = Config()
    config.HTMLExporter.template_name = "formgrade"
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    resources = {"assignment_id": A, "notebook_id": A, "submission_id": student, "index": 0, "total": 1,
                 "base_url": "", "student": student, "last_name": None, "first_name": None, "notebook_path": ""}
    html, _ = HTMLExporter(config=config).from_filename(
        str(paths.autograded / student / A / f"{A}.ipynb"), resources=resources)
    return html


@slow_fixture(scope="module")
def graded(releases, tmp_path_factory):
    """A course copy with 08 released and `course grade`d: its solutions, a blank notebook, and
    one learner who answered in writing."""
    paths = releases.copy(tmp_path_factory.mktemp("written"), [A])
    source = nbformat.read(paths.source / A / f"{A}.ipynb", as_version=4)
    released = nbformat.read(paths.notebooks / f"{A}.ipynb", as_version=4)
    answered = S.blank(released)  # code left unanswered: only the written answers matter here
    for cell in answered.cells:
        if role(cell) == "written":
            cell.source = "The model keeps none of them; code around it does."
    for student, nb in {"solutions": S.correct(source), "blank": S.blank(released), "writer": answered}.items():
        S.write(nb, paths.submitted / student / A / f"{A}.ipynb")
    results = {g.student: g for g in grade(paths, A, GradeOptions(jobs=2))}
    assert all(g.status == "graded" for g in results.values()), results
    return paths, source, results


def grades(paths, student: str) -> dict[str, tuple]:
    """grade_id -> (auto score, manual score, max score, needs manual grade) from the gradebook."""
    with Gradebook(f"sqlite:///{paths.grading / 'gradebook.db'}") as gb:
        (notebook,) = gb.find_submission(A, student).notebooks
        return {g.name: (g.auto_score, g.manual_score, g.max_score, g.needs_manual_grade) for g in notebook.grades}


def test_the_solutions_earn_every_automatic_point_and_wait_for_the_grader(graded):
    paths, source, results = graded
    by_hand = {a.metadata["nbgrader"]["grade_id"]: a.metadata["nbgrader"]["points"] for _, a, _ in written(source)}
    rows = grades(paths, "solutions")
    assert {name for name, row in rows.items() if row[3]} == set(by_hand)  # needs_manual_grade: the written ones
    for name, (auto, manual, max_score, _) in rows.items():
        assert (auto, manual, max_score) == ((None, None, by_hand[name]) if name in by_hand else (max_score, None, max_score))
    solutions = results["solutions"]
    assert solutions.score == solutions.max_score - sum(by_hand.values()) > 0
    assert f"{sum(by_hand.values()):g} points wait for grading by hand" in solutions.reason


def test_an_untouched_answer_scores_zero_with_nothing_left_to_grade(graded):
    paths, _, results = graded
    assert results["blank"].score == 0
    assert not any(needs for *_, needs in grades(paths, "blank").values())
    writer = grades(paths, "writer")
    assert all(writer[name][3] and writer[name][0] is None for name in writer if name.startswith("written-"))


def test_formgrader_shows_the_rubric_above_each_answer_and_the_learner_never_does(graded):
    paths, source, _ = graded
    released_text = (paths.notebooks / f"{A}.ipynb").read_text(encoding="utf-8")
    for student in ("blank", "writer"):  # their notebooks came from the learner's copy, rubric-free
        autograded = nbformat.read(paths.autograded / student / A / f"{A}.ipynb", as_version=4)
        html = formgrader_html(paths, student)
        for question, answer, card in written(autograded):
            assert rubric_of(question.source) == rubric_of(next(q for q, _, c in written(source) if c == card).source)
            rubric_at = html.find(f"<strong>Rubric</strong> (probe card <code>{card.id}</code>")
            score_box = html.find(f'id="{answer.metadata["nbgrader"]["grade_id"]}"')
            assert 0 <= rubric_at < score_box, f"{card.id}: the rubric belongs above the answer's score box"
            assert card.strong_points[0] not in released_text
    writer = nbformat.read(paths.autograded / "writer" / A / f"{A}.ipynb", as_version=4)
    assert all(a.source == "The model keeps none of them; code around it does." for _, a, _ in written(writer))
    feedback = (paths.feedback / "writer" / A / f"{A}.html").read_text(encoding="utf-8")
    assert all(f"<strong>Rubric</strong> (probe card <code>{card.id}</code>" in feedback
               for card in cards_for(A))  # nbgrader's documented behaviour: the feedback shows it too


def test_a_manual_grade_adds_to_the_automatic_points(graded, tmp_path):
    paths, source, results = graded
    db = tmp_path / "gradebook.db"  # a copy, so the other tests see the gradebook as `course grade` left it
    shutil.copy(paths.grading / "gradebook.db", db)
    given = dict(zip([a.metadata["nbgrader"]["grade_id"] for _, a, _ in written(source)], (2.0, 1.2, 0.4)))
    with Gradebook(f"sqlite:///{db}") as gb:
        for name, score in given.items():
            entry = gb.find_grade(name, A, A, "solutions")
            entry.manual_score = score
            entry.needs_manual_grade = False  # what formgrader records when a grader enters a score
        gb.db.commit()
        submission = gb.find_submission(A, "solutions")
        assert submission.score == pytest.approx(results["solutions"].score + sum(given.values()))
        assert submission.max_score == results["solutions"].max_score
        assert not submission.needs_manual_grade


def test_nbgrader_alone_would_refuse_a_rubric_outside_a_task_cell(graded, tmp_path):
    """Why grading/nbgrader_config.py sets ClearMarkScheme.enforce_metadata = False."""
    paths, _, _ = graded
    with pytest.raises(NbgraderFailed, match="Mark scheme region detected in a non-grade cell"):
        run_nbgrader(paths.grading, "generate_assignment", A, "--force", "--log-level=WARN",
                     "--db", f"sqlite:///{tmp_path / 'gradebook.db'}", "--ClearMarkScheme.enforce_metadata=True")


def test_grading_again_keeps_hand_grades_whose_answer_is_unchanged(graded):
    """Runs last: it grades the module's course again. The writer is given a score and a comment
    on every written answer, then edits one answer and is graded again: the edited one waits
    for the grader once more, the others keep what was given."""
    paths, _, _ = graded
    names = sorted(name for name in grades(paths, "writer") if name.startswith("written-"))
    with Gradebook(f"sqlite:///{paths.grading / 'gradebook.db'}") as gb:
        for name in names:
            entry = gb.find_grade(name, A, A, "writer")
            entry.manual_score, entry.needs_manual_grade = 1.5, False
            gb.find_comment(name, A, A, "writer").manual_comment = f"comment on {name}"
        gb.db.commit()
    submitted = paths.submitted / "writer" / A / f"{A}.ipynb"
    nb = nbformat.read(submitted, as_version=4)
    edited = next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == names[0])
    edited.source = "A longer, second try at this answer."
    S.write(nb, submitted)

    results = {g.student: g for g in grade(paths, A, GradeOptions(jobs=2))}
    assert f"kept {len(names) - 1} grade(s) given by hand" in results["writer"].reason
    rows = grades(paths, "writer")
    assert rows[names[0]][1] is None and rows[names[0]][3]  # an edited answer is graded afresh
    with Gradebook(f"sqlite:///{paths.grading / 'gradebook.db'}") as gb:
        for name in names[1:]:
            assert (rows[name][1], rows[name][3]) == (1.5, False)
            assert gb.find_comment(name, A, A, "writer").manual_comment == f"comment on {name}"
