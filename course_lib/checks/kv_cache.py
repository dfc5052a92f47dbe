"""Visible checks for notebook 03 (the KV cache and its memory).

Each rule an exercise states has a case here; expectations are computed from the rule, never
typed in, so a green line means the rule holds on that case.
"""
from __future__ import annotations

import functools
import math

import torch

from course_lib.checks.report import expect_close, expect_equal, expect_raises

HINTS = {
    "kv_cache_bytes": [
        "Every layer stores one key and one value vector per KV head for every token: count "
        "those vectors, then multiply by their length and the bytes of one element.",
        "Check each of n_layers, n_kv_heads, head_dim, seq_len and batch before multiplying: "
        "`if value <= 0: raise ValueError(...)` (zero is as wrong as a negative number).",
        "Return int(2 * n_layers * n_kv_heads * head_dim * seq_len * bytes_per_element * batch); "
        "the int(...) matters when bytes_per_element is 0.5.",
    ],
    "max_concurrent_sequences": [
        "First find the memory left for caches: memory minus weights minus reserve.",
        "Whole sequences only: floor division (//) rounds down. If nothing is left the answer "
        "is 0, never negative: max(0, ...).",
        "Validate kv_bytes_per_sequence > 0 first (raise ValueError), then return "
        "max(0, int(free // kv_bytes_per_sequence)).",
    ],
    "simple_kv_cache": [
        "Allocate both tensors in __init__ with torch.zeros((batch_size, n_kv_heads, "
        "max_seq_len, head_dim), dtype=dtype) and keep them as attributes; never torch.cat.",
        "append writes with slice assignment along dim 2: store[:, :, length:length + T] = k, "
        "after checking that length + T <= max_seq_len (filling exactly is allowed).",
        "Return store[:, :, :length] for keys and values after advancing length: slicing gives "
        "a view, so data_ptr() stays the same. nbytes() is the two stores' .nbytes summed.",
    ],
    "cached_greedy_logits": [
        "One cache for the whole call: cache = model.new_cache(1). Every prefill and "
        "decode_step gets that same cache, which is how each piece knows its position.",
        "Prompt pieces: for start in range(0, len(prompt), chunk): prefill(model, "
        "ids[:, start:start + chunk], cache). The logits of the last piece are row 0.",
        "Then repeat steps - 1 times: next_id = logits.argmax(-1, keepdim=True) (shape (1, 1)), "
        "logits = decode_step(model, next_id, cache), keep logits[0]. torch.stack the rows. "
        "Check the four ValueError cases before touching the model.",
    ],
    "paging_waste": [
        "Contiguous reserves max_seq_len slots per sequence; paged reserves whole blocks. "
        "Waste is reserved minus used, summed over the sequences.",
        "Blocks for n tokens: ceil(n / block_size), which is -(-n // block_size) in integers; "
        "a length that is an exact multiple of the block needs no extra block.",
        "Validate block_size >= 1 and every n <= max_seq_len (raise ValueError), then add "
        "max_seq_len - n and blocks * block_size - n per sequence; return the pair as a tuple.",
    ],
}


def kv_cache_bytes(fn) -> None:
    """The worked figure, GQA, batch, int4, the int type, the defaults, and bad sizes."""
    rule = "2 (K and V) x layers x KV heads x head_dim x tokens x bytes per element x batch"
    expect_equal("GPT-3-class, fp16 by default, 4,096 tokens", fn(96, 96, 128, 4096), 2 * 96 * 96 * 128 * 4096 * 2,
                 hint=rule + "; bytes_per_element defaults to 2")
    expect_equal("the same with 8 KV heads", fn(96, 8, 128, 4096), 2 * 96 * 8 * 128 * 4096 * 2,
                 hint="only the KV heads are cached, not the query heads")
    expect_equal("Llama-2-7B, one token", fn(32, 32, 128, 1), 2 * 32 * 32 * 128 * 1 * 2, hint=rule)
    expect_equal("Llama-3-8B, 1,000 tokens, batch 4", fn(32, 8, 128, 1000, batch=4), 2 * 32 * 8 * 128 * 1000 * 2 * 4,
                 hint="every sequence in the batch has its own cache")
    expect_equal("int4 (0.5 bytes per element)", fn(32, 8, 128, 4096, bytes_per_element=0.5),
                 2 * 32 * 8 * 128 * 4096 // 2, hint="return int(...) of the product")
    expect_equal("the result is an int, not a float", type(fn(32, 8, 128, 10)).__name__, "int",
                 hint="wrap the product in int(...)")
    for args, kwargs, what in [((0, 8, 128, 4096), {}, "zero layers"), ((32, 8, 128, 0), {}, "a zero seq_len"),
                               ((32, 0, 128, 10), {}, "zero KV heads"), ((32, 8, 0, 10), {}, "a zero head_dim"),
                               ((32, 8, 128, -1), {}, "a negative seq_len"), ((32, 8, 128, 10), {"batch": 0}, "batch=0")]:
        expect_raises(f"{what} raises ValueError", lambda: fn(*args, **kwargs), ValueError,
                      hint="n_layers, n_kv_heads, head_dim, seq_len and batch must all be positive: zero too is rejected")


def max_concurrent_sequences(fn) -> None:
    rule = "floor((memory - weights - reserve) / KV bytes per sequence)"
    memory, weights, per_seq, reserve = 80 * 10**9, 16 * 10**9, 2 * 10**9, 8 * 10**9
    expect_equal("80 GB, 16 GB weights, 8 GB reserve, 2 GB each", fn(memory, weights, per_seq, reserve_bytes=reserve),
                 (memory - weights - reserve) // per_seq, hint=rule + ": subtract the reserve too")
    expect_equal("reserve_bytes defaults to 0", fn(1000, 100, 300), (1000 - 100) // 300)
    expect_equal("a partial sequence does not count: 90 bytes free, 40 each", fn(100, 10, 40), (100 - 10) // 40,
                 hint="round down: floor division")
    expect_equal("weights do not fit: zero, not negative", fn(10**9, 2 * 10**9, 10**6), 0,
                 hint="never return a negative count")
    expect_equal("the count is an int", type(fn(memory, weights, per_seq, reserve_bytes=reserve)).__name__, "int",
                 hint="use // and int(...), never /")
    for bad in (0, -10):
        expect_raises(f"kv_bytes_per_sequence={bad} raises ValueError", lambda: fn(10**9, 0, bad), ValueError,
                      hint="check kv_bytes_per_sequence > 0 before dividing")


def _tensor_fields(cache) -> list[torch.Tensor]:
    """Tensors the cache keeps as attributes (directly, or in a list, tuple or dict)."""
    found = []
    for value in vars(cache).values():
        items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
        found += [t for t in items if isinstance(t, torch.Tensor)]
    return found


def simple_kv_cache(cls) -> None:
    g = torch.Generator().manual_seed(0)
    B, H, S, D = 1, 2, 10, 4
    cache = cls(B, H, S, D)
    expect_equal("starts empty", cache.length, 0)
    stores = [t for t in _tensor_fields(cache) if tuple(t.shape) == (B, H, S, D)]
    expect_equal("__init__ keeps two zero tensors of shape (B, H_kv, max_seq_len, D)",
                 len(stores) >= 2 and all(bool((t == 0).all()) for t in stores), True,
                 hint="allocate keys and values as two separate torch.zeros tensors in __init__")
    k1, v1 = torch.randn(B, H, 3, D, generator=g), torch.randn(B, H, 3, D, generator=g)
    keys, values = cache.append(k1, v1)
    expect_equal("after a 3-token prompt: keys shape", tuple(keys.shape), (B, H, 3, D),
                 hint="return only the filled positions, shape (B, H_kv, length, D)")
    k2, v2 = torch.randn(B, H, 1, D, generator=g), torch.randn(B, H, 1, D, generator=g)
    first_pointer = keys.data_ptr()
    keys, values = cache.append(k2, v2)
    expect_close("keys equal torch.cat of the appended chunks", keys, torch.cat([k1, k2], dim=2),
                 hint="write each chunk at positions length .. length + T_new - 1")
    expect_close("values equal torch.cat of the appended chunks", values, torch.cat([v1, v2], dim=2))
    expect_equal("length after one decode step", cache.length, 4)
    expect_equal("no reallocation: keys start at the same address", keys.data_ptr(), first_pointer,
                 hint="allocate the full (B, H_kv, max_seq_len, D) tensors once in __init__, write into them, return slices")
    expect_equal("nbytes counts the full preallocation", cache.nbytes(), 2 * B * H * S * D * 4,
                 hint="both tensors, all max_seq_len positions, 4 bytes per float32")
    expect_raises("an append past max_seq_len is rejected",
                  lambda: cache.append(torch.zeros(B, H, 7, D), torch.zeros(B, H, 7, D)), ValueError,
                  hint="4 stored + 7 new > max_seq_len = 10: raise ValueError yourself")
    full = cls(B, H, 4, D)
    keys, _ = full.append(torch.ones(B, H, 4, D), torch.ones(B, H, 4, D))
    expect_equal("filling the cache exactly to max_seq_len is allowed", (tuple(keys.shape), full.length),
                 ((B, H, 4, D), 4), hint="reject only length + T_new > max_seq_len")
    half = cls(B, H, S, D, dtype=torch.float16)
    keys, _ = half.append(torch.ones(B, H, 2, D, dtype=torch.float16), torch.ones(B, H, 2, D, dtype=torch.float16))
    expect_equal("dtype=torch.float16: the stores and nbytes follow it", (str(keys.dtype), half.nbytes()),
                 ("torch.float16", 2 * B * H * S * D * 2), hint="pass dtype=dtype to torch.zeros")


@functools.lru_cache(maxsize=1)
def _course_model():
    """The shipped tinychat (random weights in its architecture if they are not installed)."""
    from course_lib.model import Transformer, WeightsNotFoundError, get_config, load_model

    try:
        return load_model("tinychat", device="cpu")
    except WeightsNotFoundError:
        return Transformer(get_config("tinychat"), generator=torch.Generator().manual_seed(0)).eval()


@torch.no_grad()
def _recomputed(model, prompt, steps) -> torch.Tensor:
    """Greedy logits with no cache at all: every step runs the whole sequence again."""
    ids, rows = list(prompt), []
    for _ in range(steps):
        logits = model(torch.tensor([ids]))[0, -1]  # (V,)
        rows.append(logits)
        ids.append(int(logits.argmax()))
    return torch.stack(rows)  # (steps, V)


def cached_greedy_logits(fn) -> None:
    model = _course_model()
    vocab, window = model.config.vocab_size, model.config.max_seq_len
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, vocab, (13,), generator=g).tolist()

    def run(*args, **kwargs):
        with torch.no_grad():
            return torch.as_tensor(fn(model, *args, **kwargs)).float()

    expected = _recomputed(model, prompt, 6)
    got = run(prompt, 6)
    expect_equal("13-token prompt, 6 steps: shape (steps, vocab_size)", tuple(got.shape), (6, vocab))
    expect_close("row 0 is the logits at the last prompt position", got[0], expected[0], atol=1e-4,
                 hint="the first row comes from prefill, before any token is fed back")
    expect_close("every row equals full recomputation (greedy, one cache)", got, expected, atol=1e-4,
                 hint="feed the argmax of the latest logits back with decode_step into the same cache")
    expect_close("chunk_size=5: pieces continue at the cached positions (RoPE offsets)", run(prompt, 6, chunk_size=5),
                 expected, atol=1e-4,
                 hint="every piece goes into the one cache; a fresh cache per piece restarts at position 0, "
                      "and the last piece may be shorter than chunk_size")
    expect_close("chunk_size=1: the prompt one token at a time", run(prompt, 3, chunk_size=1), expected[:3], atol=1e-4)
    expect_close("steps=1: just the prompt's last logits", run(prompt, 1), expected[:1], atol=1e-4)
    edge = torch.randint(0, vocab, (window - 3,), generator=g).tolist()
    expect_raises(f"{window - 3} prompt tokens + 4 steps > max_seq_len={window} raises ValueError",
                  lambda: run(edge, 4), ValueError, hint="check len(prompt_ids) + steps against model.config.max_seq_len first")
    for what, args, kwargs in [("an empty prompt", ([], 2), {}), ("steps=0", (prompt, 0), {}),
                               ("chunk_size=0", (prompt, 2), {"chunk_size": 0})]:
        expect_raises(f"{what} raises ValueError", lambda: run(*args, **kwargs), ValueError)


def paging_waste(fn) -> None:
    def expected(lengths, block, max_len):
        return (sum(max_len - n for n in lengths), sum(math.ceil(n / block) * block - n for n in lengths))

    rule = "contiguous wastes max_seq_len - n per sequence; paged wastes the unused tail of the last block"
    for lengths, block, max_len in [([100, 1000, 30], 16, 2048), ([17, 33, 5], 16, 64)]:
        result = fn(list(lengths), block, max_len)
        expect_equal(f"{lengths}, blocks of {block}, max {max_len}: (contiguous, paged)",
                     tuple(result) if isinstance(result, (tuple, list)) else result, expected(lengths, block, max_len),
                     hint=rule)
    expect_equal("the result is a tuple of two ints", type(fn([100], 16, 2048)).__name__, "tuple",
                 hint="return (contiguous_waste, paged_waste)")
    expect_equal("exact multiples waste nothing when paged", tuple(fn([32, 64], 16, 64)), expected([32, 64], 16, 64),
                 hint="ceil(n / block_size) blocks: no extra block when n is a multiple")
    expect_equal("a sequence of exactly max_seq_len is allowed", tuple(fn([64], 16, 64)), expected([64], 16, 64),
                 hint="only a length above max_seq_len is rejected")
    expect_raises("a sequence longer than max_seq_len is rejected", lambda: fn([5000], 16, 4096), ValueError)
    for block in (0, -16):
        expect_raises(f"block_size={block} raises ValueError", lambda: fn([10], block, 4096), ValueError,
                      hint="check block_size >= 1 before dividing")
