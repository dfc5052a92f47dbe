"""Progressive hints: each call shows the next hint for an exercise and says how many remain.

    >>> hint = Hints({"softmax": ["Subtract the largest logit first.", "Handle T == 0 before dividing."]})
    >>> hint("softmax")
    Hint 1 of 2 for softmax: Subtract the largest logit first.
    (1 more: run hint("softmax") again)
    >>> hint("softmax")
    Hint 2 of 2 for softmax: Handle T == 0 before dividing.
    (that was the last hint)

The hints themselves live beside each notebook's visible checks (``HINTS`` in
``course_lib/checks/<topic>.py``); a notebook's setup cell makes ``hint = Hints(check.HINTS)``.
"""
from __future__ import annotations


class Hints:
    def __init__(self, hints: dict[str, list[str]]) -> None:
        self.hints = hints
        self.shown: dict[str, int] = {}  # per notebook kernel: how far each exercise has got

    def __call__(self, exercise: str) -> None:
        if exercise not in self.hints:
            raise KeyError(f"no hints for {exercise!r}; exercises with hints: {', '.join(self.hints)}")
        hints = self.hints[exercise]
        index = self.shown.get(exercise, 0)
        if index >= len(hints):
            print(f"No more hints for {exercise}: all {len(hints)} are above. "
                  "The failing check's message names the rule your answer breaks.")
            return
        self.shown[exercise] = index + 1
        print(f"Hint {index + 1} of {len(hints)} for {exercise}: {hints[index]}")
        remaining = len(hints) - index - 1
        print(f'({remaining} more: run hint("{exercise}") again)' if remaining else "(that was the last hint)")
