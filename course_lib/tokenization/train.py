"""Training byte-level BPE: the textbook algorithm and a fast incremental one.

Both start from the corpus cut into chunks by the split pattern, with each distinct chunk
kept once with its count (Sennrich et al., 2016). Each step merges the most frequent
adjacent pair into a new token. **Tie rule:** among pairs with the same count, the pair
with the smallest ``(left ID, right ID)`` wins. Same text, same merges, every time.

Hand-checkable example (one chunk, IDs are bytes: a=97, b=98, c=99, d=100):

    >>> train_merges({b"aaabdaaabac": 1}, 5)
    [(97, 97), (97, 98), (256, 257), (97, 99), (100, 258)]

``(97, 97)`` occurs 4 times; then ``(97, 98)`` and ``(256, 97)`` both occur twice and the
tie goes to the smaller pair; at the end every pair occurs once.
"""
from __future__ import annotations

import heapq
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence

from course_lib.tokenization.merge import Pair, get_pair_counts, merge_pair
from course_lib.tokenization.pretokenize import GPT4_PATTERN, compile_pattern
from course_lib.tokenization.special import split_on_special


def count_chunks(text: str, pattern: str = GPT4_PATTERN, special_tokens: Sequence[str] = ()) -> dict[bytes, int]:
    """Distinct pre-token chunks (as UTF-8 bytes) and how often each occurs.

    Special-token strings are cut out first, so no chunk (and no merge) contains one.

    >>> count_chunks("the cat<|end|>the cat", special_tokens=["<|end|>"])
    {b'the': 2, b' cat': 2}
    """
    finder = compile_pattern(pattern)
    counts: Counter[str] = Counter()
    for piece, is_special in split_on_special(text, special_tokens):
        if not is_special:
            counts.update(finder.findall(piece))
    return {chunk.encode("utf-8", "replace"): n for chunk, n in counts.items()}


def train_merges_reference(chunk_counts: Mapping[bytes, int], num_merges: int, first_id: int = 256) -> list[Pair]:
    """The textbook algorithm: recount every pair after every merge. Slow; kept as the oracle."""
    words = [list(chunk) for chunk in chunk_counts]
    freqs = list(chunk_counts.values())
    merges: list[Pair] = []
    for step in range(num_merges):
        counts: dict[Pair, int] = {}
        for word, freq in zip(words, freqs):
            get_pair_counts(word, counts, freq)
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = [merge_pair(word, best, first_id + step) if len(word) > 1 else word for word in words]
    return merges


def train_merges(chunk_counts: Mapping[bytes, int], num_merges: int, first_id: int = 256) -> list[Pair]:
    """Same merges as ``train_merges_reference``, without recounting the corpus each step.

    Keep the count of every pair and, per pair, the chunks it occurs in. A merge touches only
    those chunks: subtract their old pairs, add their new ones. A heap of (-count, pair) with
    stale entries skipped on the way out yields the best pair under the same tie rule.
    """
    words = [list(chunk) for chunk in chunk_counts]
    freqs = list(chunk_counts.values())
    pair_counts: dict[Pair, int] = {}
    where: dict[Pair, set[int]] = {}
    for index, (word, freq) in enumerate(zip(words, freqs)):
        for pair in zip(word, word[1:]):
            pair_counts[pair] = pair_counts.get(pair, 0) + freq
            where.setdefault(pair, set()).add(index)
    heap = [(-count, pair) for pair, count in pair_counts.items()]
    heapq.heapify(heap)
    merges: list[Pair] = []
    while len(merges) < num_merges:
        while heap and pair_counts.get(heap[0][1], 0) != -heap[0][0]:
            heapq.heappop(heap)  # stale: this pair's count changed after the entry was pushed
        if not heap:
            break
        _, best = heapq.heappop(heap)
        new_id = first_id + len(merges)
        merges.append(best)
        delta: dict[Pair, int] = {}
        for index in where.pop(best, ()):
            word = words[index]
            merged = merge_pair(word, best, new_id)
            if len(merged) == len(word):
                continue  # the pair left this chunk in an earlier merge
            freq = -freqs[index]
            get_pair_counts(word, delta, freq)
            get_pair_counts(merged, delta, -freq)
            for pair in zip(merged, merged[1:]):
                if new_id in pair:  # only pairs with the new token are new to this chunk
                    where.setdefault(pair, set()).add(index)
            words[index] = merged
        for pair, change in delta.items():
            if change:
                count = pair_counts.get(pair, 0) + change
                if count:
                    pair_counts[pair] = count
                    heapq.heappush(heap, (-count, pair))
                else:
                    del pair_counts[pair]
    return merges


def normalise_special_tokens(special_tokens) -> list[str] | dict[str, int]:
    """Check the ``special_tokens`` argument: None, a sequence of strings, or str -> ID."""
    if special_tokens is None:
        return []
    if isinstance(special_tokens, (str, bytes)):
        raise TypeError(f"special_tokens must be a list of strings, got the single string {special_tokens!r}; "
                        f"wrap it in a list: [{special_tokens!r}]")
    items = list(special_tokens.items()) if isinstance(special_tokens, Mapping) else [(s, None) for s in special_tokens]
    for token, token_id in items:
        if not isinstance(token, str) or not token:
            raise TypeError(f"each special token must be a non-empty str, got {token!r}")
        if token_id is not None and (isinstance(token_id, bool) or not isinstance(token_id, int) or token_id < 0):
            raise TypeError(f"special token {token!r} needs a non-negative int ID, got {token_id!r}")
    names = [token for token, _ in items]
    if len(set(names)) != len(names):
        raise ValueError(f"special tokens must be distinct, got {names}")
    return dict(special_tokens) if isinstance(special_tokens, Mapping) else names


def train_bpe(text: str, vocab_size: int, *, pattern: str = GPT4_PATTERN, special_tokens=None):
    """Text -> (merge table {pair: new ID}, special tokens {string: ID}).

    ``vocab_size`` counts everything: 256 byte tokens + merges + special tokens.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise TypeError(f"vocab_size must be an int, got {type(vocab_size).__name__}")
    specials = normalise_special_tokens(special_tokens)
    minimum = 256 + len(specials)
    if vocab_size < minimum:
        raise ValueError(
            f"vocab_size={vocab_size} is too small: the 256 byte tokens and {len(specials)} special "
            f"token(s) need at least {minimum}; pass vocab_size >= {minimum}"
        )
    num_merges = vocab_size - minimum
    pairs = train_merges(count_chunks(text, pattern, list(specials)), num_merges)
    if len(pairs) < num_merges:
        warnings.warn(
            f"the training text ran out of pairs after {len(pairs)} of {num_merges} merges; "
            f"the vocabulary has {256 + len(pairs) + len(specials)} tokens, not {vocab_size}",
            stacklevel=3,
        )
    merges = {pair: 256 + i for i, pair in enumerate(pairs)}
    if isinstance(specials, dict):
        clash = {s: i for s, i in specials.items() if i < 256 + len(pairs)}
        if clash or len(set(specials.values())) != len(specials):
            raise ValueError(
                f"explicit special-token IDs must be distinct and >= {256 + len(pairs)} (the first ID after "
                f"the bytes and merges); got {specials}"
            )
        return merges, specials
    return merges, {s: 256 + len(pairs) + i for i, s in enumerate(specials)}
