"""`course lab` in a real browser: the released notebooks run, the widget reacts, and a
learner's lab differs from an instructor's.

What a released notebook must do when a learner runs it untouched is read from its JSON, not
written down here: the answer cells (nbgrader ``solution``) only define a stub that raises
``NotImplementedError``; every other cell that calls an exercise function (its test cell
first, then any later cell using it) therefore shows that error; every remaining cell runs
cleanly.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.browser.conftest import REPO
from tests.browser.jupyterlab import (
    NOTEBOOK,
    choose_menu,
    code_cells,
    menu_bar_labels,
    open_notebook,
    run_cell,
    scroll_to_cell,
    select_cell,
    side_panel_titles,
    wait_until_idle,
)

NEWS_PROMPT = "official Jupyter news"  # "Would you like to get notified about official Jupyter news?"

# The cells the sampling widget needs, each found by a line only it has: the imports, the
# model's logits for the 2 + 2 prompt, the plotting function, and the widget itself.
WIDGET_CELLS = (r"^import matplotlib\.pyplot as plt", r"^\s*logits = prefill\(", r"^def draw_distribution\(",
                r"widgets\.interactive\(")


def _load(name: str) -> dict:
    return json.loads((REPO / "notebooks" / f"{name}.ipynb").read_text())


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _is_answer_cell(cell: dict) -> bool:
    return cell["cell_type"] == "code" and bool(cell["metadata"].get("nbgrader", {}).get("solution"))


def exercise_names(notebook: dict) -> set[str]:
    """The functions learners write: those the answer cells define."""
    return {name for cell in notebook["cells"] if _is_answer_cell(cell)
            for name in re.findall(r"^def (\w+)\(", _source(cell), re.MULTILINE)}


def _calls_an_exercise(cell: dict, exercises: set[str]) -> bool:
    return any(re.search(rf"\b{name}\b", _source(cell)) for name in exercises)


def expected_errors(notebook: dict) -> dict[int, str | None]:
    """Code cell index -> the error an untouched released notebook shows there (None: none)."""
    exercises = exercise_names(notebook)
    expected = {}
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        if _is_answer_cell(cell):
            assert "raise NotImplementedError" in _source(cell), f"answer cell {index} is not a released stub"
            expected[index] = None  # defining the stub is fine; calling it is not
        else:
            expected[index] = "NotImplementedError" if _calls_an_exercise(cell, exercises) else None
    return expected


def _mismatches(expected: dict[int, tuple], seen: dict[int, tuple], what: str) -> str:
    return "; ".join(f"cell {i}: expected {what} {expected[i]}, saw {seen.get(i)}"
                     for i in expected if expected[i] != seen.get(i))


def _news_default(page, lab) -> str:
    """The default of JupyterLab's fetchNews setting as this lab serves it (after overrides)."""
    plugin = page.request.get(lab.url("lab/api/settings/@jupyterlab/apputils-extension:notification")).json()
    return plugin["schema"]["properties"]["fetchNews"]["default"]


def _snap(page, artifacts: Path, name: str) -> Path:
    path = artifacts / f"{name}.png"
    page.screenshot(path=str(path))
    return path


@pytest.fixture(scope="module")
def learner_lab(labs):
    return labs["learner"]


def test_orientation_runs_as_released_in_the_learner_lab(learner_lab, page, artifacts):
    notebook = _load("00_orientation")
    expected = expected_errors(notebook)
    open_notebook(page, learner_lab.url("lab/tree/notebooks/00_orientation.ipynb", reset_workspace=True),
                  len(notebook["cells"]))

    choose_menu(page, "Run", "Run All Cells")
    wait_until_idle(page)
    # JupyterLab asks the kernel to stop on error, so Run All ends at the first failing cell
    # (exercise 1's test cell) and the cells after it never run.
    first_failure = min(i for i, error in expected.items() if error)
    scroll_to_cell(page, first_failure)
    shot = _snap(page, artifacts, "00-run-all")
    want = {i: (i <= first_failure, expected[i] if i <= first_failure else None) for i in expected}
    seen = {i: (s.ran, s.error) for i, s in code_cells(page).items()}
    assert seen == want, f"after Run All ({shot}): " + _mismatches(want, seen, "(ran, error)")

    # Carry on past each failure as a learner would: Run Selected Cell and All Below.
    while not_run := [i for i, s in code_cells(page).items() if not s.ran]:
        select_cell(page, not_run[0])
        choose_menu(page, "Run", "Run Selected Cell and All Below")
        wait_until_idle(page)
        assert code_cells(page)[not_run[0]].ran, f"cell {not_run[0]} did not run ({_snap(page, artifacts, '00-stuck')})"
    shot = _snap(page, artifacts, "00-every-cell-run")
    seen_errors = {i: s.error for i, s in code_cells(page).items()}
    assert seen_errors == expected, f"every cell run ({shot}): " + _mismatches(expected, seen_errors, "error")


def test_sampling_widget_renders_and_redraws_without_any_exercise_solved(learner_lab, page, artifacts):
    notebook = _load("04_sampling")
    needed = []
    for pattern in WIDGET_CELLS:
        matches = [i for i, cell in enumerate(notebook["cells"])
                   if cell["cell_type"] == "code" and re.search(pattern, _source(cell), re.MULTILINE)]
        assert len(matches) == 1, f"expected one code cell matching {pattern!r} in 04_sampling, found {matches}"
        needed += matches
    exercises = exercise_names(notebook)
    blocked = [i for i in needed if _calls_an_exercise(notebook["cells"][i], exercises)]
    assert not blocked, f"the widget's cells {blocked} call an exercise: an unsolved notebook cannot show it"

    open_notebook(page, learner_lab.url("lab/tree/notebooks/04_sampling.ipynb", reset_workspace=True),
                  len(notebook["cells"]))
    for index in needed:
        run_cell(page, index)
    wait_until_idle(page)
    states = code_cells(page)
    assert [(states[i].ran, states[i].error) for i in needed] == [(True, None)] * len(needed), \
        f"the widget's cells {needed} did not all run cleanly ({_snap(page, artifacts, '04-cells')})"

    widget = page.locator(f"{NOTEBOOK} .widget-interact")
    temperature = widget.locator(".widget-slider", has_text="temperature")
    temperature.locator(".noUi-handle").wait_for(state="visible")
    plot = widget.locator(".widget-output img")
    before = plot.get_attribute("src")
    temperature.scroll_into_view_if_needed()
    _snap(page, artifacts, "04-widget")

    readout = temperature.locator(".widget-readout")
    readout.fill("2.5")
    readout.press("Enter")
    page.wait_for_function(  # the plot is cleared, then drawn again for T = 2.5
        "([widget, before]) => { const img = document.querySelector(widget + ' .widget-output img');"
        " return img !== null && img.src !== before; }",
        arg=[f"{NOTEBOOK} .widget-interact", before], timeout=30_000)
    assert temperature.locator(".noUi-handle").get_attribute("aria-valuenow") == "2.5"
    wait_until_idle(page)
    _snap(page, artifacts, "04-widget-after-slider")


def test_the_xray_panel_of_notebook_00_answers_a_message_typed_into_it(learner_lab, page, artifacts):
    notebook = _load("00_orientation")
    (index,) = [i for i, cell in enumerate(notebook["cells"])
                if cell["cell_type"] == "code" and "xray_panel(" in _source(cell)]
    open_notebook(page, learner_lab.url("lab/tree/notebooks/00_orientation.ipynb", reset_workspace=True),
                  len(notebook["cells"]))
    run_cell(page, index)  # the cell imports what it needs: it runs in a fresh kernel on its own
    wait_until_idle(page)
    panel = page.locator(f"{NOTEBOOK} .course-xray-panel")
    panel.locator(".xr details").first.wait_for(state="visible", timeout=60_000)  # its first message's tokens
    box = panel.locator("input[type=text]")
    box.fill("Tell me about <b>bold</b> cats")
    box.press("Enter")
    page.wait_for_function(
        "panel => { const chat = document.querySelector(panel).textContent;"
        " return chat.includes('Tell me about <b>bold</b> cats') && chat.includes('finish reason')"
        " && (chat.match(/user:/g) || []).length === 2; }",
        arg=f"{NOTEBOOK} .course-xray-panel", timeout=60_000)
    assert panel.locator("b", has_text="bold").count() == 0  # the message is text, not markup
    # The trace's last line, drawn once the reply is done: clicking before it lands can open a
    # <details> that the redraw then replaces (seen on a loaded machine).
    panel.get_by_text("KV blocks held after the end: 0").first.wait_for(state="visible", timeout=60_000)
    panel.locator(".xr details summary").first.click()
    # model, after the rules, drawn from: the third table of the opened step appears (waits for it)
    panel.locator(".xr details[open] table").nth(2).wait_for(state="attached", timeout=30_000)
    assert panel.locator(".xr details[open] table").count() >= 3
    assert "KV blocks held after the end: 0" in panel.inner_text()
    panel.scroll_into_view_if_needed()
    _snap(page, artifacts, "00-xray-panel")


def test_learner_lab_hides_nbgrader_and_the_news_prompt(learner_lab, page, artifacts):
    open_notebook(page, learner_lab.url("lab/tree/notebooks/00_orientation.ipynb", reset_workspace=True),
                  len(_load("00_orientation")["cells"]))
    shot = _snap(page, artifacts, "learner-lab")
    assert "Nbgrader" not in menu_bar_labels(page), f"learner lab shows the Nbgrader menu ({shot})"
    assert not [t for t in side_panel_titles(page) if "Assignment" in t], f"learner lab shows nbgrader panels ({shot})"
    formgrader = page.request.get(learner_lab.url("formgrader/manage_assignments"))
    assert formgrader.status == 404, "the formgrader server extension is loaded in the learner lab"
    assert _news_default(page, learner_lab) == "false"
    # The prompt would show a few seconds after the app starts; the kernel is ready later still.
    assert page.get_by_text(NEWS_PROMPT).count() == 0, f"the Jupyter news prompt is shown ({shot})"


def test_instructor_lab_shows_nbgrader_for_the_course(labs, page, artifacts):
    lab = labs["instructor"]
    page.goto(lab.url("lab/tree/notebooks", reset_workspace=True))
    page.locator(".jp-DirListing-item", has_text="00_orientation.ipynb").wait_for(state="visible")
    assert "Nbgrader" in menu_bar_labels(page)
    assert "Nbgrader Create Assignment" in side_panel_titles(page)
    page.get_by_role("menuitem", name="Nbgrader", exact=True).click()
    page.get_by_role("menuitem", name="Formgrader", exact=True).wait_for(state="visible")
    shot = _snap(page, artifacts, "instructor-lab-nbgrader-menu")
    page.keyboard.press("Escape")

    # The formgrader page as the server renders it, without its script (which would open
    # grading/gradebook.db): nbgrader found grading/nbgrader_config.py and the course under the root.
    html = page.request.get(lab.url("formgrader/manage_assignments")).text()
    assert 'var url_prefix = "grading";' in html, "nbgrader did not find the course in grading/"
    assert "after-you-press-enter" in html, "nbgrader did not read grading/nbgrader_config.py"
    assert _news_default(page, lab) == "false"
    assert page.get_by_text(NEWS_PROMPT).count() == 0, f"the Jupyter news prompt is shown ({shot})"
