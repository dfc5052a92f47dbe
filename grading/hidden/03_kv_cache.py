"""Hidden tests for 03_kv_cache, run in the grader's process (see course_lib/pipeline/hidden.py).

Expectations are computed here in plain Python (the byte formula with exact fractions, the
capacity floor, block counts) or with NumPy (the concatenated keys a cache must return). The
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

from course_lib.pipeline.learner import LearnerRaised

REFERENCES = (
    "course_lib.kv_memory.formula.kv_cache_bytes",
    "course_lib.kv_memory.capacity.max_concurrent_sequences",
    "course_lib.kv_memory.append_cache.LayerKVCache",
    "course_lib.kv_memory.paging.compare_paging",
    "course_lib.kv_memory.paging.blocks_needed",
    "course_lib.model.generate.greedy_generate",
)


def _is_int(value):
    return type(value) is int


def kv_cache_bytes(learner, check):
    f = learner.function("kv_cache_bytes")
    rng = random.Random(303)
    for _ in range(40):
        L, H, D, S, B = (rng.randint(1, 128), rng.choice([1, 2, 4, 8, 32, 64]), rng.choice([64, 80, 128, 256]),
                         rng.randint(1, 200_000), rng.randint(1, 64))
        e = rng.choice([4, 2, 1, 0.5])
        check.equal(f"2 x layers x KV heads x head_dim x tokens x bytes per element x batch "
                    f"({L} layers, {H} KV heads, head_dim {D}, {S} tokens, {e:g} bytes, batch {B})",
                    lambda: f(L, H, D, S, bytes_per_element=e, batch=B), int(2 * L * H * D * S * B * Fraction(e)))
    check.equal("the worked figure: GPT-3-class (96 layers, 96 KV heads, head_dim 128), 4,096 tokens, fp16",
                lambda: f(96, 96, 128, 4096), 2 * 96 * 96 * 128 * 4096 * 2)
    check.equal("bytes_per_element defaults to 2 and batch to 1", lambda: f(80, 8, 128, 8192),
                2 * 80 * 8 * 128 * 8192 * 2)
    for args, kwargs, rule in [((32, 8, 128, 4096), {"bytes_per_element": 0.5}, "int4 (0.5 bytes per element)"),
                               ((32, 8, 128, 10), {}, "fp16"), ((3, 1, 64, 7), {"bytes_per_element": 4}, "fp32")]:
        check.that(f"the result is an int, not a float: {rule}", lambda: f(*args, **kwargs), _is_int,
                   "return an int (wrap the product in int(...))")
    for bad, rule in [((0, 8, 128, 10), "zero layers"), ((32, 0, 128, 10), "zero KV heads"),
                      ((32, 8, 0, 10), "a zero head_dim"), ((32, 8, 128, 0), "a zero seq_len"),
                      ((-1, 8, 128, 10), "negative layers"), ((32, 8, 128, -5), "a negative seq_len"),
                      ((32, -8, 128, 10), "negative KV heads"), ((32, 8, -64, 10), "a negative head_dim")]:
        check.raises(f"{rule} raises ValueError", lambda: f(*bad), "ValueError")
    for batch in (0, -2):
        check.raises(f"batch={batch} raises ValueError", lambda: f(32, 8, 128, 10, batch=batch), "ValueError")


def max_concurrent_sequences(learner, check):
    f = learner.function("max_concurrent_sequences")
    rng = random.Random(2026)
    for _ in range(60):
        memory = rng.randint(10**9, 200 * 10**9)
        weights = rng.randint(0, 150 * 10**9)
        per_seq = rng.randint(1, 20 * 10**9)
        reserve = rng.randint(0, 10 * 10**9)
        free = memory - weights - reserve
        rule = ("whole sequences that fit: floor((memory - weights - reserve) / KV bytes per sequence)" if free >= 0
                else "no room left for any cache gives 0, never a negative count")
        check.equal(f"{rule} ({memory:,} B memory, {weights:,} B weights, {reserve:,} B reserve, {per_seq:,} B each)",
                    lambda: f(memory, weights, per_seq, reserve_bytes=reserve), max(0, free // per_seq))
    check.equal("reserve_bytes defaults to 0", lambda: f(1000, 100, 300), 3)
    check.equal("a partial sequence does not count (round down)", lambda: f(1000, 0, 334, reserve_bytes=0), 2)
    check.equal("memory left exactly for whole sequences: all of them fit", lambda: f(1000, 100, 300, reserve_bytes=0), 3)
    check.equal("weights that alone exceed the memory give 0, never a negative count",
                lambda: f(10**9, 2 * 10**9, 10**6), 0)
    check.equal("weights plus reserve exactly filling the memory give 0", lambda: f(10**9, 6 * 10**8, 10**6, reserve_bytes=4 * 10**8), 0)
    check.that("the count is an int", lambda: f(80 * 10**9, 16 * 10**9, 2 * 10**9, reserve_bytes=8 * 10**9), _is_int,
               "return an int (use // or int(...))")
    for bad in (0, -10):
        check.raises(f"kv_bytes_per_sequence={bad} raises ValueError", lambda: f(10**9, 0, bad), "ValueError")


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


class _Once:
    """One run of a scenario in the kernel, shared by the checks that read it (its error too)."""

    def __init__(self, call):
        self.call, self.done, self.value, self.error = call, False, None, None

    def __call__(self):
        if not self.done:
            self.done = True
            try:
                self.value = self.call()
            except Exception as exc:  # LearnerRaised and friends: every reading check reports it
                self.error = exc
        if self.error is not None:
            raise self.error
        return self.value


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
        run = _Once(lambda: drive(dtype, (B, H, S, D), chunks))
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


def paging_waste(learner, check):
    f = learner.function("paging_waste")
    rng = random.Random(16)
    for _ in range(40):
        max_len = rng.choice([512, 2048, 4096, 8192])
        block = rng.choice([1, 8, 16, 32, 100])
        lens = [rng.randint(1, max_len) for _ in range(rng.randint(1, 30))]
        contiguous = sum(max_len - n for n in lens)
        paged = sum(((n + block - 1) // block) * block - n for n in lens)
        check.equal(f"(contiguous, paged) waste: max_seq_len - n per sequence, and the unused tail of the last "
                    f"block ({len(lens)} sequences, blocks of {block}, max_seq_len {max_len})",
                    lambda: f(list(lens), block, max_len), (contiguous, paged))
    check.equal("lengths that are exact multiples of the block waste nothing when paged",
                lambda: f([32, 64, 16], 16, 64), (32 + 0 + 48, 0))
    check.equal("one position past a block boundary takes a whole new block", lambda: f([17, 33], 16, 64),
                (47 + 31, 15 + 15))
    check.equal("a sequence of exactly max_seq_len is allowed and wastes nothing contiguously",
                lambda: f([4096], 16, 4096), (0, 0))
    check.equal("blocks of 1 position waste nothing when paged", lambda: f([5, 1, 999], 1, 1000), (995 + 999 + 1, 0))
    check.that("the result is a pair (contiguous_waste, paged_waste)", lambda: f([100, 1000, 30], 16, 2048),
               lambda r: isinstance(r, (tuple, list)) and len(r) == 2,
               "return a tuple of two counts: (contiguous_waste, paged_waste)")
    for args, rule in [(([10, 5000], 16, 4096), "a length above max_seq_len"), (([4097], 16, 4096), "a length one above max_seq_len"),
                       (([10], 0, 4096), "block_size 0"), (([10], -16, 4096), "a negative block_size")]:
        check.raises(f"{rule} raises ValueError", lambda: f(*args), "ValueError")


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
    results = _Once(lambda: run(scenarios))
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
                   "no ValueError: check the arguments before touching the model")
