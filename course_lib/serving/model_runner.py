"""One forward pass of the course Transformer over a ragged batch, with KV in a paged pool.

A pass mixes sequences at different stages: a prompt chunk here, a one-token decode there.
Their new tokens are laid end to end in one flat row, so every linear layer runs once for the
whole batch; only attention needs to know where one sequence ends and the next begins.

>>> from course_lib.model import Transformer, get_config
>>> model = Transformer(get_config("test-gqa"), generator=torch.Generator().manual_seed(0)).eval()
>>> runner = ModelRunner(model, num_blocks=8, block_size=4)
>>> batch = build_batch([Chunk([5, 6, 7], 0, [2], True), Chunk([9], 0, [0], True)], 4)
>>> batch.slot_mapping.tolist(), batch.query_lens.tolist()    # block 2 holds 0..2, block 0 holds 0
([8, 9, 10, 0], [3, 1])
>>> logits = runner.forward(batch)                             # one row per sampling sequence
>>> tuple(logits.shape)
(2, 128)
>>> full = model(torch.tensor([[5, 6, 7]]))[0, -1]             # the model's own forward agrees
>>> torch.allclose(logits[0], full, atol=1e-5)
True

Per layer: norm -> q, k, v with the module's own projections, each token rotated at its own
position -> write k, v to the pool at the token's slot -> paged attention over everything the
sequence has in the pool -> output projection -> residual -> MLP. Only the rows that sample
go through the final norm and the output head (a prompt chunk needs no logits).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from course_lib.serving.paged_attention import KVPool, pad_block_tables, paged_attention, paged_prefill_attention

__all__ = ["Chunk", "ModelRunner", "RaggedBatch", "build_batch"]


@dataclass(frozen=True)
class Chunk:
    """One sequence's share of a pass."""

    token_ids: Sequence[int]   # the new tokens, at positions start .. start + len - 1
    start: int                 # tokens before it already have KV in the pool (cached or computed)
    block_table: Sequence[int] # the sequence's blocks, covering at least start + len positions
    sample: bool               # return logits for its last token
    num_logits: int = 1        # ... or for its last n tokens (a speculative verify pass scores each draft)


@dataclass(frozen=True)
class RaggedBatch:
    """Device tensors for one pass; N new tokens from B sequences, M of which sample."""

    token_ids: torch.Tensor      # (N,) sequence after sequence
    positions: torch.Tensor      # (N,) each token's position in its own sequence
    slot_mapping: torch.Tensor   # (N,) flat pool slot (block * block_size + offset) for its KV
    block_tables: torch.Tensor   # (B, max_blocks), -1 padded
    query_lens: torch.Tensor     # (B,) new tokens per sequence
    context_lens: torch.Tensor   # (B,) tokens with KV after this pass (start + query_len)
    padded_index: torch.Tensor   # (B, Tq) flat row of (sequence b, new token t); padding -> row 0
    flat_index: torch.Tensor     # (N,) where flat row i sits in the (B * Tq) padded layout
    logit_indices: torch.Tensor  # (M,) flat rows whose logits are returned
    max_query_len: int           # Tq, a host int so the pass never reads lengths back

    @property
    def is_decode(self) -> bool:
        """Every sequence adds exactly one token: attention takes the one-query path."""
        return self.max_query_len == 1


def build_batch(chunks: Sequence[Chunk], block_size: int, *, device=None) -> RaggedBatch:
    """Lay the chunks end to end; slots come from each block table (the same rule as
    ``BlockManager.slot_mapping``: position p is block table[p // block_size], offset p % block_size)."""
    if not chunks:
        raise ValueError("build_batch needs at least one chunk; skip the pass when nothing is scheduled")
    tokens, positions, slots, logit_rows = [], [], [], []
    padded, flat = [], []
    max_q = max(len(c.token_ids) for c in chunks)
    for b, c in enumerate(chunks):
        n = len(c.token_ids)
        if n == 0:
            raise ValueError(f"chunk {b} has no tokens; every scheduled sequence computes at least one")
        if len(c.block_table) * block_size < c.start + n:
            raise ValueError(f"chunk {b} reaches position {c.start + n - 1} but its {len(c.block_table)} "
                             f"blocks of {block_size} do not cover it; allocate the slots first")
        first = len(tokens)
        tokens.extend(c.token_ids)
        for p in range(c.start, c.start + n):
            positions.append(p)
            slots.append(c.block_table[p // block_size] * block_size + p % block_size)
        padded.append([first + t if t < n else 0 for t in range(max_q)])
        flat.extend(b * max_q + t for t in range(n))
        if c.sample:
            if not 1 <= c.num_logits <= n:
                raise ValueError(f"chunk {b} asks for logits of its last {c.num_logits} tokens but has {n}")
            logit_rows.extend(range(len(tokens) - c.num_logits, len(tokens)))

    def long(values):
        return torch.tensor(values, dtype=torch.long, device=device)

    return RaggedBatch(
        token_ids=long(tokens), positions=long(positions), slot_mapping=long(slots),
        block_tables=pad_block_tables([c.block_table for c in chunks], device=device),
        query_lens=long([len(c.token_ids) for c in chunks]),
        context_lens=long([c.start + len(c.token_ids) for c in chunks]),
        padded_index=long(padded), flat_index=long(flat), logit_indices=long(logit_rows),
        max_query_len=max_q,
    )


class ModelRunner:
    """The model's weights plus a ``KVPool`` shaped for it; ``run(chunks)`` -> logits (M, V).

    The runner reads the Transformer's own modules (norms, projections, MLPs, rotary tables),
    so it holds no copy of any weight and follows the model wherever its weights change.

    ``batch_invariant=True`` computes every token in a pass of its own, so each matrix
    multiply has the same shape whatever else is in the batch, however the prompt was chunked
    and whichever prefix came from the cache: a token's logits then depend only on its own
    sequence, bit for bit. The price is the batching itself (see bench_engine).
    """

    def __init__(self, model, *, num_blocks: int, block_size: int, batch_invariant: bool = False):
        cfg = model.config
        self.model = model
        self.block_size = block_size
        self.batch_invariant = batch_invariant
        self.pool = KVPool(cfg.n_layers, num_blocks, block_size, cfg.n_kv_heads, cfg.head_dim,
                           device=model.device, dtype=model.dtype)

    def run(self, chunks: Sequence[Chunk]) -> torch.Tensor:
        """One scheduled pass: the chunks' KV into the pool, logits (M, V) of their sampling rows."""
        device = self.model.device
        if not self.batch_invariant:
            return self.forward(build_batch(chunks, self.block_size, device=device))
        rows = []
        for c in chunks:  # token by token, in order, so each reads the KV its predecessors wrote
            n = len(c.token_ids)
            for t, token in enumerate(c.token_ids):
                wanted = c.sample and t >= n - c.num_logits
                logits = self.forward(build_batch([Chunk([token], c.start + t, c.block_table, True)],
                                                  self.block_size, device=device))  # (1, V)
                if wanted:
                    rows.append(logits)
        return torch.cat(rows) if rows else torch.empty(0, self.model.config.vocab_size, device=device)

    @torch.inference_mode()
    def forward(self, batch: RaggedBatch) -> torch.Tensor:
        """Write the batch's KV into the pool and return logits (M, V) for its sampling rows."""
        model = self.model
        x = model.embed_tokens(batch.token_ids)[None]  # (1, N, d): the flat batch as one row
        rotary = model.rotary(batch.positions)  # (N, D) x2: each token at its own position
        for layer_idx, layer in enumerate(model.layers):
            x = x + self._attention(layer_idx, layer.self_attn, layer.input_layernorm(x), rotary, batch)  # (1, N, d)
            x = x + layer.mlp(layer.post_attention_layernorm(x))  # (1, N, d)
        x = x[0, batch.logit_indices]  # (M, d): only the rows that sample need the head
        return model.lm_head(model.norm(x))  # (M, V)

    def _attention(self, layer_idx: int, attn, x: torch.Tensor, rotary, batch: RaggedBatch) -> torch.Tensor:
        n_tokens = x.shape[1]
        q, k, v = attn.project_qkv(x, rotary)  # (1, H, N, D), (1, Hkv, N, D) x2
        self.pool.write(layer_idx, batch.slot_mapping, k[0].transpose(0, 1), v[0].transpose(0, 1))  # (N, Hkv, D)
        q = q[0].transpose(0, 1)  # (N, H, D)
        keys, values = self.pool.keys[layer_idx], self.pool.values[layer_idx]
        if batch.is_decode:  # N == B: one query per sequence
            out = paged_attention(q, keys, values, batch.block_tables, batch.context_lens)  # (B, H, D)
        else:
            q_padded = q[batch.padded_index].transpose(1, 2)  # (B, H, Tq, D)
            out = paged_prefill_attention(q_padded, keys, values, batch.block_tables, batch.context_lens,
                                          batch.query_lens)  # (B, H, Tq, D)
            out = out.transpose(1, 2).flatten(0, 1)[batch.flat_index]  # (N, H, D): back to flat order
        return attn.o_proj(out.reshape(1, n_tokens, -1))  # (1, N, d)
