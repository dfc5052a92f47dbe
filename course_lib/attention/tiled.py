"""Tiled attention with an online softmax: FlashAttention's recurrence, written in plain torch.

Naive attention materialises the whole (Tq, Tk) score matrix. Here queries are processed in
blocks of `block_size` rows and, for each query block, keys/values stream past in blocks of
`block_size` columns. Only one (block, block) tile of scores exists at a time; per query row
we keep a running maximum m, a running softmax denominator l and an unnormalised output o:

    m_new = max(m, rowmax(S))                  S = q_blk k_blk^T * scale
    P     = exp(S - m_new)
    l     = l * exp(m - m_new) + rowsum(P)     rescale what was summed under the old maximum
    o     = o * exp(m - m_new) + P v_blk
    output = o / l                             after the last key block

Subtracting the running maximum keeps every exp() <= 1, so huge scores do not overflow, and
the result equals softmax(QK^T * scale) V exactly (up to rounding). Extra memory: one tile of
scores plus m, l and o, i.e. O(block^2 + Tq * D), linear in the sequence length.
"""
from __future__ import annotations

import math

import torch

from course_lib.attention.core import _check_qkv
from course_lib.validation import positive_int

__all__ = ["tiled_attention"]


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, block_size: int,
                    is_causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """Same result as scaled_dot_product_attention(q, k, v, is_causal=...) for (..., T, D) inputs.

    Causal follows the course convention: queries are the last Tq positions of the keys.
    Key blocks entirely in a query block's future are skipped, not just masked.

    >>> q, k, v = torch.randn(1, 10, 4), torch.randn(1, 10, 4), torch.randn(1, 10, 4)
    >>> from course_lib.attention.core import scaled_dot_product_attention as sdpa
    >>> torch.allclose(tiled_attention(q, k, v, block_size=3, is_causal=True), sdpa(q, k, v, is_causal=True), atol=1e-6)
    True
    """
    _check_qkv(q, k, v)
    positive_int("block_size", block_size)
    n_queries, n_keys = q.shape[-2], k.shape[-2]
    if is_causal and n_queries > n_keys:
        raise ValueError(f"causal attention needs at most as many queries ({n_queries}) as keys ({n_keys})")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    compute_dtype = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    offset = n_keys - n_queries  # absolute position of query 0 when causal

    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)  # (..., Tq, Dv)
    for q_start in range(0, n_queries, block_size):
        q_blk = q[..., q_start:q_start + block_size, :].to(compute_dtype)  # (..., Bq, D)
        rows = q_blk.shape[-2]
        running_max = q_blk.new_full((*q_blk.shape[:-1], 1), float("-inf"))  # (..., Bq, 1)
        running_sum = q_blk.new_zeros((*q_blk.shape[:-1], 1))  # (..., Bq, 1)
        acc = q_blk.new_zeros((*q_blk.shape[:-1], v.shape[-1]))  # (..., Bq, Dv)
        # The last key this query block may see; later key blocks are pure future.
        key_stop = min(n_keys, offset + q_start + rows) if is_causal else n_keys
        for k_start in range(0, key_stop, block_size):
            k_blk = k[..., k_start:k_start + block_size, :].to(compute_dtype)  # (..., Bk, D)
            v_blk = v[..., k_start:k_start + block_size, :].to(compute_dtype)  # (..., Bk, Dv)
            scores = torch.matmul(q_blk, k_blk.transpose(-2, -1)) * scale  # (..., Bq, Bk)
            if is_causal and k_start + k_blk.shape[-2] - 1 > offset + q_start:
                # This tile straddles the diagonal: hide keys after each query's own position.
                q_pos = torch.arange(rows, device=q.device).unsqueeze(1) + offset + q_start  # (Bq, 1)
                k_pos = torch.arange(k_blk.shape[-2], device=q.device).unsqueeze(0) + k_start  # (1, Bk)
                scores = scores.masked_fill(k_pos > q_pos, float("-inf"))
            new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))  # (..., Bq, 1)
            # A row that has seen only masked keys so far has max -inf; shift by 0 there to avoid inf-inf.
            safe_max = torch.where(torch.isneginf(new_max), torch.zeros_like(new_max), new_max)
            probs = torch.exp(scores - safe_max)  # (..., Bq, Bk), every entry <= 1
            correction = torch.exp(running_max - safe_max)  # (..., Bq, 1): rescale the old sums
            running_sum = running_sum * correction + probs.sum(dim=-1, keepdim=True)
            acc = acc * correction + torch.matmul(probs, v_blk)  # (..., Bq, Dv)
            running_max = new_max
        # Rows that saw nothing (impossible when causal with Tq <= Tk) would be 0/0; give zeros.
        out[..., q_start:q_start + rows, :] = (acc / running_sum.clamp_min(torch.finfo(compute_dtype).tiny)).to(q.dtype)
    return out
