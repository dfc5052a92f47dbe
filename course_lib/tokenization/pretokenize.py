"""Regex pre-tokenization: cut text into chunks that BPE never merges across.

Byte-level BPE does not run over a whole document at once. A split pattern first cuts the
text into words, number groups, punctuation runs and whitespace runs; merges then happen
only inside a chunk. That keeps " dog", " dog." and " dog!" from becoming three unrelated
tokens, and it is why a run of digits is cut into groups of at most three.

    >>> split_text("Hello world, it's 2024!!!", GPT4_PATTERN)
    ['Hello', ' world', ',', ' it', "'s", ' ', '202', '4', '!!!']

The patterns are tiktoken's own strings (``tiktoken_ext/openai_public.py``); they need the
third-party ``regex`` module (``\\p{L}``, possessive quantifiers), which tiktoken installs.
"""
from __future__ import annotations

from functools import lru_cache

import regex

# GPT-2 / r50k_base: words, numbers and punctuation may take one leading space.
GPT2_PATTERN = (
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
)
# GPT-4 / cl100k_base: case-insensitive contractions, numbers in groups of 1-3 digits,
# newlines kept apart from other whitespace.
GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
# GPT-4o / o200k_base: a word splits at lower->upper case changes (CamelCase -> Camel|Case)
# and keeps a trailing contraction.
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


@lru_cache(maxsize=16)
def compile_pattern(pattern: str) -> regex.Pattern:
    """Compile a split pattern once (compiled patterns are immutable, so caching is safe)."""
    if not isinstance(pattern, str):
        raise TypeError(f"a split pattern must be a str, got {type(pattern).__name__}")
    try:
        return regex.compile(pattern)
    except regex.error as exc:
        raise ValueError(f"the split pattern {pattern!r} is not a valid regex: {exc}") from exc


def split_text(text: str, pattern: str = GPT4_PATTERN) -> list[str]:
    """Text -> the list of chunks the pattern finds (their concatenation is the text).

    >>> split_text("x = 12345\\n", GPT4_PATTERN)
    ['x', ' =', ' ', '123', '45', '\\n']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    return compile_pattern(pattern).findall(text)
