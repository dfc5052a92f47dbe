"""BlockManager: no leaks, exact prefix sharing, verification on collisions, LRU eviction.

The randomized tests drive the manager the way an engine would and keep a fake KV store: each
slot holds the token prefix its KV would have been computed from. A sequence reading a slot
whose prefix is not its own would be reading wrong KV, whatever the cause (a bad hit, a shared
block handed out again, a cached block overwritten).
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

import course_lib.serving.block_manager as block_manager_module
from course_lib.serving import Allocation, BlockManager, NoFreeBlocksError

BS = 4
SYSTEM = list(range(100, 108))  # two full blocks


def _prefill(bm: BlockManager, kv: dict, seq_id, tokens: list[int], num_cached: int) -> None:
    """What the engine's prefill writes: every prompt position not served from the cache."""
    for pos, slot in enumerate(bm.slot_mapping(seq_id, num_cached), start=num_cached):
        kv[slot] = tuple(tokens[:pos + 1])


def _check_kv(bm: BlockManager, kv: dict, seq_id, tokens: list[int]) -> None:
    for pos, slot in enumerate(bm.slot_mapping(seq_id)):
        assert kv.get(slot) == tuple(tokens[:pos + 1]), f"{seq_id!r} position {pos} reads foreign KV"


# --- randomized operation sequences against a model ----------------------------------------

class BlockManagerMachine(RuleBasedStateMachine):
    """Allocate (prompts drawn from a few shared prefixes), append, free; check against a model."""

    def __init__(self):
        super().__init__()
        self.bm = BlockManager(num_blocks=12, block_size=BS)
        self.tokens: dict[int, list[int]] = {}  # the model: live sequence -> its tokens
        self.kv: dict[int, tuple[int, ...]] = {}
        self.next_id = 0

    # Prompts built from a few block-sized words repeat blocks across requests, at the root and
    # deeper, in and out of context: hits, near misses and (with a weak hash) collisions.
    @rule(words=st.lists(st.sampled_from([SYSTEM[:BS], SYSTEM[BS:], [0, 0, 0, 0]]), max_size=3),
          tail=st.lists(st.integers(0, 3), max_size=2 * BS))
    def allocate(self, words, tail):
        tokens = [t for word in words for t in word] + tail or [0]
        seq_id, self.next_id = self.next_id, self.next_id + 1
        expected_ok = self.bm.can_allocate(tokens)
        before = self.bm.stats()
        try:
            alloc = self.bm.allocate(seq_id, tokens)
        except NoFreeBlocksError:
            assert not expected_ok and self.bm.stats() == before  # all or nothing
            return
        assert expected_ok
        assert len(alloc.block_table) == -(-len(tokens) // BS)
        assert alloc.num_cached_tokens % BS == 0 and alloc.num_cached_tokens <= len(tokens) - 1
        self.tokens[seq_id] = tokens
        _prefill(self.bm, self.kv, seq_id, tokens, alloc.num_cached_tokens)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), token=st.integers(0, 3))
    def append(self, data, token):
        seq_id = data.draw(st.sampled_from(sorted(self.tokens)))
        expected_ok = self.bm.can_append(seq_id)
        try:
            slot = self.bm.append_slot(seq_id, token)
        except NoFreeBlocksError:
            assert not expected_ok
            return
        assert expected_ok
        self.tokens[seq_id].append(token)
        self.kv[slot] = tuple(self.tokens[seq_id])  # the next decode step writes this token's KV

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free(self, data):
        seq_id = data.draw(st.sampled_from(sorted(self.tokens)))
        self.bm.free(seq_id)
        del self.tokens[seq_id]

    @invariant()
    def blocks_are_accounted_for(self):
        refs: dict[int, int] = {}
        for seq_id, tokens in self.tokens.items():
            table = self.bm.block_table(seq_id)
            assert len(table) == -(-len(tokens) // BS) and self.bm.num_tokens(seq_id) == len(tokens)
            for block_id in table:
                refs[block_id] = refs.get(block_id, 0) + 1
        assert all(self.bm.ref_count(b) == refs.get(b, 0) for b in range(self.bm.num_blocks))
        assert self.bm.num_free_blocks == self.bm.num_blocks - len(refs)

    @invariant()
    def every_sequence_reads_its_own_kv(self):
        for seq_id, tokens in self.tokens.items():
            _check_kv(self.bm, self.kv, seq_id, tokens)

    def teardown(self):
        for seq_id in list(self.tokens):
            self.bm.free(seq_id)
        assert self.bm.num_free_blocks == self.bm.num_blocks  # no leaks


_MACHINE_SETTINGS = settings(max_examples=60, stateful_step_count=30, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])


def test_random_operations_never_leak_or_share_wrong_kv():
    run_state_machine_as_test(BlockManagerMachine, settings=_MACHINE_SETTINGS)


def _tokens_only_hash(parent, tokens):
    """A hash blind to the prefix: equal tokens collide in any context, at any position."""
    return hash(tuple(tokens))


@pytest.mark.parametrize("colliding_hash", [lambda parent, tokens: 0, _tokens_only_hash],
                         ids=["constant", "tokens-only"])
def test_random_operations_stay_exact_when_hashes_collide(monkeypatch, colliding_hash):
    monkeypatch.setattr(block_manager_module, "block_hash", colliding_hash)
    run_state_machine_as_test(BlockManagerMachine, settings=_MACHINE_SETTINGS)


def test_random_operations_without_prefix_caching_never_share():
    class NoCaching(BlockManagerMachine):
        def __init__(self):
            super().__init__()
            self.bm = BlockManager(num_blocks=12, block_size=BS, prefix_caching=False)

        @invariant()
        def nothing_is_shared(self):
            assert all(self.bm.ref_count(b) <= 1 for b in range(self.bm.num_blocks))

    run_state_machine_as_test(NoCaching, settings=settings(_MACHINE_SETTINGS, max_examples=20))


# --- prefix hits ---------------------------------------------------------------------------

def _serve(bm: BlockManager, seq_id, tokens: list[int]) -> Allocation:
    """Allocate, then append the first sampled token (which publishes the prompt's full blocks)."""
    alloc = bm.allocate(seq_id, tokens)
    bm.append_slot(seq_id, 0)
    return alloc


def test_requests_sharing_a_system_prompt_hit_its_blocks():
    bm = BlockManager(num_blocks=16, block_size=BS)
    first = _serve(bm, "a", SYSTEM + [1, 2])
    assert first.num_cached_tokens == 0
    others = [_serve(bm, name, SYSTEM + [3, i]) for name, i in (("b", 4), ("c", 5))]
    for alloc in others:
        assert alloc.num_cached_tokens == len(SYSTEM)
        assert alloc.block_table[:2] == first.block_table[:2]
        assert alloc.block_table[2] not in first.block_table  # the last prompt block stays private
    assert [bm.ref_count(b) for b in first.block_table] == [3, 3, 1]
    stats = bm.stats()
    assert (stats.prefix_queries, stats.prefix_hits) == (30, 16)
    assert stats.hit_rate == pytest.approx(16 / 30)
    assert stats.num_cached_blocks == 2 and stats.num_used_blocks == 2 + 3


def test_at_least_one_prompt_token_is_left_to_prefill():
    bm = BlockManager(num_blocks=16, block_size=BS)
    _serve(bm, "a", SYSTEM)  # exactly two full blocks
    assert bm.allocate("same", SYSTEM).num_cached_tokens == BS  # not 8: the last token needs logits
    assert bm.allocate("longer", SYSTEM + [9]).num_cached_tokens == 2 * BS
    assert bm.allocate("one", [5]).num_cached_tokens == 0


def test_blocks_are_published_only_after_their_kv_is_computed():
    bm = BlockManager(num_blocks=16, block_size=BS)
    bm.allocate("a", SYSTEM + [1])
    assert bm.allocate("b", SYSTEM + [2]).num_cached_tokens == 0  # a is still prefilling
    bm.append_slot("a", 7)
    assert bm.allocate("c", SYSTEM + [3]).num_cached_tokens == 2 * BS


def test_decode_blocks_become_shareable_once_full_and_computed():
    bm = BlockManager(num_blocks=16, block_size=BS)
    bm.allocate("a", [1, 2, 3])
    for t in (4, 5, 6, 7, 8):  # fills block 1 with 5, 6, 7, 8; 8's successor publishes it
        bm.append_slot("a", t)
    bm.append_slot("a", 9)
    alloc = bm.allocate("b", [1, 2, 3, 4, 5, 6, 7, 8, 0])
    assert alloc.num_cached_tokens == 8 and alloc.block_table[:2] == bm.block_table("a")[:2]


def test_without_prefix_caching_nothing_is_shared_or_counted():
    bm = BlockManager(num_blocks=16, block_size=BS, prefix_caching=False)
    _serve(bm, "a", SYSTEM + [1])
    assert bm.allocate("b", SYSTEM + [1]).num_cached_tokens == 0
    assert bm.stats().prefix_queries == 0 and bm.stats().hit_rate == 0.0


# --- verification on collisions ------------------------------------------------------------

def test_forced_collision_with_other_tokens_is_a_miss(monkeypatch):
    monkeypatch.setattr(block_manager_module, "block_hash", lambda parent, tokens: 42)
    bm = BlockManager(num_blocks=16, block_size=BS)
    _serve(bm, "a", [1, 2, 3, 4, 9])
    assert bm.allocate("b", [5, 6, 7, 8, 9]).num_cached_tokens == 0  # same hash, other tokens
    assert bm.allocate("c", [1, 2, 3, 4, 9]).num_cached_tokens == BS  # a genuine match still hits


def test_forced_collision_with_same_tokens_in_another_context_is_a_miss(monkeypatch):
    monkeypatch.setattr(block_manager_module, "block_hash", _tokens_only_hash)
    bm = BlockManager(num_blocks=16, block_size=BS)
    p, q = [1, 2, 3, 4], [5, 6, 7, 8]
    _serve(bm, "pq", p + q + [0])  # caches q as the child of p
    assert bm.allocate("qq", q + q + [0]).num_cached_tokens == 0  # q at the root is other KV
    assert bm.allocate("pq-again", p + q + [0]).num_cached_tokens == 2 * BS


def test_forced_collision_under_a_refilled_parent_block_is_a_miss(monkeypatch):
    """A cached child must not match once its parent's block holds something else."""
    monkeypatch.setattr(block_manager_module, "block_hash", _tokens_only_hash)
    bm = BlockManager(num_blocks=5, block_size=BS)
    p, p2, q = [1, 1, 1, 1], [2, 2, 2, 2], [5, 6, 7, 8]
    bm.allocate("a", p + [0])                     # blocks 0, 1
    bm.allocate("b", p + q + [0])                 # blocks 2, 3, 4: a's p is not published yet
    bm.append_slot("a", 0)                        # p cached in block 0
    bm.append_slot("b", 0)                        # block 2 stays a private p; q cached in 3, child of 2
    assert bm.block_table("b")[:2] == [2, 3]
    bm.free("a")
    bm.free("b")                                  # block 2 (never cached) will be handed out first
    assert bm.allocate("d", p2 + [0]).block_table[0] == 2
    bm.append_slot("d", 0)                        # block 2 now caches p2
    # p2 hits block 2; q's stored parent is block 2 of an earlier generation, so q misses.
    assert bm.allocate("c", p2 + q + [0]).num_cached_tokens == BS


# --- eviction and reference counts ---------------------------------------------------------

def test_lru_eviction_order():
    bm = BlockManager(num_blocks=6, block_size=2)
    prompts = {"a": [1, 1, 0], "b": [2, 2, 0], "c": [3, 3, 0]}  # one shareable block each
    for name, tokens in prompts.items():
        _serve(bm, name, tokens)
    for name in ("a", "b", "c"):
        bm.free(name)
    assert bm.stats().num_cached_blocks == 3 and bm.num_free_blocks == 6
    assert bm.allocate("touch", [1, 1, 5]).num_cached_tokens == 2  # a's block is now most recent
    bm.free("touch")
    bm.allocate("filler", [9] * 7)  # 4 blocks: the 3 never-cached ones first, then the LRU cached (b)
    assert bm.stats().num_cached_blocks == 2
    bm.free("filler")
    hits = {name: bm.allocate(f"{name}-again", tokens).num_cached_tokens for name, tokens in prompts.items()}
    assert hits == {"a": 2, "b": 0, "c": 2}


def test_a_shared_block_is_never_handed_out_while_in_use():
    bm = BlockManager(num_blocks=8, block_size=BS)
    _serve(bm, "a", SYSTEM + [1])
    _serve(bm, "b", SYSTEM + [2])
    shared = bm.block_table("b")[:2]
    bm.free("a")
    assert [bm.ref_count(b) for b in shared] == [1, 1]
    taken = []
    while bm.can_allocate(1):
        taken += bm.allocate(f"filler-{len(taken)}", [7]).block_table
    assert not set(shared) & set(taken)
    with pytest.raises(NoFreeBlocksError):
        bm.allocate("one-too-many", [7])
    bm.free("b")
    assert bm.num_free_blocks == len(shared) + 1


def test_exhaustion_raises_and_changes_nothing():
    bm = BlockManager(num_blocks=3, block_size=BS)
    bm.allocate("a", list(range(9)))  # 3 blocks, last one holds 1 token
    before = bm.stats()
    assert not bm.can_allocate(1) and not bm.can_allocate([1])
    with pytest.raises(NoFreeBlocksError, match="preempt"):
        bm.allocate("b", [1])
    assert bm.stats() == before and "b" not in bm
    for t in range(3):
        bm.append_slot("a", t)  # fills the last block
    assert not bm.can_append("a")
    with pytest.raises(NoFreeBlocksError):
        bm.append_slot("a", 0)
    assert bm.num_tokens("a") == 12
    bm.free("a")
    assert bm.num_free_blocks == 3


# --- slots and errors ----------------------------------------------------------------------

def test_slots_follow_the_block_table():
    bm = BlockManager(num_blocks=8, block_size=BS)
    bm.allocate("x", [5])
    bm.allocate("a", [1, 2, 3, 4, 5])
    table = bm.block_table("a")
    assert bm.slot("a", 0) == (table[0], 0) and bm.slot("a", 4) == (table[1], 0)
    assert bm.slot_mapping("a") == [table[0] * BS + i for i in range(4)] + [table[1] * BS]
    assert bm.slot_mapping("a", 3, 5) == bm.slot_mapping("a")[3:]
    assert bm.append_slot("a", 6) == table[1] * BS + 1


def test_errors_say_what_to_do():
    with pytest.raises(ValueError, match="num_blocks"):
        BlockManager(0, 4)
    with pytest.raises(ValueError, match="block_size"):
        BlockManager(4, 0)
    bm = BlockManager(num_blocks=4, block_size=BS)
    bm.allocate("a", [1, 2])
    with pytest.raises(ValueError, match="already holds blocks"):
        bm.allocate("a", [1])
    for call in (lambda: bm.free("nope"), lambda: bm.append_slot("nope", 1), lambda: bm.block_table("nope"),
                 lambda: bm.can_append("nope")):
        with pytest.raises(ValueError, match="unknown sequence"):
            call()
    with pytest.raises(ValueError, match="empty"):
        bm.allocate("b", [])
    with pytest.raises(ValueError, match="non-negative int"):
        bm.allocate("b", [1, -1])
    with pytest.raises(ValueError, match="outside sequence"):
        bm.slot("a", 2)
    with pytest.raises(ValueError, match="does not fit"):
        bm.slot_mapping("a", 1, 3)
    bm.free("a")
    with pytest.raises(ValueError, match="already freed"):
        bm.free("a")
