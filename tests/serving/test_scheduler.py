"""Scheduler: every request gets exactly its own tokens, nothing leaks, nobody starves.

The simulations drive the scheduler the way the engine will, with a fake model over a fake KV
pool. Each slot holds a 64-bit chain hash of the tokens up to its position (what real KV
depends on); a pass asserts that every position it attends to holds the right hash (so block
tables, slot reservation, prefix hits and recompute after preemption are all checked) and
samples a token from (request, that hash). A request's reference stream therefore is what it
would produce running alone, computed without any scheduler.
"""
from __future__ import annotations

import random

import pytest

from course_lib.kv_memory.paging import blocks_needed
from course_lib.serving import BlockManager, Scheduler, Sequence, SequenceStatus

EOS = 0
MASK = (1 << 64) - 1


def _mix(h: int, x: int) -> int:
    return ((h ^ x) * 0x100000001B3 + 0x9E3779B97F4A7C15) & MASK


def _chain(tokens, h: int = 0x12345) -> list[int]:
    """KV 'contents' of positions 0..len-1: each depends on every token up to it."""
    out = []
    for t in tokens:
        h = _mix(h, t + 1)
        out.append(h)
    return out


def _sample(request_id: int, context: int) -> int:
    h = _mix(context, request_id + 0xABCDEF)
    return EOS if (h >> 40) % 80 == 0 else 1 + (h >> 13) % 997


def reference_stream(request_id: int, prompt: list[int], max_tokens: int) -> list[int]:
    """What the request samples alone: max_tokens tokens, or up to and including EOS."""
    h = _chain(prompt)[-1]
    out = []
    while len(out) < max_tokens:
        t = _sample(request_id, h)
        out.append(t)
        if t == EOS:
            break
        h = _mix(h, t + 1)
    return out


class FakeEngine:
    """Runs the scheduler's plans over a fake KV pool and checks every invariant each step."""

    def __init__(self, sched: Scheduler):
        self.sched, self.bm = sched, sched.block_manager
        self.kv: dict[int, int] = {}
        self.step = 0
        self.first_admissions: list[int] = []   # arrivals, in the order requests first ran
        self.finished_at: dict[int, int] = {}
        self.computed_prompt_tokens = 0
        self.num_preemptions = self.num_chunks = 0
        self.seqs: dict[int, Sequence] = {}     # every request _run added, by id

    def run_step(self):
        sched, bm = self.sched, self.bm
        decoding = [s for s in sched.running if not s.is_prefill]
        was_running = {id(s) for s in sched.running}
        out = sched.schedule()
        entries = out.scheduled

        # --- limits and rules ---
        assert out.num_batched_tokens <= sched.max_batched_tokens
        assert len(entries) <= sched.max_num_seqs and sched.num_running <= sched.max_num_seqs
        seqs = [e.seq for e in entries]
        assert len({id(s) for s in seqs}) == len(seqs), "a sequence scheduled twice in one pass"
        for seq in out.preempted:
            assert seq.status is SequenceStatus.WAITING and seq.num_computed_tokens == 0
            assert seq.block_table == []  # its blocks went back with it
            assert all(s is not seq for s in seqs)
        scheduled_ids = {id(s): e for s, e in zip(seqs, entries)}
        for seq in decoding:   # decodes are never skipped: scheduled for 1 token, or preempted
            if seq.status is SequenceStatus.RUNNING:
                assert scheduled_ids[id(seq)].num_new_tokens == 1
            else:
                assert seq in out.preempted
        arrivals = [s.arrival for s in sched.running]
        assert arrivals == sorted(arrivals)
        if sched.running and sched.waiting:
            assert arrivals[-1] < min(s.arrival for s in sched.waiting), "FCFS order broken"
        for seq in sched.running:
            if id(seq) not in was_running and seq.num_preemptions == 0:
                self.first_admissions.append(seq.arrival)
        self.num_preemptions += len(out.preempted)

        # --- the fake model ---
        sampled = {}
        for e in entries:
            seq, rid = e.seq, e.seq.request_id
            assert seq.status is SequenceStatus.RUNNING and e.num_new_tokens >= 1
            assert e.start == seq.num_computed_tokens and bm.num_tokens(rid) == seq.num_tokens
            assert seq.block_table == bm.block_table(rid)  # the request carries its live table
            if seq.is_prefill and sched.chunk_size is not None:
                assert e.num_new_tokens <= sched.chunk_size
            if e.start < seq.num_prompt_tokens:
                self.computed_prompt_tokens += min(e.stop, seq.num_prompt_tokens) - e.start
            self.num_chunks += not e.samples
            truth = _chain(seq.token_ids[:e.stop])
            slots = bm.slot_mapping(rid, 0, e.stop)
            assert [self.kv.get(s) for s in slots[:e.start]] == truth[:e.start], f"{rid} reads wrong KV"
            for s, h in zip(slots[e.start:], truth[e.start:]):
                self.kv[s] = h
            if e.samples:
                sampled[rid] = _sample(rid, truth[-1])
        for seq in sched.update(out, sampled, eos_ids={EOS}):
            self.finished_at[seq.request_id] = self.step
        self.step += 1
        return out


def _run(sched: Scheduler, requests, *, arrive_at=None, abort_at=None, max_steps=100_000) -> FakeEngine:
    """requests: [(rid, prompt, max_tokens)]; arrive_at/abort_at: {step: [rid, ...]}."""
    engine = FakeEngine(sched)
    arrive_at = arrive_at if arrive_at is not None else {0: [r[0] for r in requests]}
    abort_at = abort_at or {}
    by_id = {r[0]: r for r in requests}
    pending = sum(len(v) for v in arrive_at.values())
    while pending or sched.has_unfinished():
        for rid in arrive_at.get(engine.step, []):
            _, prompt, max_tokens = by_id[rid]
            engine.seqs[rid] = Sequence(rid, prompt, max_tokens)
            sched.add(engine.seqs[rid])
            pending -= 1
        for rid in abort_at.get(engine.step, []):
            if rid in sched:
                sched.abort(rid)
                engine.finished_at[rid] = engine.step
        engine.run_step()
        assert engine.step < max_steps, "the scheduler stopped making progress"
    return engine


# --- random workloads --------------------------------------------------------------------------

def _random_case(rng: random.Random):
    block_size = rng.choice([1, 2, 4, 8, 16])
    systems = [[rng.randrange(1000) for _ in range(rng.randint(1, 120))] for _ in range(2)]
    requests = []
    for rid in range(rng.randint(3, 24)):
        n = rng.randint(1, 200)
        if rng.random() < 0.5:   # a shared system prompt plus a question
            prompt = (rng.choice(systems) + [rng.randrange(1000) for _ in range(n)])[:200]
        else:
            prompt = [rng.randrange(1000) for _ in range(n)]
        requests.append((rid, prompt, rng.randint(1, 50)))
    smallest = max(blocks_needed(len(p) + m - 1, block_size) for _, p, m in requests)
    num_blocks = smallest + rng.randint(0, 2 * smallest)  # tight pools force preemption
    max_num_seqs = rng.randint(1, 16)
    sched = Scheduler(BlockManager(num_blocks, block_size, prefix_caching=rng.random() < 0.7),
                      max_num_seqs=max_num_seqs,
                      max_batched_tokens=rng.randint(max_num_seqs, max_num_seqs + 150),
                      chunk_size=rng.choice([None, None, rng.randint(1, 64)]))
    arrive_at: dict[int, list[int]] = {}
    for rid, *_ in requests:   # some at once, some over time
        arrive_at.setdefault(rng.choice([0, 0, rng.randint(0, 200)]), []).append(rid)
    abort_at = {}
    if rng.random() < 0.3:
        for rid in rng.sample([r[0] for r in requests], k=rng.randint(1, 3)):
            abort_at.setdefault(rng.randint(0, 300), []).append(rid)
    return sched, requests, arrive_at, abort_at


@pytest.mark.parametrize("seed", range(100))
def test_random_workloads_each_request_gets_its_own_stream(seed):
    rng = random.Random(seed)
    sched, requests, arrive_at, abort_at = _random_case(rng)
    bm = sched.block_manager
    engine = _run(sched, requests, arrive_at=arrive_at, abort_at=abort_at)
    seqs = engine.seqs

    arrival_step = {rid: step for step, rids in arrive_at.items() for rid in rids}
    aborted = {rid for rids in abort_at.values() for rid in rids}
    for rid, prompt, max_tokens in requests:
        seq = seqs[rid]
        expected = reference_stream(rid, prompt, max_tokens)
        assert seq.status is SequenceStatus.FINISHED and rid not in bm
        if seq.finish_reason == "abort":
            assert rid in aborted and seq.output_token_ids == expected[:len(seq.output_token_ids)]
            continue
        assert seq.output_token_ids == expected, f"request {rid} lost or repeated tokens"
        assert seq.finish_reason == ("stop" if expected[-1] == EOS else "length")
        # Liveness: each step the oldest live request computes >= 1 token and is never
        # preempted, so a request finishes within the work of everything that arrived before it.
        older_work = sum(len(p) + m for r, p, m in requests if seqs[r].arrival <= seq.arrival)
        assert engine.finished_at[rid] - arrival_step[rid] + 1 <= older_work
    assert engine.first_admissions == sorted(engine.first_admissions), "admission not FCFS"
    assert bm.num_free_blocks == bm.num_blocks and bm.stats().num_used_blocks == 0, "blocks leaked"
    assert sched.num_waiting == sched.num_running == 0


def test_random_workloads_exercise_preemption_and_chunking():
    """The random cases above are only worth something if they hit the hard paths."""
    preemptions = chunks = prefix_hits = 0
    for seed in range(100):
        sched, requests, arrive_at, abort_at = _random_case(random.Random(seed))
        engine = _run(sched, requests, arrive_at=arrive_at, abort_at=abort_at)
        preemptions += engine.num_preemptions > 0
        chunks += engine.num_chunks > 0
        prefix_hits += sched.block_manager.stats().prefix_hits > 0
    assert preemptions >= 30 and chunks >= 50 and prefix_hits >= 30


def test_batched_equals_one_by_one():
    """The reference stream is what a request produces running alone through the scheduler."""
    rng = random.Random(7)
    requests = [(rid, [rng.randrange(1000) for _ in range(rng.randint(1, 60))], rng.randint(1, 30))
                for rid in range(6)]
    together = _run(Scheduler(BlockManager(24, 4), max_num_seqs=4, max_batched_tokens=16), requests)
    assert together.num_preemptions > 0
    for rid, prompt, max_tokens in requests:
        alone = _run(Scheduler(BlockManager(24, 4)), [(rid, prompt, max_tokens)])
        assert alone.num_preemptions == 0
        stream = alone.seqs[rid].output_token_ids
        assert together.seqs[rid].output_token_ids == stream == reference_stream(rid, prompt, max_tokens)


# --- the rules, one at a time ------------------------------------------------------------------

def _table(out):
    return [(e.seq.request_id, e.start, e.num_new_tokens, e.samples) for e in out.scheduled]


def test_chunked_prefill_splits_a_long_prompt_and_samples_only_at_its_end():
    sched = Scheduler(BlockManager(8, 4), max_num_seqs=2, max_batched_tokens=4)
    sched.add(Sequence("a", list(range(1, 11)), max_tokens=2))
    starts = []
    for _ in range(3):
        out = sched.schedule()
        starts += _table(out)
        sched.update(out, {"a": 99} if out.scheduled[0].samples else {})
    assert starts == [("a", 0, 4, False), ("a", 4, 4, False), ("a", 8, 2, True)]
    capped = Scheduler(BlockManager(8, 4), max_batched_tokens=2048, chunk_size=3)
    capped.add(Sequence("b", list(range(1, 8)), max_tokens=1))
    assert _table(capped.schedule()) == [("b", 0, 3, False)]


def test_a_prompt_is_offered_to_the_prefix_cache_as_soon_as_its_prefill_is_written():
    sched = Scheduler(BlockManager(64, 4), max_num_seqs=4, max_batched_tokens=16)
    sched.add(Sequence("b", list(range(1, 20)), max_tokens=1))
    sched.update(sched.schedule(), {})                    # b's first 16 tokens are written
    sched.add(Sequence("c", list(range(1, 20)), max_tokens=1))
    out = sched.schedule()                                # b has not sampled yet, and c still hits
    assert _table(out) == [("b", 16, 3, True), ("c", 16, 3, True)]


def test_decodes_come_first_and_prefills_go_oldest_first():
    # Prefix caching off: b and c share a prompt, and this test is about order, not reuse.
    sched = Scheduler(BlockManager(64, 4, prefix_caching=False), max_num_seqs=4, max_batched_tokens=8)
    sched.add(Sequence("a", [1, 2], max_tokens=5))
    sched.update(sched.schedule(), {"a": 7})             # a is decoding now
    sched.add(Sequence("b", list(range(1, 20)), max_tokens=1))
    sched.add(Sequence("c", list(range(1, 20)), max_tokens=1))
    out = sched.schedule()
    assert _table(out) == [("a", 2, 1, True), ("b", 0, 7, False)]   # c waits for budget
    sched.update(out, {"a": 8})
    out = sched.schedule()
    assert _table(out) == [("a", 3, 1, True), ("b", 7, 7, False)]   # no budget left for c
    sched.update(out, {"a": 9})
    assert _table(sched.schedule()) == [("a", 4, 1, True), ("b", 14, 5, True), ("c", 0, 2, False)]

    capped = Scheduler(BlockManager(64, 4), max_num_seqs=4, max_batched_tokens=5, chunk_size=3)
    capped.add(Sequence("old", list(range(1, 20)), max_tokens=1))
    capped.add(Sequence("new", list(range(1, 20)), max_tokens=1))
    capped.update(capped.schedule(), {})                          # old 0..2, new 0..1
    assert _table(capped.schedule()) == [("old", 3, 3, False), ("new", 2, 2, False)]


def test_admission_is_fcfs_and_a_request_that_does_not_fit_blocks_later_ones():
    bm = BlockManager(6, 4)
    sched = Scheduler(bm, max_num_seqs=8, max_batched_tokens=64)
    sched.add(Sequence("big-running", list(range(1, 13)), max_tokens=4))   # 3 blocks
    sched.update(sched.schedule(), {"big-running": 5})
    sched.add(Sequence("too-big-now", list(range(100, 116)), max_tokens=1))  # 4 blocks: waits
    sched.add(Sequence("small", [1, 2], max_tokens=1))                    # would fit, must not pass
    out = sched.schedule()
    assert [e.seq.request_id for e in out.scheduled] == ["big-running"]
    assert [s.request_id for s in sched.waiting] == ["too-big-now", "small"]
    while "big-running" in sched:
        out = sched.schedule()
        sched.update(out, {e.seq.request_id: 5 for e in out.scheduled if e.samples})
    assert [e.seq.request_id for e in out.scheduled] == ["big-running"]
    assert [e.seq.request_id for e in sched.schedule().scheduled] == ["too-big-now", "small"]


def test_preemption_takes_the_newest_recomputes_it_and_loses_nothing():
    bm = BlockManager(4, 4)   # 16 slots: "old" alone needs 4 + 12 - 1 = 15
    sched = Scheduler(bm, max_num_seqs=2, max_batched_tokens=16)
    old, new = Sequence(1, [1, 2, 3, 4], max_tokens=12), Sequence(2, [5, 6, 7, 8], max_tokens=10)
    engine = FakeEngine(sched)
    sched.add(old)
    sched.add(new)
    while not (out := engine.run_step()).preempted:
        assert engine.step < 10
    assert out.preempted == [new] and list(sched.waiting) == [new] and sched.running == [old]
    assert new.output_token_ids and new.num_computed_tokens == 0 and new.num_preemptions == 1
    assert 2 not in bm
    while sched.has_unfinished():
        engine.run_step()
    for seq in (old, new):
        assert seq.output_token_ids == reference_stream(seq.request_id, seq.prompt_token_ids, seq.max_tokens)
    assert old.num_preemptions == 0 and bm.num_free_blocks == 4
    assert old.block_table == new.block_table == []  # finished: nothing held


def test_a_lone_sequence_that_cannot_grow_is_preempted_and_resumes_later():
    bm = BlockManager(3, 2)
    sched = Scheduler(bm, max_num_seqs=2, max_batched_tokens=8)
    sched.add(a := Sequence("a", [1, 2], max_tokens=3))
    sched.update(sched.schedule(), {"a": 3})
    bm.allocate("squatter", [9, 9, 9, 9])   # someone outside the scheduler took the other blocks
    out = sched.schedule()
    assert out.is_empty and [s.request_id for s in out.preempted] == ["a"] and sched.has_unfinished()
    assert sched.schedule().is_empty        # it cannot come back while the pool is full
    bm.free("squatter")
    out = sched.schedule()                  # recompute: prompt + kept output, after its own cached block
    assert _table(out) == [("a", 2, 1, True)]
    sched.update(out, {"a": 4})
    out = sched.schedule()
    sched.update(out, {"a": 5})
    assert a.output_token_ids == [3, 4, 5] and a.finish_reason == "length" and bm.num_free_blocks == 3


def test_abort_frees_blocks_at_once_wherever_the_request_is():
    bm = BlockManager(16, 4)
    sched = Scheduler(bm, max_num_seqs=1, max_batched_tokens=8)
    for rid in ("running", "waiting", "mid-step"):
        sched.add(Sequence(rid, list(range(1, 11)), max_tokens=5))
    out = sched.schedule()                      # "running" takes a chunk and 3 blocks
    assert bm.num_used_blocks == 3
    assert sched.abort("running").finish_reason == "abort" and bm.num_used_blocks == 0
    assert sched.update(out, {}) == []          # a pass over an aborted request is dropped
    assert sched.abort("waiting").status is SequenceStatus.FINISHED
    assert [s.request_id for s in sched.waiting] == ["mid-step"]
    out = sched.schedule()
    sched.abort("mid-step")
    sched.update(out, {})
    assert not sched.has_unfinished() and bm.num_free_blocks == 16
    with pytest.raises(ValueError, match="'mid-step'"):
        sched.abort("mid-step")


def test_finish_ends_a_request_for_a_stop_string():
    sched = Scheduler(BlockManager(4, 4))
    sched.add(Sequence("a", [1, 2, 3], max_tokens=9))
    sched.update(sched.schedule(), {"a": 4})
    assert sched.finish("a").finish_reason == "stop" and sched.block_manager.num_free_blocks == 4


def test_prefix_caching_skips_a_shared_system_prompt():
    system = list(range(1, 33))   # 8 full blocks every chat opens with
    requests = [(rid, system + [100 + rid, 200 + rid], 3) for rid in range(5)]

    def prompt_tokens_computed(prefix_caching: bool) -> FakeEngine:
        sched = Scheduler(BlockManager(64, 4, prefix_caching=prefix_caching))
        return _run(sched, requests, arrive_at={2 * rid: [rid] for rid in range(5)})

    cached, uncached = prompt_tokens_computed(True), prompt_tokens_computed(False)
    assert uncached.computed_prompt_tokens == 5 * 34
    assert cached.computed_prompt_tokens == 34 + 4 * 2          # later requests prefill 2 tokens
    assert [cached.seqs[rid].num_cached_tokens for rid in range(5)] == [0, 32, 32, 32, 32]
    for rid, prompt, max_tokens in requests:                    # and read the right KV doing so
        assert cached.seqs[rid].output_token_ids == reference_stream(rid, prompt, max_tokens)


@pytest.mark.parametrize("make, match", [
    (lambda: Sequence("r", [], 4), "empty prompt"),
    (lambda: Sequence("r", [1, -2], 4), r"prompt_token_ids\[1\]"),
    (lambda: Sequence("r", [1, 2], 0), "max_tokens must be a positive int"),
    (lambda: Scheduler(BlockManager(4, 4), max_num_seqs=8, max_batched_tokens=4), "raise max_batched_tokens"),
    (lambda: Scheduler(BlockManager(4, 4), chunk_size=0), "chunk_size"),
])
def test_bad_arguments_are_rejected(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_impossible_and_duplicate_requests_are_rejected_at_add():
    sched = Scheduler(BlockManager(4, 4))                  # 16 slots
    with pytest.raises(ValueError, match="needs up to 5 blocks.*pool has 4"):
        sched.add(Sequence("long", list(range(1, 18)), max_tokens=1))
    with pytest.raises(ValueError, match="lower max_tokens"):
        sched.add(Sequence("greedy", [1, 2], max_tokens=16))
    sched.add(Sequence("fits", [1, 2], max_tokens=15))     # 2 + 15 - 1 = 16 slots: exactly the pool
    with pytest.raises(ValueError, match="'fits' is already waiting or running"):
        sched.add(Sequence("fits", [3], max_tokens=1))
    with pytest.raises(ValueError, match="unknown request id 'nope'"):
        sched.abort("nope")
    assert sched.num_waiting == 1 and not sched.waiting[0].output_token_ids


def test_update_rejects_a_pass_the_engine_got_wrong_and_changes_nothing():
    sched = Scheduler(BlockManager(8, 4), max_num_seqs=2, max_batched_tokens=4)
    sched.add(Sequence("chunked", list(range(1, 9)), max_tokens=2))
    sched.add(Sequence("x", [1], max_tokens=2))
    out = sched.schedule()
    with pytest.raises(ValueError, match="'chunked' computed a chunk that does not end"):
        sched.update(out, {"chunked": 5})
    assert sched.running[0].num_computed_tokens == 0
    sched.update(out, {})
    with pytest.raises(ValueError, match="call update\\(\\) once per schedule"):
        sched.update(out, {})
    out = sched.schedule()
    with pytest.raises(ValueError, match="'chunked' reached its last token .* got None"):
        sched.update(out, {})
