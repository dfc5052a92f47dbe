"""Hidden tests for 06_serving, run in the grader's process (see course_lib/pipeline/hidden.py).

Where each exercise's expectations come from (none of them is the solution's code):

- stream_metrics: the course's bench-serve ``RequestRecord`` (``course_lib.api.loadgen``).
- decode_roofline: the roofline arithmetic in plain Python (``_roofline``), from the exercise text.
- schedule_step: the course's engine ``Scheduler`` itself, run on each state by
  ``course_lib.checks.serving.reference_schedule`` (the production oracle; imported here, in the
  grader's process).
- block_pool: ``course_lib.checks.serving.ReferencePool``, the six rules as a different model
  (reference counts counted from the live tables, the free list ordered by when blocks were
  freed, the cache a list of entries), on sessions run by ``pool_session``.
- accept_or_resample: the rule replayed in plain Python over the same seeded uniform stream
  (``_replay``), and the output distribution by a chi-square test against the target.
- quantize_per_channel: per-row scales and Python's half-to-even ``round`` (``_quantize``).

torch is used to build tensors, as the oracle of the uniform stream a seeded
``torch.Generator`` yields, and for float64 arithmetic. The block pool and the seeded
generator live in the learner's kernel, built by the scripts below, which return plain data.
"""
import copy
import hashlib
import random
from array import array

import numpy as np
import torch

from course_lib.api.loadgen import RequestRecord
from course_lib.checks.serving import (ReferencePool, float32_ratio_round, pool_session, reference_schedule,
                                       stored_scale_row)
from course_lib.pipeline.hidden import Once
from course_lib.pipeline.hidden import item as _item  # one part of a shared answer

REFERENCES = (
    "course_lib.api.loadgen.RequestRecord",
    "course_lib.serving.scheduler.Scheduler",
    "course_lib.serving.block_manager.BlockManager",
    "course_lib.serving.speculative.accept_or_resample",
    "course_lib.serving.quantize.quantize_per_channel",
    "course_lib.serving.quantize.dequantize",
)


def _n(count, word):
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


# -- exercise 1 -------------------------------------------------------------------------------
def _metrics(start, chunks, tokens, end):
    """What the course's own bench-serve records for the stream (``RequestRecord``)."""
    record = RequestRecord(index=0, start=start, chunk_times=list(chunks), end=end, output_tokens=tokens)
    return {"ttft": record.ttft, "latency": record.latency, "tpot": record.tpot, "itl": record.itls}


def _is_none(value):
    return value is None


def stream_metrics(learner, check):
    f = learner.function("stream_metrics")
    rng = random.Random(606)
    cases = [(10.0, [10.25, 10.3, 10.42, 10.5], 7, 10.5), (0.0, [0.4], 1, 0.45), (3.0, [], 0, 3.2),
             (1.0, [1.1, 1.1, 1.3], 3, 1.3), (0.0, [0.2, 0.5], 2, 0.9), (7.5, [], 1, 8.0)]
    for _ in range(14):
        start = rng.uniform(0, 1000)
        chunks = sorted(start + rng.uniform(0, 4) for _ in range(rng.randint(0, 9)))
        end = (chunks[-1] if chunks else start) + rng.choice([0.0, rng.uniform(0, 1)])
        tokens = rng.randint(0, 1) if not chunks else len(chunks) + rng.choice([0, 0, rng.randint(1, 9)])
        cases.append((start, chunks, tokens, end))
    for case, (start, chunks, tokens, end) in enumerate(cases):
        expected = _metrics(start, chunks, tokens, end)
        replay = Once(lambda: f(start, list(chunks), tokens, end))
        shown = f"case {case}: {_n(len(chunks), 'chunk')}, {_n(tokens, 'token')}"
        check.that(f"returns a dict with the keys ttft, latency, tpot, itl ({shown})", replay,
                   lambda out: isinstance(out, dict) and set(out) == {"ttft", "latency", "tpot", "itl"},
                   "return {'ttft': ..., 'latency': ..., 'tpot': ..., 'itl': [...]}")
        rule = "TTFT is the first chunk minus start" if chunks else "no chunk at all: TTFT = end - start"
        check.close(f"{rule} ({shown})", _item("ttft", replay), expected["ttft"], atol=1e-9)
        check.close(f"latency = end - start ({shown})", _item("latency", replay), expected["latency"], atol=1e-9)
        itl_rule = f"ITL: the gaps between consecutive chunks, TTFT not among them ({shown})"
        if expected["itl"]:
            check.close(itl_rule, _item("itl", replay), expected["itl"], atol=1e-9)
        else:
            check.equal(itl_rule, _item("itl", replay), [])
        if expected["tpot"] is None:
            check.that(f"TPOT is None with fewer than 2 tokens ({shown})", _item("tpot", replay), _is_none,
                       "there is no second token to time: return None", edge=True)
        else:
            check.close(f"TPOT = (latency - TTFT) / (output_tokens - 1) ({shown})", _item("tpot", replay),
                        expected["tpot"], atol=1e-9)
    for label, args in (("a chunk before start", (5.0, [4.9, 5.2], 2, 5.3)),
                        ("chunks out of order", (0.0, [0.3, 0.2, 0.4], 3, 0.5)),
                        ("end before the last chunk", (0.0, [0.1, 0.3], 2, 0.25)),
                        ("end before start with no chunk", (2.0, [], 0, 1.0))):
        check.raises(f"times going backwards raise ValueError ({label})", lambda: f(*args), "ValueError")


# -- exercise 2 -------------------------------------------------------------------------------
def _roofline(n_params, bytes_per_param, kv, batch, bandwidth_gb_s, peak_tflops):
    bandwidth, peak = bandwidth_gb_s * 10**9, peak_tflops * 10**12
    total = n_params * bytes_per_param + batch * kv
    flops = 2 * n_params * batch
    memory_s, compute_s = total / bandwidth, flops / peak
    step = memory_s if memory_s >= compute_s else compute_s
    return {"bytes_per_step": total, "flops_per_step": flops, "intensity": flops / total, "ridge": peak / bandwidth,
            "step_s": step, "tokens_per_s": batch / step, "bound": "memory" if memory_s >= compute_s else "compute"}


ROOFLINE_RULES = {
    "bytes_per_step": "bytes per step: the weights once plus every sequence's KV",
    "flops_per_step": "FLOPs per step = 2 x params x batch",
    "intensity": "intensity = FLOPs / bytes",
    "ridge": "ridge = peak FLOP/s / bandwidth in bytes/s (decimal GB, bytes not bits)",
    "step_s": "step = the larger of bytes / bandwidth and FLOPs / peak",
    "tokens_per_s": "tokens/s = batch / step",
}


def decode_roofline(learner, check):
    f = learner.function("decode_roofline")
    rng = random.Random(6006)
    cases = [(8_030_261_248, 2, 536_870_912, 1, 3350, 989), (8_030_261_248, 2, 536_870_912, 64, 3350, 989),
             (70_553_706_496, 2, 0, 512, 4800, 989), (885_888, 4, 300_000, 1, 12.5, 0.2), (1e9, 1, 0, 4, 2000, 8),
             (5e8, 2, 2e7, 16, 900, 50)]
    for _ in range(10):
        cases.append((rng.uniform(1e6, 2e11), rng.choice([0.5, 1, 2, 4]), rng.choice([0, rng.uniform(0, 2e9)]),
                      rng.choice([1, rng.randint(2, 2048)]), rng.uniform(20, 9000), rng.uniform(0.5, 3000)))
    for case, args in enumerate(cases):
        expected = _roofline(*args)
        replay = Once(lambda: f(*args))
        shown = f"case {case}: batch {args[3]}, {args[4]:.0f} GB/s, {args[5]:.1f} TFLOP/s"
        check.that(f"returns a dict with the seven keys ({shown})", replay,
                   lambda out: isinstance(out, dict) and set(out) == set(ROOFLINE_RULES) | {"bound"},
                   "return exactly bytes_per_step, flops_per_step, intensity, ridge, step_s, tokens_per_s, bound")
        for key, rule in ROOFLINE_RULES.items():
            check.close(f"{rule} ({shown})", _item(key, replay), expected[key], atol=0, rtol=1e-9)
        check.equal(f"bound: 'memory' when the memory time is at least the compute time ({shown})",
                    _item("bound", replay), expected["bound"])
    empty_cache = Once(lambda: f(1e9, 2, 0, 3, 1000, 100))
    check.close("a KV of 0 bytes per sequence is valid (no cache read yet): only a negative one raises",
                _item("bytes_per_step", empty_cache), _roofline(1e9, 2, 0, 3, 1000, 100)["bytes_per_step"], atol=0,
                rtol=1e-9)
    tie = Once(lambda: f(1e9, 2, 0, 1, 1000, 1))
    check.equal("bound: 'memory' when the memory time is at least the compute time (equal times)", _item("bound", tie),
                "memory")
    for label, args in (("batch 0", (1e9, 2, 0, 0, 1000, 100)), ("negative batch", (1e9, 2, 0, -3, 1000, 100)),
                        ("negative KV bytes", (1e9, 2, -5, 2, 1000, 100)), ("zero parameters", (0, 2, 0, 1, 1000, 100)),
                        ("negative bytes per parameter", (1e9, -2, 0, 1, 1000, 100)),
                        ("zero bandwidth", (1e9, 2, 0, 1, 0, 100)), ("zero peak", (1e9, 2, 0, 1, 1000, 0))):
        check.raises(f"invalid input raises ValueError ({label})", lambda: f(*args), "ValueError")


# -- exercise 3 -------------------------------------------------------------------------------
def _ceil(a, b):
    return -(-a // b)


def _s(rid, tokens, computed=0, outputs=0, blocks=0):
    return {"id": rid, "tokens": tokens, "computed": computed, "outputs": outputs, "blocks": blocks}


def _state(rng):
    block_size = rng.choice([2, 3, 4, 16])
    seats = rng.randint(1, 6)
    names = iter([f"r{i}" for i in range(20)])
    running, waiting = [], []
    for _ in range(rng.randint(0, seats)):
        prompt = rng.randint(1, 40)
        if rng.random() < 0.55:
            outputs = rng.randint(1, 12)
            tokens = prompt + outputs
            running.append(_s(next(names), tokens, tokens - 1, outputs, _ceil(tokens - 1, block_size)))
        else:
            outputs = rng.choice([0, 0, rng.randint(1, 5)])
            tokens = prompt + outputs
            computed = rng.randint(0, tokens - 1) if outputs == 0 else rng.randint(0, tokens - 2)
            running.append(_s(next(names), tokens, computed, outputs, _ceil(tokens, block_size)))
    for _ in range(rng.randint(0, 5)):
        outputs = rng.choice([0, 0, rng.randint(1, 6)])
        waiting.append(_s(next(names), rng.randint(1, 40) + outputs, 0, outputs, 0))
    free = rng.choice([0, 0, 0, 1, rng.randint(0, 30)])
    return running, waiting, free, block_size, seats, rng.randint(seats, 48)


FIELDS = ("batch", "preempted", "running", "waiting", "free_blocks")


def _plain_plan(plan):
    """Lists for the batch entries (a learner may use tuples), everything else as returned."""
    if isinstance(plan, dict) and isinstance(plan.get("batch"), (list, tuple)):
        plan = dict(plan)
        plan["batch"] = [list(e) if isinstance(e, (list, tuple)) else e for e in plan["batch"]]
    return plan


def schedule_step(learner, check):
    f = learner.function("schedule_step")
    named = [
        ("decodes come first, then running prefills share the budget left",
         ([_s("P", 30, 6, 0, 8), _s("D", 11, 10, 2, 3), _s("Q", 12, 0, 0, 3)], [_s("W", 5)], 6, 4, 4, 10)),
        ("a decode whose newest token starts a block takes one free block",
         ([_s("D", 17, 16, 3, 4), _s("E", 9, 8, 1, 2)], [], 3, 4, 3, 8)),
        ("no free block: the newest running sequence is preempted, to the front of waiting",
         ([_s("A", 9, 8, 1, 2), _s("B", 14, 2, 0, 4), _s("C", 10, 9, 3, 3)], [_s("W1", 4), _s("W2", 3)], 0, 4, 3, 12)),
        ("no admission in a step that preempted",
         ([_s("A", 17, 16, 5, 4), _s("B", 6, 5, 1, 2)], [_s("W", 1)], 0, 4, 3, 20)),
        ("the sequence needing the block is the newest: it preempts itself and the decodes stop",
         ([_s("A", 5, 4, 1, 2), _s("B", 8, 7, 1, 2), _s("C", 13, 12, 4, 3)], [], 0, 4, 3, 9)),
        ("each decode short of a block preempts the newest in turn",
         ([_s("A", 5, 4, 1, 1), _s("B", 9, 8, 2, 2), _s("C", 2, 1, 1, 1), _s("D", 4, 1, 0, 1)], [_s("W", 2)], 0, 4, 5, 10)),
        ("head of line: a waiting request that does not fit stops admission",
         ([_s("A", 6, 5, 1, 2)], [_s("BIG", 50), _s("S1", 2), _s("S2", 2)], 6, 4, 4, 16)),
        ("admission in arrival order, each chunk capped by the budget left",
         ([], [_s("X", 7), _s("Y", 9, 0, 2), _s("Z", 3)], 30, 4, 5, 12)),
        ("admission stops at max_num_seqs",
         ([_s("A", 6, 5, 1, 2), _s("B", 8, 3, 0, 2)], [_s("W1", 2), _s("W2", 2)], 10, 4, 3, 20)),
        ("a running prefill's chunk is capped by the budget left (chunked prefill)",
         ([_s("A", 100, 10, 0, 25)], [_s("W", 3)], 4, 4, 2, 16)),
        ("a readmitted sequence with outputs and more than one token to compute is a prefill",
         ([_s("D", 5, 4, 1, 2), _s("R", 15, 3, 3, 4)], [], 0, 4, 3, 20)),
        ("one prompt token left and no output yet is a prefill after the decodes",
         ([_s("P", 13, 12, 0, 4), _s("D", 13, 12, 1, 3)], [], 1, 4, 3, 8)),
        ("a preempted sequence keeps tokens and outputs, and gets computed 0 and blocks 0",
         ([_s("A", 9, 8, 2, 2), _s("Z", 11, 10, 4, 3)], [], 0, 4, 2, 4)),
    ]
    rng = random.Random(66)
    cases = named + [(f"random state {i}: the three passes in order (decodes, prefills, admission)", _state(rng))
                     for i in range(30)]
    for label, args in cases:
        expected = reference_schedule(*[copy.deepcopy(a) for a in args])
        replay = Once(lambda: _plain_plan(f([dict(s) for s in args[0]], [dict(s) for s in args[1]], *args[2:])))
        shown = (f"{_n(len(args[0]), 'running sequence')}, {len(args[1])} waiting, {args[2]} free, block size "
                 f"{args[3]}, {args[4]} seats, budget {args[5]}")
        check.that(f"returns a dict with batch, preempted, running, waiting, free_blocks ({shown})", replay,
                   lambda out: isinstance(out, dict) and set(out) == set(FIELDS),
                   "return {'batch', 'preempted', 'running', 'waiting', 'free_blocks'}")
        for field in FIELDS:
            check.equal(f"{label}: the {field} ({shown})", _item(field, replay), expected[field])


# -- exercise 4 -------------------------------------------------------------------------------
POOL_SCRIPT = """
import hashlib as _hashlib
from array import array as _array

def _pool_hash(name):
    def chained(parent, block_tokens):
        data = (b"" if parent is None else parent.to_bytes(8, "big")) + _array("q", block_tokens).tobytes()
        return int.from_bytes(_hashlib.blake2b(data, digest_size=8, person=b"grader").digest(), "big")
    def constant(parent, block_tokens):
        return 3
    def tokens_only(parent, block_tokens):
        return sum((i + 2) * t for i, t in enumerate(block_tokens)) % 997
    def weak(parent, block_tokens):
        return ((parent or 1) * 7 + sum(block_tokens)) % 4
    return {"chained": chained, "constant": constant, "tokens_only": tokens_only, "weak": weak}[name]

def _pool_session(num_blocks, block_size, hash_name, ops):
    pool = BlockPool(num_blocks, block_size, _pool_hash(hash_name))
    out = []
    for op in ops:
        name, args = op[0], op[1:]
        try:
            result = getattr(pool, name)(*args)
        except Exception as exc:
            out.append(["raised", type(exc).__name__])
            continue
        if name == "allocate":
            result = [[int(b) for b in result[0]], int(result[1])]
        elif name in ("ref_count", "num_free"):
            result = int(result)
        else:
            result = None  # what free returns does not matter
        out.append(result)
    return out
"""


def _hash(name):
    def chained(parent, block_tokens):
        data = (b"" if parent is None else parent.to_bytes(8, "big")) + array("q", block_tokens).tobytes()
        return int.from_bytes(hashlib.blake2b(data, digest_size=8, person=b"grader").digest(), "big")
    table = {"chained": chained, "constant": lambda parent, block: 3,
             "tokens_only": lambda parent, block: sum((i + 2) * t for i, t in enumerate(block)) % 997,
             "weak": lambda parent, block: ((parent or 1) * 7 + sum(block)) % 4}
    return table[name]


def _expected_session(num_blocks, block_size, hash_name, ops):
    return pool_session(ReferencePool, num_blocks, block_size, _hash(hash_name), ops)


def _session_ops(rng, num_blocks, alphabet):
    ops, live, n = [], [], 0
    for _ in range(rng.randint(8, 18)):
        roll = rng.random()
        if live and roll < 0.3:
            ops.append(("free", live.pop(rng.randrange(len(live)))))
        elif roll < 0.4:
            ops.append(("ref_count", rng.randrange(num_blocks)))
        elif roll < 0.45 and live:
            ops.append(("allocate", rng.choice(live), [1]))  # already holds blocks: ValueError
        else:
            base = rng.choice([[], [1, 2, 1, 2], [2, 1, 2, 1, 2, 1]])
            prompt = base + [rng.choice(alphabet) for _ in range(rng.randint(0 if base else 1, 7))]
            ops.append(("allocate", f"s{n}", prompt))
            live.append(f"s{n}")
            n += 1
        ops.append(("num_free",))
    return ops


def block_pool(learner, check):
    run = learner.script(POOL_SCRIPT, "_pool_session")
    system = [11, 12, 13, 14, 15, 16, 17, 18]
    named = [
        ("a fresh pool hands out blocks from the front of the free list", 6, 4, "chained",
         [("allocate", "a", [1, 2, 3, 4, 5]), ("allocate", "b", [9] * 8), ("num_free",)]),
        ("a shared prefix hits its full blocks and adds a reference to each", 10, 4, "chained",
         [("allocate", "a", system + [1, 2]), ("allocate", "b", system + [3]), ("ref_count", 0), ("ref_count", 1),
          ("ref_count", 2), ("num_free",)]),
        ("only the first (len - 1) // block_size blocks are looked up: the last token is always computed", 8, 4,
         "chained", [("allocate", "a", system), ("allocate", "b", system), ("allocate", "c", system[:4])]),
        ("free walks the table last-first; a block reaching 0 goes to the back of the free list", 8, 2, "chained",
         [("allocate", "a", [1, 2, 3, 4, 5]), ("allocate", "b", [6, 7]), ("free", "a"), ("num_free",),
          ("allocate", "c", [8] * 9)]),
        ("free decrements reference counts; a shared block stays in use", 8, 4, "chained",
         [("allocate", "a", system + [1]), ("allocate", "b", system + [2]), ("free", "a"), ("ref_count", 0),
          ("ref_count", 2), ("num_free",), ("free", "b"), ("ref_count", 0), ("num_free",)]),
        ("a freed cached block keeps its contents and leaves the free list when hit", 8, 4, "chained",
         [("allocate", "a", system + [1]), ("free", "a"), ("allocate", "b", system + [5, 5]), ("num_free",),
          ("ref_count", 1)]),
        ("taking a cached block from the free list evicts its key", 4, 4, "chained",
         [("allocate", "a", system + [1]), ("free", "a"), ("allocate", "x", list(range(40, 49))), ("free", "x"),
          ("allocate", "b", system + [1])]),
        ("chained keys: the same block tokens at different depths are different blocks", 8, 2, "chained",
         [("allocate", "a", [5, 6, 5, 6, 5, 6, 5]), ("allocate", "b", [5, 6, 5, 6, 5, 6, 5])]),
        ("chained keys: the same block tokens after another prefix do not hit", 8, 2, "chained",
         [("allocate", "a", [1, 2, 5, 6, 0]), ("allocate", "b", [3, 4, 5, 6, 0]), ("allocate", "c", [1, 2, 5, 6, 9])]),
        ("a hit is verified: a colliding key whose block holds other tokens is a miss", 9, 2, "constant",
         [("allocate", "a", [1, 2, 3]), ("allocate", "b", [4, 4, 4]), ("allocate", "c", [1, 2, 7, 7, 7])]),
        ("a key already in the cache keeps its first block (first copy wins)", 9, 2, "constant",
         [("allocate", "a", [1, 2, 3]), ("allocate", "b", [4, 4, 4]), ("allocate", "c", [1, 2, 9]), ("ref_count", 0)]),
        ("a hit is verified on the whole prefix, not just the block's own tokens", 9, 2, "tokens_only",
         [("allocate", "a", [1, 2, 3, 4, 5, 6, 0]), ("allocate", "b", [1, 2, 5, 6, 0]), ("allocate", "c", [1, 2, 3, 4, 9])]),
        ("the lookup stops at the first miss: a later block that would verify is not a hit", 9, 2, "tokens_only",
         [("allocate", "q", [1, 2, 9]), ("allocate", "p", [4, 0, 5, 6, 7]), ("allocate", "r", [4, 0, 5, 6, 1])]),
        ("every full block is registered, the last one too (it was not looked up)", 8, 4, "chained",
         [("allocate", "a", system), ("allocate", "b", system + [1]), ("ref_count", 1), ("num_free",)]),
        ("a request that needs exactly the free blocks gets them; the next one raises RuntimeError", 4, 2, "chained",
         [("allocate", "a", [1, 2, 3, 4, 5]), ("allocate", "b", [7]), ("num_free",), ("allocate", "c", [8]),
          ("free", "b"), ("allocate", "c", [8, 8])]),
        ("not enough free blocks: RuntimeError and nothing changes", 5, 4, "chained",
         [("allocate", "a", system + [1]), ("allocate", "b", [9, 9, 9]), ("allocate", "c", system + [1, 2, 3, 4, 5]),
          ("ref_count", 0), ("ref_count", 1), ("num_free",), ("allocate", "d", [7, 7, 7, 7, 7])]),
        ("hits that wait on the free list count against it", 3, 2, "chained",
         [("allocate", "a", [1, 2, 3, 4]), ("free", "a"), ("allocate", "b", [9, 9]), ("allocate", "c", [1, 2, 3, 4, 5]),
          ("num_free",), ("ref_count", 0), ("allocate", "d", [1, 2, 6])]),
        ("ValueError: a sequence that holds blocks, an unknown or freed one, an empty prompt", 4, 2, "chained",
         [("allocate", "a", [1, 2, 3]), ("allocate", "a", [4]), ("free", "nobody"), ("allocate", "e", []),
          ("free", "a"), ("free", "a"), ("num_free",)]),
    ]
    for label, num_blocks, block_size, hash_name, ops in named:
        check.equal(f"{label} ({num_blocks} blocks of {block_size}, {hash_name} hash)",
                    lambda: run(num_blocks, block_size, hash_name, ops),
                    _expected_session(num_blocks, block_size, hash_name, ops))
    rng = random.Random(6060)
    for case in range(24):
        num_blocks, block_size = rng.randint(3, 12), rng.choice([1, 2, 3, 4])
        hash_name = ["chained", "weak", "tokens_only", "constant"][case % 4]
        ops = _session_ops(rng, num_blocks, [1, 2, 3])
        check.equal(f"random session {case} ({num_blocks} blocks of {block_size}, {hash_name} hash, "
                    f"{_n(len(ops), 'operation')}): every result follows the six rules",
                    lambda: run(num_blocks, block_size, hash_name, ops),
                    _expected_session(num_blocks, block_size, hash_name, ops))


# -- exercise 5 -------------------------------------------------------------------------------
SPEC_SCRIPT = """
import torch as _torch

def _spec_rounds(rounds, seed):
    generator = _torch.Generator().manual_seed(seed)
    outputs, plain = [], True
    for tokens, q, p in rounds:
        out = accept_or_resample(list(tokens), _torch.tensor(q, dtype=_torch.float32),
                                 _torch.tensor(p, dtype=_torch.float32), generator)
        plain = plain and type(out) is list and all(type(t) is int for t in out)
        outputs.append([int(t) for t in out])
    following = _torch.rand((), generator=generator, dtype=_torch.float64).item()
    return outputs, plain, following
"""


def _f32(rows):
    """Probabilities as the learner's float32 tensors hold them, back in float64."""
    return torch.tensor(rows, dtype=torch.float32).double().tolist()


def _replay(rounds, seed):
    """The rule, round after round on one generator; then the generator's next uniform."""
    g = torch.Generator().manual_seed(seed)
    outputs = []
    for tokens, q, p in rounds:
        q, p = _f32(q), _f32(p)
        k = len(tokens)
        u = torch.rand(k, generator=g, dtype=torch.float64).tolist()
        kept = 0
        while kept < k and u[kept] < p[kept][tokens[kept]] / q[kept][tokens[kept]]:
            kept += 1
        final = p[k] if kept == k else [max(0.0, a - b) for a, b in zip(p[kept], q[kept])]
        v = torch.rand((), generator=g, dtype=torch.float64).item()
        cdf = np.cumsum(np.array(final, dtype=np.float64))  # inverse CDF: the first index past v x total
        token = min(int(np.searchsorted(cdf, v * cdf[-1], side="right")), len(final) - 1)
        outputs.append(list(tokens[:kept]) + [token])
    return outputs, torch.rand((), generator=g, dtype=torch.float64).item()


def _random_dist(rng, V, zeros):
    w = [rng.random() + 0.05 for _ in range(V)]
    for i in rng.sample(range(V), zeros):
        w[i] = 0.0
    return [x / sum(w) for x in w]


def _draw(rng, dist):
    return rng.choices(range(len(dist)), weights=dist)[0]


# Pearson chi-square critical values at 0.001 by degrees of freedom.
CHI2_CRITICAL = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46}


def _chi_square(counts, probs):
    n = sum(counts)
    return sum((c - n * p) ** 2 / (n * p) for c, p in zip(counts, probs) if p > 0) + \
        (float("inf") if any(c and p == 0 for c, p in zip(counts, probs)) else 0.0)


def accept_or_resample(learner, check):
    run = learner.script(SPEC_SCRIPT, "_spec_rounds")
    rng = random.Random(560)
    named = [
        ("every guess has p(x) >= q(x): all kept, then the bonus token from p[k]",
         [([1, 0], [[0.2, 0.8, 0.0], [0.6, 0.2, 0.2]], [[0.1, 0.9, 0.0], [0.7, 0.1, 0.2], [0.0, 0.0, 1.0]])]),
        ("a guess with p(x) = 0 is always rejected and replaced from max(0, p - q)",
         [([2], [[0.3, 0.3, 0.4]], [[0.5, 0.5, 0.0], [0.0, 1.0, 0.0]])]),
        ("after a rejection the replacement comes from max(0, p - q), never from p or q",
         [([0], [[0.7, 0.1, 0.2]], [[0.3, 0.1, 0.6], [1.0, 0.0, 0.0]])] * 6),
        ("the rejection stops the round: later guesses are not examined",
         [([1, 1, 1], [[0.1, 0.9], [0.1, 0.9], [0.1, 0.9]], [[0.9, 0.1], [0.1, 0.9], [0.1, 0.9], [0.5, 0.5]])] * 4),
    ]
    for label, rounds in named:
        for seed in (0, 1, 2):
            expected, _ = _replay(rounds, seed)
            check.equal(f"{label} (seed {seed})", lambda: run(rounds, seed)[0], expected)
    for case in range(12):
        V, k = rng.randint(2, 8), rng.randint(1, 5)
        rounds = []
        for _ in range(rng.randint(1, 6)):
            q = [_random_dist(rng, V, rng.randint(0, V - 1)) for _ in range(k)]
            p = [_random_dist(rng, V, rng.randint(0, V - 1)) for _ in range(k + 1)]
            rounds.append(([_draw(rng, q[i]) for i in range(k)], q, p))
        seed = rng.randrange(10**6)
        expected, following = _replay(rounds, seed)
        replay = Once(lambda: run(rounds, seed))
        shown = f"random case {case}: V = {V}, k = {k}, {_n(len(rounds), 'round')}, seed {seed}"
        check.equal(f"accept while u[i] < p/q (k uniforms in one call first), resample from max(0, p - q) or take "
                    f"the bonus from p[k], by inverse CDF ({shown})", _item(0, replay), expected)
        if case < 4:
            check.equal(f"each round draws k uniforms and then exactly one more, even after an early rejection ({shown})",
                        _item(2, replay), following)
            check.that(f"returns a list of Python ints ({shown})", _item(1, replay), lambda ok: ok is True,
                       "return [int(t) for t in ...], a list, not a tensor", edge=True)
    # The distribution the rule promises: draft tokens drawn here from a poor draft, 4,000 rounds.
    p = [[0.05, 0.10, 0.45, 0.30, 0.10], [0.40, 0.05, 0.05, 0.25, 0.25], [0.2, 0.2, 0.2, 0.2, 0.2]]
    q = [[0.45, 0.35, 0.05, 0.10, 0.05], [0.05, 0.50, 0.30, 0.05, 0.10]]
    p, q = _f32(p), _f32(q)
    draws = random.Random(777)
    rounds = [([_draw(draws, q[0]), _draw(draws, q[1])], q, p) for _ in range(4000)]
    replay = Once(lambda: run(rounds, 4242))
    for position, label in ((0, "the first token out"), (1, "the second token out (when the first was kept)")):
        def statistic(result, position=position):
            tokens = [out[position] for out in result[0] if len(out) > position]
            counts = [tokens.count(t) for t in range(5)]
            return _chi_square(counts, p[position])
        check.that(f"4,000 rounds of a poor draft: {label} follows the target p (chi-square, 0.001 level)", replay,
                   lambda result, statistic=statistic: statistic(result) < CHI2_CRITICAL[4],
                   "the output does not follow the target's distribution: accept with min(1, p/q) and resample from "
                   "normalize(max(0, p - q))")
    check.equal("4,000 rounds of a poor draft: the same tokens as the rule replayed here",
                lambda: replay()[0], _replay(rounds, 4242)[0])
    for seed in (3, 4, 5, 6):
        rounds = [float32_ratio_round(seed)]  # inputs only: the expectation is the replay here
        check.equal(f"p / q divided in float64: u[0] within float32 rounding of p/q (seed {seed})",
                    lambda: run(rounds, seed)[0], _replay(rounds, seed)[0])
    for label, rounds in (("the first guess", [([1], [[1.0, 0.0]], [[0.5, 0.5], [0.5, 0.5]])]),
                          ("a later guess", [([0, 2], [[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]],
                                              [[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [0.1, 0.1, 0.8]])])):
        check.raises(f"a drafted token with q(x) = 0 raises ValueError ({label})", lambda: run(rounds, 0), "ValueError")


# -- exercise 6 -------------------------------------------------------------------------------
def _quantize(rows):
    """Per row: scale = max|w| / 127 (float64, stored float32; 1.0 for a zero row), q = round half even."""
    qs, scales = [], []
    for row in rows:
        amax = max(abs(x) for x in row)
        scale = float(np.float32(amax / 127)) if amax > 0 else 1.0
        q = [max(-127, min(127, round(x / scale))) for x in row]  # Python's round is half to even
        qs.append(q)
        scales.append(scale)
    return qs, scales


def _dtype_is(name):
    def ok(value):
        return isinstance(value, np.ndarray) and value.dtype == np.dtype(name)
    return ok


def quantize_per_channel(learner, check):
    f = learner.function("quantize_per_channel")
    dq = learner.function("dequantize")
    g = torch.Generator().manual_seed(66)
    named = [
        ("rounding is half to even (scale exactly 1)", torch.tensor([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5]],
                                                                    dtype=torch.float64)),
        ("values round to the nearest integer, never truncated (scale exactly 1)",
         torch.tensor([[-127.0, 1.9, -1.9, 0.7, -0.7, 99.6]], dtype=torch.float64)),
        ("one scale per output row: rows of very different size keep their own precision",
         torch.tensor([[1000.0, -3.0, 1.0, 250.0], [0.001, -0.003, 0.0025, 0.0001]])),
        ("one scale per output row, not per column (a 4 x 2 matrix)",
         torch.tensor([[1.0, 8.0], [-3.0, 0.5], [0.25, 0.125], [6.0, -6.0]])),
        ("a row of zeros gets scale 1.0 and q = 0", torch.tensor([[0.0, 0.0, 0.0], [0.3, -0.6, 0.9], [0.0, 0.0, 0.0]])),
        ("the largest magnitude of each row maps to +-127", torch.tensor([[-5.0, 2.0, 4.99], [3.0, -3.0, 1.0]])),
        ("w is divided by the stored float32 scale (a value at x.5 in float64)", stored_scale_row()),
    ]
    for case in range(5):
        rows, cols = 7 + case, 9 + 2 * case
        w = torch.randn(rows, cols, generator=g) * 10 ** (case - 2)
        if case == 2:
            w[3] = 0.0
        named.append((f"random matrix {case} ({rows} x {cols})", w))
    for label, w in named:
        q_expected, scale_expected = _quantize(w.double().tolist())
        replay = Once(lambda: f(w.clone()))
        check.close(f"{label}: q = round(w / scale) half to even, in -127..127", _item(0, replay), q_expected,
                    atol=0)
        check.close(f"{label}: scale = max|row| / 127 per output row (1.0 for a zero row)", _item(1, replay),
                    scale_expected, atol=0, rtol=1e-7)
        check.that(f"{label}: q is int8", _item(0, replay), _dtype_is("int8"), "return q as torch.int8")
        check.that(f"{label}: scale is float32", _item(1, replay), _dtype_is("float32"), "return scale as float32")
        q_t = torch.tensor(q_expected, dtype=torch.int8)
        s_t = torch.tensor(scale_expected, dtype=torch.float32)
        check.close(f"{label}: dequantize(q, scale) = q * scale row by row, float32", lambda: dq(q_t, s_t),
                    (q_t.float() * s_t[:, None]).tolist(), atol=1e-6, rtol=1e-6)
        check.that(f"{label}: dequantize returns float32", lambda: dq(q_t, s_t), _dtype_is("float32"),
                   "return float32 values")
    for label, bad in (("a 1-D tensor", torch.ones(5)), ("a 3-D tensor", torch.ones(2, 3, 4)),
                       ("a NaN", torch.tensor([[0.5, float("nan")], [1.0, 2.0]])),
                       ("an infinity", torch.tensor([[1.0, 2.0], [float("-inf"), 1.0]]))):
        check.raises(f"invalid weight raises ValueError ({label})", lambda: f(bad), "ValueError")
