"""The model's two decode steps: prefill and decode_step.

    cache = model.new_cache(1)
    logits = prefill(model, prompt (1, T), cache)         # reads the prompt, fills positions 0..T-1
    next_id = logits.argmax(-1, keepdim=True)             # (1, 1)
    logits = decode_step(model, next_id, cache)           # one new position, attends to the cache

Those two are the steps notebook 03 takes by hand. The loops that drive them sit above the
engine, in ``course_lib.generation`` (``greedy_generate`` and friends).
"""
from __future__ import annotations

import torch

from course_lib.model.kv_cache import KVCache

__all__ = ["prefill", "decode_step", "as_prompt_tensor"]


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
            raise ValueError(f"give one prompt: a list, a 1-D tensor or shape (1, T); "
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
