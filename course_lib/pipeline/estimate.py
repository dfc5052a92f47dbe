"""How long a notebook takes a new reader: the estimate its header and the README state.

    minutes = prose words / 150 (careful technical reading)
            + code lines / 6 (read, run, glance at the output)
            + 12 per exercise (attempt, check, fix)

Prose includes the notebook's interview probe cards: they live in the probe bank
(course_lib/drills/probes.toml), and the notebook shows them with ``show_probes``.
Rounded to 5 minutes. A heuristic from reading rates, not a timed reader: it errs long, on
purpose. tests/pipeline/test_scaffolding.py keeps each notebook's stated time and the
README's within 25% of it, so the figures move when a notebook grows.
"""
from __future__ import annotations

from pathlib import Path

from course_lib.pipeline.authoring import parse

WORDS_PER_MINUTE = 150
CODE_LINES_PER_MINUTE = 6
MINUTES_PER_EXERCISE = 12


def reading_minutes(authoring_file: Path) -> int:
    cells = parse(Path(authoring_file).read_text(encoding="utf-8"), origin=str(authoring_file))
    words = sum(len(c.body.split()) for c in cells if c.kind == "markdown") + _probe_words(Path(authoring_file).stem)
    code = sum(len([l for l in c.body.splitlines() if l.strip()]) for c in cells
               if c.kind in ("code", "setup", "solution", "tests"))
    exercises = sum(c.kind == "tests" for c in cells)
    minutes = words / WORDS_PER_MINUTE + code / CODE_LINES_PER_MINUTE + exercises * MINUTES_PER_EXERCISE
    return max(5, 5 * round(minutes / 5))


def _probe_words(notebook: str) -> int:
    from course_lib.drills.cards import cards_for, render_markdown  # imports the drills (and torch) only when asked

    cards = cards_for(notebook)
    return len(render_markdown(cards).split()) if cards else 0
