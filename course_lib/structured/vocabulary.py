"""A tokenizer's vocabulary as a byte trie, the data structure a token mask is computed on.

Tokens are byte strings, and many share prefixes (" the", " then", " there"...). Stored as a
trie, the shared prefix is walked through a DFA once, not once per token:

    >>> from course_lib.model import load_tokenizer
    >>> vocab = TokenVocabulary.of(load_tokenizer("tinychat"))
    >>> vocab.size, vocab.eos_id                 # IDs 0..1023; <|end|> ends a reply
    (1024, 1022)
    >>> vocab.token_bytes[vocab.eos_id]          # a special token has no bytes of output
    b''

The trie's nodes are numbered level by level (all 1-byte prefixes, then all 2-byte ones...),
so a walk over every node at once is one array gather per level (see ``guide.py``).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from course_lib.tokenization.chat_template import END, END_OF_TEXT

_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _special_ids(tokenizer) -> dict[str, int]:
    specials = getattr(tokenizer, "special_tokens", None)
    if isinstance(specials, dict):  # the course BPETokenizer
        return dict(specials)
    if hasattr(tokenizer, "special_tokens_set") and hasattr(tokenizer, "encode_single_token"):
        return {s: tokenizer.encode_single_token(s) for s in tokenizer.special_tokens_set}  # tiktoken
    raise TypeError(f"tokenizer must be a course BPETokenizer or a tiktoken Encoding, got {type(tokenizer).__name__}")


def _ordinary_bytes(tokenizer, special_ids: set[int]) -> dict[int, bytes]:
    vocab = getattr(tokenizer, "vocab", None)
    if isinstance(vocab, dict):  # BPETokenizer: id -> bytes, specials included
        return {i: b for i, b in vocab.items() if i not in special_ids}
    out = {}
    for i in range(tokenizer.n_vocab):
        if i in special_ids:
            continue
        try:
            out[i] = tokenizer.decode_single_token_bytes(i)
        except KeyError:  # cl100k_base has a hole at 100256
            continue
    return out


@dataclass(frozen=True, eq=False)
class TokenVocabulary:
    size: int                      # mask length: one more than the largest ID
    eos_id: int                    # the one special token a guide allows (in accepting states)
    token_bytes: tuple[bytes, ...]  # by ID; b"" for specials and holes (never allowed as text)
    node_parent: np.ndarray        # (N,) int32: parent node, -1 for the root's children
    node_byte: np.ndarray          # (N,) uint8: the byte on the edge into this node
    level_starts: tuple[int, ...]  # nodes of depth d are node_parent[level_starts[d-1]:level_starts[d]]
    token_node: np.ndarray         # (size,) int32: the node spelling each token, -1 for none
    node_token: np.ndarray         # (N,) int32: the token a node spells, -1 for an inner prefix
    child_lo: np.ndarray           # (N,) int32: a node's children are nodes child_lo..child_hi-1
    child_hi: np.ndarray           # (N,) int32
    has_every_byte: bool           # all 256 single bytes are tokens (then no state is a dead end)

    @classmethod
    def of(cls, tokenizer, *, eos_id: int | None = None) -> TokenVocabulary:
        """The vocabulary of a course ``BPETokenizer`` or a tiktoken ``Encoding``, built once
        per tokenizer (the trie of cl100k_base takes about a second) and remembered."""
        if eos_id is None:
            try:
                cached = _CACHE.get(tokenizer)
            except TypeError:
                cached = None
            if cached is not None:
                return cached
        vocabulary = cls._build(tokenizer, eos_id)
        if eos_id is None:
            try:
                _CACHE[tokenizer] = vocabulary
            except TypeError:  # not weak-referenceable: just rebuild next time
                pass
        return vocabulary

    @classmethod
    def _build(cls, tokenizer, eos_id: int | None) -> TokenVocabulary:
        specials = _special_ids(tokenizer)
        if eos_id is None and getattr(tokenizer, "end_ids", ()):  # a checkpoint's tokenizer names its own
            eos_id = tokenizer.end_ids[0]
        if eos_id is None:
            # A chat reply ends with <|end|>; a plain completion with <|endoftext|>.
            name = END if END in specials else END_OF_TEXT
            if name not in specials:
                raise ValueError(f"the tokenizer has neither {END} nor {END_OF_TEXT}; pass eos_id= explicitly")
            eos_id = specials[name]
        ordinary = _ordinary_bytes(tokenizer, set(specials.values()))
        return cls.from_token_bytes(ordinary, eos_id=eos_id, size=max([*ordinary, *specials.values()]) + 1)

    @classmethod
    def from_token_bytes(cls, tokens, *, eos_id: int, size: int | None = None) -> TokenVocabulary:
        """A vocabulary from ``{id: bytes}`` (or a list, ID = position) and the ID that ends output.

        >>> v = TokenVocabulary.from_token_bytes([b"a", b"b", b"ab"], eos_id=3)
        >>> v.size, v.n_nodes, v.has_every_byte
        (4, 3, False)
        """
        ordinary = dict(enumerate(tokens)) if isinstance(tokens, (list, tuple)) else dict(tokens)
        bad = [i for i, b in ordinary.items() if not isinstance(b, bytes) or not b]
        if bad:
            raise ValueError(f"token(s) {bad[:5]} are not non-empty bytes; every ordinary token spells at least one byte")
        size = max([*ordinary, eos_id]) + 1 if size is None else size
        if not 0 <= eos_id < size:
            raise ValueError(f"eos_id {eos_id} is outside the vocabulary 0..{size - 1}")
        if eos_id in ordinary:
            raise ValueError(f"eos_id {eos_id} is an ordinary token ({ordinary[eos_id]!r}); pass a special token's ID")
        token_bytes = [b""] * size
        for i, b in ordinary.items():
            token_bytes[i] = b
        # Number every distinct prefix, shortest first, so each trie level is one slice.
        by_length: dict[int, set[bytes]] = {}
        for b in ordinary.values():
            for k in range(1, len(b) + 1):
                by_length.setdefault(k, set()).add(b[:k])
        prefixes = [p for k in sorted(by_length) for p in sorted(by_length[k])]
        index = {p: n for n, p in enumerate(prefixes)}
        parent = np.fromiter((index[p[:-1]] if len(p) > 1 else -1 for p in prefixes), np.int32, len(prefixes))
        edge = np.fromiter((p[-1] for p in prefixes), np.uint8, len(prefixes))
        depth = np.fromiter((len(p) for p in prefixes), np.int64, len(prefixes))
        level_starts = tuple(int(x) for x in np.searchsorted(depth, np.arange(1, int(depth.max(initial=0)) + 2)))
        token_node = np.full(size, -1, dtype=np.int32)
        node_token = np.full(len(prefixes), -1, dtype=np.int32)
        for i, b in ordinary.items():
            token_node[i] = index[b]
            if node_token[index[b]] < 0:  # two IDs with the same bytes: the lower one spells it
                node_token[index[b]] = i
        # Parents are non-decreasing in this numbering, so each node's children are one run.
        everyone = np.arange(len(prefixes))
        child_lo = np.searchsorted(parent, everyone, side="left").astype(np.int32)
        child_hi = np.searchsorted(parent, everyone, side="right").astype(np.int32)
        spelled = set(ordinary.values())
        every_byte = all(bytes([x]) in spelled for x in range(256))
        return cls(size, eos_id, tuple(token_bytes), parent, edge, level_starts, token_node, node_token,
                   child_lo, child_hi, every_byte)

    @property
    def n_nodes(self) -> int:
        return len(self.node_parent)

    def __repr__(self) -> str:
        return f"<TokenVocabulary: {self.size} IDs, {self.n_nodes} trie nodes, eos {self.eos_id}>"
