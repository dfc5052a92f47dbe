"""Widen every attention head with zero dimensions, leaving the network's function unchanged.

Serving engines accept only some head sizes (vLLM's CPU attention starts at 32; tinychat's heads
are 16 wide), so ``course export-hf`` writes tinychat with its heads padded. The padding is exact:

- rotary position embedding rotates dimension j with j + P/2 at frequency theta^(-2j/P). With
  P = r·D, the even-spaced dimensions j = r·i turn at theta^(-2i/D), the frequencies of the
  original D-wide head. So original dimension i (i < D/2) moves to r·i and its partner i + D/2
  to r·i + P/2; every other dimension is zero in q, k and v and stays zero when rotated;
- a score q·k only sums the moved dimensions, so it is unchanged; attention divides it by
  sqrt(P) instead of sqrt(D), so the query weights are multiplied by sqrt(r) to give it back;
- the zero value dimensions add nothing to the output projection.

>>> import torch
>>> from course_lib.model import Transformer, get_config
>>> model = Transformer(get_config("test-gqa"), generator=torch.Generator().manual_seed(0)).eval()
>>> wide = pad_heads(model, 2 * model.config.head_dim)
>>> ids = torch.tensor([[1, 2, 3, 4, 5]])
>>> torch.allclose(wide(ids), model(ids), atol=1e-5)
True
"""
from __future__ import annotations

import dataclasses
import math

import torch

from course_lib.model.transformer import Transformer

__all__ = ["padded_positions", "pad_heads"]


def padded_positions(head_dim: int, padded: int) -> list[int]:
    """Where each of a head's ``head_dim`` dimensions lands in a ``padded``-wide head.

    >>> padded_positions(4, 8)
    [0, 2, 4, 6]
    """
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"rotary heads have an even width of at least 2, got head_dim={head_dim}")
    if padded < head_dim or padded % head_dim:
        raise ValueError(f"the padded head width must be a multiple of head_dim={head_dim} (such as "
                         f"{2 * head_dim}), got {padded}: only then do its rotary frequencies include the original ones")
    r, half = padded // head_dim, head_dim // 2
    return [r * i for i in range(half)] + [r * i + padded // 2 for i in range(half)]


def _widen_rows(weight: torch.Tensor, heads: int, index: torch.Tensor, padded: int, scale: float = 1.0):
    """(heads*D, d_model) projection rows -> (heads*P, d_model), each head's rows moved to index."""
    d, d_model = weight.shape[0] // heads, weight.shape[1]
    out = weight.new_zeros(heads, padded, d_model)
    out[:, index] = weight.reshape(heads, d, d_model) * scale
    return out.reshape(heads * padded, d_model)


def pad_heads(model: Transformer, head_dim: int) -> Transformer:
    """A copy of ``model`` whose heads are ``head_dim`` wide (a multiple of the current width),
    with the same logits up to float rounding; ``model`` itself is left as it was."""
    config = model.config
    if head_dim == config.head_dim:
        wide = Transformer(config, generator=torch.Generator().manual_seed(0))
        wide.load_state_dict(model.state_dict())
        return wide.to(device=model.device, dtype=model.dtype).eval()
    index = torch.tensor(padded_positions(config.head_dim, head_dim))
    scale = math.sqrt(head_dim / config.head_dim)  # sqrt(P) / sqrt(D): the score's old divisor
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for layer in range(config.n_layers):
        prefix = f"layers.{layer}.self_attn."
        state[prefix + "q_proj.weight"] = _widen_rows(state[prefix + "q_proj.weight"], config.n_heads, index,
                                                      head_dim, scale)
        for name in ("k_proj", "v_proj"):
            state[prefix + f"{name}.weight"] = _widen_rows(state[prefix + f"{name}.weight"], config.n_kv_heads,
                                                           index, head_dim)
        o = state[prefix + "o_proj.weight"]  # (d_model, heads*D): the same moves on its columns
        state[prefix + "o_proj.weight"] = _widen_rows(o.T, config.n_heads, index, head_dim).T.contiguous()
    wide = Transformer(dataclasses.replace(config, head_dim=head_dim), generator=torch.Generator().manual_seed(0))
    wide.load_state_dict(state)
    return wide.to(device=model.device, dtype=model.dtype).eval()
