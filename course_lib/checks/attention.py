"""Visible checks for notebook 02 (attention and the transformer block).

Expectations come from torch itself (scaled_dot_product_attention, tril, repeat_interleave)
or from tiny hand-worked cases, so a failure points at the learner's code, not at ours.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_lib.checks.report import expect_close, expect_equal, expect_raises

HINTS = {
    "scaled_dot_product_attention": [
        "Three steps: scores from queries and keys, a softmax that turns each row of scores into "
        "weights, then a weighted sum of the values.",
        "Transpose only the last two axes of k (k.transpose(-2, -1)), so any batch and head axes "
        "stay where they are; divide by the square root of the QUERY width q.shape[-1].",
        "With a mask, use scores.masked_fill(~mask, float('-inf')) before torch.softmax(scores, dim=-1); "
        "-inf becomes exactly 0 after the softmax, a finite number such as -1e4 does not.",
    ],
    "causal_mask": [
        "Query i may see key j when j is not in its future. Start with n_queries == n_keys: "
        "that is the lower triangle including the diagonal.",
        "With fewer queries than keys the queries are the LAST positions: query i sits at "
        "position n_keys - n_queries + i. Check n_queries > n_keys first and raise ValueError.",
        "Compare a column of key positions torch.arange(n_keys) with a column of query positions "
        "torch.arange(n_queries)[:, None] + (n_keys - n_queries) using <=; the result is already boolean.",
    ],
    "split_merge_heads": [
        "Head h must get a contiguous slice of FEATURES; positions are never mixed between heads.",
        "split: x.view(B, T, H, D) cuts the last axis into heads, then .transpose(1, 2) moves the "
        "head axis in front of the positions. Check width % n_heads first.",
        "merge: transpose(1, 2) back to (B, T, H, D), then .reshape(B, T, H * D); reshape (not view) "
        "copies when the memory is not in order, as it is not after split_heads.",
    ],
    "apply_rope": [
        "Feature i is paired with feature i + D/2, and pair i turns by the angle position * theta ** (-2i / D).",
        "Build angles of shape (T, D/2) as positions[:, None] * speeds, in float32 or float64 "
        "whatever x's dtype, then cos and sin of them repeated twice along the last axis to (T, D).",
        "The rotation is x * cos + rotate_half(x) * sin, where rotate_half splits the last axis into "
        "halves [a, b] and returns [-b, a]; cast the result back to x.dtype.",
    ],
    "transformer_block": [
        "Write rms_norm and repeat_kv first: each is a few lines. Then follow the numbered steps of "
        "the exercise, printing shapes as you go.",
        "rms_norm: x / sqrt(mean(x**2 over the last axis) + eps), times weight. repeat_kv: index "
        "x[:, :, None], expand the new axis to n_rep, then reshape so copies of one head sit side by side.",
        "Linear layers are h @ W.T. q goes into n_heads heads, k and v into n_kv_heads; apply_rope "
        "with torch.arange(T); repeat k and v by n_heads // n_kv_heads; attention with causal_mask(T).",
        "Pre-norm: the residual x is never normalised itself. x = x + o_proj(merged attention of "
        "rms_norm(x)); then return x + down(silu(gate(h2)) * up(h2)) with h2 = rms_norm(x, post weight).",
    ],
}


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
    expect_close("a boolean keep-mask hides keys (True = may attend)", fn(q, k, v, mask=keep).flatten(),
                 F.scaled_dot_product_attention(q, k, v, attn_mask=keep).flatten(), atol=1e-5,
                 hint="set the scores where mask is False to -inf before the softmax")
    q, k, v = _qkv(4, 2, 3, 4, 8, n_keys=5, dv=2)  # (B=2, H=3, ...): two leading axes
    expect_close("leading batch and head axes come along", fn(q, k, v).flatten(),
                 F.scaled_dot_product_attention(q, k, v).flatten(), atol=1e-5,
                 hint="transpose only the last two axes of k: k.transpose(-2, -1), not k.T")
    q, k, v = _qkv(5, 3, 16, n_keys=4, dv=2)  # D = 16 but the values are only 2 wide
    expect_close("the scale is 1/sqrt(D) of the queries and keys, not of the values", fn(q, k, v).flatten(),
                 F.scaled_dot_product_attention(q, k, v).flatten(), atol=1e-5,
                 hint="divide by math.sqrt(q.shape[-1])")
    q, k, v = _qkv(6, 3, 4, n_keys=5)
    q = q * 60.0  # scores in the hundreds: exp overflows unless the row maximum is subtracted first
    got = fn(q, k, v)
    expect_close("large scores do not overflow (subtract the row maximum)", got.flatten(),
                 F.scaled_dot_product_attention(q.double(), k.double(), v.double()).flatten(), atol=1e-4,
                 hint="torch.softmax subtracts the maximum for you; a hand-written exp must do it itself")
    # Every visible score near -1e5: a finite fill such as -1e4 for hidden keys would outrank them.
    k = torch.randn(4, 4, generator=torch.Generator().manual_seed(7))
    k = 2 * k / k.norm(dim=-1, keepdim=True)  # |k|^2 = 4, so each visible score is -3e4 * 4 / 2
    q = -3e4 * k[:2]
    v = torch.zeros(4, 1)
    v[2:] = 1e6  # any weight leaking onto the hidden keys shows up as a huge output
    keep = torch.tensor([[True, False, False, False], [False, True, False, False]])
    expect_close("hidden keys get exactly zero weight, even when every visible score is very negative",
                 fn(q, k, v, mask=keep).flatten(), [0.0, 0.0], atol=1e-4,
                 hint="fill hidden scores with float('-inf'), not a finite number")
    expect_equal("written by hand, without torch's scaled_dot_product_attention", _calls_torch_sdpa(fn), False,
                 hint="the test compares you with torch.nn.functional.scaled_dot_product_attention: write it yourself")


def _calls_torch_sdpa(fn) -> bool:
    """Whether fn reaches torch's fused attention (the exercise asks for it by hand)."""
    seen = []
    original = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append(True)
        return original(*args, **kwargs)

    F.scaled_dot_product_attention = spy
    torch.nn.functional.scaled_dot_product_attention = spy
    try:
        q, k, v = _qkv(8, 3, 4)
        fn(q, k, v)
    finally:
        F.scaled_dot_product_attention = original
        torch.nn.functional.scaled_dot_product_attention = original
    return bool(seen)


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
    expect_equal("the mask is a boolean tensor", getattr(fn(3, 5), "dtype", None), torch.bool,
                 hint="comparisons such as <= already give torch.bool; do not convert to float")


def split_merge_heads(split_heads, merge_heads) -> None:
    x = torch.arange(2 * 3 * 8, dtype=torch.float32).reshape(2, 3, 8)  # (B=2, T=3, H*D=8)
    heads = split_heads(x, 2)
    expect_equal("split_heads shape (2, 3, 8) with 2 heads", tuple(heads.shape), (2, 2, 3, 4),
                 hint="(B, T, H*D) -> (B, H, T, D)")
    expect_equal("head 1 holds features 4..7", heads[0, 1, 0], x[0, 0, 4:8],
                 hint="view as (B, T, H, D), then swap the T and H axes")
    expect_equal("merge_heads undoes split_heads", merge_heads(heads).flatten(), x.flatten())
    y = torch.arange(2 * 3 * 2 * 4, dtype=torch.float32).reshape(2, 3, 2, 4)  # (B, H=3, T=2, D=4), contiguous
    expect_equal("merge_heads on a freshly made (B, H, T, D) tensor: heads side by side",
                 merge_heads(y), y.permute(0, 2, 1, 3).reshape(2, 2, 12),
                 hint="transpose(1, 2) back to (B, T, H, D), then reshape (view fails on non-contiguous memory)")
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
    x = torch.randn(2, 3, 8, generator=g)
    positions = torch.tensor([0, 7, 40])
    expect_close("theta is a parameter: theta=500", fn(x, positions, theta=500.0),
                 _rope_by_complex_numbers(x, positions, 500.0), atol=1e-5,
                 hint="use the theta argument in theta ** (-2i / D), not a fixed 10000")
    got = fn(x, positions)
    expect_equal("a float32 input gives a float32 result of the same shape", (got.dtype, tuple(got.shape)),
                 (torch.float32, (2, 3, 8)), hint="cast the result back to x.dtype")
    half, far = torch.randn(3, 32, generator=g).half(), torch.tensor([1500, 2047, 3001])
    got = fn(half, far)
    expect_equal("a float16 input stays float16", got.dtype, torch.float16, hint="cast the result back to x.dtype")
    expect_close("angles in at least float32, even for float16 input at positions in the thousands",
                 got.float(), _rope_by_complex_numbers(half.float(), far, 10000.0), atol=2e-2,
                 hint="compute positions * speeds in float32 or float64, then cast only the result")


def _rope_by_complex_numbers(x, positions, theta):
    """RoPE written independently: pair (x_i, x_{i+D/2}) is the complex number x_i + j x_{i+D/2}."""
    x = x.double()
    d = x.shape[-1]
    z = torch.complex(x[..., : d // 2], x[..., d // 2:])  # (..., T, D/2)
    speeds = theta ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)
    turn = torch.polar(torch.ones(len(positions), d // 2, dtype=torch.float64),
                       positions.double()[:, None] * speeds)  # (T, D/2): e^{j p theta_i}
    w = z * turn
    return torch.cat([w.real, w.imag], dim=-1)


def repeat_kv(fn) -> None:
    kv = torch.tensor([1.0, 2.0]).view(1, 2, 1, 1)  # (B, Hkv=2, T, D)
    expect_equal("2 KV heads shared by 4 query heads, repeated in place", fn(kv, 2).flatten(), [1.0, 1.0, 2.0, 2.0],
                 hint="query head h uses KV head h // n_rep: [a, b] -> [a, a, b, b], not [a, b, a, b]")
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 6, 5, 8, generator=g)
    k, v = torch.randn(1, 2, 5, 8, generator=g), torch.randn(1, 2, 5, 8, generator=g)
    expect_equal("(B, H_kv, T, D) -> (B, H_kv * n_rep, T, D)", tuple(fn(k, 3).shape), (1, 6, 5, 8),
                 hint="repeat along the head axis (dim 1), not along the positions")
    expect_close("GQA equals torch SDPA with enable_gqa=True",
                 F.scaled_dot_product_attention(q, fn(k, 3), fn(v, 3), is_causal=True).flatten(),
                 F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).flatten(), atol=1e-5)
    expect_equal("n_rep = 1 changes nothing", fn(k, 1).flatten(), k.flatten())
    expect_raises("n_rep = 0 raises ValueError", lambda: fn(k, 0), ValueError,
                  hint="check n_rep < 1 before repeating")


def rms_norm(fn) -> None:
    x, weight = torch.tensor([[3.0, 4.0]]), torch.tensor([1.0, 2.0])
    rms = math.sqrt((9 + 16) / 2)
    expect_close("rms_norm([3, 4]), weight [1, 2], eps 0", fn(x, weight, 0.0), [[3 / rms, 8 / rms]], atol=1e-6,
                 hint="divide by sqrt(mean(x**2)) over the last axis, then multiply by weight; no mean subtraction")
    small = torch.tensor([[1e-3, -2e-3, 3e-3]])
    expected = small / torch.sqrt(small.pow(2).mean(-1, keepdim=True) + 1e-5)
    expect_close("eps goes inside the square root (small activations, eps 1e-5)", fn(small, torch.ones(3), 1e-5),
                 expected, atol=1e-5, hint="x / sqrt(mean(x**2) + eps), not x / (sqrt(mean(x**2)) + eps)")


_LAYER_CASES: dict = {}


def _layer_cases():
    """The trained tinychat (or, without weights, a seeded random one) and real block inputs."""
    if not _LAYER_CASES:
        from course_lib.model import Transformer, WeightsNotFoundError, get_config, load_model, load_tokenizer

        try:
            model = load_model("tinychat", device="cpu")
            ids = load_tokenizer("tinychat").encode("<|user|>What is 2 + 2?<|end|><|assistant|>", allowed_special="all")
        except (WeightsNotFoundError, ImportError):
            model = Transformer(get_config("tinychat"), generator=torch.Generator().manual_seed(0)).eval()
            ids = list(range(1, 13))
        captured = []
        hooks = [layer.register_forward_hook(lambda m, args, out: captured.append((args[0].detach(), out.detach())))
                 for layer in model.layers]
        with torch.no_grad():
            model(torch.tensor([ids]))
        for hook in hooks:
            hook.remove()
        cfg = model.config
        config = dict(n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads, head_dim=cfg.head_dim,
                      norm_eps=cfg.norm_eps, rope_theta=cfg.rope_theta)
        _LAYER_CASES.update(model=model, captured=captured, config=config)
    return _LAYER_CASES


def transformer_block(block, rms_norm_fn, repeat_kv_fn) -> None:
    rms_norm(rms_norm_fn)
    repeat_kv(repeat_kv_fn)
    cases = _layer_cases()
    model, config = cases["model"], cases["config"]
    for layer_idx, (x, expected) in enumerate(cases["captured"]):
        weights = {name: t.detach().clone() for name, t in model.layers[layer_idx].state_dict().items()}
        with torch.no_grad():
            got = block(x.clone(), weights, dict(config))
        expect_equal(f"layer {layer_idx}: output shape", tuple(got.shape), tuple(expected.shape),
                     hint="return the residual stream, (B, T, d_model), like x")
        expect_close(f"layer {layer_idx}: reproduces the trained layer on a real prompt ({x.shape[1]} tokens)",
                     got.flatten(), expected.flatten(), atol=1e-4, rtol=1e-4,
                     hint="pre-norm: x + attn(rms_norm(x)), then x + mlp(rms_norm(x)); run hint('transformer_block')")
    x, _ = cases["captured"][0]
    layer = model.layers[0]
    small = x[:, :5] * 1e-3  # activations this small make eps matter
    with torch.no_grad():
        expected = layer(small, rotary=model.rotary.slice(0, 5))
        got = block(small, {n: t.detach().clone() for n, t in layer.state_dict().items()}, dict(config))
    expect_close("eps inside the square root (activations scaled down 1000x)", got.flatten(), expected.flatten(),
                 atol=1e-4, rtol=1e-4, hint="rms_norm divides by sqrt(mean(x**2) + eps)")
    _other_geometry(block)


def _other_geometry(block) -> None:
    """A random block with one KV head for four query heads and RoPE base 500: nothing hard-coded."""
    from course_lib.model import Transformer, get_config

    cfg = get_config("test-mqa", rope_theta=500.0)
    model = Transformer(cfg, generator=torch.Generator().manual_seed(1)).eval()
    x = torch.randn(2, 6, cfg.d_model, generator=torch.Generator().manual_seed(2))
    config = dict(n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads, head_dim=cfg.head_dim,
                  norm_eps=cfg.norm_eps, rope_theta=cfg.rope_theta)
    with torch.no_grad():
        expected = model.layers[0](x, rotary=model.rotary.slice(0, 6))
        got = block(x.clone(), {n: t.detach().clone() for n, t in model.layers[0].state_dict().items()}, config)
    expect_close(f"read every size from config: {cfg.n_heads} query heads, {cfg.n_kv_heads} KV head, "
                 f"rope_theta {cfg.rope_theta:g}, a batch of 2", got.flatten(), expected.flatten(), atol=1e-4,
                 rtol=1e-4, hint="use config['n_heads'], config['n_kv_heads'] and config['rope_theta']; n_rep = n_heads // n_kv_heads")


