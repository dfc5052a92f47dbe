"""The BPE primitives: count pairs, merge one pair, apply a merge table to one chunk.

A merge table maps a pair of token IDs to the ID of the token that replaces it. The new ID
is also the merge's rank: lower IDs were learned earlier and are applied first.

    >>> get_pair_counts([1, 2, 3, 1, 2])
    {(1, 2): 2, (2, 3): 1, (3, 1): 1}
    >>> merge_pair([1, 2, 3, 1, 2], (1, 2), 4)
    [4, 3, 4]
    >>> apply_merges([1, 2, 3, 1, 2], {(1, 2): 4, (4, 3): 5})
    [5, 4]
"""
from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence

Pair = tuple[int, int]
# Chunks longer than this use the heap-based merge, which stays O(n log n) on pathological
# input such as 100,000 spaces in one chunk; the simple loop is faster on short chunks.
LONG_CHUNK = 64
_NO_MERGE = 1 << 62


def get_pair_counts(ids: Sequence[int], counts: dict[Pair, int] | None = None, weight: int = 1) -> dict[Pair, int]:
    """Count adjacent pairs (optionally adding ``weight`` per occurrence into ``counts``).

    >>> get_pair_counts([5, 5, 5])
    {(5, 5): 2}
    """
    counts = {} if counts is None else counts
    for pair in zip(ids, ids[1:]):
        counts[pair] = counts.get(pair, 0) + weight
    return counts


def merge_pair(ids: Sequence[int], pair: Pair, new_id: int) -> list[int]:
    """Replace every occurrence of ``pair``, scanning left to right, by ``new_id``.

    Overlaps resolve to the left: ``[5, 5, 5]`` with pair ``(5, 5)`` gives ``[new, 5]``.

    >>> merge_pair([5, 5, 5], (5, 5), 9)
    [9, 5]
    """
    first, second = pair
    ids = ids if isinstance(ids, (list, tuple)) else list(ids)
    out: list[int] = []
    start, last = 0, len(ids) - 1  # a match starts before the last position
    while True:
        try:  # jump to the next place the pair could start (list.index scans at C speed)
            i = ids.index(first, start, max(last, 0))
        except ValueError:
            break
        if ids[i + 1] == second:
            out.extend(ids[start:i])
            out.append(new_id)
            start = i + 2
        else:
            out.extend(ids[start:i + 1])
            start = i + 1
    out.extend(ids[start:])
    return out


def apply_merges(ids: Sequence[int], merges: Mapping[Pair, int]) -> list[int]:
    """Encode one chunk: repeatedly merge the adjacent pair with the lowest rank.

    Among equal ranks (the same pair at several places) the leftmost goes first, exactly as
    tiktoken does. ``ids`` are the chunk's byte tokens.
    """
    if len(ids) > LONG_CHUNK:
        return _apply_merges_heap(ids, merges)
    ids = list(ids)
    get = merges.get
    # ranks[k] is the rank of the pair (ids[k], ids[k + 1]); a merge changes only its neighbours.
    ranks = [get(pair, _NO_MERGE) for pair in zip(ids, ids[1:])]
    while ranks:
        best = min(ranks)
        if best == _NO_MERGE:
            break
        i = ranks.index(best)  # leftmost among equal ranks
        ids[i] = best
        del ids[i + 1]
        del ranks[i]
        if i > 0:
            ranks[i - 1] = get((ids[i - 1], best), _NO_MERGE)
        if i < len(ranks):
            ranks[i] = get((best, ids[i + 1]), _NO_MERGE)
    return ids


def _apply_merges_heap(ids: Sequence[int], merges: Mapping[Pair, int]) -> list[int]:
    """Same result as the simple loop, with a linked list and a heap of (rank, position)."""
    n = len(ids)
    tokens = list(ids)
    nxt = list(range(1, n + 1))  # nxt[i] == n: no right neighbour
    prv = list(range(-1, n - 1))
    alive = [True] * n
    get = merges.get
    heap = [(r, i) for i, pair in enumerate(zip(tokens, tokens[1:])) if (r := get(pair)) is not None]
    heapq.heapify(heap)
    while heap:
        rank, i = heapq.heappop(heap)
        j = nxt[i] if alive[i] else n
        # Stale entry: the left token died or its pair changed since the entry was pushed.
        if j >= n or get((tokens[i], tokens[j])) != rank:
            continue
        tokens[i] = rank
        alive[j] = False
        nxt[i] = nxt[j]
        if nxt[i] < n:
            prv[nxt[i]] = i
            if (r := get((tokens[i], tokens[nxt[i]]))) is not None:
                heapq.heappush(heap, (r, i))
        if prv[i] >= 0 and (r := get((tokens[prv[i]], tokens[i]))) is not None:
            heapq.heappush(heap, (r, prv[i]))
    return [t for t, keep in zip(tokens, alive) if keep]


def recover_merges(token_bytes_by_rank: Iterable[tuple[bytes, int]], byte_ids: Sequence[int]) -> dict[Pair, int]:
    """Rebuild a merge table from a tiktoken rank file (token bytes -> rank).

    A rank file lists tokens, not merges. Each multi-byte token was made by one merge of two
    earlier tokens; running BPE on its bytes with only the earlier merges stops at exactly
    those two parts. ``token_bytes_by_rank`` must come in increasing rank order and
    ``byte_ids[b]`` is the ID of the single byte ``b`` (cl100k's bytes are not in byte order).

    >>> ranks = [(b"ab", 256), (b"abc", 257)]
    >>> recover_merges(ranks, list(range(256)))
    {(97, 98): 256, (256, 99): 257}
    """
    merges: dict[Pair, int] = {}
    for token, rank in token_bytes_by_rank:
        if len(token) < 2:
            continue
        parts = apply_merges([byte_ids[b] for b in token], merges)
        if len(parts) != 2:
            raise ValueError(
                f"token {token!r} (rank {rank}) cannot be built from two earlier tokens "
                f"(BPE on its bytes stops at {len(parts)} parts); the rank table is not a BPE table"
            )
        merges[(parts[0], parts[1])] = rank
    return merges
