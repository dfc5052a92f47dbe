"""Driving JupyterLab 4 the way a person does (menus, clicks, keys) and reading what it shows.

Cells are read from the DOM of the notebook on screen: the input prompt says whether a cell
ran (``[3]:``), is running (``[*]:``) or never ran (``[ ]:``), and an error shows as a
stderr output whose traceback names the exception:

    "NotImplementedError          Traceback (most recent call last)" -> "NotImplementedError"
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# The notebook on screen: other notebooks' panels stay in the DOM, hidden.
NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden)"

_READ_CELLS = """notebook => [...document.querySelectorAll(notebook + ' .jp-Notebook .jp-Cell')].map(cell => ({
    code: cell.classList.contains('jp-CodeCell'),
    prompt: (cell.querySelector('.jp-InputPrompt') || {textContent: ''}).textContent.trim(),
    stderr: [...cell.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
        .map(output => output.textContent),
}))"""

_TRACEBACK_HEADER = re.compile(r"^(\S+)\s+Traceback \(most recent call last\)", re.MULTILINE)
_LAST_LINE_ERROR = re.compile(r"^(\w+(?:Error|Exception))\b")  # SyntaxError and friends carry no header


@dataclass(frozen=True)
class CellState:
    index: int  # position in the notebook, markdown cells included (as in the .ipynb)
    ran: bool
    error: str | None  # the exception's name, e.g. "NotImplementedError"


def error_name(stderr_text: str) -> str | None:
    """The exception an error output shows; None for plain stderr such as a warning."""
    header = _TRACEBACK_HEADER.search(stderr_text)
    if header:
        return header.group(1)
    lines = [line for line in stderr_text.splitlines() if line.strip()]
    match = _LAST_LINE_ERROR.match(lines[-1]) if lines else None
    return match.group(1) if match else None


def code_cells(page) -> dict[int, CellState]:
    """Every code cell of the notebook on screen, by its index in the notebook."""
    states = {}
    for index, cell in enumerate(page.evaluate(_READ_CELLS, NOTEBOOK)):
        if cell["code"]:
            errors = [name for name in map(error_name, cell["stderr"]) if name]
            ran = bool(re.fullmatch(r"\[\d+\]:", cell["prompt"]))
            states[index] = CellState(index, ran, errors[0] if errors else None)
    return states


def open_notebook(page, url: str, cell_count: int) -> None:
    """Open a notebook and wait until all its cells are on the page and its kernel is idle."""
    page.goto(url)
    page.wait_for_function(
        "([notebook, n]) => document.querySelectorAll(notebook + ' .jp-Notebook .jp-Cell').length === n",
        arg=[NOTEBOOK, cell_count], timeout=60_000)
    wait_until_idle(page)


def wait_until_idle(page, timeout_s: float = 90) -> None:
    """No cell waiting or running, and the kernel reports idle (the status bar says so)."""
    page.wait_for_function(
        """notebook => ![...document.querySelectorAll(notebook + ' .jp-InputPrompt')]
                          .some(prompt => prompt.textContent.includes('*'))
                       && [...document.querySelectorAll('.jp-StatusBar-TextItem')]
                          .some(item => item.textContent.includes('| Idle'))""",
        arg=NOTEBOOK, timeout=timeout_s * 1000)


def choose_menu(page, menu: str, item: str) -> None:
    page.get_by_role("menuitem", name=menu, exact=True).click()
    page.get_by_role("menuitem", name=item, exact=True).click()


def select_cell(page, index: int) -> None:
    """Select a cell in command mode (a click on its prompt, as a person would)."""
    page.locator(f"{NOTEBOOK} .jp-Notebook .jp-Cell").nth(index).locator(".jp-InputPrompt").first.click()


def scroll_to_cell(page, index: int) -> None:
    page.locator(f"{NOTEBOOK} .jp-Notebook .jp-Cell").nth(index).scroll_into_view_if_needed()


def run_cell(page, index: int) -> None:
    """Run one cell and stay on it (Ctrl+Enter); the kernel queues it after any running one."""
    select_cell(page, index)
    page.keyboard.press("Control+Enter")


def menu_bar_labels(page) -> list[str]:
    return page.locator(".lm-MenuBar-itemLabel").all_text_contents()


def side_panel_titles(page) -> list[str]:
    return [tab.get_attribute("title") or tab.text_content() or ""
            for tab in page.locator(".jp-SideBar .lm-TabBar-tab").all()]
