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
    "plan_kv_capacity": [
        "Work key by key, in the order listed: each later value uses an earlier one. Per token "
        "the cache holds one K and one V vector per KV head in every layer (query heads do not "
        "count).",
        "The reserve is a share of the whole memory, taken before anything else; what is left "
        "after weights and reserve can be negative, so clamp it with max(0, ...). Sequences that "
        "fit: floor division by the bytes of one whole sequence (per token x seq_len).",
        "Blocks for n tokens are ceil(n / block_size) = -(-n // block_size); paged waste is "
        "blocks x block_size - sum(seq_lens), counted in token slots, and contiguous waste is "
        "len(seq_lens) x seq_len - sum(seq_lens). Check every ValueError rule before computing, "
        "and return int values.",
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
}


PLAN_KEYS = ("kv_bytes_per_token", "reserve_bytes", "cache_bytes", "max_sequences", "paged_blocks",
             "paged_waste_tokens", "contiguous_waste_tokens")


def _expected_plan(geometry, *, accelerator_bytes, weights_bytes, reserve_fraction, seq_len, seq_lens, block_size,
                   dtype_bytes=2) -> dict:
    """Each stated rule, written out on its own."""
    per_token = int(2 * geometry["n_layers"] * geometry["n_kv_heads"] * geometry["head_dim"] * dtype_bytes)
    reserve = int(accelerator_bytes * reserve_fraction)
    cache = max(0, accelerator_bytes - weights_bytes - reserve)
    blocks = sum(math.ceil(n / block_size) for n in seq_lens)
    return {"kv_bytes_per_token": per_token, "reserve_bytes": reserve, "cache_bytes": cache,
            "max_sequences": cache // (per_token * seq_len), "paged_blocks": blocks,
            "paged_waste_tokens": blocks * block_size - sum(seq_lens),
            "contiguous_waste_tokens": len(seq_lens) * seq_len - sum(seq_lens)}


_PLAN_HINTS = {
    "kv_bytes_per_token": "2 (one K and one V) x n_layers x n_kv_heads x head_dim x dtype_bytes; "
                          "the KV heads, not the query heads in n_heads",
    "reserve_bytes": "int(accelerator_bytes x reserve_fraction): a share of the whole memory, "
                     "not of what the weights leave",
    "cache_bytes": "accelerator_bytes - weights_bytes - reserve_bytes: subtract both",
    "max_sequences": "floor(cache_bytes / (kv_bytes_per_token x seq_len)): whole sequences only, round down",
    "paged_blocks": "ceil(n / block_size) blocks per sequence: a partly filled last block counts as a whole block",
    "paged_waste_tokens": "blocks x block_size - sum(seq_lens): empty token slots, not blocks",
    "contiguous_waste_tokens": "every sequence reserves seq_len slots: len(seq_lens) x seq_len - sum(seq_lens)",
}


def plan_kv_capacity(fn) -> None:
    """Every key on a realistic plan, int4, weights that do not fit, block edges, and bad input."""
    llama = {"n_layers": 32, "n_heads": 32, "n_kv_heads": 8, "head_dim": 128}  # Llama-3-8B: GQA, 4 query heads per KV head
    base = dict(accelerator_bytes=80 * 10**9, weights_bytes=16_060_522_496, reserve_fraction=0.10, seq_len=8192,
                seq_lens=[100, 1000, 30, 4097, 8192], block_size=16)
    got = fn(dict(llama), **{**base, "seq_lens": list(base["seq_lens"])})
    want = _expected_plan(llama, **base)
    expect_equal("the result is a dict with the seven keys",
                 sorted(got) if isinstance(got, dict) else type(got).__name__, sorted(PLAN_KEYS),
                 hint=", ".join(PLAN_KEYS))
    where = "Llama-3-8B on 80 GB, 10% reserve, 8,192-token sequences, blocks of 16"
    for key in PLAN_KEYS:
        expect_equal(f"{key} ({where})", got[key], want[key], hint=_PLAN_HINTS[key])
    expect_equal("every value is an int", sorted(k for k in PLAN_KEYS if type(got[k]) is not int), [],
                 hint="use //, int(...) and sums of ints, never /")

    small = {"n_layers": 4, "n_heads": 8, "n_kv_heads": 2, "head_dim": 16}
    args = dict(accelerator_bytes=10**6, weights_bytes=200_000, reserve_fraction=0.25, seq_len=64,
                seq_lens=[17, 33, 5], block_size=16)
    got, want = fn(dict(small), **{**args, "seq_lens": list(args["seq_lens"])}), _expected_plan(small, **args)
    for key in PLAN_KEYS:
        expect_equal(f"{key} (a small model: 1 MB, 25% reserve, lengths [17, 33, 5], blocks of 16)", got[key],
                     want[key], hint=_PLAN_HINTS[key])

    int4 = fn(dict(llama), **{**base, "dtype_bytes": 0.5})
    expect_equal("int4 cache (dtype_bytes=0.5): kv_bytes_per_token is an int",
                 (int4["kv_bytes_per_token"], type(int4["kv_bytes_per_token"]).__name__),
                 (_expected_plan(llama, **{**base, "dtype_bytes": 0.5})["kv_bytes_per_token"], "int"),
                 hint="wrap the product in int(...)")
    heavy = {**base, "weights_bytes": 141 * 10**9}
    got = fn(dict(llama), **heavy)
    expect_equal("weights larger than the memory: cache_bytes and max_sequences are 0, never negative",
                 (got["cache_bytes"], got["max_sequences"]), (0, 0), hint="clamp the room left with max(0, ...)")
    exact = {**args, "seq_lens": [16, 32, 64], "block_size": 16}
    got = fn(dict(small), **exact)
    want = _expected_plan(small, **exact)
    expect_equal("lengths that are multiples of the block: no extra block, no paged waste",
                 (got["paged_blocks"], got["paged_waste_tokens"]), (want["paged_blocks"], want["paged_waste_tokens"]),
                 hint="ceil(n / block_size): exactly n / block_size blocks when it divides")
    got = fn(dict(small), **{**args, "seq_lens": [64]})
    expect_equal("a length of exactly seq_len is allowed and wastes nothing contiguously",
                 got["contiguous_waste_tokens"], 0, hint="reject only lengths above seq_len")
    got = fn(dict(small), **{**args, "seq_lens": []})
    expect_equal("no sequences: no blocks, no waste", (got["paged_blocks"], got["paged_waste_tokens"],
                                                       got["contiguous_waste_tokens"]), (0, 0, 0))
    bad_cases = [("n_layers=0", {"geometry": {**small, "n_layers": 0}}),
                 ("n_kv_heads=0", {"geometry": {**small, "n_kv_heads": 0}}),
                 ("head_dim=0", {"geometry": {**small, "head_dim": 0}}),
                 ("seq_len=0", {"seq_len": 0, "seq_lens": []}), ("block_size=0", {"block_size": 0}),
                 ("reserve_fraction=1.0", {"reserve_fraction": 1.0}),
                 ("reserve_fraction=-0.1", {"reserve_fraction": -0.1}),
                 ("a length of 0 in seq_lens", {"seq_lens": [10, 0]}),
                 ("a length of seq_len + 1 in seq_lens", {"seq_lens": [65]})]
    for what, change in bad_cases:
        call = {"geometry": dict(small), **args, **change}
        expect_raises(f"{what} raises ValueError", lambda call=call: fn(call["geometry"], **{k: v for k, v in call.items() if k != "geometry"}), ValueError,
                      hint="check n_layers, n_kv_heads, head_dim, seq_len, block_size >= 1, 0 <= reserve_fraction < 1 "
                           "and 1 <= every length <= seq_len before computing anything")


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
