"""Continuous batching: which tokens of which requests the next forward pass computes.

>>> from course_lib.serving import BlockManager, Sequence
>>> bm = BlockManager(num_blocks=4, block_size=4)
>>> sched = Scheduler(bm, max_num_seqs=2, max_batched_tokens=8)
>>> sched.add(Sequence("a", [1, 2, 3, 4, 5, 6], max_tokens=2))
>>> sched.add(Sequence("b", [7, 8, 9], max_tokens=1))
>>> out = sched.schedule()                          # 8 tokens: all of a's prompt, a chunk of b's
>>> out.scheduled
[ScheduledSeq('a', positions 0..5, samples), ScheduledSeq('b', positions 0..1)]
>>> sched.update(out, {"a": 10})                    # a sampled 10; b's chunk samples nothing
[]
>>> out = sched.schedule()                          # a decodes 10 at position 6; b ends its prompt
>>> out.scheduled
[ScheduledSeq('a', positions 6..6, samples), ScheduledSeq('b', positions 2..2, samples)]
>>> bm.slot_mapping("a", 6, 7)                      # where the engine writes the KV of 10
[6]
>>> [seq.request_id for seq in sched.update(out, {"a": 11, "b": 12})]  # both hit max_tokens
['a', 'b']
>>> sched.has_unfinished(), bm.num_free_blocks
(False, 4)

Rules of ``schedule()``, in the order it applies them (vLLM v1 style, FCFS):

1. Decodes first: every running sequence whose next pass is one token (its newest sample)
   gets that token, oldest first, so a long prompt arriving never stalls ongoing replies. Its
   slot is reserved now with ``append_slot``; if that needs a block and none is free, the
   NEWEST running sequence is preempted, repeatedly until one is free (when the newest is the
   growing one, it is preempted itself). ``max_batched_tokens >= max_num_seqs`` guarantees the
   budget covers every decode. With speculative decoding, a decode also carries its drafts
   (``schedule(drafts)``) as far as the budget left after all decodes, its ``max_tokens`` and
   the free blocks allow; their slots are lookahead slots, and drafting never preempts.
2. Running prefills next, oldest first: each gets ``min(tokens left, budget left,
   chunk_size)`` tokens (chunked prefill); a chunk that does not end the sequence samples
   nothing. Their blocks were all reserved at admission.
3. Admission last, only if this step preempted nobody (memory is tight; readmitting the victim
   now would thrash): waiting requests in arrival order while budget, ``max_num_seqs`` and free
   blocks allow. Blocks for the whole prompt (plus kept outputs after a preemption) are
   allocated at once; computation starts after the prefix-cache hits. A request that does not
   fit stops admission (head of line): nobody overtakes it, so nobody waits forever.

Preemption is by recompute: the victim's blocks are freed, ``num_computed_tokens`` drops to 0,
its outputs are kept, and it goes to the FRONT of the waiting queue; when readmitted its prompt
plus outputs are prefilled as one longer prompt and the last of them yields the next sample, so
no token is lost or sampled twice. Because admission is FCFS and the victim is the newest,
running arrivals are always sorted and all older than any waiting one: the oldest running
request is never preempted (unless alone and unable to grow, which ``add`` rules out by
rejecting requests whose prompt + max_tokens - 1 slots exceed the pool), so it always makes
progress and every request finishes.

The engine's contract, each step:

- ``out = scheduler.schedule()``. For each entry ``e`` of ``out.scheduled``, the pass takes
  ``e.token_ids`` at positions ``e.start .. e.stop - 1`` and writes their KV to
  ``block_manager.slot_mapping(e.seq.request_id, e.start, e.stop)``; attention reads positions
  ``0 .. e.stop - 1`` through ``e.seq.block_table`` (positions before ``e.start`` are in the
  pool already, computed earlier or prefix-cache hits). That is the block manager's own table,
  kept on the sequence while it runs: it grows, and a preempted request comes back with a new
  one, so read it at every step and never change it.
- Where ``e.samples``, sample one token from the logits of position ``e.stop - 1``.
- ``scheduler.update(out, {request_id: token}, eos_ids=...)`` once per output, in order; it
  returns the sequences that finished (their blocks already freed). Stop strings: call
  ``finish(request_id)`` after update. ``out.preempted`` needs no action (no token is lost).
- The engine never calls ``allocate``, ``append_slot`` or ``free`` itself. An empty output
  while ``has_unfinished()`` (a lone request preempted itself) just means: schedule again.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass

from course_lib.kv_memory.paging import blocks_needed
from course_lib.serving.block_manager import BlockManager
from course_lib.serving.sequence import FinishReason, Sequence, SequenceStatus
from course_lib.validation import positive_int

__all__ = ["ScheduledSeq", "Scheduler", "SchedulerOutput"]

_WAITING, _RUNNING, _FINISHED = SequenceStatus.WAITING, SequenceStatus.RUNNING, SequenceStatus.FINISHED


@dataclass(frozen=True, repr=False)
class ScheduledSeq:
    seq: Sequence
    start: int            # first position computed this pass (seq.num_computed_tokens when scheduled)
    num_new_tokens: int   # positions start .. start + num_new_tokens - 1
    samples: bool         # the chunk ends the sequence's tokens: sample one token from its last logits
    draft_token_ids: tuple[int, ...] = ()  # speculative guesses after the newest sample, to verify

    @property
    def stop(self) -> int:
        return self.start + self.num_new_tokens

    @property
    def positions(self) -> range:
        return range(self.start, self.stop)

    @property
    def token_ids(self) -> list[int]:
        """The pass's input tokens for this sequence (a verify pass: the newest sample, then the drafts)."""
        if self.draft_token_ids:
            return [self.seq.output_token_ids[-1], *self.draft_token_ids]
        return self.seq.token_ids[self.start:self.stop]

    def __repr__(self) -> str:
        drafts = f", {len(self.draft_token_ids)} drafts" if self.draft_token_ids else ""
        return (f"ScheduledSeq({self.seq.request_id!r}, positions {self.start}..{self.stop - 1}"
                f"{', samples' if self.samples else ''}{drafts})")


@dataclass(frozen=True)
class SchedulerOutput:
    scheduled: list[ScheduledSeq]   # one forward pass: decodes first, then prefill chunks
    preempted: list[Sequence]       # moved back to waiting by this step (none of them is scheduled)

    @property
    def num_batched_tokens(self) -> int:
        return sum(e.num_new_tokens for e in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


class Scheduler:
    """A waiting deque and a running list over one ``BlockManager``; pure logic, no model."""

    def __init__(self, block_manager: BlockManager, *, max_num_seqs: int = 32,
                 max_batched_tokens: int = 2048, chunk_size: int | None = None):
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []           # in arrival order (see the module docstring)
        self._live: dict[Hashable, Sequence] = {}   # waiting or running, by request id
        self._num_added = 0
        self.block_manager = block_manager
        self.max_num_seqs = positive_int("max_num_seqs", max_num_seqs)
        self.max_batched_tokens = positive_int("max_batched_tokens", max_batched_tokens)
        self.chunk_size = None if chunk_size is None else positive_int("chunk_size", chunk_size)
        if max_batched_tokens < max_num_seqs:
            raise ValueError(f"max_batched_tokens ({max_batched_tokens}) is below max_num_seqs "
                             f"({max_num_seqs}), so running decodes could overflow a pass; raise "
                             "max_batched_tokens or lower max_num_seqs")

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def has_unfinished(self) -> bool:
        return bool(self._live)

    def __contains__(self, request_id: Hashable) -> bool:
        return request_id in self._live

    def add(self, seq: Sequence) -> None:
        """Queue a new request at the back of the waiting queue."""
        if seq.request_id in self._live:
            raise ValueError(f"request id {seq.request_id!r} is already waiting or running; "
                             "give each request a unique id")
        if seq.arrival != -1 or seq.status is not _WAITING:
            raise ValueError(f"sequence {seq.request_id!r} was added before; create a new Sequence")
        # The last sampled token is never fed back, so it needs no slot.
        worst = seq.num_prompt_tokens + seq.max_tokens - 1
        bm = self.block_manager
        if blocks_needed(worst, bm.block_size) > bm.num_blocks:
            raise ValueError(
                f"request {seq.request_id!r} needs up to {blocks_needed(worst, bm.block_size)} blocks "
                f"({seq.num_prompt_tokens} prompt tokens + max_tokens {seq.max_tokens} - 1 slots, "
                f"{bm.block_size} per block) but the pool has {bm.num_blocks}; shorten the prompt, "
                "lower max_tokens or give the engine more blocks")
        seq.arrival, self._num_added = self._num_added, self._num_added + 1
        self.waiting.append(seq)
        self._live[seq.request_id] = seq

    def schedule(self, drafts: Mapping[Hashable, list[int]] | None = None) -> SchedulerOutput:
        """Plan one forward pass (rules in the module docstring). ``drafts`` maps a decoding
        request to speculative tokens to verify in the same pass (speculative decoding)."""
        bm, budget = self.block_manager, self.max_batched_tokens
        scheduled: list[ScheduledSeq] = []
        preempted: list[Sequence] = []
        drafts = drafts or {}
        # Budget left over once every decode has its one token; drafts share it, oldest first.
        spare = budget - sum(1 for seq in self.running if not seq.is_prefill)

        # 1. Decodes. Victims come from the end of `running`, never from before index i, so
        #    nothing already scheduled is ever preempted.
        i = 0
        while i < len(self.running):
            seq = self.running[i]
            i += 1
            if seq.is_prefill:
                continue
            rid = seq.request_id
            if bm.num_tokens(rid) < seq.num_tokens:  # the newest sample has no slot yet
                while not bm.can_append(rid):
                    victim = self.running[-1]
                    self._preempt(victim)
                    preempted.append(victim)
                    if victim is seq:
                        break
                if seq.status is not _RUNNING:
                    break  # it was the newest, so nobody after it is left
                bm.append_slot(rid, seq.output_token_ids[-1])
            guesses = self._fit_drafts(seq, drafts.get(rid, ()), spare)
            if guesses:
                bm.append_lookahead(rid, guesses)
                spare -= len(guesses)
            scheduled.append(ScheduledSeq(seq, seq.num_computed_tokens, 1 + len(guesses), True, guesses))
            budget -= 1 + len(guesses)

        # 2. Prefills already running, oldest first.
        for seq in self.running:
            if budget == 0:
                break
            if seq.is_prefill:
                entry = self._chunk(seq, budget)
                scheduled.append(entry)
                budget -= entry.num_new_tokens

        # 3. Admission, first come first served, head of line.
        while not preempted and self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            token_ids = seq.token_ids
            if not bm.can_allocate(token_ids):
                break
            allocation = bm.allocate(seq.request_id, token_ids)
            self.waiting.popleft()
            seq.status, seq.block_table = _RUNNING, allocation.block_table
            seq.num_computed_tokens = seq.num_cached_tokens = allocation.num_cached_tokens
            self.running.append(seq)
            entry = self._chunk(seq, budget)
            scheduled.append(entry)
            budget -= entry.num_new_tokens

        return SchedulerOutput(scheduled, preempted)

    def update(self, output: SchedulerOutput, sampled: Mapping[Hashable, int | list[int] | None], *,
               eos_ids: Collection[int] = ()) -> list[Sequence]:
        """Record a finished pass: advance each entry's computed count, append the token sampled
        for entries that ``samples`` (``sampled[request_id]``; others may be absent or None),
        finish sequences that sampled an eos id ("stop") or reached max_tokens ("length") and
        free their blocks. Entries aborted since ``schedule()`` are skipped. Returns the
        sequences finished here. Checks everything first, so a bad call changes nothing.

        A verify entry (with ``draft_token_ids``) takes a list instead: the accepted drafts (a
        prefix of them) then the token the target chose; the rejected drafts' slots are given
        back. Tokens after one that finishes the sequence are dropped."""
        for e in output.scheduled:
            seq = e.seq
            if seq.is_finished:
                continue
            if seq.num_computed_tokens != e.start:
                raise ValueError(f"request {seq.request_id!r} has moved on since this output was "
                                 "scheduled; call update() once per schedule(), in order")
            token = sampled.get(seq.request_id)
            if e.draft_token_ids:
                _check_verified(seq.request_id, e.draft_token_ids, token)
                continue
            if e.samples and (isinstance(token, bool) or not isinstance(token, int)):
                raise ValueError(f"request {seq.request_id!r} reached its last token this pass, so it "
                                 "needs a sampled token id (an int: .item() or .tolist() a tensor), "
                                 f"got {token!r}")
            if not e.samples and token is not None:
                raise ValueError(f"request {seq.request_id!r} computed a chunk that does not end its "
                                 f"tokens; sample nothing for it (got {token!r})")
        finished = []
        for e in output.scheduled:
            seq = e.seq
            if seq.is_finished:
                continue
            tokens = sampled.get(seq.request_id)
            if e.draft_token_ids:  # only the accepted drafts' KV is kept
                seq.num_computed_tokens += len(tokens)
                self.block_manager.truncate(seq.request_id, seq.num_computed_tokens)
            else:
                seq.num_computed_tokens += e.num_new_tokens
                tokens = [tokens]
            self.block_manager.mark_computed(seq.request_id, seq.num_computed_tokens)  # offer written blocks
            if not e.samples:
                continue
            for token in tokens:
                seq.output_token_ids.append(token)
                if token in eos_ids or token in seq.stop_token_ids:
                    self._finish(seq, "stop")
                elif len(seq.output_token_ids) >= seq.max_tokens:
                    self._finish(seq, "length")
                else:
                    continue
                finished.append(seq)
                break
        return finished

    def abort(self, request_id: Hashable) -> Sequence:
        """Drop a waiting or running request now, freeing its blocks; finish_reason "abort"."""
        return self.finish(request_id, "abort")

    def finish(self, request_id: Hashable, reason: FinishReason = "stop") -> Sequence:
        """End a request the engine decided is done (a stop string matched), freeing its blocks."""
        seq = self._live.get(request_id)
        if seq is None:
            raise ValueError(f"unknown request id {request_id!r}: it was never added or has "
                             "already finished")
        if reason not in ("stop", "length", "abort"):
            raise ValueError(f"finish reason must be 'stop', 'length' or 'abort', got {reason!r}")
        self._finish(seq, reason)
        return seq

    # --- internals ---------------------------------------------------------------------------

    def _fit_drafts(self, seq: Sequence, guesses: list[int], spare: int) -> tuple[int, ...]:
        """The drafts worth verifying: within the spare budget, the request's token limit and the
        free blocks. Speculation never preempts anyone; short of room, it guesses less."""
        room = min(len(guesses), spare, seq.max_tokens - len(seq.output_token_ids) - 1)
        while room > 0 and not self.block_manager.can_append(seq.request_id, room):
            room -= 1
        return tuple(guesses[:max(room, 0)])

    def _chunk(self, seq: Sequence, budget: int) -> ScheduledSeq:
        n = min(seq.num_uncomputed, budget)
        if self.chunk_size is not None:
            n = min(n, self.chunk_size)
        return ScheduledSeq(seq, seq.num_computed_tokens, n, n == seq.num_uncomputed)

    def _preempt(self, seq: Sequence) -> None:
        """Recompute preemption of the newest running sequence (the last in ``running``)."""
        self.running.pop()
        self.block_manager.free(seq.request_id)
        seq.status, seq.block_table = _WAITING, []
        seq.num_computed_tokens = seq.num_cached_tokens = 0
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)

    def _finish(self, seq: Sequence, reason: FinishReason) -> None:
        if seq.status is _RUNNING:
            self.running.remove(seq)
            self.block_manager.free(seq.request_id)
            seq.block_table = []
        else:
            self.waiting.remove(seq)  # waiting sequences hold no blocks
        seq.status, seq.finish_reason = _FINISHED, reason
        del self._live[seq.request_id]

    def __repr__(self) -> str:
        return (f"Scheduler(waiting={len(self.waiting)}, running={len(self.running)}, "
                f"max_num_seqs={self.max_num_seqs}, max_batched_tokens={self.max_batched_tokens}, "
                f"chunk_size={self.chunk_size})")


def _check_verified(request_id: Hashable, drafts: tuple[int, ...], tokens) -> None:
    """A verify entry's result: the accepted drafts (a prefix of them) then one chosen token."""
    ok = (isinstance(tokens, (list, tuple)) and 1 <= len(tokens) <= len(drafts) + 1
          and all(isinstance(t, int) and not isinstance(t, bool) for t in tokens))
    if not ok:
        raise ValueError(f"request {request_id!r} verified {len(drafts)} drafts this pass, so it needs "
                         f"a list of 1..{len(drafts) + 1} token ids (accepted drafts, then the target's "
                         f"token), got {tokens!r}")
    if list(tokens[:-1]) != list(drafts[:len(tokens) - 1]):
        raise ValueError(f"request {request_id!r}: the accepted tokens {list(tokens[:-1])} are not a "
                         f"prefix of the drafts {list(drafts)}")
