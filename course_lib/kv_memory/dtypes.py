"""Bytes per stored element for the number formats a KV cache is kept in.

The cache stores one number per (layer, K or V, KV head, position, channel); its size is that
count times the bytes per number. Halving the bytes halves the cache:

>>> bytes_per_element("fp16"), bytes_per_element("int8"), bytes_per_element("int4")
(2, 1, 0.5)

int4 packs two values in one byte, hence half a byte per element. Quantized caches also store
a small scale per group of values; the helpers here count only the elements, which is the
figure people quote (int8 "halves" fp16, 4-bit "quarters" it).
"""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from course_lib.validation import positive_number

ELEMENT_BYTES: Mapping[str, float] = MappingProxyType(
    {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
)
# Spellings people (and torch) use for the same formats.
DTYPE_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "float32": "fp32",
        "float": "fp32",
        "bfloat16": "bf16",
        "float16": "fp16",
        "half": "fp16",
        "float8": "fp8",
        "float8_e4m3fn": "fp8",
        "float8_e5m2": "fp8",
        "uint8": "int8",
        "4bit": "int4",
        "nf4": "int4",
    }
)


def canonical_dtype(dtype: object) -> str:
    """Name -> the canonical short name (``"bfloat16"`` -> ``"bf16"``, ``torch.half`` -> ``"fp16"``)."""
    text = str(dtype).lower().removeprefix("torch.") if dtype is not None else ""
    if text in ELEMENT_BYTES:
        return text
    if text in DTYPE_ALIASES:
        return DTYPE_ALIASES[text]
    known = ", ".join(ELEMENT_BYTES)
    raise ValueError(
        f"unknown dtype {dtype!r}; use one of {known} "
        f"(or an alias such as {', '.join(sorted(DTYPE_ALIASES)[:4])}, ...), or pass a number of bytes"
    )


def bytes_per_element(dtype: object) -> float:
    """Bytes one stored number takes: a dtype name, a torch dtype, or a plain positive number.

    >>> bytes_per_element("bfloat16"), bytes_per_element(1)
    (2, 1)
    """
    if isinstance(dtype, (int, float)) and not isinstance(dtype, bool):
        return positive_number("bytes_per_element", dtype)
    return ELEMENT_BYTES[canonical_dtype(dtype)]
