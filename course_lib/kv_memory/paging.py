"""Contiguous reservation versus paging: how much KV memory each wastes.

A server that does not know how long a reply will be can reserve ``max_seq_len`` slots per
sequence up front (contiguous). Paging (PagedAttention) instead hands out fixed-size blocks
as tokens arrive and records them in a block table, so a sequence wastes at most the unused
tail of its last block.

>>> blocks_needed(100, 16)
7
>>> c = compare_paging([100, 1000, 30], block_size=16, max_seq_len=2048)
>>> c.contiguous_waste_tokens, c.paged_waste_tokens
(5014, 22)
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from course_lib.validation import positive_int


def blocks_needed(seq_len: int, block_size: int) -> int:
    """Blocks a sequence of ``seq_len`` tokens occupies: ceil(seq_len / block_size)."""
    positive_int("seq_len", seq_len)
    positive_int("block_size", block_size)
    return -(-seq_len // block_size)


@dataclass(frozen=True)
class PagingComparison:
    seq_lens: tuple[int, ...]
    block_size: int
    max_seq_len: int
    bytes_per_token: int
    used_tokens: int                 # slots holding real tokens
    contiguous_reserved_tokens: int  # max_seq_len slots per sequence
    paged_reserved_tokens: int       # whole blocks per sequence

    @property
    def contiguous_waste_tokens(self) -> int:
        return self.contiguous_reserved_tokens - self.used_tokens

    @property
    def paged_waste_tokens(self) -> int:
        return self.paged_reserved_tokens - self.used_tokens

    @property
    def contiguous_waste_bytes(self) -> int:
        return self.contiguous_waste_tokens * self.bytes_per_token

    @property
    def paged_waste_bytes(self) -> int:
        return self.paged_waste_tokens * self.bytes_per_token

    @property
    def contiguous_waste_fraction(self) -> float:
        """Share of the reserved memory that holds no token."""
        return self.contiguous_waste_tokens / self.contiguous_reserved_tokens

    @property
    def paged_waste_fraction(self) -> float:
        return self.paged_waste_tokens / self.paged_reserved_tokens


def compare_paging(
    seq_lens: Iterable[int], *, block_size: int, max_seq_len: int, bytes_per_token: int = 1
) -> PagingComparison:
    """Reserved and wasted KV slots for a mix of sequence lengths under both schemes.

    ``bytes_per_token`` (for example ``kv_bytes_per_token(...)``) turns slots into bytes;
    leave it at 1 to count slots.
    """
    lengths = tuple(seq_lens)
    if not lengths:
        raise ValueError("seq_lens is empty; give the length of at least one sequence")
    positive_int("block_size", block_size)
    positive_int("max_seq_len", max_seq_len)
    positive_int("bytes_per_token", bytes_per_token)
    for i, length in enumerate(lengths):
        positive_int(f"seq_lens[{i}]", length)
        if length > max_seq_len:
            raise ValueError(
                f"seq_lens[{i}] = {length} exceeds max_seq_len = {max_seq_len}; a contiguous "
                "reservation could not hold it, so raise max_seq_len or shorten the sequence"
            )
    paged = sum(blocks_needed(length, block_size) * block_size for length in lengths)
    return PagingComparison(
        seq_lens=lengths,
        block_size=block_size,
        max_seq_len=max_seq_len,
        bytes_per_token=bytes_per_token,
        used_tokens=sum(lengths),
        contiguous_reserved_tokens=max_seq_len * len(lengths),
        paged_reserved_tokens=paged,
    )
