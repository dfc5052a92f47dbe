"""Hidden tests for 03_kv_cache, run in the grader's process (see course_lib/pipeline/hidden.py).

Expectations are computed here in plain Python (the capacity plan's seven numbers, each from
its stated rule: the byte formula with exact fractions, the reserve, the floor, block counts
and waste) or with NumPy (the concatenated keys a cache must return). The
cache class is stateful, so it is driven inside the learner's kernel by small scripts that
return plain data: lengths, byte counts, the arrays it returned, and whether those arrays are
views of the tensors it allocated up front.

Cached decoding is graded the same way: a script builds the shipped tinychat model in the
learner's kernel, runs their function and returns its logits as an array. The expectation
comes from Hugging Face transformers' LlamaForCausalLM holding the same weights (its own RoPE
and attention), run with no cache at all: every step recomputes the whole sequence.
"""
import functools
import random
from fractions import Fraction

import numpy as np
import torch

from course_lib.pipeline.hidden import Once
from course_lib.pipeline.learner import LearnerRaised

REFERENCES = (
    "course_lib.kv_memory.formula.kv_cache_bytes",
    "course_lib.kv_memory.formula.kv_bytes_per_token",
    "course_lib.kv_memory.capacity.max_concurrent_sequences",
    "course_lib.kv_memory.capacity.plan_capacity",
    "course_lib.kv_memory.append_cache.LayerKVCache",
    "course_lib.kv_memory.paging.compare_paging",
    "course_lib.kv_memory.paging.blocks_needed",
    "course_lib.generation.generate.greedy_generate",
)


# Drives the learner's class in their kernel and reports what it saw, as plain data.
_CACHE_SCRIPT = '''
import torch as _torch


def _held_tensors(cache):
    """Tensors the cache holds as attributes (directly, or in a list, tuple or dict)."""
    try:
        fields = list(vars(cache).values())
    except TypeError:
        fields = []
    found = []
    for value in fields:
        items = list(value.values()) if isinstance(value, dict) else list(value) if isinstance(value, (list, tuple)) else [value]
        found += [t for t in items if isinstance(t, _torch.Tensor)]
    return found


def _drive_cache(dtype_name, shape, chunks):
    batch, heads, max_len, dim = shape
    dtype = getattr(_torch, dtype_name)
    cache = SimpleKVCache(batch, heads, max_len, dim, dtype=dtype)
    held = _held_tensors(cache)
    full = [t for t in held if tuple(t.shape) == tuple(shape) and t.dtype == dtype]
    storages = {t.untyped_storage().data_ptr() for t in full}
    report = {"length": [cache.length], "nbytes": [cache.nbytes()],
              "preallocated": (len(full), all(bool((t == 0).all()) for t in full)),
              "shapes": [], "new": [], "views": [], "pointers": []}
    keys = values = None
    for k, v in chunks:
        before = cache.length
        keys, values = cache.append(k.to(dtype), v.to(dtype))
        # What each step returned: its shape and its newest positions; the whole at the end.
        report["shapes"].append((tuple(keys.shape), tuple(values.shape)))
        report["new"].append((keys[:, :, before:], values[:, :, before:]))
        report["length"].append(cache.length)
        report["views"].append(isinstance(keys, _torch.Tensor) and isinstance(values, _torch.Tensor)
                               and keys.untyped_storage().data_ptr() in storages
                               and values.untyped_storage().data_ptr() in storages
                               and keys.untyped_storage().data_ptr() != values.untyped_storage().data_ptr())
        report["pointers"].append((keys.data_ptr(), values.data_ptr()))
    report["nbytes"].append(cache.nbytes())
    report["last"] = (keys, values)
    return report


def _overflow(dtype_name, shape, fill, extra):
    """Fill the cache with `fill` positions, then append `extra` more (which may raise)."""
    batch, heads, max_len, dim = shape
    dtype = getattr(_torch, dtype_name)
    try:
        cache = SimpleKVCache(batch, heads, max_len, dim, dtype=dtype)
        if fill:
            cache.append(_torch.ones(batch, heads, fill, dim, dtype=dtype), _torch.ones(batch, heads, fill, dim, dtype=dtype))
    except Exception as exc:
        raise RuntimeError(f"setting up the cache failed before the append under test ({type(exc).__name__})") from None
    keys, values = cache.append(_torch.ones(batch, heads, extra, dim, dtype=dtype), _torch.ones(batch, heads, extra, dim, dtype=dtype))
    return tuple(keys.shape), cache.length
'''


def same_shapes(got, want):
    return len(got) == len(want) and all(tuple(map(tuple, g)) == w for g, w in zip(got, want))


def holds_chunks(report, chunks):
    """Each append's newest positions are its chunk, and the last append returns them all, in order."""
    if len(report["new"]) != len(chunks):
        return False
    for (new_k, new_v), (k, v) in zip(report["new"], chunks):
        if not (np.array_equal(np.asarray(new_k, dtype=np.float32), k.numpy())
                and np.array_equal(np.asarray(new_v, dtype=np.float32), v.numpy())):
            return False
    last_k, last_v = report["last"]
    return (np.array_equal(np.asarray(last_k, dtype=np.float32), np.concatenate([k.numpy() for k, _ in chunks], axis=2))
            and np.array_equal(np.asarray(last_v, dtype=np.float32), np.concatenate([v.numpy() for _, v in chunks], axis=2)))


def simple_kv_cache(learner, check):
    drive = learner.script(_CACHE_SCRIPT, "_drive_cache")
    overflow = learner.script(_CACHE_SCRIPT, "_overflow")
    rng = random.Random(33)
    gen = torch.Generator().manual_seed(33)
    for dtype, size in (("float32", 4), ("float16", 2), ("bfloat16", 2)):
        B, H, S, D = rng.randint(1, 2), rng.choice([1, 2, 3]), rng.randint(10, 24), rng.choice([4, 8])
        chunks, used = [], 0
        while True:
            n_new = rng.randint(1, 5)
            if used + n_new >= S:  # stop short of full: filling exactly is its own check below
                break
            used += n_new
            # Values already representable in the cache's dtype, sent as float32.
            chunks.append(tuple(torch.randn(B, H, n_new, D, generator=gen).to(getattr(torch, dtype)).float()
                                for _ in range(2)))
        where = f"{dtype}, B={B}, H_kv={H}, max_seq_len={S}, D={D}"
        run = Once(lambda: drive(dtype, (B, H, S, D), chunks))
        lengths = [sum(k.shape[2] for k, _ in chunks[:i]) for i in range(len(chunks) + 1)]
        check.that(f"__init__ allocates the two (B, H_kv, max_seq_len, D) tensors of the given dtype, zeroed ({where})",
                   run, lambda r: r["preallocated"][0] >= 2 and r["preallocated"][1],
                   "allocate two zero tensors of shape (batch_size, n_kv_heads, max_seq_len, head_dim) and "
                   "the given dtype in __init__, kept as attributes of the cache")
        check.equal(f"nbytes() counts both preallocated tensors at full length, before and after appends ({where})",
                    lambda: run()["nbytes"], [2 * B * H * S * D * size] * 2)
        check.equal(f"length starts at 0 and counts the positions stored so far ({where})",
                    lambda: run()["length"], lengths)
        shapes = [((B, H, n, D),) * 2 for n in lengths[1:]]
        check.that(f"append returns (keys, values) of shape (B, H_kv, length, D) ({where})", run,
                   lambda r, shapes=shapes: same_shapes(r["shapes"], shapes),
                   "return the filled part only: keys and values of shape (batch_size, n_kv_heads, length, head_dim)")
        check.that(f"the keys and values returned are the appended chunks, in order ({where})", run,
                   lambda r, chunks=chunks: holds_chunks(r, chunks),
                   "the keys or values returned differ from the chunks appended so far, in order")
        check.that(f"append returns views of the tensors allocated in __init__, not new tensors ({where})", run,
                   lambda r: len(r["views"]) > 0 and all(r["views"]) and len(set(r["pointers"])) == 1,
                   "write into the preallocated tensors and return slices of them (their data_ptr() never changes)")
        check.raises(f"an append past max_seq_len raises ValueError ({where}, {used} stored, {S - used + 1} more)",
                     lambda: overflow(dtype, (B, H, S, D), used, S - used + 1), "ValueError")
    check.equal("an append that fills the cache exactly to max_seq_len is allowed",
                lambda: overflow("float32", (1, 2, 10, 4), 6, 4), ((1, 2, 10, 4), 10))
    check.equal("a prompt of exactly max_seq_len positions fits in one append",
                lambda: overflow("float32", (2, 1, 7, 8), 0, 7), ((2, 1, 7, 8), 7))
    check.raises("a single append longer than max_seq_len raises ValueError on an empty cache",
                 lambda: overflow("float32", (1, 1, 5, 4), 0, 6), "ValueError")


# Builds the shipped model in the learner's kernel once and runs every scenario on it: for
# each, the logits as an array, or the names of the exception it raised.
_DECODE_SCRIPT = '''
import torch as _torch
from course_lib.model import load_model as _load_model


def _cached_logits(scenarios):
    model = _load_model("tinychat", device="cpu")
    results = []
    for prompt, steps, chunk_size in scenarios:
        try:
            with _torch.no_grad():
                out = cached_greedy_logits(model, list(prompt), steps, chunk_size=chunk_size)
            results.append({"logits": _torch.as_tensor(out).detach().float().cpu()})
        except Exception as exc:
            results.append({"raised": [c.__name__ for c in type(exc).__mro__]})
    return results
'''


@functools.lru_cache(maxsize=1)
def _oracle():
    """transformers' Llama with tinychat's weights: the grader's own copy, no cache used."""
    from course_lib.model import load_model, to_hf_llama

    return to_hf_llama(load_model("tinychat", device="cpu"), attn_implementation="eager").eval()


@torch.no_grad()
def _recomputed(prompt, steps):
    """Greedy logits by full recomputation: each step runs every token so far through the model."""
    model, ids, rows = _oracle(), list(prompt), []
    for _ in range(steps):
        logits = model(torch.tensor([ids]), use_cache=False).logits[0, -1].float()  # (V,)
        rows.append(logits.numpy())
        ids.append(int(logits.argmax()))
    return np.stack(rows)  # (steps, V)


def _logits_of(results, index):
    """The logits one scenario returned, or the learner's exception raised here (as a failure)."""
    result = results[index]
    if "raised" in result:
        raise LearnerRaised(result["raised"], "")
    return result["logits"]


def _raised(result, name):
    return name in result.get("raised", [])


def cached_greedy_logits(learner, check):
    run = learner.script(_DECODE_SCRIPT, "_cached_logits")
    config = _oracle().config
    vocab, window = config.vocab_size, config.max_position_embeddings
    gen = torch.Generator().manual_seed(303)
    prompt = torch.randint(0, vocab, (21,), generator=gen).tolist()
    long_prompt = torch.randint(0, vocab, (150,), generator=gen).tolist()
    edge = torch.randint(0, vocab, (window - 2,), generator=gen).tolist()
    scenarios = [(prompt, 6, None), (prompt, 6, 4), (prompt, 6, 7), (prompt, 3, 1), (long_prompt, 4, 64),
                 (edge, 2, None), (edge, 3, None), ([], 3, None), (prompt, 0, None), (prompt, -1, None),
                 (prompt, 3, 0), (prompt, 3, -4)]
    results = Once(lambda: run(scenarios))
    expected = _recomputed(prompt, 6)
    check.that("the result has shape (steps, vocab_size)", lambda: _logits_of(results(), 0),
               lambda r: np.asarray(r).shape == (6, vocab),
               "return one row of logits per step: a tensor of shape (steps, vocab_size)")
    check.close("row 0 is the logits at the last prompt position (full recomputation)",
                lambda: np.asarray(_logits_of(results(), 0))[:1], expected[:1], atol=1e-3)
    check.close("greedy decoding with one cache equals full recomputation, every row",
                lambda: _logits_of(results(), 0), expected, atol=1e-3)
    for index, (chunk, steps) in ((1, (4, 6)), (2, (7, 6)), (3, (1, 3))):
        check.close(f"chunked prefill (pieces of {chunk}, the last one shorter) continues at the cached positions: "
                    "RoPE offsets after a prefix", lambda: _logits_of(results(), index), expected[:steps], atol=1e-3)
    check.close("a 150-token prompt in pieces of 64, then decoding at positions 150 and beyond",
                lambda: _logits_of(results(), 4), _recomputed(long_prompt, 4), atol=1e-3)
    check.close("a prompt plus steps exactly filling max_seq_len is allowed",
                lambda: _logits_of(results(), 5), _recomputed(edge, 2), atol=1e-3)
    for index, rule in ((6, "len(prompt_ids) + steps above max_seq_len"), (7, "an empty prompt"),
                        (8, "steps=0 (below 1)"), (9, "steps=-1 (below 1)"), (10, "chunk_size=0 (below 1)"),
                        (11, "chunk_size=-4 (below 1)")):
        check.that(f"{rule} raises ValueError", lambda: results()[index], lambda r: _raised(r, "ValueError"),
                   "no ValueError: check the arguments before touching the model", edge=True)


_PLAN_RULES = {
    "kv_bytes_per_token": "kv_bytes_per_token = 2 x n_layers x n_kv_heads x head_dim x dtype_bytes",
    "reserve_bytes": "reserve_bytes = int(accelerator_bytes x reserve_fraction), a share of the whole memory",
    "cache_bytes": "cache_bytes = accelerator_bytes - weights_bytes - reserve_bytes (0 if negative)",
    "max_sequences": "max_sequences = floor(cache_bytes / (kv_bytes_per_token x seq_len))",
    "paged_blocks": "paged_blocks = sum of ceil(n / block_size)",
    "paged_waste_tokens": "paged_waste_tokens = paged_blocks x block_size - sum(seq_lens), in token slots",
    "contiguous_waste_tokens": "contiguous_waste_tokens = len(seq_lens) x seq_len - sum(seq_lens)",
}


def _plan(geometry, accelerator_bytes, weights_bytes, reserve_fraction, seq_len, seq_lens, block_size, dtype_bytes):
    """The stated rules in plain Python (exact fractions for the int4 half byte)."""
    per_token = int(2 * geometry["n_layers"] * geometry["n_kv_heads"] * geometry["head_dim"] * Fraction(dtype_bytes))
    reserve = int(accelerator_bytes * reserve_fraction)
    cache = max(0, accelerator_bytes - weights_bytes - reserve)
    blocks = sum((n + block_size - 1) // block_size for n in seq_lens)
    return {"kv_bytes_per_token": per_token, "reserve_bytes": reserve, "cache_bytes": cache,
            "max_sequences": cache // (per_token * seq_len), "paged_blocks": blocks,
            "paged_waste_tokens": blocks * block_size - sum(seq_lens),
            "contiguous_waste_tokens": len(seq_lens) * seq_len - sum(seq_lens)}


def _field(result, key):
    return result.get(key) if isinstance(result, dict) else None


def plan_kv_capacity(learner, check):
    f = learner.function("plan_kv_capacity")

    def call(geometry, accelerator_bytes, weights_bytes, reserve_fraction, seq_len, seq_lens, block_size, dtype_bytes=2):
        return f(dict(geometry), accelerator_bytes=accelerator_bytes, weights_bytes=weights_bytes,
                 reserve_fraction=reserve_fraction, seq_len=seq_len, seq_lens=list(seq_lens), block_size=block_size,
                 dtype_bytes=dtype_bytes)

    rng = random.Random(3030)
    for case in range(24):
        kv_heads = rng.choice([1, 2, 4, 8, 16])
        geometry = {"n_layers": rng.randint(1, 96), "n_heads": kv_heads * rng.choice([1, 2, 4, 8]),
                    "n_kv_heads": kv_heads, "head_dim": rng.choice([64, 80, 128, 256])}
        memory = rng.randint(8, 200) * 10**9
        # Weights that leave room, and every fourth case weights that leave none.
        weights = rng.randint(1, memory // 10**6 // 2) * 10**6 if case % 4 else rng.randint(memory // 10**6, 2 * memory // 10**6) * 10**6
        fraction = rng.choice([0.0, 0.05, 0.1, 0.125, 0.2, 0.25])
        seq_len = rng.choice([512, 2048, 4096, 8192, 32768])
        block = rng.choice([1, 8, 16, 32, 100])
        lens = [rng.randint(1, seq_len) for _ in range(rng.randint(0, 20))]
        dtype = rng.choice([4, 2, 1, 0.5])
        args = (geometry, memory, weights, fraction, seq_len, lens, block, dtype)
        want = _plan(*args)
        got = Once(lambda args=args: call(*args))
        where = (f"{geometry['n_layers']} layers, {geometry['n_heads']} query / {kv_heads} KV heads, head_dim "
                 f"{geometry['head_dim']}, {dtype:g} bytes; {memory:,} B memory, {weights:,} B weights, reserve "
                 f"{fraction:g}; seq_len {seq_len}, {len(lens)} lengths, blocks of {block}")
        for key, rule in _PLAN_RULES.items():
            check.equal(f"{rule} ({where})", lambda key=key, got=got: _field(got(), key), want[key])
        check.that(f"every value is an int ({where})", got,
                   lambda r: isinstance(r, dict) and all(type(r.get(k)) is int for k in _PLAN_RULES),
                   "return a dict of ints under the seven keys (use //, int(...) and sums, never /)")
    small = {"n_layers": 4, "n_heads": 8, "n_kv_heads": 2, "head_dim": 16}
    edge = (small, 10**6, 200_000, 0.25, 64)
    check.equal("lengths that are exact multiples of the block: no extra block, no paged waste",
                lambda: (lambda r: (_field(r, "paged_blocks"), _field(r, "paged_waste_tokens")))(call(*edge, [16, 32, 64], 16)),
                (1 + 2 + 4, 0))
    check.equal("one token past a block boundary takes a whole new block",
                lambda: (lambda r: (_field(r, "paged_blocks"), _field(r, "paged_waste_tokens")))(call(*edge, [17, 33], 16)),
                (2 + 3, 15 + 15))
    check.equal("a length of exactly seq_len is allowed and wastes nothing contiguously",
                lambda: _field(call(*edge, [64], 16), "contiguous_waste_tokens"), 0)
    check.equal("an empty seq_lens takes no blocks and wastes nothing",
                lambda: tuple(_field(call(*edge, [], 16), k) for k in ("paged_blocks", "paged_waste_tokens",
                                                                      "contiguous_waste_tokens")), (0, 0, 0))
    check.equal("weights and reserve exactly filling the memory leave 0 bytes and 0 sequences",
                lambda: tuple(_field(call(small, 10**6, 750_000, 0.25, 64, [], 16), k)
                              for k in ("cache_bytes", "max_sequences")), (0, 0))
    check.equal("weights larger than the memory give 0 bytes and 0 sequences, never negative",
                lambda: tuple(_field(call(small, 10**6, 3 * 10**6, 0.1, 64, [], 16), k)
                              for k in ("cache_bytes", "max_sequences")), (0, 0))
    check.equal("the query heads (n_heads) are not cached: only n_kv_heads count",
                lambda: _field(call({**small, "n_heads": 64}, *edge[1:], [], 16), "kv_bytes_per_token"),
                2 * 4 * 2 * 16 * 2)
    check.equal("dtype_bytes defaults to 2", lambda: _field(f(dict(small), accelerator_bytes=10**6, weights_bytes=0,
                                                              reserve_fraction=0.0, seq_len=64, seq_lens=[],
                                                              block_size=16), "kv_bytes_per_token"), 2 * 4 * 2 * 16 * 2)
    for rule, change in [("n_layers=0", {"geometry": {**small, "n_layers": 0}}),
                         ("n_layers=-2", {"geometry": {**small, "n_layers": -2}}),
                         ("n_kv_heads=0", {"geometry": {**small, "n_kv_heads": 0}}),
                         ("head_dim=0", {"geometry": {**small, "head_dim": 0}}),
                         ("seq_len=0", {"seq_len": 0, "seq_lens": []}), ("block_size=0", {"block_size": 0}),
                         ("block_size=-16", {"block_size": -16}), ("reserve_fraction=1.0", {"reserve_fraction": 1.0}),
                         ("reserve_fraction=1.5", {"reserve_fraction": 1.5}),
                         ("reserve_fraction=-0.1", {"reserve_fraction": -0.1}),
                         ("a length of 0 in seq_lens", {"seq_lens": [10, 0]}),
                         ("a negative length in seq_lens", {"seq_lens": [-3]}),
                         ("a length above seq_len in seq_lens", {"seq_lens": [10, 65]})]:
        kwargs = dict(geometry=small, accelerator_bytes=10**6, weights_bytes=200_000, reserve_fraction=0.25,
                      seq_len=64, seq_lens=[10, 20], block_size=16, dtype_bytes=2)
        kwargs.update(change)
        check.raises(f"{rule} raises ValueError", lambda kwargs=kwargs: call(**kwargs), "ValueError")
