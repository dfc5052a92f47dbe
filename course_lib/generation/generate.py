"""The decode helpers: one prompt through the serving engine, to completion.

``generate`` and ``generate_many`` decode under a ``SamplingParams`` rule; ``greedy_generate``
takes the argmax on token ids alone (notebook 03's loop, with its slow uncached reference).

    prompt -> token IDs -> the engine's steps [process logits -> sample -> next pass] until an
    end token, a stop string or a stop token (all "stop", as OpenAI's API names them) or the
    token cap ("length").

These are thin callers of ``course_lib.serving.Engine``, the course's one decode loop: each
call builds an engine sized for its job (``Engine.for_job``) and runs it to completion.

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

from collections.abc import Iterable, Sequence

import torch

from course_lib.model.steps import as_prompt_tensor
from course_lib.sampling.params import SamplingParams
from course_lib.sampling.prompt import encode_prompt
from course_lib.sampling.result import GenerationResult
from course_lib.serving.engine import Engine
from course_lib.tokenization.chat_template import end_token_ids
from course_lib.validation import positive_int

__all__ = ["GenerationResult", "default_eos_ids", "encode_prompt", "generate", "generate_many", "greedy_generate"]


def default_eos_ids(tokenizer) -> tuple[int, ...]:
    """IDs of the course's end tokens (<|end|>, <|endoftext|>) that this tokenizer knows."""
    return end_token_ids(tokenizer)


def _generate_rows(model, tokenizer, prompt, params, n_rows, generator, eos_ids, guide=None):
    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
    if generator is None and not params.greedy:
        generator = torch.Generator()
        if params.seed is not None:
            generator.manual_seed(params.seed)
        else:
            generator.seed()  # fresh entropy: unseeded sampling is meant to vary
    prompt_ids = encode_prompt(tokenizer, prompt)
    # Room for every row's whole reply at once (up to the window), so nothing is ever preempted.
    engine = Engine.for_job(model, tokenizer, rows=n_rows, tokens=len(prompt_ids) + params.max_new_tokens)
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


@torch.no_grad()
def greedy_generate(model, prompt_ids: Sequence[int] | torch.Tensor, max_new_tokens: int, *,
                    stop_ids: Iterable[int] = (), use_cache: bool = True) -> list[int]:
    """Append the argmax token max_new_tokens times (or until a stop id); return the new ids.

    The returned list excludes the prompt and includes the stop id when one ended generation.
    use_cache=False recomputes the whole sequence every step (the slow reference); both paths
    give the same tokens.
    """
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a non-negative int, got {max_new_tokens!r}")
    ids = as_prompt_tensor(prompt_ids, model.device)  # (1, T)
    stop = set(int(s) for s in stop_ids)
    limit = model.config.max_seq_len
    if ids.shape[1] + max_new_tokens > limit:
        raise ValueError(f"prompt of {ids.shape[1]} tokens plus max_new_tokens={max_new_tokens} exceeds the "
                         f"context window max_seq_len={limit}; shorten the prompt or ask for fewer tokens")
    if max_new_tokens == 0:
        return []

    if use_cache:
        engine = Engine.for_job(model, rows=1, tokens=ids.shape[1] + max_new_tokens, prefix_caching=False)
        params = SamplingParams(temperature=0, max_new_tokens=max_new_tokens, stop_token_ids=tuple(stop))
        return list(engine.generate([ids[0].tolist()], params)[0].token_ids)
    generated: list[int] = []
    while True:
        logits = model(ids)[:, -1, :]  # (1, V): the whole prefix is recomputed
        next_id = logits.argmax(dim=-1, keepdim=True)  # (1, 1)
        generated.append(int(next_id))
        if generated[-1] in stop or len(generated) == max_new_tokens:
            return generated
        ids = torch.cat([ids, next_id], dim=1)  # (1, T + 1)
