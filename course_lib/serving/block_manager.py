"""A pool of fixed-size KV blocks, per-sequence block tables, and prefix caching.

The engine keeps keys and values in blocks of ``block_size`` token slots (see ``KVPool``). A
sequence's block table lists, in order, the blocks holding its positions: position p lives in
block ``table[p // block_size]`` at offset ``p % block_size``. With prefix caching, a full block
whose tokens, and every token before them, match a block computed earlier is shared instead
of recomputed, so requests that open with one system prompt prefill it once.

>>> bm = BlockManager(num_blocks=8, block_size=4)
>>> system = [1, 2, 3, 4, 5, 6, 7, 8]                   # two full blocks every chat opens with
>>> bm.allocate("a", system + [9, 10])                   # nothing cached yet: prefill all 10
Allocation(block_table=[0, 1, 2], num_cached_tokens=0)
>>> bm.append_slot("a", 11)     # a sampled 11, so its prompt KV is written: its full blocks are published
10
>>> bm.allocate("b", system + [42])                      # b shares blocks 0, 1: prefill 1 token
Allocation(block_table=[0, 1, 3], num_cached_tokens=8)
>>> bm.ref_count(0), bm.num_free_blocks
(2, 4)
>>> bm.free("a"); bm.free("b"); bm.num_free_blocks       # free, yet blocks 0, 1 keep their KV...
8
>>> bm.allocate("c", system + [7]).num_cached_tokens     # ...so a later request still hits
8

Rules the engine can rely on:

- Sharing: only full blocks that end before the last prompt token are looked up, at most
  ``(len(prompt) - 1) // block_size`` of them. So ``num_cached_tokens <= len(prompt) - 1``: the
  engine always prefills the last prompt token, whose logits it samples the first reply from.
  A shared block is never written again (appends go to the sequence's own last block).
- Publication: a block joins the cache only once its KV exists. ``append_slot(seq, t)`` means
  t was sampled from a forward pass over every earlier token, so it publishes the full blocks
  before t. ``allocate`` never publishes, so chunked prefill cannot expose a half-written block.
- Verification: the cache is keyed by a chained hash, ``block_hash(parent_hash, tokens)``
  (blake2b, 64 bits, stable across processes and Python versions, unlike ``hash(tuple)``,
  which is CPython's own and collides by design: ``hash(-1) == hash(-2)``). A hit must also
  match the stored token ids and the identity of the block before it (block id plus a
  generation bumped on every reuse), so a collision, even one that repeats a block's tokens in
  another context, is a miss and never yields another prefix's KV.
- Eviction: a freed block whose hash is cached keeps its contents on the free list; when a
  block is needed, never-cached blocks go first, then the least recently freed cached block,
  whose hash is dropped. A sequence frees its blocks last-first, so deep blocks go before the
  shared prefix they hang from.
- Errors: ``NoFreeBlocksError`` (a RuntimeError: the pool is busy, not the caller wrong) when
  the pool cannot supply a block, leaving the state unchanged so the scheduler can preempt
  and retry; ``ValueError`` for unknown or duplicate sequence ids, bad sizes and positions.
"""
from __future__ import annotations

import hashlib
from array import array
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from course_lib.kv_memory.paging import blocks_needed
from course_lib.validation import positive_int

__all__ = ["Allocation", "BlockManager", "BlockManagerStats", "NoFreeBlocksError", "block_hash"]


class NoFreeBlocksError(RuntimeError):
    """The pool has too few free blocks; free or preempt a sequence, then try again."""


def block_hash(parent_hash: int | None, token_ids: Sequence[int]) -> int:
    """64-bit chained hash of one block: it covers the block's tokens and, through
    ``parent_hash``, every token before them.

    >>> block_hash(None, [1, 2]) == block_hash(None, [1, 2]) != block_hash(block_hash(None, [1, 2]), [1, 2])
    True
    """
    h = hashlib.blake2b(digest_size=8)
    if parent_hash is not None:  # the root has no parent; the input lengths keep the two apart
        h.update(parent_hash.to_bytes(8, "little"))
    h.update(array("q", token_ids).tobytes())
    return int.from_bytes(h.digest(), "little")


@dataclass(frozen=True)
class Allocation:
    # Block ids for the prompt's positions, in order: the sequence's own table, which grows as it
    # decodes and shrinks when guesses are rejected (so a scheduler can keep it on its request);
    # read it, never change it (block_table(seq_id) gives a copy to keep).
    block_table: list[int]
    num_cached_tokens: int   # leading prompt tokens whose KV is already there: skip their prefill


@dataclass(frozen=True)
class BlockManagerStats:
    num_blocks: int
    num_used_blocks: int     # referenced by at least one live sequence
    num_free_blocks: int     # reference count 0: never used, or cached and evictable
    num_cached_blocks: int   # blocks whose hash is in the prefix cache, used or free
    prefix_queries: int      # prompt tokens looked up in the prefix cache
    prefix_hits: int         # of those, tokens found cached

    @property
    def hit_rate(self) -> float:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else 0.0


class _Block:
    __slots__ = ("ref_count", "hash", "token_ids", "parent", "generation")

    def __init__(self):
        self.ref_count = 0
        self.hash: int | None = None            # set only while the cache maps this hash here
        self.token_ids: tuple[int, ...] = ()    # contents, compared on every hit
        self.parent: tuple[int, int] | None = None  # (block id, generation) before it; None at the root
        self.generation = 0                     # bumped each time the block is handed out afresh


class _Sequence:
    __slots__ = ("block_table", "token_ids", "num_hashed", "last_hash")

    def __init__(self, block_table: list[int], token_ids: list[int], num_hashed: int, last_hash: int | None):
        self.block_table = block_table
        self.token_ids = token_ids   # every token that has a slot
        self.num_hashed = num_hashed  # leading full blocks already hashed (hit or published)
        self.last_hash = last_hash   # chain hash of block num_hashed - 1


class BlockManager:
    """Hands out KV blocks to sequences (keyed by any hashable id) and shares cached prefixes."""

    def __init__(self, num_blocks: int, block_size: int, *, prefix_caching: bool = True):
        self.num_blocks = positive_int("num_blocks", num_blocks)
        self.block_size = positive_int("block_size", block_size)
        self.prefix_caching = prefix_caching
        self._blocks = [_Block() for _ in range(num_blocks)]
        # Never-cached blocks sit at the left, cached ones at the right in the order they were
        # freed, so popleft() takes a worthless block first and otherwise the LRU cached one.
        self._free: deque[int] = deque(range(num_blocks))
        self._hash_to_block: dict[int, int] = {}
        self._seqs: dict[Hashable, _Sequence] = {}
        self._queries = self._hits = 0

    # --- queries -----------------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    def __contains__(self, seq_id: Hashable) -> bool:
        return seq_id in self._seqs

    def block_table(self, seq_id: Hashable) -> list[int]:
        """A copy of the sequence's block table."""
        return list(self._seq(seq_id).block_table)

    def num_tokens(self, seq_id: Hashable) -> int:
        """Tokens of the sequence that have a slot (prompt plus appended)."""
        return len(self._seq(seq_id).token_ids)

    def ref_count(self, block_id: int) -> int:
        return self._blocks[block_id].ref_count

    def slot(self, seq_id: Hashable, position: int) -> tuple[int, int]:
        """(block_id, offset) where the KV of ``position`` lives; its flat slot is
        ``block_id * block_size + offset``."""
        seq = self._seq(seq_id)
        if not 0 <= position < len(seq.token_ids):
            raise ValueError(f"position {position} is outside sequence {seq_id!r}, which has "
                             f"{len(seq.token_ids)} tokens; use 0..{len(seq.token_ids) - 1}")
        return seq.block_table[position // self.block_size], position % self.block_size

    def slot_mapping(self, seq_id: Hashable, start: int = 0, stop: int | None = None) -> list[int]:
        """Flat slots (block_id * block_size + offset) of positions start..stop-1, the indices
        ``KVPool.write`` takes; prefill passes start=num_cached_tokens."""
        seq = self._seq(seq_id)
        stop = len(seq.token_ids) if stop is None else stop
        if not 0 <= start <= stop <= len(seq.token_ids):
            raise ValueError(f"slot range {start}..{stop} does not fit sequence {seq_id!r} of "
                             f"{len(seq.token_ids)} tokens; need 0 <= start <= stop <= {len(seq.token_ids)}")
        table, size = seq.block_table, self.block_size
        return [table[p // size] * size + p % size for p in range(start, stop)]

    def stats(self) -> BlockManagerStats:
        return BlockManagerStats(
            num_blocks=self.num_blocks, num_used_blocks=self.num_used_blocks,
            num_free_blocks=self.num_free_blocks, num_cached_blocks=len(self._hash_to_block),
            prefix_queries=self._queries, prefix_hits=self._hits,
        )

    # --- prompts -----------------------------------------------------------------------------

    def can_allocate(self, token_count_or_ids: int | Sequence[int]) -> bool:
        """Whether ``allocate`` would succeed now. A count ignores the prefix cache (a safe
        lower bound: hits never cost more blocks than misses); token ids count the hits."""
        if isinstance(token_count_or_ids, int):
            return blocks_needed(token_count_or_ids, self.block_size) <= len(self._free)
        token_ids = _checked_prompt(token_count_or_ids)
        hits, _ = self._lookup(token_ids)
        return self._blocks_to_take(len(token_ids), hits) <= len(self._free)

    def allocate(self, seq_id: Hashable, token_ids: Sequence[int]) -> Allocation:
        """Reserve slots for a prompt, sharing cached full blocks; all or nothing."""
        if seq_id in self._seqs:
            raise ValueError(f"sequence {seq_id!r} already holds blocks; free() it before allocating again")
        token_ids = _checked_prompt(token_ids)
        hits, last_hash = self._lookup(token_ids)
        needed = self._blocks_to_take(len(token_ids), hits)
        if needed > len(self._free):
            raise NoFreeBlocksError(
                f"prompt of {len(token_ids)} tokens needs {needed} free blocks but {len(self._free)} "
                f"of {self.num_blocks} are free; preempt or finish a sequence, or add blocks")
        for block_id in hits:
            block = self._blocks[block_id]
            if block.ref_count == 0:  # cached but free: take it back off the free list
                self._free.remove(block_id)  # O(num_blocks), as in nano-vllm; fine at course scale
            block.ref_count += 1
        n_new = blocks_needed(len(token_ids), self.block_size) - len(hits)
        table = hits + [self._take_free_block() for _ in range(n_new)]
        self._seqs[seq_id] = _Sequence(table, token_ids, len(hits), last_hash)
        num_cached = len(hits) * self.block_size
        if self.prefix_caching:
            self._queries += len(token_ids)
            self._hits += num_cached
        return Allocation(table, num_cached)

    # --- decoding ----------------------------------------------------------------------------

    def can_append(self, seq_id: Hashable, num_tokens: int = 1) -> bool:
        """Whether ``num_tokens`` more slots fit now (``append_slot`` once, or ``append_lookahead``)."""
        seq = self._seq(seq_id)
        needed = blocks_needed(len(seq.token_ids) + num_tokens, self.block_size) - len(seq.block_table)
        return needed <= len(self._free)

    def append_slot(self, seq_id: Hashable, token_id: int) -> int:
        """Reserve the slot for a just-sampled token and return it (block_id * block_size + offset).

        Call it after the forward pass that sampled ``token_id``: that pass wrote the KV of every
        earlier token, so their full blocks are published to the prefix cache here.
        """
        seq = self._seq(seq_id)
        self._publish(seq)
        position = len(seq.token_ids)
        if position % self.block_size == 0:  # the last block is full
            if not self._free:
                raise NoFreeBlocksError(f"sequence {seq_id!r} needs a new block and none is free; "
                                        "preempt a sequence (free it and re-allocate it later)")
            seq.block_table.append(self._take_free_block())
        seq.token_ids.append(token_id)
        return seq.block_table[-1] * self.block_size + position % self.block_size

    def append_lookahead(self, seq_id: Hashable, token_ids: Sequence[int]) -> None:
        """Reserve slots for speculative tokens whose KV the next pass writes but which may be
        rejected: nothing is published (``append_slot`` would offer blocks of guesses to the
        cache); ``truncate`` drops the rejected ones after verification."""
        seq = self._seq(seq_id)
        if not self.can_append(seq_id, len(token_ids)):
            raise NoFreeBlocksError(f"sequence {seq_id!r} needs blocks for {len(token_ids)} lookahead "
                                    "tokens and too few are free; speculate less or free a sequence")
        for token in token_ids:
            if len(seq.token_ids) % self.block_size == 0:
                seq.block_table.append(self._take_free_block())
            seq.token_ids.append(token)

    def truncate(self, seq_id: Hashable, num_tokens: int) -> None:
        """Keep the sequence's first ``num_tokens`` slots (rejected speculative tokens go); blocks
        left empty return to the free list. Published (hashed) blocks cannot be cut."""
        seq = self._seq(seq_id)
        if not seq.num_hashed * self.block_size <= num_tokens <= len(seq.token_ids):
            raise ValueError(f"cannot truncate sequence {seq_id!r} to {num_tokens} tokens: it has "
                             f"{len(seq.token_ids)}, the first {seq.num_hashed * self.block_size} of "
                             "them published to the prefix cache")
        del seq.token_ids[num_tokens:]
        keep = blocks_needed(num_tokens, self.block_size)
        while len(seq.block_table) > keep:
            block_id = seq.block_table.pop()
            block = self._blocks[block_id]
            block.ref_count -= 1  # a lookahead block is fresh and private: it is now free
            if block.ref_count == 0:
                self._free.appendleft(block_id)

    def mark_computed(self, seq_id: Hashable, num_tokens: int) -> None:
        """The engine wrote the KV of the sequence's first ``num_tokens`` tokens: publish the full
        blocks among them now, so a request arriving next step can reuse a prompt that has only
        been prefilled (without it, blocks are offered only at the first decode step).
        """
        self._publish(self._seq(seq_id), upto=num_tokens)

    def free(self, seq_id: Hashable) -> None:
        """Drop the sequence; blocks nobody else uses return to the free list, cached ones
        keeping their contents until evicted."""
        seq = self._seqs.pop(seq_id, None)
        if seq is None:
            raise ValueError(f"unknown sequence {seq_id!r}; it was never allocated or is already freed")
        for block_id in reversed(seq.block_table):  # last-first: deep blocks are evicted before their prefix
            block = self._blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                if block.hash is None:
                    self._free.appendleft(block_id)
                else:
                    self._free.append(block_id)

    # --- internals ---------------------------------------------------------------------------

    def _seq(self, seq_id: Hashable) -> _Sequence:
        try:
            return self._seqs[seq_id]
        except KeyError:
            raise ValueError(f"unknown sequence {seq_id!r}; allocate() it first") from None

    def _blocks_to_take(self, n_tokens: int, hits: list[int]) -> int:
        """Free-list entries an allocation consumes: new blocks plus hits that are free now."""
        n_new = blocks_needed(n_tokens, self.block_size) - len(hits)
        return n_new + sum(1 for block_id in hits if self._blocks[block_id].ref_count == 0)

    def _lookup(self, token_ids: list[int]) -> tuple[list[int], int | None]:
        """Cached blocks matching the prompt's leading full blocks, stopping at the first miss,
        and the chain hash of the last hit."""
        hits: list[int] = []
        parent_hash, expected_parent = None, None
        if not self.prefix_caching:
            return hits, parent_hash
        size = self.block_size
        for i in range((len(token_ids) - 1) // size):  # never the block holding the last token
            tokens = tuple(token_ids[i * size:(i + 1) * size])
            h = block_hash(parent_hash, tokens)
            block_id = self._hash_to_block.get(h)
            if block_id is None:
                break
            block = self._blocks[block_id]
            if block.token_ids != tokens or block.parent != expected_parent:  # a hash collision
                break
            hits.append(block_id)
            parent_hash, expected_parent = h, (block_id, block.generation)
        return hits, parent_hash

    def _publish(self, seq: _Sequence, upto: int | None = None) -> None:
        """Hash every full block of ``seq`` (within its first ``upto`` tokens) not hashed yet and
        offer it to the cache."""
        if not self.prefix_caching:
            return
        size, table = self.block_size, seq.block_table
        known = len(seq.token_ids) if upto is None else min(upto, len(seq.token_ids))
        for i in range(seq.num_hashed, known // size):
            tokens = tuple(seq.token_ids[i * size:(i + 1) * size])
            h = block_hash(seq.last_hash, tokens)
            block = self._blocks[table[i]]
            if block.hash is None and h not in self._hash_to_block:
                # First copy wins; a duplicate computed alongside it stays private.
                block.hash, block.token_ids = h, tokens
                block.parent = None if i == 0 else (table[i - 1], self._blocks[table[i - 1]].generation)
                self._hash_to_block[h] = table[i]
            seq.num_hashed, seq.last_hash = i + 1, h

    def _take_free_block(self) -> int:
        """Pop the next free block (never-cached first, else LRU cached), evicting its hash."""
        block_id = self._free.popleft()
        block = self._blocks[block_id]
        if block.hash is not None:
            del self._hash_to_block[block.hash]
            block.hash, block.token_ids, block.parent = None, (), None
        block.generation += 1  # children cached on top of the old contents no longer match
        block.ref_count = 1
        return block_id

    def __repr__(self) -> str:
        return (f"BlockManager(blocks={self.num_blocks}, block_size={self.block_size}, "
                f"free={self.num_free_blocks}, sequences={len(self._seqs)}, "
                f"cached={len(self._hash_to_block)}, prefix_caching={self.prefix_caching})")


def _checked_prompt(token_ids: Sequence[int]) -> list[int]:
    """The prompt as a list of non-negative ints, or a ValueError saying what to pass."""
    token_ids = list(token_ids)
    if not token_ids:
        raise ValueError("the prompt is empty; a sequence needs at least one token to prefill")
    for i, t in enumerate(token_ids):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < 2**63:
            raise ValueError(f"token_ids[{i}] must be a non-negative int, got {type(t).__name__} {t!r}; "
                             "pass a list of ints (tensor.tolist() for a tensor)")
    return token_ids
