"""A finished reply: what every decode loop in the course returns."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Completion", "GenerationResult"]


@dataclass(frozen=True)
class Completion:
    """A finished request, as ``Engine.generate`` and ``generate`` return it."""

    text: str                    # decoded output, stop string and end token removed
    token_ids: tuple[int, ...]   # every sampled token, including the one that ended generation
    finish_reason: str
    prompt_ids: tuple[int, ...]
    stop_sequence: str | None = None  # which stop string matched, when one did


GenerationResult = Completion  # the name the sampling notebook (04) uses
