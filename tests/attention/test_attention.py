"""course_lib.attention against torch's scaled_dot_product_attention, nn.MultiheadAttention and
Hugging Face's Llama rotary code; tiled attention against naive attention."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from course_lib.attention import (
    MultiHeadAttention,
    RotaryEmbedding,
    apply_rotary,
    attention_weights,
    causal_mask,
    merge_heads,
    repeat_kv,
    rope_cos_sin,
    rotate_half,
    scaled_dot_product_attention,
    sinusoidal_positions,
    split_heads,
    tiled_attention,
)

ATOL = 1e-5


def _qkv(*shape_q, n_keys=None, dv=None, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    *batch, n_q, d = shape_q
    n_keys = n_q if n_keys is None else n_keys
    q = torch.randn(*batch, n_q, d, generator=g, dtype=dtype)
    k = torch.randn(*batch, n_keys, d, generator=g, dtype=dtype)
    v = torch.randn(*batch, n_keys, dv or d, generator=g, dtype=dtype)
    return q, k, v


# --- scaled dot-product attention ---------------------------------------------------------

@pytest.mark.parametrize("shape", [(5, 8), (2, 7, 16), (2, 3, 6, 4), (1, 2, 3, 9, 8)])
def test_sdpa_matches_torch_without_mask(shape):
    q, k, v = _qkv(*shape)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v))


def test_sdpa_matches_torch_with_value_width_and_scale():
    q, k, v = _qkv(2, 4, 6, 8, n_keys=9, dv=5)
    ours = scaled_dot_product_attention(q, k, v, scale=0.3)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, scale=0.3))


def test_sdpa_boolean_keep_mask_matches_torch():
    q, k, v = _qkv(2, 3, 6, 8, n_keys=7, seed=1)
    mask = torch.rand(2, 1, 6, 7, generator=torch.Generator().manual_seed(2)) > 0.4  # broadcast over heads
    mask[..., 0] = True  # every row keeps something
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, mask=mask),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_sdpa_fully_masked_row_gives_zeros_like_torch():
    q, k, v = _qkv(1, 4, 8, seed=3)
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[2] = False
    ours = scaled_dot_product_attention(q, k, v, mask=mask)
    assert torch.equal(ours[0, 2], torch.zeros(8))
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_sdpa_additive_mask_matches_torch():
    q, k, v = _qkv(2, 5, 8, n_keys=6, seed=4)
    bias = torch.randn(5, 6, generator=torch.Generator().manual_seed(5))
    bias[1, 3:] = float("-inf")
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, mask=bias),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=bias))


def test_sdpa_causal_square_matches_torch():
    q, k, v = _qkv(2, 4, 10, 8, seed=6)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, is_causal=True),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_sdpa_causal_with_fewer_queries_sees_up_to_own_position():
    """The documented difference: queries are the last positions (bottom-right alignment)."""
    q, k, v = _qkv(1, 2, 3, 8, n_keys=7, seed=7)
    bottom_right = torch.ones(3, 7, dtype=torch.bool).tril(diagonal=7 - 3)
    ours = scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=bottom_right))
    # torch's own is_causal aligns top-left, so query 0 sees only key 0: a different answer.
    assert not torch.allclose(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    # One decoding query sees every cached key.
    last = scaled_dot_product_attention(q[..., -1:, :], k, v, is_causal=True)
    torch.testing.assert_close(last, F.scaled_dot_product_attention(q[..., -1:, :], k, v))


def test_sdpa_mask_and_causal_combine():
    q, k, v = _qkv(1, 5, 4, seed=8)
    keep = torch.tensor([True, False, True, True, True])  # hide key 1 from everyone
    combined = torch.ones(5, 5, dtype=torch.bool).tril() & keep
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, mask=keep, is_causal=True),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=combined))


def test_sdpa_bfloat16_keeps_dtype_and_stays_close():
    q, k, v = _qkv(2, 6, 16, seed=9)
    out = scaled_dot_product_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), is_causal=True)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=3e-2, rtol=3e-2)


def test_attention_weights_rows_sum_to_one():
    q, k, _ = _qkv(2, 6, 8, seed=10)
    w = attention_weights(q, k, is_causal=True)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 6))
    assert torch.all(w.triu(diagonal=1) == 0)


@pytest.mark.parametrize("bad, error", [
    (lambda q, k, v: scaled_dot_product_attention(q, k[..., :3], v), ValueError),
    (lambda q, k, v: scaled_dot_product_attention(q, k, v[..., :2, :]), ValueError),
    (lambda q, k, v: scaled_dot_product_attention(q, k, v, mask=torch.ones(4, 4, dtype=torch.int64)), TypeError),
    (lambda q, k, v: scaled_dot_product_attention(q.long(), k, v), TypeError),
    (lambda q, k, v: scaled_dot_product_attention(q[0, 0], k, v), ValueError),
    (lambda q, k, v: causal_mask(5, 3), ValueError),
    (lambda q, k, v: tiled_attention(q, k, v, block_size=0), ValueError),
])
def test_bad_inputs_raise_clear_errors(bad, error):
    q, k, v = _qkv(1, 4, 8)
    with pytest.raises(error):
        bad(q, k, v)


# --- masks and heads -----------------------------------------------------------------------

@pytest.mark.parametrize("n_q, n_k", [(1, 1), (4, 4), (3, 8), (1, 6)])
def test_causal_mask_is_bottom_right_lower_triangle(n_q, n_k):
    expected = torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal=n_k - n_q)
    assert torch.equal(causal_mask(n_q, n_k), expected)


def test_split_and_merge_heads_match_reference_reshape():
    x = torch.randn(2, 5, 24, generator=torch.Generator().manual_seed(11))
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 8)
    assert torch.equal(heads, x.view(2, 5, 3, 8).permute(0, 2, 1, 3))
    assert torch.equal(merge_heads(heads), x)
    with pytest.raises(ValueError):
        split_heads(x, 5)


def test_repeat_kv_matches_torch_gqa():
    """GQA via repeat: our repeat_kv + our SDPA equals torch's SDPA with enable_gqa."""
    g = torch.Generator().manual_seed(12)
    q = torch.randn(2, 6, 5, 8, generator=g)
    k, v = torch.randn(2, 2, 5, 8, generator=g), torch.randn(2, 2, 5, 8, generator=g)
    assert torch.equal(repeat_kv(k, 3), k.repeat_interleave(3, dim=1))
    ours = scaled_dot_product_attention(q, repeat_kv(k, 3), repeat_kv(v, 3), is_causal=True)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))


# --- positions --------------------------------------------------------------------------------

def test_sinusoidal_positions_follow_the_formula():
    table = sinusoidal_positions(50, 16)
    pos, i = 37, 3
    angle = pos / 10000 ** (2 * i / 16)
    assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
    assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


@pytest.mark.parametrize("scaling", [1.0, 4.0])
def test_rope_matches_hugging_face_llama(scaling):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    rope = {"rope_type": "default", "rope_theta": 500.0}
    if scaling != 1.0:
        rope = {"rope_type": "linear", "rope_theta": 500.0, "factor": scaling}
    cfg = LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=64, rope_parameters=rope)
    g = torch.Generator().manual_seed(13)
    q, k = torch.randn(2, 4, 10, 16, generator=g), torch.randn(2, 4, 10, 16, generator=g)
    positions = torch.arange(3, 13)
    hf_cos, hf_sin = LlamaRotaryEmbedding(cfg)(q, positions.unsqueeze(0))
    hf_q, hf_k = apply_rotary_pos_emb(q, k, hf_cos, hf_sin)
    cos, sin = rope_cos_sin(positions, 16, theta=500.0, scaling=scaling)
    torch.testing.assert_close(apply_rotary(q, cos, sin), hf_q)
    torch.testing.assert_close(apply_rotary(k, cos, sin), hf_k)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(0, 200), n=st.integers(0, 200), shift=st.integers(-100, 100), seed=st.integers(0, 2**16))
def test_rope_dot_product_depends_only_on_offset(m, n, shift, seed):
    shift = max(shift, -min(m, n))  # keep positions non-negative
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(32, generator=g, dtype=torch.float64), torch.randn(32, generator=g, dtype=torch.float64)
    rope = RotaryEmbedding(32, 512)

    def score(pos_q, pos_k):
        cq, sq = rope(torch.tensor([pos_q]))
        ck, sk = rope(torch.tensor([pos_k]))
        return (apply_rotary(q, cq[0].double(), sq[0].double()) @ apply_rotary(k, ck[0].double(), sk[0].double())).item()

    assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-4)


def test_rope_changes_scores_with_offset_and_keeps_norms():
    g = torch.Generator().manual_seed(14)
    q = torch.randn(16, generator=g)
    cos, sin = rope_cos_sin(torch.arange(10), 16)
    rotated = apply_rotary(q.expand(10, 16), cos, sin)
    torch.testing.assert_close(rotated.norm(dim=-1), q.norm().expand(10))
    assert not torch.allclose(rotated[0] @ q, rotated[5] @ q)  # position matters
    assert torch.equal(rotate_half(torch.tensor([1.0, 2.0, 3.0, 4.0])), torch.tensor([-3.0, -4.0, 1.0, 2.0]))


def test_rotary_tables_stay_float32_in_bfloat16_models():
    rope = RotaryEmbedding(8, 32).to(torch.bfloat16)
    assert rope.cos.dtype == torch.float32
    torch.testing.assert_close(rope.cos, rope_cos_sin(torch.arange(32), 8)[0])


# --- multi-head attention -------------------------------------------------------------------

def test_mha_matches_torch_multihead_attention():
    torch.manual_seed(15)  # nn.MultiheadAttention has no generator argument
    ours = MultiHeadAttention(d_model=32, n_heads=4)
    ref = torch.nn.MultiheadAttention(32, 4, bias=False, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        ref.out_proj.weight.copy_(ours.o_proj.weight)
    x = torch.randn(2, 7, 32)
    causal_blocked = ~causal_mask(7)  # torch's attn_mask marks what is *hidden*
    expected, _ = ref(x, x, x, attn_mask=causal_blocked, need_weights=False)
    torch.testing.assert_close(ours(x, is_causal=True), expected, atol=ATOL, rtol=1e-4)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_gqa_module_matches_torch_enable_gqa(n_kv_heads):
    torch.manual_seed(16)
    attn = MultiHeadAttention(d_model=32, n_heads=4, n_kv_heads=n_kv_heads)
    x = torch.randn(2, 6, 32)
    q = attn.q_proj(x).view(2, 6, 4, 8).transpose(1, 2)  # (B, H, T, D)
    k = attn.k_proj(x).view(2, 6, n_kv_heads, 8).transpose(1, 2)  # (B, Hkv, T, D)
    v = attn.v_proj(x).view(2, 6, n_kv_heads, 8).transpose(1, 2)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # (B, H, T, D)
    expected = attn.o_proj(ref.transpose(1, 2).reshape(2, 6, 32))
    torch.testing.assert_close(attn(x), expected, atol=ATOL, rtol=1e-4)
    assert attn.k_proj.weight.shape == (n_kv_heads * 8, 32)


def test_attention_without_positions_is_permutation_equivariant():
    torch.manual_seed(17)
    attn = MultiHeadAttention(d_model=32, n_heads=4, n_kv_heads=2)
    x = torch.randn(1, 9, 32)
    perm = torch.randperm(9)
    out = attn(x, is_causal=False)
    torch.testing.assert_close(attn(x[:, perm], is_causal=False), out[:, perm], atol=ATOL, rtol=1e-5)
    # With rotary positions the same permutation changes more than the order.
    rotary = rope_cos_sin(torch.arange(9), 8)
    rotated = attn(x, rotary=rotary, is_causal=False)
    assert not torch.allclose(attn(x[:, perm], rotary=rotary, is_causal=False), rotated[:, perm], atol=1e-3)


# --- tiled attention ---------------------------------------------------------------------------

def _naive(q, k, v, is_causal):
    return scaled_dot_product_attention(q, k, v, is_causal=is_causal)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("n, block", [(1, 4), (7, 3), (64, 16), (100, 32), (33, 64)])
def test_tiled_equals_naive(n, block, is_causal):
    q, k, v = _qkv(2, 3, n, 16, seed=n + block)
    torch.testing.assert_close(tiled_attention(q, k, v, block_size=block, is_causal=is_causal),
                               _naive(q, k, v, is_causal), atol=ATOL, rtol=1e-5)


@settings(max_examples=20, deadline=None)
@given(n_q=st.integers(1, 40), extra=st.integers(0, 30), block=st.integers(1, 17), causal=st.booleans(),
       seed=st.integers(0, 2**16))
def test_tiled_equals_naive_with_fewer_queries(n_q, extra, block, causal, seed):
    q, k, v = _qkv(1, 2, n_q, 8, n_keys=n_q + extra, seed=seed)
    torch.testing.assert_close(tiled_attention(q, k, v, block_size=block, is_causal=causal),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(n_q, n_q + extra))
                               if causal else F.scaled_dot_product_attention(q, k, v), atol=ATOL, rtol=1e-5)


def test_tiled_handles_huge_scores_without_overflow():
    q, k, v = _qkv(1, 50, 16, seed=18)
    q = q * 1e4  # scores around 1e5: exp() of them would overflow float32 without the max shift
    expected = torch.softmax((q.double() @ k.double().mT) / 4.0, dim=-1) @ v.double()
    out = tiled_attention(q, k, v, block_size=8)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), expected, atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(tiled_attention(q, k, v, block_size=8, is_causal=True),
                               _naive(q, k, v, True), atol=ATOL, rtol=1e-5)


def test_tiled_bfloat16_returns_bfloat16():
    q, k, v = _qkv(1, 20, 8, seed=19)
    out = tiled_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), block_size=6, is_causal=True)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), _naive(q, k, v, True), atol=3e-2, rtol=3e-2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_attention_matches_cpu(dtype):
    q, k, v = _qkv(2, 4, 37, 16, seed=20)
    cpu = scaled_dot_product_attention(q, k, v, is_causal=True)
    gq, gk, gv = (t.cuda().to(dtype) for t in (q, k, v))
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(scaled_dot_product_attention(gq, gk, gv, is_causal=True).float().cpu(), cpu, atol=tol, rtol=tol)
    torch.testing.assert_close(tiled_attention(gq, gk, gv, block_size=8, is_causal=True).float().cpu(), cpu, atol=tol, rtol=tol)
    torch.testing.assert_close(scaled_dot_product_attention(gq, gk, gv, is_causal=True),
                               F.scaled_dot_product_attention(gq, gk, gv, is_causal=True), atol=tol, rtol=tol)
