"""Tokenization: production encodings offline, and (later) byte-level BPE from scratch."""
from course_lib.tokenization.offline import (
    KNOWN_ENCODINGS,
    RankFileError,
    encoding_spec,
    get_encoding,
    prime_tiktoken_cache,
)

__all__ = ["KNOWN_ENCODINGS", "RankFileError", "encoding_spec", "get_encoding", "prime_tiktoken_cache"]
