"""Known-wrong answers to notebook 02 fail its hidden tests, each on the rule it breaks."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tests.hidden.conftest import failures, verdict

A = "02_attention"


# -- scaled_dot_product_attention -------------------------------------------------------------
def _attention(q, k, v, mask=None, *, scale=None, dim=-1, fill=float("-inf"), keep_means_true=True):
    scores = q @ k.transpose(-2, -1) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if mask is not None:
        scores = scores.masked_fill(~mask if keep_means_true else mask, fill)
    return torch.softmax(scores, dim=dim) @ v


def _unscaled(q, k, v, mask=None):
    return _attention(q, k, v, mask, scale=1.0)


def _scaled_by_value_width(q, k, v, mask=None):
    return _attention(q, k, v, mask, scale=1 / math.sqrt(v.shape[-1]))


def _softmax_over_queries(q, k, v, mask=None):
    return _attention(q, k, v, mask, dim=-2)


def _finite_fill(q, k, v, mask=None):  # -1e4 is not -inf: it can outrank very negative visible scores
    return _attention(q, k, v, mask, fill=-1e4)


def _mask_ignored(q, k, v, mask=None):
    return _attention(q, k, v, None)


def _mask_inverted(q, k, v, mask=None):  # True taken to mean "hide"
    return _attention(q, k, v, mask, keep_means_true=False)


def _no_max_shift(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.exp()
    return weights / weights.sum(-1, keepdim=True) @ v


def _plain_transpose(q, k, v, mask=None):  # k.T reverses every axis, not just the last two
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kt = k.T if k.dim() == 2 else k.permute(*reversed(range(k.dim())))
    scores = q @ kt / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, -1) @ v


def _torch_shortcut(q, k, v, mask=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("wrong, broken_rule", [
    (_unscaled, "softmax(q k^T / sqrt(D)) v"),
    (_scaled_by_value_width, "not of the values"),
    (_softmax_over_queries, "over the keys"),
    (_finite_fill, "exactly zero weight"),
    (_mask_ignored, "with a boolean keep-mask"),
    (_mask_inverted, "with a boolean keep-mask"),
    (_no_max_shift, "large scores do not overflow"),
    (_plain_transpose, "for any leading axes"),
    (_torch_shortcut, "without torch's scaled_dot_product_attention"),
])
def test_wrong_attention_fails_on_the_rule_it_breaks(wrong, broken_rule):
    result = verdict(A, "scaled_dot_product_attention", scaled_dot_product_attention=wrong)
    assert not result.passed
    assert broken_rule in failures(result), failures(result)


def test_torch_shortcut_fails_only_the_rule_it_breaks():
    result = verdict(A, "scaled_dot_product_attention", scaled_dot_product_attention=_torch_shortcut)
    assert failures(result).count("✗") == 1, failures(result)


# -- causal_mask ------------------------------------------------------------------------------
def _top_left(n_queries, n_keys=None):  # torch.tril without the offset: queries taken as the first positions
    n_keys = n_queries if n_keys is None else n_keys
    if n_queries > n_keys:
        raise ValueError("too many queries")
    return torch.ones(n_queries, n_keys, dtype=torch.bool).tril()


def _as_floats(n_queries, n_keys=None):
    n_keys = n_queries if n_keys is None else n_keys
    if n_queries > n_keys:
        raise ValueError("too many queries")
    return torch.ones(n_queries, n_keys).tril(diagonal=n_keys - n_queries)


def _no_check(n_queries, n_keys=None):
    n_keys = n_queries if n_keys is None else n_keys
    return torch.ones(n_queries, n_keys, dtype=torch.bool).tril(diagonal=n_keys - n_queries)


def _strictly_below(n_queries, n_keys=None):  # a query may not see its own key
    n_keys = n_queries if n_keys is None else n_keys
    if n_queries > n_keys:
        raise ValueError("too many queries")
    return torch.ones(n_queries, n_keys, dtype=torch.bool).tril(diagonal=n_keys - n_queries - 1)


def _upper(n_queries, n_keys=None):  # True where a query must NOT look
    n_keys = n_queries if n_keys is None else n_keys
    if n_queries > n_keys:
        raise ValueError("too many queries")
    return torch.ones(n_queries, n_keys, dtype=torch.bool).triu(diagonal=n_keys - n_queries + 1)


@pytest.mark.parametrize("wrong, broken_rule", [
    (_top_left, "the queries are the last positions"),
    (_as_floats, "boolean tensor"),
    (_no_check, "more queries than keys raises ValueError"),
    (_strictly_below, "True on and below the diagonal"),
    (_upper, "equals torch's is_causal=True"),
])
def test_wrong_causal_mask_fails_on_the_rule_it_breaks(wrong, broken_rule):
    result = verdict(A, "causal_mask", causal_mask=wrong)
    assert not result.passed
    assert broken_rule in failures(result), failures(result)


# -- split_heads / merge_heads ----------------------------------------------------------------
def _split(x, n_heads):
    b, t, w = x.shape
    if w % n_heads:
        raise ValueError("does not divide")
    return x.view(b, t, n_heads, w // n_heads).transpose(1, 2)


def _merge(x):
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


def _split_by_reshape(x, n_heads):  # heads cut across positions, not features
    b, t, w = x.shape
    if w % n_heads:
        raise ValueError("does not divide")
    return x.reshape(b, n_heads, t, w // n_heads)


def _split_no_transpose(x, n_heads):  # (B, T, H, D)
    b, t, w = x.shape
    if w % n_heads:
        raise ValueError("does not divide")
    return x.view(b, t, n_heads, w // n_heads)


def _split_unchecked(x, n_heads):
    b, t, w = x.shape
    return x.view(b, t, n_heads, w // n_heads).transpose(1, 2)


def _merge_by_reshape(x):  # forgets to bring the heads back next to each other
    b, h, t, d = x.shape
    return x.reshape(b, t, h * d)


def _merge_by_view(x):  # view cannot flatten the non-contiguous transposed tensor
    b, h, t, d = x.shape
    return x.transpose(1, 2).view(b, t, h * d)


def _merge_flat_view(x):  # right on the contiguous tensors that cross the boundary, wrong on split_heads' view
    b, h, t, d = x.shape
    if not x.is_contiguous():
        return x.reshape(b, t, h * d)
    return x.transpose(1, 2).reshape(b, t, h * d)


@pytest.mark.parametrize("replacements, broken_rule", [
    ({"split_heads": _split_by_reshape}, "head h holds features"),
    ({"split_heads": _split_no_transpose}, "(B, T, H*D) -> (B, H, T, D)"),
    ({"split_heads": _split_unchecked}, "do not split into 4 heads"),
    ({"merge_heads": _merge_by_reshape}, "heads side by side"),
    ({"merge_heads": _merge_by_view}, "heads side by side"),
    ({"split_heads": _split_by_reshape, "merge_heads": _merge}, "equal torch's nn.MultiheadAttention"),
])
def test_wrong_heads_fail_on_the_rule_they_break(replacements, broken_rule):
    result = verdict(A, "split_merge_heads", **replacements)
    assert not result.passed
    assert broken_rule in failures(result), failures(result)


def test_only_the_kernel_side_round_trip_sees_a_merge_that_breaks_on_views():
    result = verdict(A, "split_merge_heads", merge_heads=_merge_flat_view)
    assert failures(result) and all("straight from split_heads' output" in line
                                    for line in failures(result).splitlines()), failures(result)


# -- apply_rope -------------------------------------------------------------------------------
def _rope(x, positions, theta=10000.0, *, exponent=2.0, angle_dtype=torch.float64, cast_back=True,
          interleaved=False, sign=1.0, fixed_theta=None):
    theta = fixed_theta or theta
    d = x.shape[-1]
    speeds = 1.0 / theta ** (exponent * torch.arange(0, d // 2, dtype=angle_dtype) / d)
    angles = positions.to(angle_dtype).unsqueeze(1) * speeds  # (T, D/2)
    cos, sin = angles.cos(), sign * angles.sin()
    work = x.to(angle_dtype)
    if interleaved:  # pairs (x_0, x_1), (x_2, x_3), ...
        a, b = work[..., 0::2], work[..., 1::2]
        out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    else:
        a, b = work[..., : d // 2], work[..., d // 2:]
        out = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    return out.to(x.dtype) if cast_back else out


@pytest.mark.parametrize("wrong, broken_rule", [
    (lambda x, p, theta=10000.0: _rope(x, p, theta, interleaved=True), "each pair (x_i, x_(i+D/2))"),
    (lambda x, p, theta=10000.0: _rope(x, p, theta, sign=-1.0), "each pair (x_i, x_(i+D/2))"),
    (lambda x, p, theta=10000.0: _rope(x, p, theta, exponent=1.0), "each pair (x_i, x_(i+D/2))"),
    (lambda x, p, theta=10000.0: _rope(x, p, theta, fixed_theta=10000.0), "theta=500"),
    (lambda x, p, theta=10000.0: _rope(x, p, theta, angle_dtype=x.dtype), "at least float32"),
    (lambda x, p, theta=10000.0: _rope(x, p, theta, cast_back=False), "a float32 input gives a float32 result"),
    (lambda x, p, theta=10000.0: _rope(x, torch.arange(x.shape[-2]), theta), "turns by position"),
    (lambda x, p, theta=100.0: _rope(x, p, theta), "theta defaults to 10000"),
])
def test_wrong_rope_fails_on_the_rule_it_breaks(wrong, broken_rule):
    result = verdict(A, "apply_rope", apply_rope=wrong)
    assert not result.passed
    assert broken_rule in failures(result), failures(result)


def test_rope_with_absolute_angles_breaks_the_offset_rule():
    def rope_plus_offset(x, positions, theta=10000.0):  # adds a position-dependent shift: not a rotation
        return _rope(x, positions, theta) + positions.to(x.dtype).unsqueeze(1) * 1e-3

    result = verdict(A, "apply_rope", apply_rope=rope_plus_offset)
    assert "q . k depends only on the offset" in failures(result), failures(result)


# -- repeat_kv --------------------------------------------------------------------------------
def _tiled(x, n_rep):  # [a, b] -> [a, b, a, b]
    if n_rep < 1:
        raise ValueError("n_rep")
    return x.repeat(1, n_rep, 1, 1)


def _unchecked(x, n_rep):
    return torch.repeat_interleave(x, n_rep, dim=1)


def _along_time(x, n_rep):
    if n_rep < 1:
        raise ValueError("n_rep")
    return torch.repeat_interleave(x, n_rep, dim=2)


@pytest.mark.parametrize("wrong, broken_rule", [
    (_tiled, "repeated n_rep times in place"),
    (_tiled, "equals torch's enable_gqa"),
    (_unchecked, "below 1) raises ValueError"),
    (_along_time, "repeated n_rep times in place"),
])
def test_wrong_repeat_kv_fails_on_the_rule_it_breaks(wrong, broken_rule):
    result = verdict(A, "repeat_kv", repeat_kv=wrong)
    assert not result.passed
    assert broken_rule in failures(result), failures(result)
