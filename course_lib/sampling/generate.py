"""generate(): one prompt through the serving engine under a decoding rule.

    prompt -> token IDs -> the engine's steps [process logits -> sample -> next pass] until an
    end token, a stop string or a stop token (all "stop", as OpenAI's API names them) or the
    token cap ("length").

These are thin callers of ``course_lib.serving.Engine``, the course's one decode loop: each
call builds an engine sized for its prompt and runs it to completion.

``generate_many`` runs n copies of one prompt as one batch: n independent samples for the
price of one forward pass per step (how the notebooks count answers over hundreds of runs).
Rows are independent but share one generator, drawing from it in turn, so row 0 of a batch
of 8 does not see the same random numbers as a run of one; a seed fixes the whole batch's
stream, not each row's. (The engine gives every request its own generator; this function
hands all rows the same one on purpose, to show what that changes.)

    >>> result = generate(model, tokenizer, "<|user|>What is 2 + 2?<|end|><|assistant|>",
    ...                   SamplingParams(temperature=0))                  # doctest: +SKIP
    >>> result.finish_reason                                             # doctest: +SKIP
    'stop'
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from course_lib.kv_memory.paging import blocks_needed
from course_lib.sampling.params import SamplingParams
from course_lib.sampling.prompt import encode_prompt
from course_lib.sampling.result import GenerationResult
from course_lib.tokenization.chat_template import end_token_ids
from course_lib.validation import positive_int

__all__ = ["GenerationResult", "default_eos_ids", "encode_prompt", "generate", "generate_many"]


def default_eos_ids(tokenizer) -> tuple[int, ...]:
    """IDs of the course's end tokens (<|end|>, <|endoftext|>) that this tokenizer knows."""
    return end_token_ids(tokenizer)


def _generate_rows(model, tokenizer, prompt, params, n_rows, generator, eos_ids, guide=None):
    from course_lib.serving.engine import Engine  # serving builds on sampling: import at call time

    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
    if generator is None and not params.greedy:
        generator = torch.Generator()
        if params.seed is not None:
            generator.manual_seed(params.seed)
        else:
            generator.seed()  # fresh entropy: unseeded sampling is meant to vary
    prompt_ids = encode_prompt(tokenizer, prompt)
    window = getattr(getattr(model, "config", None), "max_seq_len", None)
    # Room for every row's whole reply at once, so nothing is ever preempted.
    length = len(prompt_ids) + params.max_new_tokens if window is None else window
    engine = Engine(model, tokenizer, max_num_seqs=n_rows, max_batched_tokens=max(2048, n_rows),
                    num_blocks=n_rows * blocks_needed(min(length, window or length), 16))
    return engine.generate([prompt_ids] * n_rows, params, guide=guide, generator=generator,
                           eos_ids=eos_ids)


def generate(model, tokenizer, prompt, params: SamplingParams | None = None, *,
             generator: torch.Generator | None = None,
             eos_ids: Sequence[int] | None = None, guide=None) -> GenerationResult:
    """Generate one completion of ``prompt`` under ``params``.

    ``generator`` drives every random draw; without one, ``params.seed`` seeds a fresh CPU
    generator, and without a seed the run is deliberately unrepeatable. Greedy decoding
    (temperature 0) draws nothing. ``eos_ids`` defaults to the tokenizer's <|end|> and
    <|endoftext|>. Generation also stops at the model's context window ("length").
    ``guide`` (a ``course_lib.structured`` guide) masks every step to its grammar and decides
    the end token; ``course_lib.structured.generate_structured`` is the friendlier entry.
    """
    params = SamplingParams() if params is None else params
    return _generate_rows(model, tokenizer, prompt, params, 1, generator, eos_ids, guide)[0]


def generate_many(model, tokenizer, prompt, params: SamplingParams | None = None, n: int = 1, *,
                  generator: torch.Generator | None = None,
                  eos_ids: Sequence[int] | None = None, guide=None) -> list[GenerationResult]:
    """``n`` independent completions of one prompt, decoded together as a batch of n rows."""
    positive_int("n", n)
    params = SamplingParams() if params is None else params
    return _generate_rows(model, tokenizer, prompt, params, n, generator, eos_ids, guide)

