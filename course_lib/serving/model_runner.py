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

The runner calls the model's own layer loop (``Transformer.run_layers``) with a ``PagedCache``:
the attention modules project q, k, v and rotate each token at its own position as always,
then hand them to the cache, which writes k, v to the pool at the tokens' slots and attends
over everything each sequence has there. The pass's decodes (one new token each) and its
prefill chunks attend in two calls, so a decode never pays for a prompt chunk's padding; each
call's keep-mask is built once per pass, not once per layer. Only the rows that sample go
through the output head (a prompt chunk needs no logits).
"""
from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from course_lib.serving.paged_attention import KVPool, paged_prefill_attention

__all__ = ["AttentionGroup", "Chunk", "ModelRunner", "PagedCache", "RaggedBatch", "build_batch"]


@dataclass(frozen=True)
class Chunk:
    """One sequence's share of a pass."""

    token_ids: Sequence[int]   # the new tokens, at positions start .. start + len - 1
    start: int                 # tokens before it already have KV in the pool (cached or computed)
    block_table: Sequence[int] # the sequence's blocks, covering at least start + len positions
    sample: bool               # return logits for its last token
    num_logits: int = 1        # ... or for its last n tokens (a speculative verify pass scores each draft)


@dataclass(frozen=True)
class AttentionGroup:
    """Sequences of a pass whose attention runs as one call: its decodes, or its longer chunks."""

    rows: torch.Tensor          # (n,) flat rows of these sequences' new tokens, sequence after sequence
    padded_index: torch.Tensor  # (b, Tq) flat row of (sequence i, new token t); padding repeats its last
    flat_index: torch.Tensor    # (n,) where each of `rows` sits in the (b * Tq) padded layout
    block_tables: torch.Tensor  # (b, max_blocks), -1 padded
    context_lens: torch.Tensor  # (b,) tokens with KV after this pass
    query_lens: torch.Tensor    # (b,) new tokens per sequence
    keep: torch.Tensor          # (b, 1, Tq, S) keep-mask, built once and shared by every layer


@dataclass(frozen=True)
class RaggedBatch:
    """Device tensors for one pass; N new tokens from B sequences, M of which sample."""

    token_ids: torch.Tensor      # (N,) sequence after sequence
    positions: torch.Tensor      # (N,) each token's position in its own sequence
    slot_mapping: torch.Tensor   # (N,) flat pool slot (block * block_size + offset) for its KV
    query_lens: torch.Tensor     # (B,) new tokens per sequence
    context_lens: torch.Tensor   # (B,) tokens with KV after this pass (start + query_len)
    logit_indices: torch.Tensor  # (M,) flat rows whose logits are returned
    groups: tuple[AttentionGroup, ...]  # the decodes (one token each), then the longer chunks

    @property
    def is_decode(self) -> bool:
        """Every sequence adds exactly one token: one attention call with one query each."""
        return len(self.groups) == 1 and self.groups[0].padded_index.shape[1] == 1


def build_batch(chunks: Sequence[Chunk], block_size: int, *, device=None) -> RaggedBatch:
    """Lay the chunks end to end; slots come from each block table (the same rule as
    ``BlockManager.slot_mapping``: position p is block table[p // block_size], offset p % block_size).

    Every index the pass needs is gathered on the host into one list and sent as one tensor
    (one copy to the device, then views of it): per-tensor overhead, not arithmetic, is what a
    small model's step pays for here."""
    if not chunks:
        raise ValueError("build_batch needs at least one chunk; skip the pass when nothing is scheduled")
    tokens, positions, slots, logit_rows, firsts = [], [], [], [], []
    for b, c in enumerate(chunks):
        n, table = len(c.token_ids), c.block_table
        if n == 0:
            raise ValueError(f"chunk {b} has no tokens; every scheduled sequence computes at least one")
        if len(table) * block_size < c.start + n:
            raise ValueError(f"chunk {b} reaches position {c.start + n - 1} but its {len(table)} "
                             f"blocks of {block_size} do not cover it; allocate the slots first")
        firsts.append(len(tokens))
        tokens.extend(c.token_ids)
        span = range(c.start, c.start + n)
        positions.extend(span)
        slots.extend([table[p // block_size] * block_size + p % block_size for p in span])
        if c.sample:
            if not 1 <= c.num_logits <= n:
                raise ValueError(f"chunk {b} asks for logits of its last {c.num_logits} tokens but has {n}")
            logit_rows.extend(range(len(tokens) - c.num_logits, len(tokens)))

    ints = _Ints()
    per_token = [ints.add(values) for values in (tokens, positions, slots, logit_rows)]
    lens = [len(c.token_ids) for c in chunks]
    context = [c.start + n for c, n in zip(chunks, lens)]
    per_seq = [ints.add(lens), ints.add(context)]
    one = [b for b, n in enumerate(lens) if n == 1]
    longer = [b for b, n in enumerate(lens) if n > 1]
    plans = [_plan_group(ints, members, chunks, lens, context, firsts) for members in (one, longer) if members]
    views = ints.tensor(device)
    groups = tuple(_group(views, plan, block_size) for plan in plans)
    token_ids, positions_t, slots_t, logits_t = (views[i] for i in per_token)
    return RaggedBatch(token_ids=token_ids, positions=positions_t, slot_mapping=slots_t,
                       query_lens=views[per_seq[0]], context_lens=views[per_seq[1]], logit_indices=logits_t,
                       groups=groups)


class _Ints:
    """Int lists collected on the host and sent as one tensor; each comes back as a view."""

    def __init__(self):
        self.values: list[int] = []
        self.spans: list[tuple[int, int, tuple[int, ...] | None]] = []

    def add(self, values: Sequence[int], shape: tuple[int, ...] | None = None) -> int:
        start = len(self.values)
        self.values.extend(values)
        self.spans.append((start, len(self.values), shape))
        return len(self.spans) - 1

    def tensor(self, device) -> list[torch.Tensor]:
        # array -> frombuffer converts ints several times faster than torch.tensor(list)
        everything = torch.frombuffer(array("q", self.values), dtype=torch.long)
        if device is not None:
            everything = everything.to(device)
        return [everything[a:b] if shape is None else everything[a:b].view(shape) for a, b, shape in self.spans]


def _plan_group(ints: _Ints, members: list[int], chunks, lens, context, firsts) -> dict:
    """Host-side indices of one attention call over the chunks ``members``."""
    max_q = max(lens[b] for b in members)
    width = max(1, max(len(chunks[b].block_table) for b in members))
    rows, padded, flat, query_pos = [], [], [], []
    for i, b in enumerate(members):
        n, first = lens[b], firsts[b]
        rows.extend(range(first, first + n))
        padded.extend(range(first, first + n))
        padded.extend([first + n - 1] * (max_q - n))  # padding repeats the last token
        flat.extend(range(i * max_q, i * max_q + n))
        start = context[b] - n
        query_pos.extend(range(start, start + n))
        query_pos.extend([start + n - 1] * (max_q - n))  # ... at its position, so it sees what that token sees
    tables = []
    for b in members:
        table = chunks[b].block_table
        tables.extend(table)
        tables.extend([-1] * (width - len(table)))
    g = len(members)
    return {"rows": ints.add(rows), "padded": ints.add(padded, (g, max_q)), "flat": ints.add(flat),
            "tables": ints.add(tables, (g, width)), "context": ints.add([context[b] for b in members]),
            "lens": ints.add([lens[b] for b in members]), "query_pos": ints.add(query_pos, (g, max_q))}


def _group(views: list[torch.Tensor], plan: dict, block_size: int) -> AttentionGroup:
    tables = views[plan["tables"]]
    # The keep-mask in one comparison: a query sees the keys at or before its position. The
    # engine's tables cover every position below the context length, so no -1 entry is ever
    # reached, and a padding row repeats its chunk's last token (its output is dropped).
    key_pos = torch.arange(tables.shape[1] * block_size, device=tables.device)  # (S,)
    keep = key_pos <= views[plan["query_pos"]][:, :, None]  # (b, Tq, S)
    return AttentionGroup(rows=views[plan["rows"]], padded_index=views[plan["padded"]], flat_index=views[plan["flat"]],
                          block_tables=tables, context_lens=views[plan["context"]], query_lens=views[plan["lens"]],
                          keep=keep[:, None])


class PagedCache:
    """The cache protocol (``attend``, see ``MultiHeadAttention``) over the paged pool, for one
    pass: the model's flat row of N new tokens holds many sequences, and each layer's k, v go
    to the tokens' slots before every sequence attends to what it has in the pool."""

    def __init__(self, pool: KVPool, batch: RaggedBatch, *, fused: bool = True):
        self.pool, self.batch, self.fused = pool, batch, fused

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (1, H, N, D), k and v (1, Hkv, N, D) of the pass's tokens -> attention out (1, H, N, D)."""
        pool, batch = self.pool, self.batch
        pool.write(layer_idx, batch.slot_mapping, k[0].transpose(0, 1), v[0].transpose(0, 1))  # (N, Hkv, D)
        q = q[0].transpose(0, 1)  # (N, H, D)
        keys, values = pool.keys[layer_idx], pool.values[layer_idx]
        out = q if len(batch.groups) == 1 else torch.empty_like(q)  # (N, H, D)
        for group in batch.groups:
            q_padded = q[group.padded_index].transpose(1, 2)  # (b, H, Tq, D)
            attended = paged_prefill_attention(q_padded, keys, values, group.block_tables, group.context_lens,
                                               group.query_lens, keep=group.keep, fused=self.fused)  # (b, H, Tq, D)
            attended = attended.transpose(1, 2).flatten(0, 1)[group.flat_index]  # (n, H, D): flat order
            if len(batch.groups) == 1:
                out = attended  # one group holds every token, in flat order
            else:
                out[group.rows] = attended
        return out.transpose(0, 1)[None]  # (1, H, N, D)


class ModelRunner:
    """The model's weights plus a ``KVPool`` shaped for it; ``run(chunks)`` -> logits (M, V).

    The runner runs the Transformer's own layer loop (``run_layers``) over its own modules, so
    it holds no copy of any weight and follows the model wherever its weights change.

    ``fused_attention`` (the default) attends in torch's fused kernel; False runs the course's
    reference attention (the same values up to float rounding, slower; see bench_step).
    ``batch_invariant=True`` computes every token in a pass of its own, so each matrix
    multiply has the same shape whatever else is in the batch, however the prompt was chunked
    and whichever prefix came from the cache: a token's logits then depend only on its own
    sequence, bit for bit. The price is the batching itself (see bench_engine).
    """

    def __init__(self, model, *, num_blocks: int, block_size: int, batch_invariant: bool = False,
                 fused_attention: bool = True):
        cfg = model.config
        self.model = model
        self.block_size = block_size
        self.batch_invariant = batch_invariant
        self.fused_attention = fused_attention
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
        """Write the batch's KV into the pool and return logits (M, V) for its sampling rows.

        Token ids are not checked here: the engine checked the prompt's when it arrived, and
        every later token was sampled from the model's own vocabulary, so no pass waits to read
        them back."""
        model = self.model
        cache = PagedCache(self.pool, batch, fused=self.fused_attention)
        x = model.run_layers(model.embed_tokens(batch.token_ids)[None],  # (1, N, d): the flat batch as one row
                             model.rotary(batch.positions), cache)  # each token at its own position
        x = x[0, batch.logit_indices]  # (M, d): only the rows that sample need the head
        return model.lm_head(model.norm(x))  # (M, V)
