"""Replaying a fixed input set on one deployment: the same conversations, pinned decoding, scored.

A deployment is a model plus how it is driven: temperature, seed and the reply cap. Replaying the
same inputs on two deployments is what makes a comparison *paired* (``course_lib.operations.drift``).
Each request gets its own seed (``seed`` plus its index), so a sampled replay repeats exactly and
does not depend on which requests share its batch.

    >>> replay(None, None, [], name="no tokenizer")
    Traceback (most recent call last):
    ...
    ValueError: replay needs the model's tokenizer (load_tokenizer("tinychat"))
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from course_lib.data.scoring import SCORERS
from course_lib.generation.replies import BATCH_ROWS
from course_lib.sampling import SamplingParams
from course_lib.serving import Engine

__all__ = ["Replay", "replay"]


@dataclass(frozen=True)
class Replay:
    name: str
    tasks: tuple[str, ...]            # one per conversation, in order
    replies: tuple[str, ...]
    correct: tuple[bool, ...]
    finish_reasons: tuple[str, ...]   # "stop" or "length"
    completion_tokens: tuple[int, ...]

    @property
    def accuracy(self) -> float:
        return sum(self.correct) / len(self.correct)

    def accuracy_by_task(self) -> dict[str, float]:
        by: dict[str, list[bool]] = {}
        for task, ok in zip(self.tasks, self.correct):
            by.setdefault(task, []).append(ok)
        return {task: sum(flags) / len(flags) for task, flags in by.items()}


def replay(model, tokenizer, conversations: Sequence, *, name: str, temperature: float = 0.0, seed: int = 0,
           max_new_tokens: int = 48) -> Replay:
    """Serve ``conversations`` (course ``Conversation`` objects) on ``model`` and score each reply
    with the corpus's own scorer (``course_lib.data.scoring.SCORERS``)."""
    if tokenizer is None:
        raise ValueError('replay needs the model\'s tokenizer (load_tokenizer("tinychat"))')
    if not conversations:
        raise ValueError("replay needs at least one conversation")
    params = [SamplingParams(temperature=temperature, seed=seed + i, max_new_tokens=max_new_tokens)
              for i in range(len(conversations))]
    engine = Engine.for_job(model, tokenizer, rows=min(BATCH_ROWS, len(conversations)))
    done = engine.generate([c.prompt_messages for c in conversations], params)
    return Replay(name, tuple(c.task for c in conversations), tuple(d.text for d in done),
                  tuple(bool(SCORERS[c.task](d.text, c.expected)) for c, d in zip(conversations, done)),
                  tuple(d.finish_reason for d in done), tuple(len(d.token_ids) for d in done))
