"""Saving and loading a BPETokenizer: versioned, human-readable JSON, one merge per line.

    {
     "format": "course-bpe",
     "version": 1,
     "name": "course-bpe",
     "pattern": "...",
     "byte_ids": [0, 1, ..., 255],
     "special_tokens": {"<|endoftext|>": 1280},
     "merges": [
      [116, 104, 256, "th"],
      [256, 101, 257, "the"],
      ...
     ],
     "sha256": "..."
    }

Each merge line is ``[left ID, right ID, new ID, the new token's text]``; the text is there
for people and is ignored on load (bytes that are not UTF-8 show as ``\\xNN``). ``sha256``
covers every other field, so a corrupt or edited file is caught, not silently misread.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

FORMAT = "course-bpe"
VERSION = 1


class TokenizerFileError(ValueError):
    """A tokenizer file is truncated, corrupt, or of an unknown format or version."""


def build_vocab(byte_ids: Sequence[int], merges: Mapping[tuple[int, int], int],
                special_tokens: Mapping[str, int]) -> dict[int, bytes]:
    """ID -> bytes for every token; checks that no two tokens share an ID.

    >>> build_vocab(range(256), {(104, 105): 256}, {"<|end|>": 257})[256]
    b'hi'
    """
    if len(byte_ids) != 256 or len(set(byte_ids)) != 256:
        raise ValueError("byte_ids must give 256 distinct IDs, one per byte value")
    vocab = {token_id: bytes([b]) for b, token_id in enumerate(byte_ids)}
    for (left, right), new_id in sorted(merges.items(), key=lambda kv: kv[1]):
        if left not in vocab or right not in vocab:
            raise ValueError(f"merge ({left}, {right}) -> {new_id} uses an ID that no earlier token has")
        if new_id in vocab:
            raise ValueError(f"merge ({left}, {right}) -> {new_id} reuses ID {new_id}")
        vocab[new_id] = vocab[left] + vocab[right]
    for token, token_id in special_tokens.items():
        if token_id in vocab:
            raise ValueError(f"special token {token!r} reuses ID {token_id}, which another token has")
        vocab[token_id] = token.encode("utf-8")
    return vocab


def _checksum(name: str, pattern: str, byte_ids, merges, special_tokens) -> str:
    canonical = json.dumps([name, pattern, list(byte_ids), [list(m) for m in merges], sorted(special_tokens.items())],
                           separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def save(path: str | Path, *, name: str, pattern: str, byte_ids: Sequence[int],
         merges: Mapping[tuple[int, int], int], special_tokens: Mapping[str, int]) -> Path:
    """Write the file atomically (a reader never sees half of it); return its path."""
    path = Path(path)
    vocab = build_vocab(byte_ids, merges, special_tokens)
    rows = [(left, right, new_id) for (left, right), new_id in sorted(merges.items(), key=lambda kv: kv[1])]
    dump = lambda value: json.dumps(value, ensure_ascii=False)  # noqa: E731
    lines = [
        "{",
        f' "format": {dump(FORMAT)},',
        f' "version": {VERSION},',
        f' "name": {dump(name)},',
        f' "pattern": {dump(pattern)},',
        f' "byte_ids": {dump(list(byte_ids))},',
        f' "special_tokens": {dump(dict(special_tokens))},',
        ' "merges": [',
    ]
    for k, (left, right, new_id) in enumerate(rows):
        text = vocab[new_id].decode("utf-8", "backslashreplace")
        lines.append(f"  {dump([left, right, new_id, text])}{',' if k < len(rows) - 1 else ''}")
    lines += [" ],", f' "sha256": {dump(_checksum(name, pattern, byte_ids, rows, special_tokens))}', "}", ""]
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text("\n".join(lines), encoding="utf-8")
    os.replace(tmp, path)
    return path


def load(path: str | Path) -> dict:
    """Read and fully check a tokenizer file; return its fields (merges as {pair: ID})."""
    path = Path(path)
    where = f"tokenizer file {str(path)!r}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerFileError(f"{where} is truncated or not JSON ({exc}); save the tokenizer again") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise TokenizerFileError(f"{where} is not a {FORMAT} file (no \"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION:
        raise TokenizerFileError(f"{where} has version {data.get('version')!r}; this code reads version {VERSION}")
    try:
        name, pattern = str(data["name"]), str(data["pattern"])
        byte_ids = [int(i) for i in data["byte_ids"]]
        rows = [(int(m[0]), int(m[1]), int(m[2])) for m in data["merges"]]
        special_tokens = {str(s): int(i) for s, i in data["special_tokens"].items()}
        stored = data["sha256"]
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise TokenizerFileError(f"{where} is missing a field or has a malformed one ({exc!r})") from exc
    if _checksum(name, pattern, byte_ids, rows, special_tokens) != stored:
        raise TokenizerFileError(f"{where} is corrupt: its contents do not match its sha256; save it again")
    merges = {(left, right): new_id for left, right, new_id in rows}
    try:
        build_vocab(byte_ids, merges, special_tokens)
    except ValueError as exc:
        raise TokenizerFileError(f"{where} is inconsistent: {exc}") from exc
    return {"name": name, "pattern": pattern, "byte_ids": byte_ids, "merges": merges, "special_tokens": special_tokens}
