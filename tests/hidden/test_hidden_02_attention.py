"""Known-wrong answers to notebook 02 fail its hidden tests, each on the rule it breaks."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tests.hidden.conftest import failures, verdict, visible_failure

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


def _rope_interleaved(x, positions, theta=10000.0):  # Meta's adjacent pairs, not the rotate-half layout
    return _rope(x, positions, theta, interleaved=True)


def _rope_backwards(x, positions, theta=10000.0):  # turns the other way
    return _rope(x, positions, theta, sign=-1.0)


def _rope_wrong_speeds(x, positions, theta=10000.0):  # theta^(-i/D) instead of theta^(-2i/D)
    return _rope(x, positions, theta, exponent=1.0)


def _rope_ignores_theta(x, positions, theta=10000.0):
    return _rope(x, positions, theta, fixed_theta=10000.0)


def _rope_low_precision_angles(x, positions, theta=10000.0):  # float16 angles at position 2,000 are off
    return _rope(x, positions, theta, angle_dtype=x.dtype)


def _rope_keeps_float64(x, positions, theta=10000.0):
    return _rope(x, positions, theta, cast_back=False)


def _rope_ignores_positions(x, positions, theta=10000.0):  # assumes positions 0..T-1
    return _rope(x, torch.arange(x.shape[-2]), theta)


def _rope_default_100(x, positions, theta=100.0):
    return _rope(x, positions, theta)


def _rope_plus_offset(x, positions, theta=10000.0):  # adds a position-dependent shift: not a rotation
    return _rope(x, positions, theta) + positions.to(x.dtype).unsqueeze(1) * 1e-3


# -- transformer_block (with rms_norm and repeat_kv) ------------------------------------------
def _split_heads(x, n_heads):
    b, t, w = x.shape
    return x.view(b, t, n_heads, w // n_heads).transpose(1, 2)


def _rope_half(x, theta):
    return _rope(x, torch.arange(x.shape[-2]), theta)


def _rms(x, weight, eps, *, eps_outside=False, subtract_mean=False):
    if subtract_mean:
        x = x - x.mean(-1, keepdim=True)
    if eps_outside:
        return weight * x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps)
    return weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _block(x, w, config, *, post_norm=False, causal=True, rope=True, tiled=False, activation=F.silu,
           gated=True, no_residual=False, norm=_rms, n_rep=None, theta=None, interleaved=False):
    n_heads, n_kv, eps = config["n_heads"], config["n_kv_heads"], config["norm_eps"]
    theta = config["rope_theta"] if theta is None else theta
    n_rep = n_heads // n_kv if n_rep is None else n_rep
    t = x.shape[1]
    pre = (lambda y, name: y) if post_norm else (lambda y, name: norm(y, w[name], eps))
    h = pre(x, "input_layernorm.weight")
    q = _split_heads(h @ w["self_attn.q_proj.weight"].T, n_heads)
    k = _split_heads(h @ w["self_attn.k_proj.weight"].T, n_kv)
    v = _split_heads(h @ w["self_attn.v_proj.weight"].T, n_kv)
    if rope:
        q = _rope(q, torch.arange(t), theta, interleaved=interleaved)
        k = _rope(k, torch.arange(t), theta, interleaved=interleaved)
    if tiled:
        k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)
    else:
        k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    attn = out.transpose(1, 2).reshape(*x.shape[:2], -1) @ w["self_attn.o_proj.weight"].T
    x = attn if no_residual else x + attn
    if post_norm:
        x = norm(x, w["input_layernorm.weight"], eps)
    h2 = x if post_norm else norm(x, w["post_attention_layernorm.weight"], eps)
    hidden = activation(h2 @ w["mlp.gate_proj.weight"].T)
    if gated:
        hidden = hidden * (h2 @ w["mlp.up_proj.weight"].T)
    x = x + hidden @ w["mlp.down_proj.weight"].T
    if post_norm:
        x = norm(x, w["post_attention_layernorm.weight"], eps)
    return x


def _post_norm_block(x, weights, config):  # x = Norm(x + f(x)): the original transformer's order
    return _block(x, weights, config, post_norm=True)


def _bidirectional_block(x, weights, config):  # forgets the causal mask
    return _block(x, weights, config, causal=False)


def _no_rope_block(x, weights, config):
    return _block(x, weights, config, rope=False)


def _interleaved_rope_block(x, weights, config):
    return _block(x, weights, config, interleaved=True)


def _tiled_kv_block(x, weights, config):  # query head h reads KV head h % n_kv, not h // n_rep
    return _block(x, weights, config, tiled=True)


def _ungated_block(x, weights, config):  # a plain silu MLP: the up projection is dropped
    return _block(x, weights, config, gated=False)


def _gelu_block(x, weights, config):
    return _block(x, weights, config, activation=F.gelu)


def _no_first_residual_block(x, weights, config):
    return _block(x, weights, config, no_residual=True)


def _layernorm_block(x, weights, config):  # LayerNorm's mean subtraction is not RMSNorm
    return _block(x, weights, config, norm=lambda y, w, eps: _rms(y, w, eps, subtract_mean=True))


def _eps_outside_block(x, weights, config):
    return _block(x, weights, config, norm=lambda y, w, eps: _rms(y, w, eps, eps_outside=True))


def _hard_coded_block(x, weights, config):  # tinychat's numbers typed in instead of read from config
    return _block(x, weights, {**config, "n_heads": 8, "n_kv_heads": 2, "rope_theta": 10000.0})


def _rms_eps_outside(x, weight, eps):
    return _rms(x, weight, eps, eps_outside=True)


def _rms_with_mean(x, weight, eps):
    return _rms(x, weight, eps, subtract_mean=True)


def _rms_no_weight(x, weight, eps):
    return _rms(x, torch.ones_like(weight), eps)


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


B = "transformer_block"
BLOCK_RULE = "pre-norm block (RMSNorm, RoPE, GQA, causal attention, SwiGLU, residuals) reproduces"

# (exercise, replaced names, fragment of the hidden check it breaks): see test_wrong_answers.py
WRONG_ANSWERS = [
    ("scaled_dot_product_attention", {"scaled_dot_product_attention": _unscaled}, "softmax(q k^T / sqrt(D)) v"),
    ("scaled_dot_product_attention", {"scaled_dot_product_attention": _scaled_by_value_width}, "not of the values"),
    ("scaled_dot_product_attention", {"scaled_dot_product_attention": _softmax_over_queries}, "over the keys"),
    ("scaled_dot_product_attention", {"scaled_dot_product_attention": _finite_fill}, "exactly zero weight"),
    ("scaled_dot_product_attention", {"scaled_dot_product_attention": _mask_ignored}, "with a boolean keep-mask"),
    ("scaled_dot_product_attention", {"scaled_dot_product_attention": _mask_inverted}, "with a boolean keep-mask"),
    ("scaled_dot_product_attention", {"scaled_dot_product_attention": _no_max_shift}, "large scores do not overflow"),
    ("scaled_dot_product_attention", {"scaled_dot_product_attention": _plain_transpose}, "for any leading axes"),
    ("scaled_dot_product_attention", {"scaled_dot_product_attention": _torch_shortcut},
     "without torch's scaled_dot_product_attention"),
    ("causal_mask", {"causal_mask": _top_left}, "the queries are the last positions"),
    ("causal_mask", {"causal_mask": _as_floats}, "boolean tensor"),
    ("causal_mask", {"causal_mask": _no_check}, "more queries than keys raises ValueError"),
    ("causal_mask", {"causal_mask": _strictly_below}, "True on and below the diagonal"),
    ("causal_mask", {"causal_mask": _upper}, "equals torch's is_causal=True"),
    ("split_merge_heads", {"split_heads": _split_by_reshape}, "head h holds features"),
    ("split_merge_heads", {"split_heads": _split_no_transpose}, "(B, T, H*D) -> (B, H, T, D)"),
    ("split_merge_heads", {"split_heads": _split_unchecked}, "do not split into 4 heads"),
    ("split_merge_heads", {"merge_heads": _merge_by_reshape}, "heads side by side"),
    ("split_merge_heads", {"merge_heads": _merge_by_view}, "heads side by side"),
    ("split_merge_heads", {"split_heads": _split_by_reshape, "merge_heads": _merge},
     "equal torch's nn.MultiheadAttention"),
    ("split_merge_heads", {"merge_heads": _merge_flat_view}, "straight from split_heads' output"),
    ("apply_rope", {"apply_rope": _rope_interleaved}, "each pair (x_i, x_(i+D/2))"),
    ("apply_rope", {"apply_rope": _rope_backwards}, "each pair (x_i, x_(i+D/2))"),
    ("apply_rope", {"apply_rope": _rope_wrong_speeds}, "each pair (x_i, x_(i+D/2))"),
    ("apply_rope", {"apply_rope": _rope_ignores_theta}, "theta=500"),
    ("apply_rope", {"apply_rope": _rope_low_precision_angles}, "at least float32"),
    ("apply_rope", {"apply_rope": _rope_keeps_float64}, "a float32 input gives a float32 result"),
    ("apply_rope", {"apply_rope": _rope_ignores_positions}, "turns by position"),
    ("apply_rope", {"apply_rope": _rope_default_100}, "theta defaults to 10000"),
    ("apply_rope", {"apply_rope": _rope_plus_offset}, "q . k depends only on the offset"),
    (B, {"repeat_kv": _tiled}, "repeated n_rep times in place"),
    (B, {"repeat_kv": _tiled}, "equals torch's enable_gqa"),
    (B, {"repeat_kv": _unchecked}, "below 1) raises ValueError"),
    (B, {"repeat_kv": _along_time}, "repeated n_rep times in place"),
    (B, {"rms_norm": _rms_eps_outside}, "eps goes inside the square root"),
    (B, {"rms_norm": _rms_with_mean}, "rms_norm: weight * x / sqrt(mean(x^2) + eps)"),
    (B, {"rms_norm": _rms_no_weight}, "rms_norm: weight * x / sqrt(mean(x^2) + eps)"),
    (B, {"transformer_block": _post_norm_block}, BLOCK_RULE),
    (B, {"transformer_block": _bidirectional_block}, BLOCK_RULE),
    (B, {"transformer_block": _no_rope_block}, BLOCK_RULE),
    (B, {"transformer_block": _interleaved_rope_block}, BLOCK_RULE),
    (B, {"transformer_block": _tiled_kv_block}, BLOCK_RULE),
    (B, {"transformer_block": _ungated_block}, BLOCK_RULE),
    (B, {"transformer_block": _gelu_block}, BLOCK_RULE),
    (B, {"transformer_block": _no_first_residual_block}, BLOCK_RULE),
    (B, {"transformer_block": _layernorm_block}, BLOCK_RULE),
    (B, {"transformer_block": _eps_outside_block}, "RMSNorm's eps inside the square root"),
    (B, {"transformer_block": _hard_coded_block}, "every size read from config"),
]


def test_the_oracle_layers_equal_hugging_face_llama():
    """The shipped layer the hidden test compares with is what transformers' Llama computes too."""
    import importlib.util

    import numpy as np

    from course_lib.model import to_hf_llama
    from tests.hidden.conftest import HIDDEN

    spec = importlib.util.spec_from_file_location("hidden_02", HIDDEN / f"{A}.py")
    hidden = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hidden)
    model, _, cases = hidden.shipped_layer_cases()
    hf = to_hf_llama(model, attn_implementation="eager")
    ids = torch.tensor([[int(i) for i in range(1, 10)]])
    with torch.no_grad():
        states = hf(ids, output_hidden_states=True).hidden_states
        ours = []
        hooks = [layer.register_forward_hook(lambda m, a, out: ours.append(out)) for layer in model.layers]
        model(ids)
        for hook in hooks:
            hook.remove()
    for layer_idx in range(model.config.n_layers - 1):  # HF's last hidden state has the final norm applied
        np.testing.assert_allclose(ours[layer_idx].numpy(), states[layer_idx + 1].numpy(), atol=1e-4)
    assert len(cases) == 4 * model.config.n_layers


def test_a_block_computed_in_float64_passes():
    """A right answer with a different order of operations (all in float64) still gets full marks."""
    def block64(x, weights, config):
        return _block(x.double(), {k: v.double() for k, v in weights.items()}, config).float()

    assert verdict(A, B, transformer_block=block64).passed
    assert not visible_failure(A, B, transformer_block=block64)
