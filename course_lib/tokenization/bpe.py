"""A byte-level BPE tokenizer written from scratch, compatible with tiktoken's encodings.

A tokenizer is four things: the 256 single-byte tokens, an ordered merge table (pair of IDs
-> new ID; the new ID is the merge's rank), a split pattern, and special tokens.

    >>> tok = BPETokenizer.train("low lower lowest " * 20, 260)
    >>> tok.decode(tok.encode("lowest")) == "lowest"
    True
    >>> tok = BPETokenizer.from_tiktoken("cl100k_base")
    >>> tok.encode("hello world")
    [15339, 1917]

Encoding: split the text into chunks with the pattern, turn each chunk into its byte
tokens, then merge the lowest-ranked pair until none applies (``merge.apply_merges``).
Repeated chunks (" the", "\\n") are common, so each tokenizer keeps a bounded cache of
encoded chunks; the cache belongs to the instance and never changes the result.
"""
from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path

from course_lib.tokenization import serialize
from course_lib.tokenization.merge import Pair, apply_merges, recover_merges
from course_lib.tokenization.pretokenize import GPT4_PATTERN, compile_pattern
from course_lib.tokenization.special import check_disallowed, resolve_policy, split_on_special
from course_lib.tokenization.train import train_bpe

_CACHE_LIMIT = 200_000  # chunks; a full cache is emptied and refilled (bounded memory)


def _check_text(text) -> str:
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}; decode bytes first")
    return text


def _scrub_surrogates(text: str) -> str:
    """Lone surrogates cannot be UTF-8 encoded; replace them with U+FFFD as tiktoken does."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class BPETokenizer:
    """Byte-level BPE: ``encode``/``decode`` with tiktoken's semantics, ``train``, ``save``/``load``."""

    def __init__(
        self,
        merges: Mapping[Pair, int],
        *,
        pattern: str = GPT4_PATTERN,
        special_tokens: Mapping[str, int] | None = None,
        byte_ids: Sequence[int] | None = None,
        name: str = "course-bpe",
    ):
        self.name = name
        self.pattern = pattern
        self._regex = compile_pattern(pattern)
        self.byte_ids: tuple[int, ...] = tuple(range(256)) if byte_ids is None else tuple(byte_ids)
        self.merges: dict[Pair, int] = dict(sorted(merges.items(), key=lambda kv: kv[1]))
        self.special_tokens: dict[str, int] = dict(special_tokens or {})
        self.vocab: dict[int, bytes] = serialize.build_vocab(self.byte_ids, self.merges, self.special_tokens)
        self._special_by_id = {i: s for s, i in self.special_tokens.items()}
        # bytes -> lowest ID with those bytes (training can, rarely, build one string twice)
        self._id_by_bytes: dict[bytes, int] = {}
        for token_id in sorted(self.vocab):
            if token_id not in self._special_by_id:
                self._id_by_bytes.setdefault(self.vocab[token_id], token_id)
        self._cache: dict[str, list[int]] = {}

    # ----- construction -------------------------------------------------------------------
    @classmethod
    def train(
        cls,
        text: str,
        vocab_size: int,
        *,
        pattern: str = GPT4_PATTERN,
        special_tokens: Sequence[str] | Mapping[str, int] | None = None,
    ) -> BPETokenizer:
        """Learn ``vocab_size - 256 - len(special_tokens)`` merges from ``text``.

        Special tokens listed as a sequence get IDs right after the merges, in order; a
        mapping gives them explicit IDs. Their strings are cut out of the training text, so
        no merge ever spans one. Ties between equally frequent pairs go to the smallest
        (left ID, right ID) pair, so training is deterministic (see ``train.train_merges``).
        """
        merges, specials = train_bpe(_check_text(text), vocab_size, pattern=pattern, special_tokens=special_tokens)
        return cls(merges, pattern=pattern, special_tokens=specials)

    @classmethod
    def from_tiktoken(cls, name: str) -> BPETokenizer:
        """Rebuild ``cl100k_base`` or ``o200k_base`` from the offline rank files tiktoken uses."""
        from course_lib.tokenization.offline import KNOWN_ENCODINGS, encoding_spec

        if name not in KNOWN_ENCODINGS:
            raise ValueError(f"unknown encoding {name!r}; known encodings: {', '.join(sorted(KNOWN_ENCODINGS))}")
        spec = encoding_spec(name)
        ranks: dict[bytes, int] = spec["mergeable_ranks"]
        missing = [b for b in range(256) if bytes([b]) not in ranks]
        if missing:
            raise ValueError(f"{name}'s rank file lacks the single bytes {missing[:8]}; it is not byte-level BPE")
        # cl100k ranks its single bytes in GPT-2's printable-first order, not byte order.
        byte_ids = [ranks[bytes([b])] for b in range(256)]
        merges = recover_merges(sorted(ranks.items(), key=lambda kv: kv[1]), byte_ids)
        return cls(merges, pattern=spec["pat_str"], special_tokens=spec["special_tokens"], byte_ids=byte_ids, name=name)

    # ----- properties ---------------------------------------------------------------------
    @property
    def n_vocab(self) -> int:
        """One more than the largest ID (tiktoken's meaning; IDs may have gaps)."""
        return max(self.vocab) + 1

    @property
    def special_tokens_set(self) -> set[str]:
        return set(self.special_tokens)

    def __repr__(self) -> str:
        return f"<BPETokenizer {self.name!r}: {len(self.merges)} merges, {len(self.special_tokens)} special tokens>"

    # ----- encoding -----------------------------------------------------------------------
    def clear_cache(self) -> None:
        """Forget the encoded chunks (results never depend on the cache; timings do)."""
        self._cache.clear()

    def _encode_chunk(self, chunk: str) -> list[int]:
        ids = self._cache.get(chunk)
        if ids is None:
            byte_ids = self.byte_ids
            start = [byte_ids[b] for b in chunk.encode("utf-8")]
            ids = apply_merges(start, self.merges) if len(start) > 1 else start
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[chunk] = ids
        return ids

    def _encode_plain(self, text: str) -> list[int]:
        out: list[int] = []
        encode_chunk = self._encode_chunk
        cache = self._cache
        for chunk in self._regex.findall(text):
            ids = cache.get(chunk)
            out += ids if ids is not None else encode_chunk(chunk)
        return out

    def encode_ordinary(self, text: str) -> list[int]:
        """Text -> IDs, treating special-token strings as plain text.

        >>> BPETokenizer.from_tiktoken("cl100k_base").encode_ordinary("<|endoftext|>")
        [27, 91, 8862, 728, 428, 91, 29]
        """
        return self._encode_plain(_scrub_surrogates(_check_text(text)))

    def encode(
        self,
        text: str,
        *,
        allowed_special: str | Collection[str] = frozenset(),
        disallowed_special: str | Collection[str] = "all",
    ) -> list[int]:
        """Text -> IDs with tiktoken's special-token policy (see ``special.py``).

        >>> tok = BPETokenizer.from_tiktoken("cl100k_base")
        >>> tok.encode("<|endoftext|>", allowed_special="all")
        [100257]
        >>> tok.encode("<|endoftext|>")
        Traceback (most recent call last):
        ValueError: Encountered text corresponding to disallowed special token '<|endoftext|>'...
        """
        text = _check_text(text)
        allowed, disallowed = resolve_policy(self.special_tokens, allowed_special, disallowed_special)
        check_disallowed(text, disallowed, self.special_tokens)
        text = _scrub_surrogates(text)
        out: list[int] = []
        for piece, is_special in split_on_special(text, allowed & self.special_tokens.keys()):
            if is_special:
                out.append(self.special_tokens[piece])
            else:
                out += self._encode_plain(piece)
        return out

    def encode_single_token(self, text_or_bytes: str | bytes) -> int:
        """The ID of a text that is exactly one token (a special token or a vocabulary entry)."""
        if isinstance(text_or_bytes, str):
            if text_or_bytes in self.special_tokens:
                return self.special_tokens[text_or_bytes]
            text_or_bytes = text_or_bytes.encode("utf-8")
        token_id = self._id_by_bytes.get(text_or_bytes)
        if token_id is None:
            raise KeyError(f"{text_or_bytes!r} is not a single token of {self.name}")
        return token_id

    # ----- decoding -----------------------------------------------------------------------
    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """IDs -> raw bytes (a token may hold part of a UTF-8 character)."""
        vocab = self.vocab
        ids = list(ids)
        try:
            return b"".join([vocab[i] for i in ids])
        except (KeyError, TypeError):
            bad = [i for i in ids if not isinstance(i, int) or i not in vocab]
            raise ValueError(
                f"IDs {bad[:5]} are not in the vocabulary of {self.name} (valid IDs are 0..{self.n_vocab - 1}, "
                "excluding gaps)"
            ) from None

    def decode(self, ids: Iterable[int]) -> str:
        """IDs -> text; bytes that are not valid UTF-8 become U+FFFD, as in tiktoken.

        >>> tok = BPETokenizer.from_tiktoken("cl100k_base")
        >>> tok.decode([15339, 1917])
        'hello world'
        """
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    # ----- persistence --------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the tokenizer as versioned, human-readable JSON (one merge per line)."""
        return serialize.save(path, name=self.name, pattern=self.pattern, byte_ids=self.byte_ids,
                              merges=self.merges, special_tokens=self.special_tokens)

    @classmethod
    def load(cls, path: str | Path) -> BPETokenizer:
        """Read a file written by ``save``; a corrupt or truncated file raises TokenizerFileError."""
        fields = serialize.load(path)
        return cls(fields["merges"], pattern=fields["pattern"], special_tokens=fields["special_tokens"],
                   byte_ids=fields["byte_ids"], name=fields["name"])
