"""Generation from small composable pieces: prefill, decode_step, greedy_generate.

    cache = model.new_cache(1)
    logits = prefill(model, prompt (1, T), cache)         # reads the prompt, fills positions 0..T-1
    next_id = logits.argmax(-1, keepdim=True)             # (1, 1)
    logits = decode_step(model, next_id, cache)           # one new position, attends to the cache

Those two are the steps notebook 03 takes by hand. ``greedy_generate`` runs the serving engine
(``course_lib.serving.Engine``, the course's one decode loop) on a single prompt; only its
``use_cache=False`` reference, which recomputes the whole sequence every step, stays here as
the slow baseline the cache is measured against.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import torch

from course_lib.model.kv_cache import KVCache

__all__ = ["prefill", "decode_step", "greedy_generate", "as_prompt_tensor"]


@torch.no_grad()
def prefill(model, ids: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """Run the prompt ids (B, T) through the model, filling the cache; logits of the last position (B, V).

    The cache may already hold a prefix (chunked prefill): the ids then continue it.
    """
    return model(ids, cache=cache)[:, -1, :]  # (B, V)


@torch.no_grad()
def decode_step(model, token_ids: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """Feed one new token per sequence, token_ids (B, 1), through the cached model; logits (B, V)."""
    if not isinstance(token_ids, torch.Tensor) or token_ids.dim() != 2 or token_ids.shape[1] != 1:
        shape = tuple(token_ids.shape) if isinstance(token_ids, torch.Tensor) else type(token_ids).__name__
        raise ValueError(f"decode_step takes exactly one token per sequence, shape (B, 1); got {shape}")
    return model(token_ids, cache=cache)[:, -1, :]  # (B, V)


def as_prompt_tensor(prompt_ids, device) -> torch.Tensor:
    """A list of ints, a 1-D tensor or a (1, T) tensor -> a (1, T) long tensor on `device`.

    >>> as_prompt_tensor([5, 6, 7], "cpu").tolist()
    [[5, 6, 7]]
    """
    if isinstance(prompt_ids, torch.Tensor):
        if prompt_ids.is_floating_point() or prompt_ids.dtype == torch.bool:
            raise TypeError(f"prompt ids must be integers, got a {prompt_ids.dtype} tensor")
        ids = prompt_ids.reshape(1, -1) if prompt_ids.dim() == 1 else prompt_ids
        if ids.dim() != 2 or ids.shape[0] != 1:
            raise ValueError(f"greedy_generate takes one prompt: a list, a 1-D tensor or shape (1, T); "
                             f"got shape {tuple(prompt_ids.shape)}")
        ids = ids.to(device=device, dtype=torch.long)
    else:
        ids_list = list(prompt_ids)
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in ids_list):
            raise TypeError("prompt ids must be a sequence of ints")
        ids = torch.tensor([ids_list], dtype=torch.long, device=device)  # (1, T)
    if ids.shape[1] == 0:
        raise ValueError("the prompt is empty; give at least one token id (e.g. a BOS or role marker)")
    return ids


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
        from course_lib.sampling.params import SamplingParams  # serving builds on this package
        from course_lib.serving.engine import Engine

        engine = Engine(model, None, max_num_seqs=1, prefix_caching=False,
                        num_blocks=-(-(ids.shape[1] + max_new_tokens) // 16))
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
