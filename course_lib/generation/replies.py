"""Replies to many prompts at once, as ``course eval`` and notebook 07 collect them.

Every prompt is one request to the serving engine, batched continuously; greedy at
temperature 0, or each request sampled with its own seed drawn from one generator.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from course_lib.sampling.params import SamplingParams
from course_lib.serving.engine import Engine

__all__ = ["BATCH_ROWS", "generate_replies", "generate_replies_for"]

BATCH_ROWS = 64  # requests decoded side by side when many prompts are replied to; the rest queue


@torch.no_grad()
def generate_replies(model, tokenizer, conversations: Sequence, *, temperature: float = 0.0,
                     generator: torch.Generator | None = None, max_new_tokens: int = 64) -> list[str]:
    """Each conversation's graded reply (``course_lib.data.corpus.Conversation``: the messages
    before it are the prompt) as the model writes it, greedy when temperature is 0."""
    return generate_replies_for(model, tokenizer, [c.prompt_messages for c in conversations],
                                temperature=temperature, generator=generator, max_new_tokens=max_new_tokens)


@torch.no_grad()
def generate_replies_for(model, tokenizer, prompts: Sequence[list[dict]], *, temperature: float = 0.0,
                         generator: torch.Generator | None = None, max_new_tokens: int = 64) -> list[str]:
    """The model's reply to each prompt (a list of chat messages), greedy when temperature is 0.

    Every prompt is one request to the serving engine (``course_lib.serving.Engine``),
    which batches them continuously until each has produced an end token or
    ``max_new_tokens`` tokens. Sampling draws from softmax(logits / temperature), the raw
    tempered distribution; each request gets its own seed, drawn from ``generator``, so a
    reply does not depend on which others share its batch.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature > 0 and generator is None:
        raise ValueError("sampling needs an explicit torch.Generator (seeded) so results can be reproduced")
    if temperature == 0:
        params = [SamplingParams(temperature=0, max_new_tokens=max_new_tokens)] * len(prompts)
    else:
        seeds = torch.randint(0, 2**62, (len(prompts),), generator=generator).tolist()
        params = [SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed) for seed in seeds]
    if not prompts:
        return []
    engine = Engine.for_job(model, tokenizer, rows=min(BATCH_ROWS, len(prompts)))
    return [c.text for c in engine.generate(list(prompts), params)]
