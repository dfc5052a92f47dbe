"""Known-wrong answers made from a notebook's own solution instead of written out again.

``mutant(notebook, name, (old, new), ..., label=...)`` is the solution cell that defines
``name`` with each edit applied to its source, run beside the notebook's other answers; an edit
is a pair (replace ``old`` by ``new``) or ``moved(piece, before)`` (move a piece of the source). A
wrong answer built this way holds no second copy of the rule it breaks: the edit is the bug.
Each ``old`` must occur exactly once, so a solution edited until an edit no longer applies
fails loudly instead of silently testing nothing. The answer is built on its first call, so
collecting the tests runs no notebook.
"""
from __future__ import annotations

import functools
import re

from course_lib.pipeline.authoring import build_notebook
from tests.hidden.conftest import AUTHORING, answers


def mutant(notebook: str, name: str, *edits: tuple[str, str], label: str):
    @functools.lru_cache(maxsize=None)
    def build():
        defines = re.compile(rf"^(def|class) {re.escape(name)}\b", re.MULTILINE)
        cells = [c.source for c in build_notebook(AUTHORING / f"{notebook}.py").cells if c.cell_type == "code"
                 and c.metadata.get("nbgrader", {}).get("solution") and defines.search(c.source)]
        assert len(cells) == 1, f"{notebook}: {len(cells)} solution cells define {name}"
        source = cells[0]
        for edit in edits:
            if callable(edit):
                source = edit(source)
                continue
            old, new = edit
            assert source.count(old) == 1, f"{notebook} {name}: the solution holds {source.count(old)} of {old!r}"
            source = source.replace(old, new)
        namespace = dict(answers(notebook))
        exec(compile(source, f"<{notebook} {name}: {label}>", "exec"), namespace)
        return namespace[name]

    def wrong(*args, **kwargs):
        return build()(*args, **kwargs)
    wrong.__name__ = wrong.__qualname__ = label
    return wrong


def moved(start: str, end: str, before: str):
    """An edit: the piece of source from the line starting ``start`` up to (not including) the line
    starting ``end`` moves to just before the line starting ``before`` (each found exactly once)."""
    def edit(source: str) -> str:
        lines = source.splitlines(keepends=True)

        def at(prefix):
            found = [i for i, line in enumerate(lines) if line.startswith(prefix)]
            assert len(found) == 1, f"{len(found)} lines start with {prefix!r}"
            return found[0]
        a, b = at(start), at(end)
        piece, rest = lines[a:b], lines[:a] + lines[b:]
        lines = rest
        c = at(before)
        return "".join(rest[:c] + piece + rest[c:])
    return edit
