"""Scaled dot-product attention, the causal mask and the head-reshaping helpers.

Everything here works on plain tensors whose last two dimensions are (positions, features),
so the same function serves one head, a batch of heads, or a batch of sequences of heads.

Worked example (one query, two keys, D = 1, scale 1):
    q = [[1.]], k = [[1.], [0.]], v = [[10.], [20.]]
    scores = [1, 0] -> softmax -> [0.731, 0.269] -> output 0.731*10 + 0.269*20 = 12.69
"""
from __future__ import annotations

import math

import torch

__all__ = [
    "causal_mask",
    "scaled_dot_product_attention",
    "attention_weights",
    "split_heads",
    "merge_heads",
    "repeat_kv",
]


def causal_mask(n_queries: int, n_keys: int | None = None, *, device=None) -> torch.Tensor:
    """Boolean keep-mask (n_queries, n_keys): True where a query may look at a key.

    The queries are taken to be the *last* n_queries positions of the key sequence, which is
    what decoding with a KV cache needs: query i sits at absolute position
    n_keys - n_queries + i and sees every key up to and including that position.

    >>> causal_mask(3).int().tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    >>> causal_mask(1, 3).int().tolist()        # one new token after two cached ones
    [[1, 1, 1]]
    >>> causal_mask(2, 4).int().tolist()
    [[1, 1, 1, 0], [1, 1, 1, 1]]
    """
    n_keys = n_queries if n_keys is None else n_keys
    if n_queries < 1 or n_keys < 1:
        raise ValueError(f"causal_mask needs at least one query and one key, got {n_queries} and {n_keys}")
    if n_queries > n_keys:
        raise ValueError(
            f"causal_mask got {n_queries} queries but only {n_keys} keys; the queries must be the "
            "last positions of the key sequence, so there cannot be more of them than keys"
        )
    offset = n_keys - n_queries  # absolute position of the first query
    query_pos = torch.arange(n_queries, device=device).unsqueeze(1) + offset  # (Tq, 1)
    key_pos = torch.arange(n_keys, device=device).unsqueeze(0)  # (1, Tk)
    return key_pos <= query_pos  # (Tq, Tk)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v for q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv).

    Follows torch.nn.functional.scaled_dot_product_attention:
    - scale defaults to 1/sqrt(D), so dot products of unit-variance vectors keep unit variance;
    - a boolean mask is a keep-mask (True = may attend), a float mask is added to the scores;
      either broadcasts to (..., Tq, Tk);
    - a query row with nothing to attend to returns zeros (as torch does), not NaN.

    Deliberate differences from torch:
    - is_causal with fewer queries than keys treats the queries as the last positions (see
      `causal_mask`), so one decoding query sees the whole cache; torch aligns the mask to the
      top-left corner and would let it see only the first key. With Tq == Tk they agree.
    - mask and is_causal may be given together; both restrictions then apply.

    Scores and softmax run in float32 for half-precision inputs; the result has q's dtype.

    >>> q = torch.tensor([[1.0]]); k = torch.tensor([[1.0], [0.0]]); v = torch.tensor([[10.0], [20.0]])
    >>> round(scaled_dot_product_attention(q, k, v, scale=1.0).item(), 2)
    12.69
    """
    _check_qkv(q, k, v)
    weights = _softmax_weights(q, k, mask, is_causal, scale)  # (..., Tq, Tk)
    return torch.matmul(weights, v.to(weights.dtype)).to(q.dtype)  # (..., Tq, Dv)


def attention_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """The softmax weights (..., Tq, Tk) that scaled_dot_product_attention mixes values with.

    Same arguments and conventions as scaled_dot_product_attention; each row sums to 1 (or is
    all zeros when the mask hides every key). Returned in float32 for half-precision inputs.

    >>> attention_weights(torch.ones(2, 1), torch.ones(2, 1), is_causal=True).tolist()
    [[1.0, 0.0], [0.5, 0.5]]
    """
    _check_qkv(q, k, k)
    return _softmax_weights(q, k, mask, is_causal, scale)


def _softmax_weights(q, k, mask, is_causal, scale) -> torch.Tensor:
    """attention_weights without the input checks (the callers have done them)."""
    n_queries, n_keys = q.shape[-2], k.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    compute_dtype = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype

    scores = torch.matmul(q.to(compute_dtype), k.to(compute_dtype).transpose(-2, -1)) * scale  # (..., Tq, Tk)
    keep = None
    if is_causal and n_queries > 1:  # a single query is the last position and sees every key
        keep = causal_mask(n_queries, n_keys, device=q.device)  # (Tq, Tk)
    if mask is not None:
        if mask.dtype == torch.bool:
            keep = mask if keep is None else keep & mask
        elif mask.is_floating_point():
            scores = scores + mask.to(compute_dtype)
        else:
            raise TypeError(f"mask must be bool (keep-mask) or floating point (additive), got {mask.dtype}")
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))

    weights = torch.softmax(scores, dim=-1)  # (..., Tq, Tk)
    if mask is not None:
        # A row whose every score is -inf gives 0/0 in softmax; torch returns zeros there. Only
        # a caller's mask can hide a whole row: the causal mask always lets a query see itself.
        nothing_visible = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (..., Tq, 1)
        weights = weights.masked_fill(nothing_visible, 0.0)
    return weights


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Shape and dtype checks up front, so a mistake reads as a sentence, not a matmul error."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(f"{name} must have shape (..., T, D); got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be floating point, got {t.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k need the same feature size D; got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v need the same number of positions; got k {tuple(k.shape)} and v {tuple(v.shape)}")


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, T, H*D) -> (B, H, T, D): cut the feature axis into n_heads slices of size D.

    >>> split_heads(torch.arange(8.).reshape(1, 2, 4), 2)[0, 1].tolist()   # head 1 = features 2..3
    [[2.0, 3.0], [6.0, 7.0]]
    """
    if x.dim() != 3:
        raise ValueError(f"split_heads expects (B, T, H*D), got shape {tuple(x.shape)}")
    batch, seq, width = x.shape
    if n_heads < 1 or width % n_heads != 0:
        raise ValueError(f"feature size {width} does not split into {n_heads} equal heads")
    return x.view(batch, seq, n_heads, width // n_heads).transpose(1, 2)  # (B, H, T, D)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, D) -> (B, T, H*D): the inverse of split_heads.

    >>> x = torch.randn(2, 5, 12); torch.equal(merge_heads(split_heads(x, 3)), x)
    True
    """
    if x.dim() != 4:
        raise ValueError(f"merge_heads expects (B, H, T, D), got shape {tuple(x.shape)}")
    batch, n_heads, seq, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq, n_heads * head_dim)  # (B, T, H*D)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(B, Hkv, T, D) -> (B, Hkv*n_rep, T, D): share each key/value head with n_rep query heads.

    Query head h uses key/value head h // n_rep (consecutive query heads form a group), the
    layout Llama-family checkpoints use.

    >>> repeat_kv(torch.tensor([1., 2.]).view(1, 2, 1, 1), 2).flatten().tolist()
    [1.0, 1.0, 2.0, 2.0]
    """
    if x.dim() != 4:
        raise ValueError(f"repeat_kv expects (B, Hkv, T, D), got shape {tuple(x.shape)}")
    if n_rep < 1:
        raise ValueError(f"n_rep must be >= 1, got {n_rep}")
    if n_rep == 1:
        return x
    batch, n_kv, seq, head_dim = x.shape
    x = x[:, :, None, :, :].expand(batch, n_kv, n_rep, seq, head_dim)  # (B, Hkv, n_rep, T, D)
    return x.reshape(batch, n_kv * n_rep, seq, head_dim)  # (B, H, T, D)
