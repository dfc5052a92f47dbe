"""Paged KV storage, and attention that reads it through block tables.

``KVPool`` holds, per layer, keys and values shaped (num_blocks, block_size, n_kv_heads,
head_dim). A token's KV lives at the flat slot ``block_id * block_size + offset`` that
``BlockManager.slot_mapping`` gives; a sequence's blocks may lie anywhere in the pool, in any
order. The attention functions gather each sequence's keys and values through its block table
and hide everything past its length, so the result equals attention over contiguous tensors.

>>> pool = KVPool(n_layers=1, num_blocks=4, block_size=2, n_kv_heads=1, head_dim=1)
>>> values = torch.tensor([10., 20., 30.]).view(3, 1, 1)              # (N, Hkv, D)
>>> pool.write(0, torch.tensor([6, 7, 2]), torch.ones(3, 1, 1), values)  # block table [3, 1]
>>> tables, lens = pad_block_tables([[3, 1]]), torch.tensor([3])
>>> paged_attention(torch.ones(1, 1, 1), pool.keys[0], pool.values[0], tables, lens)  # equal scores: the mean
tensor([[[20.]]])
>>> paged_prefill_attention(torch.ones(1, 1, 3, 1), pool.keys[0], pool.values[0], tables, lens).flatten()
tensor([10., 15., 20.])

By default these are readable references (gather, mask, softmax, weighted sum through the
course's own ``scaled_dot_product_attention``). The engine passes ``fused=True``: the same
gather and mask, then torch's fused kernel, which shares key/value heads without copying them
and never materialises the masked scores (``benchmarks/bench_step.py`` shows the difference;
tests hold the two equal). Both copy every sequence's keys out to the longest block table.
A pass with many layers builds the keep-mask once (``keep_mask``) and hands it to each
layer's call. Arguments are checked by shape only; nothing here reads a tensor's values back
to the host, so a decode step never waits on the device.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch.nn import functional as F

from course_lib.attention.core import repeat_kv, scaled_dot_product_attention
from course_lib.kv_memory.paging import PagingComparison, compare_paging
from course_lib.validation import positive_int

__all__ = ["KVPool", "keep_mask", "pad_block_tables", "paged_attention", "paged_prefill_attention"]


class KVPool:
    """Per-layer key and value pools (num_blocks, block_size, n_kv_heads, head_dim), zeroed."""

    def __init__(self, n_layers: int, num_blocks: int, block_size: int, n_kv_heads: int, head_dim: int,
                 *, device=None, dtype: torch.dtype = torch.float32):
        for name, value in (("n_layers", n_layers), ("num_blocks", num_blocks), ("block_size", block_size),
                            ("n_kv_heads", n_kv_heads), ("head_dim", head_dim)):
            positive_int(f"KVPool {name}", value)
        self.n_layers, self.num_blocks, self.block_size = n_layers, num_blocks, block_size
        self.n_kv_heads, self.head_dim = n_kv_heads, head_dim
        shape = (num_blocks, block_size, n_kv_heads, head_dim)  # (N, bs, Hkv, D)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]

    @property
    def device(self) -> torch.device:
        return self.keys[0].device

    @property
    def dtype(self) -> torch.dtype:
        return self.keys[0].dtype

    @property
    def bytes_per_token(self) -> int:
        """KV bytes one token occupies across all layers (K and V)."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.keys[0].element_size()

    def nbytes(self) -> int:
        """Bytes held by every pool tensor: num_blocks * block_size * bytes_per_token.

        >>> KVPool(n_layers=2, num_blocks=4, block_size=8, n_kv_heads=2, head_dim=16).nbytes()  # 2*2*4*8*2*16*4
        16384
        """
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def write(self, layer: int, slot_mapping: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store the keys and values k, v (N, Hkv, D) of N tokens at flat slots ``slot_mapping`` (N,).

        Slots must be in 0..num_blocks*block_size-1 (an index error says so otherwise); write a
        chunk's KV before attending to it, as the model's layers do.
        """
        expected = (slot_mapping.shape[0] if slot_mapping.dim() == 1 else -1, self.n_kv_heads, self.head_dim)
        for name, t in (("k", k), ("v", v)):
            if tuple(t.shape) != expected:
                raise ValueError(f"KVPool.write: {name} must be (N, n_kv_heads, head_dim) = {expected} for "
                                 f"a slot_mapping of shape {tuple(slot_mapping.shape)}; got {tuple(t.shape)}")
        slots = slot_mapping.to(device=self.device, dtype=torch.long)  # (N,)
        flat = (-1, self.n_kv_heads, self.head_dim)  # a view: (num_blocks * bs, Hkv, D)
        self.keys[layer].view(flat).index_copy_(0, slots, k.to(self.dtype))
        self.values[layer].view(flat).index_copy_(0, slots, v.to(self.dtype))

    def fragmentation_report(self, seq_lens: Iterable[int], max_seq_len: int) -> PagingComparison:
        """Bytes a contiguous max_seq_len reservation per sequence would waste, against this
        pool's paging (see ``course_lib.kv_memory.compare_paging``)."""
        return compare_paging(seq_lens, block_size=self.block_size, max_seq_len=max_seq_len,
                              bytes_per_token=self.bytes_per_token)

    def __repr__(self) -> str:
        return (f"KVPool(layers={self.n_layers}, blocks={self.num_blocks}, block_size={self.block_size}, "
                f"kv_heads={self.n_kv_heads}, head_dim={self.head_dim}, dtype={self.dtype}, device={self.device})")


def pad_block_tables(tables: Sequence[Sequence[int]], *, device=None) -> torch.Tensor:
    """Block tables of different lengths as one (B, max_blocks) int64 tensor, padded with -1.

    >>> pad_block_tables([[3, 1], [0]]).tolist()
    [[3, 1], [0, -1]]
    """
    if not tables:
        raise ValueError("pad_block_tables needs at least one block table")
    width = max(1, max(len(t) for t in tables))
    rows = [list(t) + [-1] * (width - len(t)) for t in tables]
    return torch.tensor(rows, dtype=torch.long, device=device)  # (B, max_blocks)


def paged_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, block_tables: torch.Tensor,
                    context_lens: torch.Tensor, *, scale: float | None = None, keep: torch.Tensor | None = None,
                    fused: bool = False) -> torch.Tensor:
    """Decode attention: one query per sequence, attending to its first context_lens[b] tokens.

    q (B, H, D); k_pool, v_pool (num_blocks, block_size, Hkv, D) with H a multiple of Hkv (query
    head h reads key/value head h // (H // Hkv)); block_tables (B, max_blocks), -1 padded;
    context_lens (B,) counts the cached tokens plus the new one, whose KV must already be
    written. Returns (B, H, D). ``keep`` and ``fused`` as in ``paged_prefill_attention``.
    """
    if q.dim() != 3:
        raise ValueError(f"paged_attention takes one query per sequence, q (B, H, D); got {tuple(q.shape)}. "
                         "Use paged_prefill_attention for several")
    out = paged_prefill_attention(q.unsqueeze(2), k_pool, v_pool, block_tables, context_lens, scale=scale,
                                  keep=keep, fused=fused)
    return out.squeeze(2)  # (B, H, D)


def paged_prefill_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                            block_tables: torch.Tensor, context_lens: torch.Tensor,
                            query_lens: torch.Tensor | None = None, *, scale: float | None = None,
                            keep: torch.Tensor | None = None, fused: bool = False) -> torch.Tensor:
    """Causal attention for a chunk of new tokens per sequence over its paged context (chunked prefill).

    q (B, H, T, D): row t of sequence b is its token at position
    ``context_lens[b] - query_lens[b] + t``, i.e. the queries are the *last* query_lens[b] of the
    context_lens[b] tokens (cached prefix plus this chunk, whose KV must already be written), the
    convention ``causal_mask`` uses. Each sees the keys at positions up to its own. query_lens
    (B,) defaults to T for every sequence; rows t >= query_lens[b] are padding and return zeros.
    A block-table entry of -1 is never read. Returns (B, H, T, D).

    ``keep``: the (B, 1, T, S) mask ``keep_mask`` returns for these arguments, when the caller
    has built it already (once per pass instead of once per layer). ``fused``: torch's kernel
    instead of the course's function, the same values up to float rounding.
    """
    _check_shapes(q, k_pool, v_pool, block_tables, context_lens, query_lens)
    batch, n_heads, n_queries, _ = q.shape
    if keep is None:
        keep = keep_mask(block_tables, context_lens, query_lens, n_queries, k_pool.shape[1])  # (B, 1, T, S)
    keys, values = _gather(k_pool, block_tables), _gather(v_pool, block_tables)  # (B, Hkv, S, D) each
    if fused:
        return F.scaled_dot_product_attention(q, keys.to(q.dtype), values.to(q.dtype), attn_mask=keep, scale=scale,
                                              enable_gqa=True)  # (B, H, T, D)
    n_rep = n_heads // k_pool.shape[2]
    keys, values = repeat_kv(keys, n_rep), repeat_kv(values, n_rep)  # (B, H, S, D)
    return scaled_dot_product_attention(q, keys, values, mask=keep, scale=scale)  # (B, H, T, D)


def _gather(pool: torch.Tensor, block_tables: torch.Tensor) -> torch.Tensor:
    """Each sequence's blocks, in table order, as one contiguous run of positions."""
    blocks = pool[block_tables.clamp(min=0)]  # (B, M, bs, Hkv, D); -1 padding reads block 0, masked later
    batch, n_blocks, block_size, n_kv_heads, head_dim = blocks.shape
    return blocks.reshape(batch, n_blocks * block_size, n_kv_heads, head_dim).transpose(1, 2)  # (B, Hkv, S, D)


def keep_mask(block_tables: torch.Tensor, context_lens: torch.Tensor, query_lens: torch.Tensor | None,
              n_queries: int, block_size: int) -> torch.Tensor:
    """(B, 1, T, S) keep-mask: a real query row sees real keys at or before its position.

    Arguments as in ``paged_prefill_attention`` (T = n_queries, S = max_blocks * block_size);
    padding rows (t >= query_lens[b]) see nothing.

    >>> keep_mask(torch.tensor([[0]]), torch.tensor([3]), torch.tensor([2]), 2, 4)[0, 0].int().tolist()
    [[1, 1, 0, 0], [1, 1, 1, 0]]
    """
    device = block_tables.device
    context_lens = context_lens.to(device)  # (B,)
    if query_lens is None:
        query_lens = torch.full_like(context_lens, n_queries)  # (B,)
    query_lens = query_lens.to(device)
    rows = torch.arange(n_queries, device=device)  # (T,)
    query_pos = (context_lens - query_lens)[:, None] + rows[None, :]  # (B, T)
    real_query = rows[None, :] < query_lens[:, None]  # (B, T)
    key_pos = torch.arange(block_tables.shape[1] * block_size, device=device)  # (S,)
    real_key = (block_tables >= 0).repeat_interleave(block_size, dim=1)  # (B, S)
    keep = (key_pos[None, None, :] <= query_pos[:, :, None]) & real_query[:, :, None] & real_key[:, None, :]
    return keep[:, None]  # (B, 1, T, S): the same for every head


def _check_shapes(q, k_pool, v_pool, block_tables, context_lens, query_lens) -> None:
    """Shape and dtype checks at the boundary, so a mistake reads as a sentence."""
    if q.dim() != 4:
        raise ValueError(f"q must be (B, H, T, D), got shape {tuple(q.shape)}")
    if k_pool.dim() != 4 or k_pool.shape != v_pool.shape:
        raise ValueError("k_pool and v_pool must both be (num_blocks, block_size, n_kv_heads, head_dim); "
                         f"got {tuple(k_pool.shape)} and {tuple(v_pool.shape)}")
    batch, n_heads, _, head_dim = q.shape
    if k_pool.shape[3] != head_dim:
        raise ValueError(f"q's head_dim {head_dim} differs from the pool's {k_pool.shape[3]}")
    if n_heads % k_pool.shape[2]:
        raise ValueError(f"q has {n_heads} heads, not a multiple of the pool's {k_pool.shape[2]} KV heads")
    if block_tables.dim() != 2 or block_tables.shape[0] != batch or block_tables.is_floating_point():
        raise ValueError(f"block_tables must be integer (B, max_blocks) with B = {batch}, got "
                         f"{block_tables.dtype} {tuple(block_tables.shape)}; build it with pad_block_tables")
    for name, lens in (("context_lens", context_lens), ("query_lens", query_lens)):
        if lens is not None and tuple(lens.shape) != (batch,):
            raise ValueError(f"{name} must have shape ({batch},), one length per sequence; got {tuple(lens.shape)}")
