"""Visible checks for notebook 02 (attention and the transformer block).

Expectations come from torch itself (scaled_dot_product_attention, tril, repeat_interleave)
or from tiny hand-worked cases, so a failure points at the learner's code, not at ours.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_lib.checks.report import expect_close, expect_equal, expect_raises


def _qkv(seed: int, *shape_q: int, n_keys: int | None = None, dv: int | None = None):
    g = torch.Generator().manual_seed(seed)
    *batch, n_q, d = shape_q
    n_keys = n_q if n_keys is None else n_keys
    return (torch.randn(*batch, n_q, d, generator=g), torch.randn(*batch, n_keys, d, generator=g),
            torch.randn(*batch, n_keys, dv or d, generator=g))


def scaled_dot_product_attention(fn) -> None:
    """A hand-worked case, then torch's SDPA with and without a keep-mask."""
    q, k, v = torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([[10.0], [20.0]])
    w = math.exp(1 / math.sqrt(2)) / (math.exp(1 / math.sqrt(2)) + 1)
    expect_close("one query, two keys (worked example)", fn(q, k, v), [[w * 10 + (1 - w) * 20]], atol=1e-4,
                 hint="scores = q @ k^T / sqrt(D), softmax over the keys, then weights @ v")
    q, k, v = _qkv(0, 2, 5, 8, n_keys=6, dv=3)
    got = fn(q, k, v)
    expect_equal("output shape for q (2, 5, 8), k (2, 6, 8), v (2, 6, 3)", tuple(got.shape), (2, 5, 3),
                 hint="the result has one row per query and the width of v")
    expect_close("matches torch SDPA", got.flatten(), F.scaled_dot_product_attention(q, k, v).flatten(), atol=1e-5,
                 hint="softmax over the last axis (the keys)")
    keep = torch.ones(5, 6, dtype=torch.bool)
    keep[:, 2] = False
    keep[0, 3:] = False
    expect_close("a boolean keep-mask hides keys", fn(q, k, v, mask=keep).flatten(),
                 F.scaled_dot_product_attention(q, k, v, attn_mask=keep).flatten(), atol=1e-5,
                 hint="set the scores where mask is False to -inf before the softmax")


def causal_mask(fn) -> None:
    expect_equal("causal_mask(3)", fn(3), torch.ones(3, 3, dtype=torch.bool).tril(),
                 hint="True on and below the diagonal: query i sees keys 0..i")
    expect_equal("causal_mask(2, 4): two new queries after two cached keys", fn(2, 4),
                 torch.ones(2, 4, dtype=torch.bool).tril(diagonal=2),
                 hint="the queries are the LAST positions: query i sits at position n_keys - n_queries + i")
    q, k, v = _qkv(1, 2, 6, 8)
    expect_close("as a mask, equals torch's is_causal=True",
                 F.scaled_dot_product_attention(q, k, v, attn_mask=fn(6)).flatten(),
                 F.scaled_dot_product_attention(q, k, v, is_causal=True).flatten(), atol=1e-5)
    expect_raises("more queries than keys is an error", lambda: fn(4, 2), ValueError)


def split_merge_heads(split_heads, merge_heads) -> None:
    x = torch.arange(2 * 3 * 8, dtype=torch.float32).reshape(2, 3, 8)  # (B=2, T=3, H*D=8)
    heads = split_heads(x, 2)
    expect_equal("split_heads shape (2, 3, 8) with 2 heads", tuple(heads.shape), (2, 2, 3, 4),
                 hint="(B, T, H*D) -> (B, H, T, D)")
    expect_equal("head 1 holds features 4..7", heads[0, 1, 0], x[0, 0, 4:8],
                 hint="view as (B, T, H, D), then swap the T and H axes")
    expect_equal("merge_heads undoes split_heads", merge_heads(heads).flatten(), x.flatten())
    expect_raises("8 features do not split into 3 heads", lambda: split_heads(x, 3), ValueError)


def apply_rope(fn) -> None:
    x = torch.tensor([[1.0, 0.0, 0.0, 1.0]])  # one position, D = 4: pairs (x0, x2) and (x1, x3)
    expect_close("position 0 is the identity", fn(x, torch.tensor([0])), x)
    angle_0, angle_1 = 1.0, 1.0 / 10000 ** 0.5  # rotation speeds theta^(-2i/D) for i = 0, 1
    expected = [[math.cos(angle_0), -math.sin(angle_1), math.sin(angle_0), math.cos(angle_1)]]
    expect_close("position 1, D = 4 (rotate_half layout)", fn(x, torch.tensor([1])), expected, atol=1e-5,
                 hint="pair feature i with feature i + D/2; angle = position * theta ** (-2i / D)")
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(1, 16, generator=g, dtype=torch.float64), torch.randn(1, 16, generator=g, dtype=torch.float64)
    near = (fn(q, torch.tensor([5])) * fn(k, torch.tensor([3]))).sum()
    far = (fn(q, torch.tensor([105])) * fn(k, torch.tensor([103]))).sum()
    expect_close("q.k depends only on the offset (5,3) vs (105,103)", far, near, atol=1e-6,
                 hint="rotate queries and keys with the same rule")


def repeat_kv(fn) -> None:
    kv = torch.tensor([1.0, 2.0]).view(1, 2, 1, 1)  # (B, Hkv=2, T, D)
    expect_equal("2 KV heads shared by 4 query heads", fn(kv, 2).flatten(), [1.0, 1.0, 2.0, 2.0],
                 hint="query head h uses KV head h // n_rep: repeat each head n_rep times in place")
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 6, 5, 8, generator=g)
    k, v = torch.randn(1, 2, 5, 8, generator=g), torch.randn(1, 2, 5, 8, generator=g)
    expect_close("GQA equals torch SDPA with enable_gqa=True",
                 F.scaled_dot_product_attention(q, fn(k, 3), fn(v, 3), is_causal=True).flatten(),
                 F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).flatten(), atol=1e-5)
    expect_equal("n_rep = 1 changes nothing", fn(k, 1).flatten(), k.flatten())
