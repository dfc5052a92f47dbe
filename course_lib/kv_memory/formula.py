"""The KV-cache memory formula.

Every layer keeps one key and one value vector per KV head for every position it has seen:

    bytes = 2 (K and V) x n_layers x n_kv_heads x head_dim x seq_len x bytes_per_element x batch

Worked figure (GPT-3-class geometry, fp16, 4,096 tokens):

>>> kv_cache_bytes(96, 96, 128, 4096)
19327352832
>>> kv_cache_bytes(96, 8, 128, 4096)   # the same model with 8 KV heads (GQA)
1610612736
>>> kv_bytes_per_token(32, 8, 128) // 1024   # Llama-3-8B, KiB per token in fp16
128
"""
from __future__ import annotations

import math
from fractions import Fraction

from course_lib.validation import positive_int
from course_lib.kv_memory.dtypes import bytes_per_element as _element_bytes

KIB = 1024
MIB = 1024**2
GIB = 1024**3
GB = 10**9


def kv_cache_bytes(
    n_layers: int,
    n_kv_heads: int,
    head_dim: int,
    seq_len: int,
    *,
    bytes_per_element: float | str = 2,
    batch: int = 1,
) -> int:
    """Bytes a KV cache holds for ``batch`` sequences of ``seq_len`` tokens.

    ``bytes_per_element`` is a number (2 for fp16/bf16, 0.5 for int4) or a dtype name
    ("fp16", "int8", ...). The result is a whole number of bytes, rounded up: a half-filled
    byte of packed int4 values still occupies a byte.

    >>> kv_cache_bytes(32, 32, 128, 1, bytes_per_element="int4")   # Llama-2-7B, one token
    131072
    """
    positive_int("n_layers", n_layers)
    positive_int("n_kv_heads", n_kv_heads)
    positive_int("head_dim", head_dim)
    positive_int("seq_len", seq_len)
    positive_int("batch", batch)
    element = Fraction(_element_bytes(bytes_per_element))
    # Fraction keeps 0.5-byte elements exact; a float product could round to ...999.
    exact = 2 * n_layers * n_kv_heads * head_dim * seq_len * batch * element
    return math.ceil(exact)


def kv_bytes_per_token(
    n_layers: int, n_kv_heads: int, head_dim: int, *, bytes_per_element: float | str = 2
) -> int:
    """Bytes one more token adds to one sequence's cache (the formula with seq_len = 1).

    >>> kv_bytes_per_token(32, 32, 128) // 1024   # Llama-2-7B: 512 KiB per token in fp16
    512
    """
    return kv_cache_bytes(n_layers, n_kv_heads, head_dim, 1, bytes_per_element=bytes_per_element)


def format_bytes(n_bytes: float) -> str:
    """Decimal and binary units side by side, because vendors and tools mix them.

    >>> format_bytes(19327352832)
    '19.33 GB (18.00 GiB)'
    >>> format_bytes(524288)
    '524.29 kB (512.00 KiB)'
    """
    if n_bytes < 0:
        raise ValueError(f"a byte count cannot be negative, got {n_bytes}")
    for decimal, binary, d_name, b_name in (
        (10**12, 1024**4, "TB", "TiB"),
        (GB, GIB, "GB", "GiB"),
        (10**6, MIB, "MB", "MiB"),
        (10**3, KIB, "kB", "KiB"),
    ):
        if n_bytes >= decimal:
            return f"{n_bytes / decimal:.2f} {d_name} ({n_bytes / binary:.2f} {b_name})"
    return f"{n_bytes:g} B"
