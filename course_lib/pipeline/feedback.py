"""Keep hidden tests out of the feedback students receive.

nbgrader's feedback shows every cell as it was graded, so hidden-test code appears in the
HTML, and its tracebacks quote it even when ``ClearHiddenTests`` runs. In each test cell this
preprocessor cuts the hidden region out of the source (the visible tests stay) and replaces
the error output with a short verdict: the exception's type and message, withheld if the
message quotes a hidden line. Printed lines of the visible checks are kept.
It is registered in ``grading/nbgrader_config.py`` for ``GenerateFeedback``.
"""
from __future__ import annotations

import re

from nbconvert.preprocessors import Preprocessor
from nbformat.v4 import new_output
from traitlets import Bool

BEGIN, END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
MAX_MESSAGE = 300


def has_hidden_tests(cell) -> bool:
    return cell.get("cell_type") == "code" and BEGIN in cell.get("source", "")


def without_hidden(source: str) -> str:
    """The source with every hidden region replaced by a one-line note."""
    kept, inside = [], False
    for line in source.splitlines():
        if line.strip() == BEGIN:
            inside = True
            kept.append("# (the hidden test code is not shown)")
        elif line.strip() == END:
            inside = False
        elif not inside:
            kept.append(line)
    return "\n".join(kept)


def _hidden_lines(source: str) -> list[str]:
    inside, lines = False, []
    for line in source.splitlines():
        if line.strip() == BEGIN:
            inside = True
        elif line.strip() == END:
            inside = False
        elif inside and len(line.strip()) >= 8:  # short lines like "x = 1" say nothing
            lines.append(line.strip())
    return lines


def verdict(cell) -> list:
    """The outputs a student may see for one graded test cell that holds hidden tests."""
    hidden = _hidden_lines(cell.source)
    kept = [o for o in cell.get("outputs", []) if o.get("output_type") == "stream"
            and not any(line in o.get("text", "") for line in hidden)]
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            message = ANSI.sub("", str(output.get("evalue", ""))).strip()
            if any(line in message for line in hidden):
                message = "(details withheld: they quote the hidden test)"
            if len(message) > MAX_MESSAGE:
                message = message[:MAX_MESSAGE] + " ..."
            text = f"Tests failed: {output.get('ename', 'Error')}"
            text += f": {message}\n" if message else "\n"
            return kept + [new_output("stream", name="stderr", text=text)]
    return kept + [new_output("stream", name="stdout", text="All tests passed, hidden ones included.\n")]


class HideHiddenTests(Preprocessor):
    """Replace hidden-test source and outputs in graded notebooks before export."""

    enabled = Bool(True).tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if has_hidden_tests(cell):
            cell.outputs = verdict(cell)
            cell.source = without_hidden(cell.source)
        return cell, resources
