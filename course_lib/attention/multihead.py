"""Multi-head attention with n_kv_heads: MHA (n_kv_heads == n_heads), GQA (fewer), MQA (one).

Grouped-query attention keeps n_heads query heads but only n_kv_heads key/value heads; each
key/value head is shared by n_heads / n_kv_heads consecutive query heads. The KV cache then
stores n_kv_heads heads per layer instead of n_heads, which is the whole point.

Parameter names (q_proj, k_proj, v_proj, o_proj) follow Hugging Face's Llama so that
checkpoints map one to one.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from course_lib.attention.core import attention_weights, merge_heads, repeat_kv, scaled_dot_product_attention, split_heads
from course_lib.attention.positions import apply_rotary

__all__ = ["MultiHeadAttention"]


class MultiHeadAttention(nn.Module):
    """Project to heads, (optionally) rotate, attend, merge heads, project back.

    >>> attn = MultiHeadAttention(d_model=16, n_heads=4, n_kv_heads=2)
    >>> tuple(attn(torch.randn(3, 5, 16)).shape)        # (B, T, d_model) in and out
    (3, 5, 16)

    The cache, if given, is one of two kinds:
    - an object with `update(layer_idx, k, v) -> (keys, values)` that stores the new
      keys/values (B, n_kv_heads, T, head_dim) after the ones it already holds and returns
      everything stored so far, e.g. course_lib.model.KVCache; attention then runs here;
    - an object with `attend(layer_idx, q, k, v) -> out (B, n_heads, T, head_dim)` that stores
      k, v and runs the attention itself, because only it knows where each token's keys live:
      the serving engine's paged pool (course_lib.serving.model_runner.PagedCache), whose
      one row of T tokens holds many sequences.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None, *,
                 head_dim: int | None = None, bias: bool = False, qkv_bias: bool | None = None, qk_norm=None):
        """``bias``: every projection has one; ``qkv_bias`` (default: ``bias``) only q, k and v
        (Qwen2). ``qk_norm``: a factory ``head_dim -> module`` whose modules normalise each
        head's queries and keys before the rotation (Qwen3's q_norm and k_norm)."""
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if n_heads < 1 or n_kv_heads < 1 or n_heads % n_kv_heads:
            raise ValueError(f"n_heads ({n_heads}) must be a positive multiple of n_kv_heads ({n_kv_heads})")
        if head_dim is None:
            if d_model % n_heads:
                raise ValueError(f"d_model {d_model} is not divisible by n_heads {n_heads}; pass head_dim")
            head_dim = d_model // n_heads
        self.d_model, self.n_heads, self.n_kv_heads, self.head_dim = d_model, n_heads, n_kv_heads, head_dim
        qkv_bias = bias if qkv_bias is None else qkv_bias
        self.q_proj = nn.Linear(d_model, n_heads * head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(n_heads * head_dim, d_model, bias=bias)
        self.q_norm = self.k_norm = None
        if qk_norm is not None:
            self.q_norm, self.k_norm = qk_norm(head_dim), qk_norm(head_dim)

    def project_qkv(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor] | None = None):
        """x (B, T, d_model) -> q (B, H, T, D), k and v (B, Hkv, T, D), rotated if tables are given."""
        q = split_heads(self.q_proj(x), self.n_heads)  # (B, H, T, D)
        k = split_heads(self.k_proj(x), self.n_kv_heads)  # (B, Hkv, T, D)
        v = split_heads(self.v_proj(x), self.n_kv_heads)  # (B, Hkv, T, D)
        if self.q_norm is not None:  # per head, over D
            q, k = self.q_norm(q), self.k_norm(k)
        if rotary is not None:
            cos, sin = rotary  # (T, D) each, for the absolute positions of these T tokens
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        return q, k, v

    def forward(self, x: torch.Tensor, *, rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
                cache=None, layer_idx: int = 0, is_causal: bool = True,
                mask: torch.Tensor | None = None, return_weights: bool = False, fused: bool = False):
        """x (B, T, d_model) -> (B, T, d_model); with return_weights also the (B, H, T, Tk) weights.

        ``fused=True`` (training: no cache, causal, no mask) hands the same softmax(q kᵀ/√D) v to
        torch's fused kernel, which shares key/value heads without copying them; the attention
        tests hold the course's function equal to it, and ``benchmarks/bench_train.py`` times
        the two (neither is faster in every setting)."""
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"expected x of shape (B, T, {self.d_model}), got {tuple(x.shape)}")
        q, k, v = self.project_qkv(x, rotary)
        if fused:
            if cache is not None or mask is not None or return_weights or not is_causal:
                raise ValueError("fused attention is for uncached causal passes without a mask or weights")
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # (B, H, T, D)
            return self.o_proj(merge_heads(out))
        if cache is not None and hasattr(cache, "attend"):
            if return_weights or mask is not None or not is_causal:
                raise ValueError("a cache that runs its own attention (attend) is causal, without a mask or weights")
            return self.o_proj(merge_heads(cache.attend(layer_idx, q, k, v)))  # (B, T, d_model)
        if cache is not None:
            k, v = cache.update(layer_idx, k, v)  # (B, Hkv, Tk, D): the cached prefix plus these T
        n_rep = self.n_heads // self.n_kv_heads
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # (B, H, Tk, D)
        if return_weights:
            weights = attention_weights(q, k, mask=mask, is_causal=is_causal)  # (B, H, T, Tk)
            out = torch.matmul(weights.to(v.dtype), v)  # (B, H, T, D)
            return self.o_proj(merge_heads(out)), weights
        out = scaled_dot_product_attention(q, k, v, mask=mask, is_causal=is_causal)  # (B, H, T, D)
        return self.o_proj(merge_heads(out))  # (B, T, d_model)
