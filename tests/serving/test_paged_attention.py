"""Paged attention against torch's scaled_dot_product_attention over contiguous tensors.

Both paths are checked: the course's reference attention (``fused=False``) and torch's fused
kernel over the gathered blocks (``fused=True``, what the engine runs); the oracle attends over
contiguous per-sequence tensors, so what it checks is the gather, the mask and the head sharing.

Each scenario scatters every sequence's blocks over the pool in random order, pads the block
tables with -1, and fills block 0 (never handed out) with huge values, so reading a padded or
masked position shows up as a wrong answer, not a coincidence.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.attention import scaled_dot_product_attention
from course_lib.kv_memory import blocks_needed, compare_paging
from course_lib.serving import BlockManager, KVPool, pad_block_tables, paged_attention, paged_prefill_attention
from course_lib.serving.paged_attention import keep_mask

ATOL = 1e-5
POISON = 1e4


def _scenario(context_lens, *, n_heads, n_kv_heads, head_dim, block_size, seed, device="cpu"):
    """A pool holding each sequence's KV in scattered blocks, and the same KV contiguous."""
    g = torch.Generator().manual_seed(seed)
    n_used = sum(blocks_needed(n, block_size) for n in context_lens)
    pool = KVPool(1, 1 + n_used + 3, block_size, n_kv_heads, head_dim, device=device)
    pool.keys[0][0] = POISON
    pool.values[0][0] = POISON
    order = (torch.randperm(n_used + 3, generator=g) + 1).tolist()  # block 0 is the poison block
    tables, contiguous = [], []
    for n in context_lens:
        table = [order.pop() for _ in range(blocks_needed(n, block_size))]
        k = torch.randn(n, n_kv_heads, head_dim, generator=g)  # (L, Hkv, D)
        v = torch.randn(n, n_kv_heads, head_dim, generator=g)  # (L, Hkv, D)
        slots = torch.tensor([table[p // block_size] * block_size + p % block_size for p in range(n)])
        pool.write(0, slots.to(device), k.to(device), v.to(device))
        tables.append(table)
        contiguous.append((k.transpose(0, 1)[None], v.transpose(0, 1)[None]))  # (1, Hkv, L, D) each
    return pool, pad_block_tables(tables, device=device), contiguous, g


def _reference(q_rows, k, v):
    """torch's attention for one sequence whose queries are the last rows of its context."""
    n_q, n_k = q_rows.shape[-2], k.shape[-2]
    keep = torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal=n_k - n_q)  # bottom-right causal
    return F.scaled_dot_product_attention(q_rows, k, v, attn_mask=keep, enable_gqa=True)


def _check_prefill(context_lens, query_lens, *, n_heads, n_kv_heads, head_dim, block_size, seed, device="cpu",
                   fused=False):
    pool, tables, contiguous, g = _scenario(context_lens, n_heads=n_heads, n_kv_heads=n_kv_heads,
                                            head_dim=head_dim, block_size=block_size, seed=seed, device=device)
    n_q = max(query_lens)
    q = torch.randn(len(context_lens), n_heads, n_q, head_dim, generator=g)  # (B, H, T, D)
    out = paged_prefill_attention(q.to(device), pool.keys[0], pool.values[0], tables,
                                  torch.tensor(context_lens, device=device), torch.tensor(query_lens, device=device),
                                  fused=fused)
    assert out.shape == q.shape and out.device == pool.device
    out = out.cpu()
    for b, (k, v) in enumerate(contiguous):
        t = query_lens[b]
        torch.testing.assert_close(out[b:b + 1, :, :t], _reference(q[b:b + 1, :, :t], k, v), atol=ATOL, rtol=0)
        assert not out[b, :, t:].any()  # padding rows are zeros


# --- decode ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("n_heads, n_kv_heads, head_dim, block_size",
                         [(4, 4, 8, 4), (8, 2, 16, 16), (6, 1, 8, 3), (4, 2, 32, 1)])
def test_decode_matches_contiguous_attention(n_heads, n_kv_heads, head_dim, block_size, fused):
    context_lens = [1, block_size, 2 * block_size + 1, 23, 7]  # ragged, incl. exactly full blocks
    pool, tables, contiguous, g = _scenario(context_lens, n_heads=n_heads, n_kv_heads=n_kv_heads,
                                            head_dim=head_dim, block_size=block_size, seed=block_size)
    q = torch.randn(len(context_lens), n_heads, head_dim, generator=g)  # (B, H, D)
    out = paged_attention(q, pool.keys[0], pool.values[0], tables, torch.tensor(context_lens), fused=fused)
    assert out.shape == q.shape
    for b, (k, v) in enumerate(contiguous):
        expected = _reference(q[b:b + 1, :, None], k, v)[:, :, 0]  # (1, H, D)
        torch.testing.assert_close(out[b:b + 1], expected, atol=ATOL, rtol=0)


def test_decode_matches_course_attention_with_scale():
    pool, tables, contiguous, g = _scenario([5, 9], n_heads=4, n_kv_heads=2, head_dim=8, block_size=4, seed=3)
    q = torch.randn(2, 4, 8, generator=g)
    out = paged_attention(q, pool.keys[0], pool.values[0], tables, torch.tensor([5, 9]), scale=0.2)
    for b, (k, v) in enumerate(contiguous):
        k, v = (t.repeat_interleave(2, dim=1) for t in (k, v))  # (1, H, L, D): head h reads KV head h // 2
        expected = scaled_dot_product_attention(q[b:b + 1, :, None], k, v, is_causal=True, scale=0.2)[:, :, 0]
        torch.testing.assert_close(out[b:b + 1], expected, atol=ATOL, rtol=0)


# --- chunked prefill -------------------------------------------------------------------------

@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("n_heads, n_kv_heads, block_size", [(4, 4, 4), (8, 2, 5), (4, 1, 16)])
def test_chunked_prefill_matches_contiguous_causal_attention(n_heads, n_kv_heads, block_size, fused):
    context_lens = [9, 12, 30, 1, 17]
    query_lens = [9, 4, 6, 1, 1]  # a whole prompt, chunks after a cached prefix, decodes mixed in
    _check_prefill(context_lens, query_lens, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=8,
                   block_size=block_size, seed=n_heads + block_size, fused=fused)


def test_a_mask_built_once_for_the_pass_gives_the_same_attention():
    context_lens, query_lens = torch.tensor([9, 12, 5]), torch.tensor([9, 4, 1])
    pool, tables, _, g = _scenario(context_lens.tolist(), n_heads=4, n_kv_heads=2, head_dim=8, block_size=4, seed=2)
    q = torch.randn(3, 4, 9, 8, generator=g)
    keep = keep_mask(tables, context_lens, query_lens, 9, 4)  # (B, 1, T, S)
    assert keep.shape == (3, 1, 9, tables.shape[1] * 4) and keep.dtype == torch.bool
    for fused in (False, True):
        plain = paged_prefill_attention(q, pool.keys[0], pool.values[0], tables, context_lens, query_lens, fused=fused)
        given_mask = paged_prefill_attention(q, pool.keys[0], pool.values[0], tables, context_lens, query_lens,
                                             keep=keep, fused=fused)
        torch.testing.assert_close(given_mask, plain, atol=0, rtol=0)


def test_query_lens_default_to_every_row():
    pool, tables, contiguous, g = _scenario([6, 8], n_heads=2, n_kv_heads=2, head_dim=4, block_size=4, seed=5)
    q = torch.randn(2, 2, 3, 4, generator=g)
    out = paged_prefill_attention(q, pool.keys[0], pool.values[0], tables, torch.tensor([6, 8]))
    for b, (k, v) in enumerate(contiguous):
        torch.testing.assert_close(out[b:b + 1], _reference(q[b:b + 1], k, v), atol=ATOL, rtol=0)


@settings(max_examples=25, deadline=None)
@given(data=st.data(), group=st.sampled_from([(1, 1), (2, 1), (4, 2), (6, 3), (8, 1)]),
       head_dim=st.sampled_from([1, 4, 8]), block_size=st.integers(1, 8), seed=st.integers(0, 2**16),
       fused=st.booleans())
def test_random_shapes_match_contiguous_attention(data, group, head_dim, block_size, seed, fused):
    context_lens = data.draw(st.lists(st.integers(1, 40), min_size=1, max_size=5))
    query_lens = [data.draw(st.integers(1, n)) for n in context_lens]
    _check_prefill(context_lens, query_lens, n_heads=group[0], n_kv_heads=group[1], head_dim=head_dim,
                   block_size=block_size, seed=seed, fused=fused)


def test_a_minus_one_entry_is_never_read_even_inside_the_context():
    pool, tables, contiguous, g = _scenario([8], n_heads=2, n_kv_heads=2, head_dim=4, block_size=4, seed=9)
    holed = tables.clone()
    holed[0, 0] = -1  # the first block's keys are hidden: only positions 4..7 remain
    q = torch.randn(1, 2, 4, generator=g)
    out = paged_attention(q, pool.keys[0], pool.values[0], holed, torch.tensor([8]))
    k, v = (t[:, :, 4:] for t in contiguous[0])
    torch.testing.assert_close(out, _reference(q[:, :, None], k, v)[:, :, 0], atol=ATOL, rtol=0)


# --- with the block manager ------------------------------------------------------------------

def test_sequences_sharing_prefix_blocks_read_the_same_kv():
    """Slots from the BlockManager, a shared system prompt written once, then decode for both."""
    g = torch.Generator().manual_seed(0)
    bm, pool = BlockManager(num_blocks=16, block_size=4), KVPool(1, 16, 4, 2, 8)
    system, kv_of = list(range(10)), {}  # a token's KV depends on its prefix: memoise per prefix

    def kv(tokens, pos):
        key = tuple(tokens[:pos + 1])
        if key not in kv_of:
            kv_of[key] = torch.randn(2, 2, 8, generator=g)  # (K|V, Hkv, D)
        return kv_of[key]

    def prefill(seq_id, tokens, start):
        slots = bm.slot_mapping(seq_id, start)
        new = torch.stack([kv(tokens, p) for p in range(start, len(tokens))])  # (N, 2, Hkv, D)
        pool.write(0, torch.tensor(slots), new[:, 0], new[:, 1])

    prompts = {"a": system + [50, 51], "b": system + [60]}
    prefill("a", prompts["a"], bm.allocate("a", prompts["a"]).num_cached_tokens)
    bm.append_slot("a", 99)  # publishes a's two full system blocks
    prompts["a"].append(99)
    prefill("a", prompts["a"], len(prompts["a"]) - 1)
    cached = bm.allocate("b", prompts["b"]).num_cached_tokens
    assert cached == 8
    prefill("b", prompts["b"], cached)

    tables = pad_block_tables([bm.block_table(s) for s in prompts])
    lens = torch.tensor([len(t) for t in prompts.values()])
    q = torch.randn(2, 4, 8, generator=g)  # (B, H, D), GQA 4 over 2
    out = paged_attention(q, pool.keys[0], pool.values[0], tables, lens)
    for b, tokens in enumerate(prompts.values()):
        kvs = torch.stack([kv(tokens, p) for p in range(len(tokens))])  # (L, 2, Hkv, D)
        k, v = kvs[:, 0].transpose(0, 1)[None], kvs[:, 1].transpose(0, 1)[None]  # (1, Hkv, L, D)
        torch.testing.assert_close(out[b:b + 1], _reference(q[b:b + 1, :, None], k, v)[:, :, 0],
                                   atol=ATOL, rtol=0)


# --- the pool --------------------------------------------------------------------------------

def test_pool_write_lands_in_block_and_offset():
    pool = KVPool(n_layers=2, num_blocks=3, block_size=4, n_kv_heads=2, head_dim=3)
    k = torch.arange(12.).view(2, 2, 3)  # (N, Hkv, D)
    pool.write(1, torch.tensor([9, 2]), k, -k)
    assert torch.equal(pool.keys[1][2, 1], k[0]) and torch.equal(pool.values[1][0, 2], -k[1])
    assert not pool.keys[0].any() and pool.keys[1].count_nonzero() == k.count_nonzero()


def test_pool_size_and_fragmentation_report():
    pool = KVPool(n_layers=4, num_blocks=10, block_size=16, n_kv_heads=2, head_dim=8, dtype=torch.float16)
    assert pool.bytes_per_token == 2 * 4 * 2 * 8 * 2
    assert pool.nbytes() == 10 * 16 * pool.bytes_per_token
    report = pool.fragmentation_report([100, 1000, 30], max_seq_len=2048)
    assert report == compare_paging([100, 1000, 30], block_size=16, max_seq_len=2048,
                                    bytes_per_token=pool.bytes_per_token)
    assert report.paged_waste_bytes == 22 * pool.bytes_per_token < report.contiguous_waste_bytes


def test_shape_errors_name_the_expected_shape():
    pool = KVPool(1, 4, 2, 2, 4)
    k_pool, v_pool, tables, lens = pool.keys[0], pool.values[0], pad_block_tables([[1]]), torch.tensor([1])
    with pytest.raises(ValueError, match=r"\(N, n_kv_heads, head_dim\)"):
        pool.write(0, torch.tensor([0]), torch.zeros(1, 4), torch.zeros(1, 4))
    with pytest.raises(ValueError, match="paged_prefill_attention"):
        paged_attention(torch.zeros(1, 2, 1, 4), k_pool, v_pool, tables, lens)
    with pytest.raises(ValueError, match="multiple"):
        paged_attention(torch.zeros(1, 3, 4), k_pool, v_pool, tables, lens)
    with pytest.raises(ValueError, match="head_dim"):
        paged_attention(torch.zeros(1, 2, 8), k_pool, v_pool, tables, lens)
    with pytest.raises(ValueError, match="pad_block_tables"):
        paged_attention(torch.zeros(1, 2, 4), k_pool, v_pool, tables.float(), lens)
    with pytest.raises(ValueError, match="context_lens"):
        paged_attention(torch.zeros(1, 2, 4), k_pool, v_pool, tables, torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="num_blocks"):
        KVPool(1, 0, 2, 2, 4)


# --- CUDA ------------------------------------------------------------------------------------

@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("n_heads, n_kv_heads, block_size", [(4, 4, 16), (8, 2, 4)])
def test_cuda_paged_attention_matches_contiguous(n_heads, n_kv_heads, block_size):
    _check_prefill([9, 40, 1, 17], [9, 5, 1, 1], n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=16,
                   block_size=block_size, seed=7, device="cuda")
