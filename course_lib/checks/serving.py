"""Visible checks for notebook 06 (serving): one case per rule each exercise states.

Expectations come from the course's production code where it has the exercise's rule: the
load generator's ``RequestRecord`` for the stream metrics, the engine's own ``Scheduler`` for
the scheduler step (``reference_schedule`` runs it on the exercise's state), the speculative
and int8 code for the last two exercises. The block pool has no production twin (the engine's
``BlockManager`` publishes blocks after they are computed), so ``ReferencePool`` states its six
rules as a different model from the one the exercise builds. Hand-worked cases come first;
the hidden tests (grading/hidden/06_serving.py) use the same two references.
"""
from __future__ import annotations

import copy
import hashlib
import random
from array import array
from collections import deque

import torch

from course_lib.checks.report import expect_close, expect_equal, expect_raises

# -- exercise 1: TTFT, TPOT, ITL ---------------------------------------------------------------
METRIC_KEYS = {"ttft", "latency", "tpot", "itl"}


def stream_metrics(fn) -> None:
    from course_lib.api.loadgen import RequestRecord

    def run(start, chunks, tokens, end):
        return fn(start, list(chunks), tokens, end)

    worked = run(0.0, [0.100, 0.120, 0.150], 3, 0.150)
    expect_equal("returns a dict with the keys ttft, latency, tpot, itl",
                 sorted(worked) if isinstance(worked, dict) else worked, sorted(METRIC_KEYS))
    expect_close("worked example: TTFT = first chunk - start", worked["ttft"], 0.100)
    expect_close("worked example: latency = end - start", worked["latency"], 0.150)
    expect_close("worked example: ITL = gaps between chunks (2 gaps for 3 chunks)", worked["itl"], [0.020, 0.030],
                 hint="the wait for the first chunk is TTFT, not an ITL: zip(chunk_times, chunk_times[1:])")
    expect_close("worked example: TPOT = (latency - TTFT) / (tokens - 1)", worked["tpot"], 0.025,
                 hint="the first token's time is TTFT; the other tokens - 1 share the rest")
    five = run(1.0, [1.3, 1.5], 5, 1.9)
    expect_close("2 chunks carrying 5 tokens: TPOT divides by tokens - 1, not chunks", five["tpot"], (0.9 - 0.3) / 4,
                 hint="use output_tokens, the server's count; a chunk may carry several tokens")
    expect_close("2 chunks: one ITL", five["itl"], [0.2])
    one = run(2.0, [2.25], 1, 2.25)
    expect_equal("a one-token reply: TPOT is None", one["tpot"], None, hint="TPOT needs a second token")
    expect_equal("one chunk: no ITL at all", one["itl"], [])
    empty = run(5.0, [], 0, 5.5)
    expect_close("no chunk at all: TTFT = end - start", empty["ttft"], 0.5,
                 hint="with no chunk the reply was complete (and empty) at end")
    expect_equal("no chunk, 0 tokens: TPOT None, ITL []", [empty["tpot"], empty["itl"]], [None, []])
    expect_raises("a chunk before start raises ValueError", lambda: run(1.0, [0.9, 1.2], 2, 1.3), ValueError,
                  hint="check start <= chunk_times[0] <= ... <= end")
    expect_raises("chunks out of order raise ValueError", lambda: run(0.0, [0.2, 0.1], 2, 0.3), ValueError)
    expect_raises("end before the last chunk raises ValueError", lambda: run(0.0, [0.1, 0.2], 2, 0.15), ValueError)
    rng = random.Random(6)
    for case in range(20):
        start = rng.uniform(0, 100)
        chunks = sorted(start + rng.uniform(0, 3) for _ in range(rng.randint(0, 8)))
        end = (chunks[-1] if chunks else start) + rng.choice([0.0, rng.uniform(0, 0.5)])
        tokens = rng.choice([0, 1]) if not chunks else len(chunks) + rng.randint(0, 4)
        record = RequestRecord(index=0, start=start, chunk_times=list(chunks), end=end, output_tokens=tokens)
        got = run(start, chunks, tokens, end)
        expected = [record.ttft, record.latency, record.itls]
        expect_close(f"random stream {case} ({len(chunks)} chunks, {tokens} tokens): TTFT, latency, ITL as "
                     "course bench-serve's RequestRecord", [got["ttft"], got["latency"], got["itl"]], expected,
                     atol=1e-9)
        if record.tpot is None:
            expect_equal(f"random stream {case}: TPOT None as RequestRecord", got["tpot"], None)
        else:
            expect_close(f"random stream {case}: TPOT as RequestRecord", got["tpot"], record.tpot, atol=1e-9)


# -- exercise 2: roofline ------------------------------------------------------------------------
ROOFLINE_KEYS = {"bytes_per_step", "flops_per_step", "intensity", "ridge", "step_s", "tokens_per_s", "bound"}


def _roofline(n_params, bytes_per_param, kv, batch, bandwidth_gb_s, peak_tflops) -> dict:
    """The step's roofline from the drills' formulas (``course_lib.drills.problem_formulas``)."""
    from course_lib.drills.problem_formulas import decode_step_floor_s, forward_flops

    weights_and_kv = n_params * bytes_per_param + batch * kv
    flops = forward_flops(n_params, tokens=batch)
    times = {"memory": decode_step_floor_s(weights_and_kv, bandwidth_gb_s), "compute": flops / (peak_tflops * 1e12)}
    bound = "memory" if times["memory"] >= times["compute"] else "compute"
    return {"bytes_per_step": weights_and_kv, "flops_per_step": flops, "intensity": flops / weights_and_kv,
            "ridge": peak_tflops * 1e12 / (bandwidth_gb_s * 1e9), "step_s": times[bound],
            "tokens_per_s": batch / times[bound], "bound": bound}


def decode_roofline(fn) -> None:
    got = fn(1e9, 2, 1e8, 4, 1000, 100)
    expect_equal("returns a dict with the seven keys", sorted(got) if isinstance(got, dict) else got,
                 sorted(ROOFLINE_KEYS))
    expect_close("1B params x 2 bytes + 4 sequences x 100 MB of KV: bytes per step (weights once, KV per sequence)",
                 got["bytes_per_step"], 2.4e9, rtol=1e-9,
                 hint="the weights are read once for the whole batch; each sequence reads its own cache")
    expect_close("FLOPs per step = 2 x params x batch", got["flops_per_step"], 8e9, rtol=1e-9)
    expect_close("intensity = FLOPs / bytes", got["intensity"], 8e9 / 2.4e9, rtol=1e-9)
    expect_close("ridge = 100 TFLOP/s / 1,000 GB/s = 100 FLOPs per byte (decimal GB)", got["ridge"], 100.0, rtol=1e-9,
                 hint="1 GB/s = 1e9 bytes/s (not 2**30, and bytes, not bits); 1 TFLOP/s = 1e12 FLOP/s")
    expect_close("step = max(memory time, compute time) = 2.4 GB / 1,000 GB/s", got["step_s"], 2.4e-3, rtol=1e-9)
    expect_close("tokens/s = batch / step (each sequence gains a token)", got["tokens_per_s"], 4 / 2.4e-3, rtol=1e-9,
                 hint="every sequence in the batch gets one token per step")
    expect_equal("that step is memory-bound", got["bound"], "memory")
    big = fn(1e9, 2, 0, 1000, 1000, 100)
    expect_close("batch 1000, no KV: the compute time (20 ms) is the step", big["step_s"], 0.02, rtol=1e-9,
                 hint="step_s is the larger of the two times")
    expect_equal("batch 1000, no KV: compute-bound", big["bound"], "compute")
    expect_close("batch 1000: 50,000 tokens/s", big["tokens_per_s"], 50_000.0, rtol=1e-9)
    expect_equal("equal memory and compute times: 'memory'", fn(1e9, 2, 0, 1, 1000, 1)["bound"], "memory",
                 hint="'memory' when the memory time is at least the compute time")
    llama = fn(8_030_261_248, 2, 0, 1, 3350, 989)
    expect_close("Llama 3.1 8B bf16 on an H100 (3,350 GB/s), batch 1: about 209 tokens/s", llama["tokens_per_s"],
                 3350e9 / (2 * 8_030_261_248), rtol=1e-9)
    rng = random.Random(2)
    for case in range(10):
        args = (rng.uniform(1e6, 1e11), rng.choice([0.5, 1, 2, 4]), rng.uniform(0, 1e9), rng.randint(1, 512),
                rng.uniform(50, 8000), rng.uniform(1, 2000))
        got, expected = fn(*args), _roofline(*args)
        numbers = [k for k in sorted(ROOFLINE_KEYS) if k != "bound"]
        expect_close(f"random case {case} (batch {args[3]}): every number", [got[k] for k in numbers],
                     [expected[k] for k in numbers], rtol=1e-9, atol=0)
        expect_equal(f"random case {case}: the bound", got["bound"], expected["bound"])
    for label, args in (("batch 0", (1e9, 2, 0, 0, 1000, 100)), ("negative KV bytes", (1e9, 2, -1, 1, 1000, 100)),
                        ("zero parameters", (0, 2, 0, 1, 1000, 100)), ("zero bytes per parameter", (1e9, 0, 0, 1, 1000, 100)),
                        ("zero bandwidth", (1e9, 2, 0, 1, 0, 100)), ("negative peak", (1e9, 2, 0, 1, 1000, -5))):
        expect_raises(f"{label} raises ValueError", lambda: fn(*args), ValueError)


# -- exercise 3: one scheduler step ------------------------------------------------------------
def _seq(rid, tokens, computed=0, outputs=0, blocks=0) -> dict:
    return {"id": rid, "tokens": tokens, "computed": computed, "outputs": outputs, "blocks": blocks}


def reference_schedule(running, waiting, free_blocks, block_size, max_num_seqs, max_batched_tokens) -> dict:
    """One ``schedule()`` of the course's own engine scheduler (``course_lib.serving.Scheduler``), run
    on the exercise's state and read back into its dicts: the production oracle of the three passes.

    Each dict becomes a ``Sequence`` (distinct token IDs, so no prefix is shared) holding its
    ``blocks`` in a ``BlockManager`` of ``free_blocks`` + the blocks held (+ one pinned block that
    no step can take, so the pool is never empty). A decode whose blocks do not yet cover its
    newest token holds slots for the others only, which is what makes the scheduler grow it.
    """
    from course_lib.kv_memory.paging import blocks_needed
    from course_lib.serving.block_manager import BlockManager
    from course_lib.serving.scheduler import Scheduler
    from course_lib.serving.sequence import Sequence, SequenceStatus

    held = sum(s["blocks"] for s in running)
    pool = BlockManager(free_blocks + held + 1, block_size, prefix_caching=False)
    scheduler = Scheduler(pool, max_num_seqs=max_num_seqs, max_batched_tokens=max_batched_tokens)
    fresh = iter(range(1 << 62))
    pool.allocate(object(), [next(fresh)])  # the pinned block

    def sequence(state):
        seq = Sequence(state["id"], [next(fresh) for _ in range(state["tokens"] - state["outputs"])], 1 << 30)
        seq.output_token_ids = [next(fresh) for _ in range(state["outputs"])]
        seq.num_computed_tokens = state["computed"]
        return seq

    for state in running:
        seq = sequence(state)
        slots = seq.num_tokens if state["blocks"] >= blocks_needed(seq.num_tokens, block_size) else seq.num_tokens - 1
        if blocks_needed(slots, block_size) != state["blocks"]:
            raise ValueError(f"{state['id']!r} holds {state['blocks']} blocks, which fit neither all its tokens "
                             "nor all but the newest")
        pool.allocate(seq.request_id, seq.token_ids[:slots])
        seq.status = SequenceStatus.RUNNING
        scheduler.running.append(seq)
    for state in waiting:
        if state["computed"] or state["blocks"]:
            raise ValueError(f"waiting {state['id']!r} must hold no blocks and have nothing computed")
        scheduler.waiting.append(sequence(state))
    step = scheduler.schedule()

    def plain(seq):
        blocks = len(pool.block_table(seq.request_id)) if seq.request_id in pool else 0
        return {"id": seq.request_id, "tokens": seq.num_tokens, "computed": seq.num_computed_tokens,
                "outputs": len(seq.output_token_ids), "blocks": blocks}
    return {"batch": [[e.seq.request_id, e.num_new_tokens] for e in step.scheduled],
            "preempted": [seq.request_id for seq in step.preempted], "running": [plain(q) for q in scheduler.running],
            "waiting": [plain(q) for q in scheduler.waiting], "free_blocks": pool.num_free_blocks}


def _plain_plan(plan):
    if not isinstance(plan, dict):
        return plan
    out = dict(plan)
    if isinstance(out.get("batch"), (list, tuple)):
        out["batch"] = [list(e) if isinstance(e, (list, tuple)) else e for e in out["batch"]]
    for key in ("running", "waiting"):
        if isinstance(out.get(key), (list, tuple)):
            out[key] = [dict(s) if isinstance(s, dict) else s for s in out[key]]
    return out


def _random_state(rng: random.Random):
    block_size = rng.choice([2, 4, 8])
    seats = rng.randint(1, 5)
    running, waiting, ids = [], [], iter("ABCDEFGHIJKLMNOP")
    for _ in range(rng.randint(0, seats)):
        prompt = rng.randint(1, 30)
        if rng.random() < 0.6:  # decoding
            outputs = rng.randint(1, 10)
            tokens = prompt + outputs
            computed = tokens - 1
            blocks = -(-computed // block_size)
        else:  # prefilling, maybe after a preemption
            outputs = rng.choice([0, 0, 0, rng.randint(1, 4)])
            tokens = prompt + outputs
            computed = rng.randint(0, tokens - 1) if outputs == 0 else rng.randint(0, tokens - 2)
            blocks = -(-tokens // block_size)
        running.append(_seq(next(ids), tokens, computed, outputs, blocks))
    for _ in range(rng.randint(0, 4)):
        outputs = rng.choice([0, 0, rng.randint(1, 5)])
        waiting.append(_seq(next(ids), rng.randint(1, 30) + outputs, 0, outputs, 0))
    free = rng.choice([0, 0, 1, 2, rng.randint(0, 20)])
    budget = rng.randint(max(seats, 1), 40)
    return running, waiting, free, block_size, seats, budget


def schedule_step(fn) -> None:
    def run(running, waiting, free, block_size=4, seats=3, budget=16):
        return _plain_plan(fn(copy.deepcopy(running), copy.deepcopy(waiting), free, block_size, seats, budget))

    def expect(label, args, hint="", **kw):
        expected = reference_schedule(*args)
        got = run(*args)
        fields = kw.get("fields")
        if fields:
            got = {k: got.get(k) for k in fields} if isinstance(got, dict) else got
            expected = {k: expected[k] for k in fields}
        expect_equal(label, got, expected, hint=hint)

    a_dec = _seq("A", 9, 8, 1, 3)      # decoding, its 3 blocks hold position 8 already
    b_pre = _seq("B", 20, 8, 0, 5)     # prefilling, 12 tokens to go
    c_wait = _seq("C", 6)
    plan = run([a_dec, b_pre], [c_wait], 10, 4, 3, 8)
    expect_equal("returns a dict with batch, preempted, running, waiting, free_blocks",
                 sorted(plan) if isinstance(plan, dict) else plan,
                 ["batch", "free_blocks", "preempted", "running", "waiting"])
    expect_equal("decodes first, then the running prefill gets what is left of the budget (8 tokens)",
                 plan["batch"], [["A", 1], ["B", 7]],
                 hint="three passes in order: decodes, running prefills, admission; a prefill chunk is "
                      "min(tokens - computed, budget left)")
    expect_equal("no budget left: C stays waiting", [[s["id"] for s in plan["running"]], [s["id"] for s in plan["waiting"]]],
                 [["A", "B"], ["C"]], hint="admission only while budget is left")
    expect_equal("A needed no new block: free blocks unchanged", plan["free_blocks"], 10)
    grow = _seq("A", 13, 12, 2, 3)     # position 12 starts a 4th block
    plan = run([grow], [], 2, 4, 3, 8)
    expect_equal("a decode whose newest token starts a new block takes one free block",
                 [plan["running"][0]["blocks"], plan["free_blocks"], plan["batch"]], [4, 1, [["A", 1]]],
                 hint="a decoding sequence needs ceil(tokens / block_size) blocks")
    expect("a decode that needs a block when none is free preempts the newest running sequence",
           ([_seq("A", 13, 12, 2, 3), _seq("B", 20, 4, 0, 5), _seq("C", 7, 6, 1, 2)], [_seq("D", 3)], 0, 4, 3, 16),
           hint="the victim is running[-1], the newest; it gives back its blocks and gets computed = 0, blocks = 0")
    plan = run([_seq("A", 13, 12, 2, 3), _seq("B", 20, 4, 0, 5), _seq("C", 7, 6, 1, 2)], [_seq("D", 3)], 0, 4, 3, 16)
    expect_equal("... the victim goes to the FRONT of waiting, keeping tokens and outputs",
                 plan["waiting"], [_seq("C", 7, 0, 1, 0), _seq("D", 3)],
                 hint="waiting.insert(0, victim): it is older than anyone still waiting")
    expect_equal("... and nobody is admitted in a step that preempted",
                 [s["id"] for s in plan["running"]], ["A", "B"],
                 hint="the victim heads the queue and cannot fit: head-of-line admission stops at once")
    expect("the decode that needs a block is itself the newest: it preempts itself and the decodes stop",
           ([_seq("A", 6, 5, 1, 2), _seq("B", 9, 8, 2, 2)], [_seq("W", 4)], 0, 4, 3, 8),
           hint="if the victim is the sequence that needed the block, stop the decode pass")
    expect("two decodes need blocks, none free: each preempts the newest in turn (the older victim ends up first)",
           ([_seq("A", 9, 8, 1, 2), _seq("B", 9, 8, 1, 2), _seq("C", 4, 3, 1, 1), _seq("D", 3, 0, 0, 1)],
            [_seq("W", 2)], 0, 4, 4, 16))
    expect("head of line: a waiting request that does not fit blocks the smaller ones behind it",
           ([], [_seq("BIG", 40), _seq("SMALL", 3)], 5, 4, 3, 16),
           hint="stop admission at the first waiting request that does not fit; nobody overtakes it")
    expect("admission takes ceil(tokens / block_size) blocks and a chunk capped by the budget left",
           ([_seq("A", 9, 8, 1, 3)], [_seq("C", 30), _seq("E", 2)], 12, 4, 3, 6),
           hint="an admitted request's first chunk is min(tokens, budget left)")
    expect("admission stops at max_num_seqs running", ([_seq("A", 9, 8, 1, 3), _seq("B", 5, 4, 1, 2)],
                                                        [_seq("C", 3), _seq("E", 3)], 20, 4, 3, 16),
           hint="while len(running) < max_num_seqs")
    expect("admission in arrival order while budget and blocks allow", ([], [_seq("C", 5), _seq("E", 6), _seq("F", 7)],
                                                                        20, 4, 4, 9))
    expect("a sequence with outputs but more than one token to compute (re-admitted) is prefilling",
           ([_seq("A", 9, 8, 1, 3), _seq("R", 12, 4, 2, 3)], [], 0, 4, 3, 16))
    expect("a prompt with one token left and no output yet is a prefill (after the decodes), not a decode",
           ([_seq("P", 9, 8, 0, 3), _seq("D", 6, 5, 1, 2)], [], 4, 4, 3, 16),
           hint="decoding means outputs >= 1 and tokens - computed == 1")
    expect("the budget is shared: later prefills get what earlier ones left",
           ([_seq("A", 20, 0, 0, 5), _seq("B", 20, 2, 0, 5), _seq("C", 5, 4, 1, 2)], [_seq("W", 2)], 5, 4, 4, 12))
    rng = random.Random(3)
    for case in range(40):
        args = _random_state(rng)
        expect(f"random state {case} ({len(args[0])} running, {len(args[1])} waiting, {args[2]} free blocks, "
               f"budget {args[5]})", args)


# -- exercise 4: the block pool ------------------------------------------------------------------
def chain_hash(parent, block_tokens):
    h = hashlib.blake2b(digest_size=8)
    if parent is not None:
        h.update(parent.to_bytes(8, "little"))
    h.update(array("q", block_tokens).tobytes())
    return int.from_bytes(h.digest(), "little")


class ReferencePool:
    """The exercise's six rules as a different model from the one the exercise builds: nothing is
    counted or queued as it happens, everything is derived when asked.

    - A block's reference count is not kept: it is the number of live block tables that hold it.
    - The free list is not a queue: it is the blocks nobody holds, in the order they were last
      freed (never-used blocks first, by id); a free stamps each block that reaches no holder.
    - The prefix cache is a list of (key, block, prefix) entries in the order they were made; a
      lookup takes the entry with the key, and taking a block off the free list drops its entry.
    """

    def __init__(self, num_blocks, block_size, hash_fn=chain_hash):
        self.blocks, self.size, self.hash_fn = range(num_blocks), block_size, hash_fn
        self.tables, self.entries = {}, []
        self.freed_at, self.clock = [block - num_blocks for block in self.blocks], 0

    def ref_count(self, block_id):
        return sum(block_id in table for table in self.tables.values())

    def _free_list(self):
        return sorted((b for b in self.blocks if not self.ref_count(b)), key=self.freed_at.__getitem__)

    def num_free(self):
        return len(self._free_list())

    def allocate(self, seq_id, token_ids):
        tokens, size = list(token_ids), self.size
        if not tokens or seq_id in self.tables:
            raise ValueError("an empty prompt, or a sequence that holds blocks")
        keys = []  # the chained key of each full block
        for block in (tuple(tokens[i:i + size]) for i in range(0, len(tokens) - size + 1, size)):
            keys.append(self.hash_fn(keys[-1] if keys else None, block))
        cached = {key: (block, prefix) for key, block, prefix in self.entries}
        hits = []
        for i in range((len(tokens) - 1) // size):
            block, prefix = cached.get(keys[i], (None, None))
            if prefix != tuple(tokens[:(i + 1) * size]):
                break
            hits.append(block)
        free = self._free_list()
        new = [b for b in free if b not in hits][:-(-len(tokens) // size) - len(hits)]
        if len(hits) + len(new) < -(-len(tokens) // size):
            raise RuntimeError("not enough free blocks")
        self.entries = [entry for entry in self.entries if entry[1] not in new]
        self.tables[seq_id] = table = hits + new
        for i, key in enumerate(keys):
            if key not in {entry[0] for entry in self.entries}:
                self.entries.append((key, table[i], tuple(tokens[:(i + 1) * size])))
        return list(table), len(hits) * size

    def free(self, seq_id):
        if seq_id not in self.tables:
            raise ValueError("unknown sequence")
        for block in reversed(self.tables.pop(seq_id)):
            if not self.ref_count(block):
                self.freed_at[block], self.clock = self.clock, self.clock + 1


def pool_session(cls, num_blocks, block_size, hash_fn, ops) -> list:
    """Run ops on a new pool; each op's result, or ["raised", exception name]."""
    pool = cls(num_blocks, block_size, hash_fn)
    out = []
    for op, *args in ops:
        try:
            result = getattr(pool, op)(*args)
            if op == "allocate" and isinstance(result, (tuple, list)) and len(result) == 2:
                result = [list(result[0]), result[1]]
            elif op == "free":
                result = None  # what free returns does not matter
            out.append(result)
        except NotImplementedError:
            raise  # an unfinished method: "not attempted", not a wrong answer
        except Exception as exc:  # what a learner's pool raised is part of its behaviour
            out.append(["raised", type(exc).__name__])
    return out


def _collide(parent, block_tokens):
    return 7  # every block has the same key: only verification tells them apart


def _tokens_only(parent, block_tokens):
    return sum((i + 1) * t for i, t in enumerate(block_tokens)) % 1009  # ignores the parent


def _weak(parent, block_tokens):
    return ((parent or 0) * 31 + sum(block_tokens)) % 5


def block_pool(cls) -> None:
    def session(ops, num_blocks=8, block_size=4, hash_fn=chain_hash):
        return pool_session(cls, num_blocks, block_size, hash_fn, ops)

    system = [1, 2, 3, 4, 5, 6, 7, 8]
    got = session([("allocate", "a", system + [9, 10]), ("num_free",)])
    expect_equal("a first prompt of 10 tokens: blocks [0, 1, 2] from the front of the free list, nothing cached",
                 got, [[[0, 1, 2], 0], 5], hint="ceil(10 / 4) = 3 blocks; the free list starts 0, 1, 2, ...")
    got = session([("allocate", "a", system + [9, 10]), ("allocate", "b", system + [42]), ("ref_count", 0),
                   ("ref_count", 2), ("num_free",)])
    expect_equal("a second prompt sharing 8 tokens: hits blocks 0 and 1 (8 cached), one new block; block 0 has "
                 "2 references", got, [[[0, 1, 2], 0], [[0, 1, 3], 8], 2, 1, 4],
                 hint="register every full block after allocating; look prefixes up block by block")
    got = session([("allocate", "a", system + [9, 10]), ("allocate", "c", system)])
    expect_equal("a prompt that is exactly 2 full blocks: only the first may hit (the last token is always computed)",
                 got, [[[0, 1, 2], 0], [[0, 3], 4]],
                 hint="look up only the first (len(token_ids) - 1) // block_size blocks")
    got = session([("allocate", "a", system + [9, 10]), ("allocate", "b", system + [42]), ("free", "a"),
                   ("ref_count", 0), ("ref_count", 2), ("num_free",), ("allocate", "x", [50, 51, 52, 53, 54, 55, 56, 57, 58]),
                   ("num_free",)])
    expect_equal("free decrements every count; a block reaching 0 goes to the BACK of the free list",
                 got, [[[0, 1, 2], 0], [[0, 1, 3], 8], None, 1, 0, 5, [[4, 5, 6], 0], 2],
                 hint="free walks the table last-first; free_list.append(block) when its count reaches 0")
    got = session([("allocate", "a", [1, 2, 3, 4, 5, 6, 7, 8, 9]), ("free", "a"),
                   ("allocate", "b", [20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40])])
    expect_equal("freed blocks (last block first) come after the never-used ones: least recently freed first",
                 got, [[[0, 1, 2], 0], None, [[3, 4, 5, 6, 7, 2], 0]],
                 hint="free a's table [0, 1, 2] from its end: 2, then 1, then 0 join the back of the free list")
    got = session([("allocate", "a", system + [9]), ("free", "a"), ("num_free",), ("allocate", "b", system + [7, 7]),
                   ("num_free",), ("ref_count", 0)])
    expect_equal("a freed block keeps its contents: a later prompt still hits it and takes it off the free list",
                 got, [[[0, 1, 2], 0], None, 8, [[0, 1, 3], 8], 5, 1],
                 hint="a hit whose count was 0 leaves the free list (free_list.remove(block))")
    got = session([("allocate", "a", system + [9]), ("free", "a"),
                   ("allocate", "x", list(range(100, 117))), ("free", "x"), ("allocate", "b", system + [9])],
                  num_blocks=6)
    expect_equal("taking a cached block from the free list evicts it: block 1 was reused, so only block 0 of the "
                 "old prefix still hits", got, [[[0, 1, 2], 0], None, [[3, 4, 5, 2, 1], 0], None, [[0, 1, 2], 4]],
                 hint="when a block is taken from the free list, drop its key from the cache")
    repeat = [1, 2, 1, 2, 1, 2, 9]
    got = session([("allocate", "a", repeat), ("allocate", "b", repeat)], block_size=2)
    expect_equal("the same block tokens at three depths: chained keys keep them apart, so all three hit",
                 got, [[[0, 1, 2, 3], 0], [[0, 1, 2, 4], 6]],
                 hint="key of block i = hash_fn(key of block i - 1, tokens of block i), None for block 0")
    got = session([("allocate", "a", [1, 2, 3, 4, 5]), ("allocate", "b", [9, 9, 9, 9, 9]),
                   ("allocate", "c", [1, 2, 8, 8, 8])], block_size=2, hash_fn=_collide)
    expect_equal("a hash under which every block collides: verification turns the false hits into misses",
                 got, [[[0, 1, 2], 0], [[3, 4, 5], 0], [[0, 6, 7], 2]],
                 hint="a hit needs the cached block's tokens from position 0 to its end to equal the prompt's")
    got = session([("allocate", "a", [1, 2, 3, 4, 5, 6, 0]), ("allocate", "f", [1, 2, 5, 6, 0])],
                  block_size=2, hash_fn=_tokens_only)
    expect_equal("a hash that ignores the parent: block (5, 6) after (1, 2) is not the block (5, 6) after (1, 2, 3, 4)",
                 got, [[[0, 1, 2, 3], 0], [[0, 4, 5], 2]],
                 hint="compare the whole prefix, not just the block's own tokens: the KV depends on everything before")
    got = session([("allocate", "q", [1, 2, 9]), ("allocate", "p", [5, 0, 5, 6, 7]),
                   ("allocate", "r", [5, 0, 5, 6, 1])],
                  num_blocks=9, block_size=2, hash_fn=_tokens_only)
    expect_equal("the lookup stops at the first miss: (5, 0) collides with (1, 2) and misses, so the (5, 6) after it "
                 "is not looked up", got, [[[0, 1], 0], [[2, 3, 4], 0], [[5, 6, 7], 0]],
                 hint="break at the first block that is not a verified hit; later blocks depend on it")
    got = session([("allocate", "a", [1, 2, 3, 4, 5, 6, 7, 8, 9]), ("allocate", "b", [1, 1, 1, 1, 1, 1, 1, 1, 1]),
                   ("num_free",), ("allocate", "c", [5, 5]), ("allocate", "d", [1, 2, 3, 4, 8]), ("ref_count", 0),
                   ("num_free",), ("free", "c"), ("allocate", "d", [1, 2, 3, 4, 8])], num_blocks=7)
    expect_equal("not enough free blocks: RuntimeError, and nothing changes", got,
                 [[[0, 1, 2], 0], [[3, 4, 5], 0], 1, [[6], 0], ["raised", "RuntimeError"], 1, 0, None, [[0, 6], 4]],
                 hint="count the blocks needed first; raise before touching anything")
    got = session([("allocate", "a", [1, 2, 3, 4]), ("free", "a"), ("allocate", "c", [5, 5]),
                   ("allocate", "d", [1, 2, 3, 4, 7]), ("num_free",), ("ref_count", 0), ("allocate", "e", [6, 6]),
                   ("allocate", "f", [1, 2, 3])], num_blocks=3, block_size=2)
    expect_equal("hits waiting on the free list count against it: RuntimeError, state unchanged", got,
                 [[[0, 1], 0], None, [[2], 0], ["raised", "RuntimeError"], 2, 0, [[1], 0], ["raised", "RuntimeError"]],
                 hint="blocks needed = new blocks + hits whose count is 0 (they come off the free list too)")
    got = session([("allocate", "a", [1, 2, 3]), ("allocate", "a", [4, 5]), ("free", "zz"), ("allocate", "e", []),
                   ("free", "a"), ("free", "a"), ("num_free",)])
    expect_equal("ValueError for a sequence that already holds blocks, an unknown one, an empty prompt, a double free",
                 got, [[[0], 0], ["raised", "ValueError"], ["raised", "ValueError"], ["raised", "ValueError"], None,
                       ["raised", "ValueError"], 8])
    rng = random.Random(4)
    for case in range(25):
        num_blocks, block_size = rng.randint(3, 10), rng.choice([1, 2, 3])
        hash_fn = rng.choice([chain_hash, _weak, _tokens_only])
        ops, live, n = [], [], 0
        for _ in range(14):
            if live and rng.random() < 0.35:
                ops.append(("free", live.pop(rng.randrange(len(live)))))
            elif rng.random() < 0.2:
                ops.append(("ref_count", rng.randrange(num_blocks)))
            else:
                prompt = [rng.choice([1, 2]) for _ in range(rng.randint(1, 9))]
                ops.append(("allocate", f"s{n}", prompt))
                live.append(f"s{n}")
                n += 1
            ops.append(("num_free",))
        expect_equal(f"random session {case} ({num_blocks} blocks of {block_size}, hash {hash_fn.__name__}): "
                     "every result as the rules say", session(ops, num_blocks, block_size, hash_fn),
                     pool_session(ReferencePool, num_blocks, block_size, hash_fn, ops))


# -- exercise 5: speculative accept/resample -----------------------------------------------------
def _uniforms(seed: int, n: int) -> list[float]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, generator=g, dtype=torch.float64).tolist()


def _dist(rng: random.Random, V: int, zeros: int = 0) -> list[float]:
    w = [rng.random() ** 2 for _ in range(V)]
    for i in rng.sample(range(V), zeros):
        w[i] = 0.0
    total = sum(w) or 1.0
    return [x / total for x in w]


def float32_ratio_round(seed: int) -> tuple[list[int], list[list[float]], list[list[float]]]:
    """One round (k = 1) whose keep-or-reject decision flips if p/q is divided in float32: the
    generator's first uniform lies between the float32 quotient and the float64 one. The
    probabilities are float32 values, so the tensors built from them hold them exactly."""
    import numpy as np

    u = torch.rand(1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).item()
    for j in range(400):
        q = np.float32(0.3 + 0.0037 * j)
        p = np.float32(u * float(q))
        for _ in range(8):
            if (u < float(p) / float(q)) != (u < float(p / q)):
                return [0], [[float(q), float(np.float32(1 - q))]], [[float(p), float(np.float32(1 - p))], [0.5, 0.5]]
            p = np.nextafter(p, np.float32(1))
    raise AssertionError(f"no float32-sensitive ratio found for seed {seed}")


def accept_or_resample(fn) -> None:
    from course_lib.sampling import chi_square_gof
    from course_lib.serving.speculative import accept_or_resample as reference

    def run(tokens, q, p, seed):
        g = torch.Generator().manual_seed(seed)
        got = fn(list(tokens), torch.tensor(q, dtype=torch.float32), torch.tensor(p, dtype=torch.float32), g)
        following = torch.rand((), generator=g, dtype=torch.float64).item()
        return got, following

    # p(x) >= q(x) everywhere a token was drafted: all kept, then the bonus from p[k] (one-hot here).
    got, _ = run([1, 2], [[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]], [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], 0)
    expect_equal("p(x) >= q(x) for both guesses: both kept, then the bonus token from p[k]", got, [1, 2, 0],
                 hint="keep x_i while u[i] < p[i, x_i] / q[i, x_i]; all kept: draw from p[k]")
    got, _ = run([0, 1], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], [[0.0, 0.2, 0.8], [0.3, 0.3, 0.4], [0.2, 0.3, 0.5]], 1)
    expect_equal("p(x_0) = 0: x_0 is always rejected, and the residual max(0, p - q) of row 0 is p[0] here",
                 [len(got), got[0] in (1, 2)], [1, True],
                 hint="at the first rejection stop; the final token comes from (p[i] - q[i]).clamp_min(0)")
    # A seed where x = 2 is rejected: u[0] >= 0.2.
    seed = next(s for s in range(100) if _uniforms(s, 1)[0] >= 0.2)
    got, _ = run([2], [[0.2, 0.3, 0.5]], [[0.0, 0.9, 0.1], [1.0, 0.0, 0.0]], seed)
    expect_equal(f"seed {seed}: u[0] >= p/q = 0.2, so 2 is rejected and the residual picks 1", got, [1],
                 hint="resample from (p[i] - q[i]).clamp_min(0), which is zero wherever q >= p")
    for tokens, q, p in (([0, 1, 0], [[0.6, 0.4], [0.3, 0.7], [0.5, 0.5]], [[0.2, 0.8], [0.9, 0.1], [0.4, 0.6], [0.5, 0.5]]),
                         ([2], [[0.1, 0.1, 0.8]], [[0.7, 0.2, 0.1], [0.3, 0.3, 0.4]])):
        for seed in range(6):
            g = torch.Generator().manual_seed(seed)
            following = _uniforms(seed, len(tokens) + 2)[-1]
            got, after = run(tokens, q, p, seed)
            expect_equal(f"{len(tokens)} guesses, seed {seed}: k uniforms in one call, then one for the final token "
                         "(the generator's next draw is the (k + 2)-th)", after, following,
                         hint="torch.rand(k, generator=generator, dtype=torch.float64) first, all k even after a "
                              "rejection; then exactly one more uniform")
    rng = random.Random(5)
    for case in range(30):
        V, k = rng.randint(2, 7), rng.randint(1, 4)
        q = [_dist(rng, V, zeros=rng.randint(0, V - 1)) for _ in range(k)]
        p = [_dist(rng, V, zeros=rng.randint(0, V - 1)) for _ in range(k + 1)]
        tokens = [rng.choice([t for t in range(V) if q[i][t] > 0]) for i in range(k)]
        seed = rng.randrange(10**6)
        expected = reference(tokens, torch.tensor(q), torch.tensor(p), torch.Generator().manual_seed(seed)).tokens
        expect_equal(f"random round {case} (V = {V}, k = {k}, seed {seed}): the same tokens as the course's "
                     "accept_or_resample", run(tokens, q, p, seed)[0], expected,
                     hint="compare u[i] < p/q in float64; resample from max(0, p - q) by inverse CDF "
                          "(sample_from_probs)")
    got, _ = run([1], [[0.5, 0.5]], [[0.5, 0.5], [0.5, 0.5]], 3)
    expect_equal("returns a list of Python ints", [type(got).__name__] + [type(t).__name__ for t in got],
                 ["list"] + ["int"] * len(got))
    expect_raises("a drafted token with q(x) = 0 raises ValueError (the first guess)",
                  lambda: fn([1], torch.tensor([[1.0, 0.0]]), torch.tensor([[0.5, 0.5], [0.5, 0.5]]),
                             torch.Generator().manual_seed(0)), ValueError,
                  hint="the draft could not have drawn a token it gave probability 0")
    expect_raises("a drafted token with q(x) = 0 raises ValueError (the second guess, after a first that is fine)",
                  lambda: fn([0, 2], torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]]),
                             torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [0.1, 0.1, 0.8]]),
                             torch.Generator().manual_seed(0)), ValueError,
                  hint="check q(x_i) for every guess, not only the first")
    for seed in range(3):
        tokens, q, p = float32_ratio_round(seed)
        expected = reference(tokens, torch.tensor(q), torch.tensor(p), torch.Generator().manual_seed(seed)).tokens
        expect_equal(f"seed {seed}: u[0] lies within float32 rounding of p/q, so p / q must be divided in float64",
                     run(tokens, q, p, seed)[0], expected,
                     hint="gather p[i, x_i] and q[i, x_i], convert them with .double(), then divide")
    # The distribution: a poor draft, 3,000 rounds; the first token out must follow p[0].
    p = torch.tensor([[0.05, 0.10, 0.50, 0.25, 0.10], [0.30, 0.30, 0.10, 0.20, 0.10], [0.1, 0.2, 0.3, 0.2, 0.2]])
    q = torch.tensor([[0.40, 0.30, 0.10, 0.10, 0.10], [0.10, 0.10, 0.10, 0.10, 0.60]])
    from course_lib.sampling import sample_from_probs

    g = torch.Generator().manual_seed(11)
    firsts, seconds = [], []
    for _ in range(3000):
        guesses = [int(sample_from_probs(q[i], g)) for i in range(2)]
        out = fn(guesses, q.clone(), p.clone(), g)
        firsts.append(out[0])
        if len(out) > 1:
            seconds.append(out[1])
    for label, draws, row in (("the first token", firsts, p[0]), ("the second token (when there is one)", seconds, p[1])):
        counts = torch.bincount(torch.tensor(draws), minlength=5).tolist()
        test = chi_square_gof(counts, row.tolist())
        expect_equal(f"3,000 rounds with a poor draft: {label} follows the target p (chi-square p-value > 0.001)",
                     test.p_value > 1e-3, True,
                     hint="accept with probability min(1, p/q); on rejection resample from max(0, p - q), not from "
                          "p or q; bonus from p[k]")


# -- exercise 6: int8 ------------------------------------------------------------------------------
def stored_scale_row() -> torch.Tensor:
    """A float64 row (1, 2) whose second value rounds one way when divided by the float32 scale
    that is stored and the other way when divided by the float64 scale before it is stored."""
    import numpy as np

    exact = 1.0 / 127  # amax 1.0
    stored = float(np.float32(exact))
    # A smaller stored scale pushes w / stored above 10.5 (-> 11): nudge w / exact just below (-> 10).
    nudge = -1 if stored < exact else 1
    return torch.tensor([[1.0, 10.5 * exact * (1 + nudge * 1e-12)]], dtype=torch.float64)


def quantize_per_channel(fn, dequantize_fn) -> None:
    from course_lib.serving.quantize import quantize_per_channel as reference

    w = torch.tensor([[0.5, -1.27, 0.0], [0.0, 0.0, 0.0]])
    q, scale = fn(w.clone())
    expect_equal("q is an int8 tensor (out, in); scale a float32 tensor (out,)",
                 [str(q.dtype), tuple(q.shape), str(scale.dtype), tuple(scale.shape)],
                 ["torch.int8", (2, 3), "torch.float32", (2,)])
    expect_equal("the worked example: q", q.tolist(), [[50, -127, 0], [0, 0, 0]],
                 hint="scale_r = max|W_r| / 127 per row; q = round(W / scale)")
    expect_close("the worked example: scale per row (a zero row gets 1.0)", scale.tolist(), [0.01, 1.0], atol=1e-9,
                 hint="a row of zeros gets scale 1.0, not 0 (which would divide by zero)")
    ties = torch.tensor([[127.0, 2.5, 3.5, -2.5, 0.5, -0.5, 1.5]], dtype=torch.float64)
    expect_equal("rounding is half to even: 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, 0.5 -> 0 (scale exactly 1)",
                 fn(ties.clone())[0].tolist(), [[127, 2, 4, -2, 0, 0, 2]],
                 hint="torch.round rounds half to even; .to(torch.int8) alone truncates toward zero")
    expect_equal("never truncates: 126.9 -> 127, -3.7 -> -4 (scale exactly 1)",
                 fn(torch.tensor([[127.0, 126.9, -3.7, 0.6]], dtype=torch.float64))[0].tolist(), [[127, 127, -4, 1]])
    row = stored_scale_row()
    expect_equal("w is divided by the stored float32 scale: a value at x.5 in float64 lands as the stored scale says",
                 fn(row.clone())[0].tolist(), reference(row)[0].tolist(),
                 hint="store scale as float32 first, then divide by scale.double(), not by amax / 127")
    mixed = torch.tensor([[100.0, 1.0, -50.0], [0.012, -0.02, 0.005]])
    q, scale = fn(mixed.clone())
    expect_close("one scale per output row: a large row does not crush a small one", scale.tolist(),
                 [100 / 127, 0.02 / 127], rtol=1e-6, atol=0,
                 hint="amax over dim=1 (each row), not over the whole tensor")
    expect_equal("... so the small row keeps its precision", q[1].tolist(), [76, -127, 32])
    tall = torch.tensor([[1.0, 2.0], [4.0, -8.0], [0.5, 0.25]])
    expect_close("a (3, 2) matrix: three scales, one per row (not per column)", fn(tall.clone())[1].tolist(),
                 [2 / 127, 8 / 127, 0.5 / 127], rtol=1e-6, atol=0)
    q, scale = fn(tall.clone())
    expect_close("dequantize(q, scale) = q * scale, row by row", dequantize_fn(q, scale).tolist(),
                 (q.float() * scale[:, None]).tolist(), atol=1e-7)
    expect_equal("dequantize returns float32", str(dequantize_fn(q, scale).dtype), "torch.float32")
    g = torch.Generator().manual_seed(0)
    for case in range(6):
        w = torch.randn(16, 24, generator=g) * (0.01 + case)
        w[case % 16] = 0.0 if case == 3 else w[case % 16]
        q, scale = fn(w.clone())
        ref_q, ref_scale = reference(w)
        expect_equal(f"random matrix {case}: q equals the course's int8 quantizer", q.tolist(), ref_q.tolist(),
                     hint="divide the float64 weight by the stored float32 scale (as float64), then torch.round")
        expect_close(f"random matrix {case}: scale equals the course's", scale.tolist(), ref_scale.tolist(), atol=0,
                     rtol=1e-7)
        error = (dequantize_fn(q, scale) - w).abs().amax(dim=1)
        expect_equal(f"random matrix {case}: every error is at most scale / 2 (plus float rounding)",
                     bool((error <= scale / 2 * (1 + 1e-5) + 1e-12).all()), True)
        expect_equal(f"random matrix {case}: every q lies in -127..127", [int(q.min()) >= -127, int(q.max()) <= 127],
                     [True, True])
    for label, bad in (("a 1-D tensor", torch.ones(4)), ("a 3-D tensor", torch.ones(2, 2, 2)),
                       ("a NaN", torch.tensor([[1.0, float("nan")]])), ("an infinity", torch.tensor([[float("inf"), 1.0]]))):
        expect_raises(f"{label} raises ValueError", lambda: fn(bad), ValueError)


# Progressive hints, gentlest first; the last one all but gives the method (see checks/hints.py).
HINTS = {
    "stream_metrics": [
        "Everything is a difference of two times on the same clock; draw the timeline on paper first.",
        "TTFT ends at the first chunk (or at end when there is none); ITL is zip(chunk_times, chunk_times[1:]).",
        "TPOT = (latency - ttft) / (output_tokens - 1) if output_tokens > 1 else None; check the times with "
        "times = [start, *chunk_times, end] and any(b < a for a, b in zip(times, times[1:])).",
    ],
    "decode_roofline": [
        "Convert units first: bandwidth = bandwidth_gb_s * 1e9 bytes/s, peak = peak_tflops * 1e12 FLOP/s.",
        "Bytes: the weights once plus batch x KV. FLOPs: 2 x params x batch. Time: the larger of bytes/bandwidth "
        "and FLOPs/peak.",
        "intensity = flops / bytes; ridge = peak / bandwidth; tokens_per_s = batch / step_s; bound is 'memory' "
        "when bytes/bandwidth >= flops/peak.",
    ],
    "schedule_step": [
        "Write three loops in order: decodes over running, prefills over running, admission from waiting; keep "
        "one `budget` variable shared by all three.",
        "A decode needs a block when seq['blocks'] < ceil(seq['tokens'] / block_size); preempt with "
        "running.pop() and waiting.insert(0, victim) until a block is free, and stop if the victim was seq.",
        "Admission: `while waiting and budget > 0 and len(running) < max_num_seqs:` look at "
        "waiting[0]; if ceil(tokens / block_size) > free_blocks, break; else move it and add [id, min(tokens, "
        "budget)].",
    ],
    "block_pool": [
        "Keep: a deque free list, a list of reference counts, a dict key -> block, and for each cached block "
        "its key and its prefix (the tokens from position 0 to its end).",
        "Compute the chained keys of every full block first; look up only the first (len - 1) // block_size, "
        "stopping at the first key that is missing or whose block's prefix differs.",
        "Check capacity before changing anything: new blocks + hits with count 0 <= len(free list). Then take "
        "hits off the free list, popleft new blocks (evicting their old keys), register the full blocks whose "
        "keys are new; free walks reversed(table) and appends blocks that reach count 0.",
    ],
    "accept_or_resample": [
        "Gather p[i, x_i] and q[i, x_i] for the k guesses first, and draw all k uniforms in one torch.rand call.",
        "Count how many guesses survive from the left: stop at the first i with u[i] >= p/q (float64).",
        "final = p[k] if all survived else (p[i] - q[i]).clamp_min(0) (float64); then "
        "tokens[:i] + [int(sample_from_probs(final, generator))].",
    ],
    "quantize_per_channel": [
        "Work in float64: w = weight.double(); amax = w.abs().amax(dim=1) gives one value per output row.",
        "scale = torch.where(amax > 0, amax / 127, 1.0) stored as float32; then divide w by scale.double()[:, None].",
        "q = torch.round(...).clamp(-127, 127).to(torch.int8); dequantize is q.float() * scale[:, None]. Check "
        "dim() == 2 and torch.isfinite(weight).all() first.",
    ],
}
