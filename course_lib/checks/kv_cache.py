"""Visible checks for notebook 03 (the KV cache and its memory)."""
from __future__ import annotations

import torch

from course_lib.checks.report import expect_close, expect_equal, expect_raises


def kv_cache_bytes(fn) -> None:
    """The syllabus figures, GQA, batch, int4, and bad sizes."""
    hint = "2 (K and V) x layers x KV heads x head_dim x tokens x bytes per element x batch"
    expect_equal("GPT-3-class, fp16, 4,096 tokens", fn(96, 96, 128, 4096), 19_327_352_832, hint=hint)
    expect_equal("the same with 8 KV heads", fn(96, 8, 128, 4096), 1_610_612_736,
                 hint="only the KV heads are cached, not the query heads")
    expect_equal("Llama-2-7B, one token", fn(32, 32, 128, 1), 512 * 1024, hint=hint)
    expect_equal("Llama-3-8B, 1,000 tokens, batch 4", fn(32, 8, 128, 1000, batch=4), 4 * 1000 * 128 * 1024,
                 hint="every sequence in the batch has its own cache")
    expect_equal("int4 (0.5 bytes per element)", fn(32, 8, 128, 4096, bytes_per_element=0.5), 134_217_728,
                 hint="return int(...) of the product")
    expect_raises("zero layers are rejected", lambda: fn(0, 8, 128, 4096), ValueError)
    expect_raises("negative seq_len is rejected", lambda: fn(32, 8, 128, -1), ValueError)


def max_concurrent_sequences(fn) -> None:
    hint = "floor((memory - weights - reserve) / KV bytes per sequence)"
    expect_equal("80 GB, 16 GB weights, 8 GB reserve, 2 GB each",
                 fn(80 * 10**9, 16 * 10**9, 2 * 10**9, reserve_bytes=8 * 10**9), 28, hint=hint)
    expect_equal("a partial sequence does not count", fn(100, 10, 30), 3, hint="round down")
    expect_equal("weights do not fit: zero, not negative", fn(10**9, 2 * 10**9, 10**6), 0,
                 hint="never return a negative count")
    expect_raises("a zero-byte sequence is rejected", lambda: fn(10**9, 0, 0), ValueError)


def simple_kv_cache(cls) -> None:
    g = torch.Generator().manual_seed(0)
    cache = cls(1, 2, 10, 4)
    expect_equal("starts empty", cache.length, 0)
    k1, v1 = torch.randn(1, 2, 3, 4, generator=g), torch.randn(1, 2, 3, 4, generator=g)
    keys, values = cache.append(k1, v1)
    expect_equal("after a 3-token prompt: keys shape", tuple(keys.shape), (1, 2, 3, 4),
                 hint="return only the filled positions, shape (B, H_kv, length, D)")
    k2, v2 = torch.randn(1, 2, 1, 4, generator=g), torch.randn(1, 2, 1, 4, generator=g)
    first_pointer = keys.data_ptr()
    keys, values = cache.append(k2, v2)
    expect_close("keys equal torch.cat of the appended chunks", keys, torch.cat([k1, k2], dim=2))
    expect_close("values equal torch.cat of the appended chunks", values, torch.cat([v1, v2], dim=2))
    expect_equal("length after one decode step", cache.length, 4)
    expect_equal("no reallocation: keys start at the same address", keys.data_ptr(), first_pointer,
                 hint="allocate the full (B, H_kv, max_seq_len, D) tensors once in __init__ and write into them")
    expect_equal("nbytes counts the full preallocation", cache.nbytes(), 2 * 1 * 2 * 10 * 4 * 4)
    expect_raises("overflow is rejected", lambda: cache.append(torch.zeros(1, 2, 7, 4), torch.zeros(1, 2, 7, 4)),
                  ValueError, hint="4 + 7 > max_seq_len = 10")


def paging_waste(fn) -> None:
    expect_equal("[100, 1000, 30], blocks of 16, max 2048", tuple(fn([100, 1000, 30], 16, 2048)), (5014, 22),
                 hint="contiguous wastes max_seq_len - n per sequence; paged wastes the unused tail of the last block")
    expect_equal("exact multiples waste nothing when paged", tuple(fn([32, 64], 16, 64)), (32, 0))
    expect_raises("a sequence longer than max_seq_len is rejected", lambda: fn([5000], 16, 4096), ValueError)
