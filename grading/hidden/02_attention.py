"""Hidden tests for 02_attention, run in the grader's process (see course_lib/pipeline/hidden.py).

Expectations come from torch itself (scaled_dot_product_attention in float64,
nn.MultiheadAttention, enable_gqa), from NumPy reshapes, or from an independent formulation
(RoPE as multiplication by complex numbers); the transformer block is compared with the shipped
tinychat model's own layers on real activations captured by forward hooks (the production
model as oracle; tests/hidden checks that it agrees with transformers' Llama). The learner's functions are reached only through
``learner.function`` / ``learner.script``, which send tensors in and get NumPy arrays back.
"""
import random

import numpy as np
import torch
import torch.nn.functional as F

from course_lib.pipeline.hidden import Once

REFERENCES = (
    "course_lib.attention.core.scaled_dot_product_attention",
    "course_lib.attention.core.attention_weights",
    "course_lib.attention.core.causal_mask",
    "course_lib.attention.core.split_heads",
    "course_lib.attention.core.merge_heads",
    "course_lib.attention.core.repeat_kv",
    "course_lib.attention.positions.rope_cos_sin",
    "course_lib.attention.positions.apply_rotary",
)

# Runs the learner's attention in their kernel under a profiler and reports whether torch's
# own fused attention was called: the exercise asks for it to be written by hand.
_CALLS_TORCH_SDPA = '''
import sys as _sys


def _calls_torch_sdpa(q, k, v, mask):
    seen = []

    def watch(frame, event, arg):
        if event == "c_call" and getattr(arg, "__name__", "") == "scaled_dot_product_attention":
            seen.append(True)

    previous = _sys.getprofile()
    _sys.setprofile(watch)
    try:
        for kwargs in ({}, {"mask": mask}):
            try:
                scaled_dot_product_attention(q, k, v, **kwargs)
            except Exception:  # a call torch's kernel served may still fail after it (a wrong keyword)
                pass
    finally:
        _sys.setprofile(previous)
    return bool(seen)
'''

# merge_heads applied to split_heads' own output, inside the kernel: that output is a
# non-contiguous view, which a tensor sent across the boundary never is.
_ROUND_TRIP = '''
def _merge_of_split(x, n_heads):
    return merge_heads(split_heads(x, n_heads))
'''


def _sdpa64(q, k, v, mask=None):
    """torch's attention in float64, the oracle for the learner's float32 answer."""
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask).numpy()


def scaled_dot_product_attention(learner, check):
    f = learner.function("scaled_dot_product_attention")
    g0 = torch.Generator().manual_seed(98)
    sdpa_used = learner.script(_CALLS_TORCH_SDPA, "_calls_torch_sdpa")
    q, k, v = torch.randn(2, 4, 8, generator=g0), torch.randn(2, 4, 8, generator=g0), torch.randn(2, 4, 8, generator=g0)
    used = Once(lambda: sdpa_used(q, k, v, torch.ones(4, 4, dtype=torch.bool).tril()))
    check.that("written by hand, without torch's scaled_dot_product_attention", used, lambda u: u is False,
               "write attention yourself instead of calling torch.nn.functional.scaled_dot_product_attention",
               edge=True)
    try:
        called_torch = used() is True
    except Exception:  # the answer failed on these inputs: the checks below say how
        called_torch = False
    if called_torch:
        # torch's own kernel gets every value right: it must not earn the value checks'
        # points, so the test stops here, unfinished, and the exercise scores 0.
        check.finished = False
        return
    rng = random.Random(2026_02)
    for case in range(12):
        g = torch.Generator().manual_seed(case)
        batch = [rng.randint(1, 3) for _ in range(rng.randint(0, 2))]
        n_q, n_k, d, dv = rng.randint(1, 9), rng.randint(1, 9), rng.choice([1, 4, 8, 16]), rng.choice([2, 5, 8])
        q, k, v = (torch.randn(*batch, n_q, d, generator=g), torch.randn(*batch, n_k, d, generator=g),
                   torch.randn(*batch, n_k, dv, generator=g))
        shape = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        if case % 3 == 2:
            q = q * 40.0
            rule = "large scores do not overflow (subtract the row maximum)"
        else:
            rule = "softmax(q k^T / sqrt(D)) v over the keys, for any leading axes"
        if case % 2:
            mask = torch.rand(n_q, n_k, generator=g) > 0.5
            mask[torch.arange(n_q), torch.randint(0, n_k, (n_q,), generator=g)] = True  # every row keeps a key
            check.close(f"{rule}, with a boolean keep-mask ({shape})",
                        lambda: f(q, k, v, mask=mask), _sdpa64(q, k, v, mask), atol=1e-4)
        else:
            check.close(f"{rule}, no mask ({shape})", lambda: f(q, k, v), _sdpa64(q, k, v), atol=1e-4)

    g = torch.Generator().manual_seed(99)
    q, k, v = torch.randn(2, 3, 4, 8, generator=g), torch.randn(2, 3, 6, 8, generator=g), torch.randn(2, 3, 6, 8, generator=g)
    mask = torch.rand(2, 1, 4, 6, generator=g) > 0.4
    mask[..., 0] = True
    check.close("a (B, 1, Tq, Tk) mask broadcasts over the heads",
                lambda: f(q, k, v, mask=mask), _sdpa64(q, k, v, mask), atol=1e-4)

    q, k, v = torch.randn(5, 16, generator=g), torch.randn(7, 16, generator=g), torch.randn(7, 3, generator=g)
    check.close("the scale is 1/sqrt(D) of the queries and keys, not of the values",
                lambda: f(q, k, v), _sdpa64(q, k, v), atol=1e-4)

    # Every visible score is around -1e5: a finite fill such as -1e4 for the hidden keys would
    # then outrank the visible ones. Hidden keys must get exactly zero weight.
    k = torch.randn(6, 4, generator=g)
    q = -5e4 * k[:3] + 0.01 * torch.randn(3, 4, generator=g)
    v = torch.randn(6, 2, generator=g)
    v[3:] = 1e6  # large values on the hidden keys: any weight leaking there shows
    keep = torch.zeros(3, 6, dtype=torch.bool)
    keep[torch.arange(3), torch.arange(3)] = True
    check.close("hidden keys get exactly zero weight, even when every visible score is very negative",
                lambda: f(q, k, v, mask=keep), v[:3].double().numpy(), atol=1e-4)

    q, k, v = torch.randn(1, 8, generator=g), torch.randn(9, 8, generator=g), torch.randn(9, 8, generator=g)
    check.close("one decoding query over nine keys", lambda: f(q, k, v), _sdpa64(q, k, v), atol=1e-4)



def _causal(n_q, n_k):
    return [[key <= n_k - n_q + query for key in range(n_k)] for query in range(n_q)]


def causal_mask(learner, check):
    f = learner.function("causal_mask")
    for n in (1, 3, 5, 16):
        check.equal(f"n_keys defaults to n_queries: True on and below the diagonal ({n} x {n})",
                    lambda: f(n), _causal(n, n))
    for n in (1, 4):
        check.equal(f"as many queries as keys: True on and below the diagonal ({n} x {n})",
                    lambda: f(n, n), _causal(n, n))
    for n_q, n_k in [(1, 7), (4, 9), (2, 30), (6, 7)]:
        check.equal(f"fewer queries than keys: the queries are the last positions ({n_q} queries, {n_k} keys)",
                    lambda: f(n_q, n_k), _causal(n_q, n_k))
    check.that("the mask is a boolean tensor", lambda: f(4, 6),
               lambda m: isinstance(m, np.ndarray) and m.dtype == np.bool_,
               "return a torch.bool tensor (True = may attend)")
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 3, 10, 8, generator=g) for _ in range(3))
    causal = F.scaled_dot_product_attention(q, k, v, is_causal=True).numpy()
    check.that("used as a mask, it equals torch's is_causal=True", lambda: f(10),
               lambda m: np.allclose(F.scaled_dot_product_attention(
                   q, k, v, attn_mask=torch.from_numpy(np.array(m, dtype=bool))).numpy(), causal, atol=1e-5),
               "attention with your mask differs from torch's causal attention")
    for n_q, n_k in [(3, 2), (10, 1)]:
        check.raises(f"more queries than keys raises ValueError ({n_q} queries, {n_k} keys)",
                     lambda: f(n_q, n_k), "ValueError")


def split_merge_heads(learner, check):
    split, merge = learner.function("split_heads"), learner.function("merge_heads")
    round_trip = learner.script(_ROUND_TRIP, "_merge_of_split")
    for b, t, h, d in [(1, 1, 1, 4), (2, 3, 4, 4), (3, 7, 2, 3), (1, 9, 8, 2)]:
        x = torch.randn(b, t, h * d, generator=torch.Generator().manual_seed(b * 100 + t))
        heads = x.numpy().reshape(b, t, h, d).transpose(0, 2, 1, 3)
        check.equal(f"split_heads: (B, T, H*D) -> (B, H, T, D), head h holds features hD..(h+1)D-1 "
                    f"({(b, t, h * d)} into {h} heads)", lambda: split(x, h), heads)
        y = torch.randn(b, h, t, d, generator=torch.Generator().manual_seed(7))
        check.equal(f"merge_heads: (B, H, T, D) -> (B, T, H*D), heads side by side ({tuple(y.shape)})",
                    lambda: merge(y), y.numpy().transpose(0, 2, 1, 3).reshape(b, t, h * d))
        check.equal(f"merge_heads(split_heads(x)) gives x back, straight from split_heads' output "
                    f"({(b, t, h * d)}, {h} heads)", lambda: round_trip(x, h), x.numpy())
    for width, n_heads in [(10, 4), (8, 3)]:
        check.raises(f"split_heads raises ValueError when {width} features do not split into {n_heads} heads",
                     lambda: split(torch.randn(1, 2, width), n_heads), "ValueError")

    # A full multi-head layer built from the learner's helpers equals torch's nn.MultiheadAttention.
    torch.manual_seed(3)
    reference = torch.nn.MultiheadAttention(24, 3, bias=False, batch_first=True)
    x = torch.randn(2, 6, 24)
    with torch.no_grad():
        expected = reference(x, x, x, need_weights=False)[0].numpy()
        w_q, w_k, w_v = reference.in_proj_weight.chunk(3)
        w_out = reference.out_proj.weight.clone()
        projections = [x @ w.T for w in (w_q, w_k, w_v)]

    def layer_output(heads):  # the learner's heads -> torch's attention -> the learner's merge
        heads = [torch.from_numpy(np.array(h, dtype=np.float32)) for h in heads]
        merged = np.array(merge(F.scaled_dot_product_attention(*heads)), dtype=np.float32)  # (B, T, H*D)
        return np.allclose((torch.from_numpy(merged) @ w_out.T).numpy(), expected, atol=1e-5, rtol=0)

    check.that("split_heads and merge_heads inside a multi-head layer equal torch's nn.MultiheadAttention",
               lambda: [split(p, 3) for p in projections], layer_output,
               "a multi-head layer built from your helpers differs from torch's nn.MultiheadAttention")


def _rope_by_complex_numbers(x, positions, theta):
    """An independent formulation: pair (x_i, x_{i+D/2}) is the complex number x_i + j x_{i+D/2}."""
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[-1]
    z = x[..., : d // 2] + 1j * x[..., d // 2:]  # (..., T, D/2)
    speeds = np.array([theta ** (-2 * i / d) for i in range(d // 2)])
    turn = np.exp(1j * np.outer(np.asarray(positions, dtype=np.float64), speeds))  # (T, D/2): e^{j p theta_i}
    w = z * turn
    return np.concatenate([w.real, w.imag], axis=-1)


def apply_rope(learner, check):
    f = learner.function("apply_rope")
    rng = random.Random(4)
    for case in range(10):
        d = rng.choice([2, 4, 8, 16, 64])
        t = rng.randint(1, 6)
        theta = rng.choice([10000.0, 500.0, 1e6])
        batch = [rng.randint(1, 3) for _ in range(rng.randint(0, 2))]
        x = torch.randn(*batch, t, d, generator=torch.Generator().manual_seed(case))
        positions = torch.tensor([rng.randint(0, 400) for _ in range(t)])
        check.close(f"each pair (x_i, x_(i+D/2)) turns by position * theta^(-2i/D) "
                    f"(x {tuple(x.shape)}, theta={theta:g})",
                    lambda: f(x, positions, theta=theta), _rope_by_complex_numbers(x, positions, theta), atol=1e-4)
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(11))
    positions = torch.tensor([0, 3, 17, 250, 1000])
    check.close("theta defaults to 10000", lambda: f(x, positions),
                _rope_by_complex_numbers(x, positions, 10000.0), atol=1e-4)
    check.that("a float32 input gives a float32 result of the same shape", lambda: f(x, positions),
               lambda y: isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == tuple(x.shape),
               "return a tensor with the shape and dtype of x")
    x64 = x.double()
    check.that("a float64 input gives a float64 result", lambda: f(x64, positions),
               lambda y: isinstance(y, np.ndarray) and y.dtype == np.float64 and y.shape == tuple(x.shape),
               "return a tensor with the shape and dtype of x")
    half = torch.randn(3, 32, generator=torch.Generator().manual_seed(12)).half()
    far = torch.tensor([1500, 2047, 3001])
    check.that("a float16 input stays float16", lambda: f(half, far),
               lambda y: isinstance(y, np.ndarray) and y.dtype == np.float16 and y.shape == (3, 32),
               "return a tensor with the shape and dtype of x")
    check.close("angles are worked out in at least float32, even for a float16 input at positions in the thousands",
                lambda: f(half, far), _rope_by_complex_numbers(half.float(), far, 10000.0), atol=2e-2)

    q = torch.randn(2, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(13))
    k = torch.randn(2, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(14))

    def same_scores(rotated):  # rotated q, k at (m, n), then at (m + shift, n + shift)
        q_near, k_near, q_far, k_far = (np.asarray(r, dtype=np.float64) for r in rotated)
        return np.allclose((q_near * k_near).sum(-1), (q_far * k_far).sum(-1), atol=1e-6, rtol=0)

    for m, n, shift in [(0, 0, 50), (7, 2, 100), (2, 7, 31), (100, 0, 250)]:
        check.that(f"q . k depends only on the offset: {m - n} at positions ({m}, {n}) and shifted by {shift}",
                   lambda: [f(vec, torch.tensor([p] * 2)) for vec, p in ((q, m), (k, n), (q, m + shift), (k, n + shift))],
                   same_scores, "rotating q and k by the same extra angle changed their dot product", edge=True)


def _repeat_kv_checks(learner, check):
    f = learner.function("repeat_kv")
    for b, h_kv, n_rep, t, d in [(1, 1, 8, 4, 2), (2, 2, 4, 5, 4), (3, 4, 1, 2, 4), (1, 3, 2, 6, 8)]:
        gen = torch.Generator().manual_seed(b + h_kv + n_rep)
        k = torch.randn(b, h_kv, t, d, generator=gen)
        repeated_k = Once(lambda k=k, n_rep=n_rep: f(k, n_rep))  # read by both checks below
        check.equal(f"each KV head is repeated n_rep times in place ([a, b] -> [a, a, b, b]): "
                    f"{h_kv} KV heads, n_rep={n_rep}", repeated_k, np.repeat(k.numpy(), n_rep, axis=1))
        q, v = torch.randn(b, h_kv * n_rep, t, d, generator=gen), torch.randn(b, h_kv, t, d, generator=gen)
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).numpy()

        def matches_gqa(repeated, q=q, expected=expected):  # the learner's repeated keys and values
            keys, values = (torch.from_numpy(np.array(r, dtype=np.float32)) for r in repeated)
            got = F.scaled_dot_product_attention(q, keys, values, is_causal=True).numpy()
            return np.allclose(got, expected, atol=1e-5, rtol=0)

        check.that(f"attention through repeat_kv equals torch's enable_gqa ({h_kv * n_rep} query heads, "
                   f"{h_kv} KV heads)", lambda: (repeated_k(), f(v, n_rep)), matches_gqa,
                   "attention with your repeated keys and values differs from grouped-query attention")
    x = torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(5))
    check.equal("n_rep = 1 returns the input unchanged", lambda: f(x, 1), x.numpy())
    for bad in (0, -2):
        check.raises(f"n_rep = {bad} (below 1) raises ValueError", lambda: f(torch.randn(1, 2, 3, 4), bad), "ValueError")


def _rms_norm_checks(learner, check):
    f = learner.function("rms_norm")
    g = torch.Generator().manual_seed(21)
    for scale, eps in [(1.0, 1e-5), (1e-3, 1e-5), (5.0, 1e-2)]:
        x, weight = scale * torch.randn(2, 3, 8, generator=g), torch.randn(8, generator=g)
        x64 = x.double()
        expected = (weight.double() * x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + eps)).numpy()
        rule = ("eps goes inside the square root" if scale < 1 else
                "rms_norm: weight * x / sqrt(mean(x^2) + eps) over the last axis")
        check.close(f"{rule} (activations of size {scale:g}, eps {eps:g})", lambda: f(x, weight, eps),
                    expected, atol=1e-5 * max(1.0, float(weight.abs().max())))


# The production oracle: the shipped tinychat model, its real layer inputs captured by hooks.
_PROMPTS = ("<|user|>How many legs does a spider have?<|end|><|assistant|>",
            "<|user|>Write a short poem about the sea.<|end|><|assistant|>",
            "<|user|>What is the capital of France?<|end|><|assistant|>")


def _plain_config(cfg):
    return dict(n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads, head_dim=cfg.head_dim,
                norm_eps=cfg.norm_eps, rope_theta=cfg.rope_theta)


def _layer_weights(layer):
    return {name: t.detach().clone() for name, t in layer.state_dict().items()}


def shipped_layer_cases():
    """[(prompt label, layer index, x, expected)], the real inputs and outputs of tinychat's layers,
    plus the model and its config as plain numbers. Also used by the tests of these tests."""
    from course_lib.model import load_model, load_tokenizer

    model, tokenizer = load_model("tinychat", device="cpu"), load_tokenizer("tinychat")
    sequences = [tokenizer.encode(p, allowed_special="all") for p in _PROMPTS]
    shortest = min(len(s) for s in sequences)
    batches = [(f"prompt {i + 1}", torch.tensor([s])) for i, s in enumerate(sequences)]
    batches.append(("a batch of two prompts", torch.tensor([s[:shortest] for s in sequences[:2]])))
    cases = []
    for label, ids in batches:
        captured = []
        hooks = [layer.register_forward_hook(lambda m, args, out: captured.append((args[0].detach(), out.detach())))
                 for layer in model.layers]
        with torch.no_grad():
            model(ids)
        for hook in hooks:
            hook.remove()
        cases += [(label, i, x, y) for i, (x, y) in enumerate(captured)]
    return model, _plain_config(model.config), cases


def transformer_block(learner, check):
    _rms_norm_checks(learner, check)
    _repeat_kv_checks(learner, check)
    block = learner.function("transformer_block")
    model, config, cases = shipped_layer_cases()
    for label, layer_idx, x, expected in cases:
        check.close(f"pre-norm block (RMSNorm, RoPE, GQA, causal attention, SwiGLU, residuals) reproduces "
                    f"trained layer {layer_idx} on {label} ({x.shape[1]} tokens)",
                    lambda: block(x, _layer_weights(model.layers[layer_idx]), config), expected.numpy(), atol=1e-4, rtol=1e-4)
    x = cases[0][2][:, :6] * 1e-3  # small activations: eps decides the norm
    with torch.no_grad():
        expected = model.layers[0](x, rotary=model.rotary.slice(0, 6)).numpy()
    check.close("RMSNorm's eps inside the square root: the block on activations scaled down 1000x",
                lambda: block(x, _layer_weights(model.layers[0]), config), expected, atol=1e-4, rtol=1e-4)

    from course_lib.model import Transformer, get_config

    for name, theta in (("test-mqa", 500.0), ("test-mha", 10000.0), ("test-gqa", 1e6)):
        cfg = get_config(name, rope_theta=theta)
        other = Transformer(cfg, generator=torch.Generator().manual_seed(5)).eval()
        x = torch.randn(2, 7, cfg.d_model, generator=torch.Generator().manual_seed(6))
        with torch.no_grad():
            expected = other.layers[1](x, rotary=other.rotary.slice(0, 7)).numpy()
        check.close(f"every size read from config: {cfg.n_heads} query heads, {cfg.n_kv_heads} KV heads, "
                    f"rope_theta {theta:g}",
                    lambda: block(x, _layer_weights(other.layers[1]), _plain_config(cfg)), expected, atol=1e-4, rtol=1e-4)
