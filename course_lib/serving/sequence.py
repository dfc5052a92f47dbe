"""One request as the scheduler sees it: its tokens, how many have KV, and where it stands.

>>> seq = Sequence("req-1", [5, 6, 7], max_tokens=2)
>>> seq.num_tokens, seq.num_uncomputed, seq.is_prefill
(3, 3, True)
>>> seq.num_computed_tokens = 3; seq.output_token_ids.append(9)   # prefilled, sampled 9
>>> seq.token_ids, seq.num_uncomputed, seq.is_prefill              # the next pass computes 9 alone
([5, 6, 7, 9], 1, False)

``num_computed_tokens`` counts leading tokens of ``prompt + output`` whose KV is in the pool.
The newest sampled token never has KV yet: the pass after the one that sampled it writes it
(a decode). After a recompute preemption the count drops to 0 and the prompt *and* the kept
outputs are prefilled again, so ``is_prefill`` means "more than the newest sampled token is
left to compute", not only "the prompt is unfinished".
"""
from __future__ import annotations

import enum
from collections.abc import Collection, Hashable, Sequence as TokenIds
from typing import Literal

from course_lib.validation import positive_int

__all__ = ["FinishReason", "Sequence", "SequenceStatus"]

FinishReason = Literal["stop", "length", "abort"]


class SequenceStatus(enum.Enum):
    WAITING = "waiting"    # queued: holds no blocks (new, or preempted and waiting to recompute)
    RUNNING = "running"    # holds blocks; scheduled in the passes until it finishes or is preempted
    FINISHED = "finished"  # done; finish_reason says why; its blocks are freed


class Sequence:
    """A request's state. The scheduler owns the counters; the engine reads them."""

    __slots__ = ("request_id", "prompt_token_ids", "output_token_ids", "max_tokens", "status",
                 "num_computed_tokens", "num_cached_tokens", "arrival", "finish_reason", "num_preemptions",
                 "stop_token_ids", "block_table")

    def __init__(self, request_id: Hashable, prompt_token_ids: TokenIds[int], max_tokens: int, *,
                 stop_token_ids: Collection[int] = ()):
        prompt = list(prompt_token_ids)
        if not prompt:
            raise ValueError(f"request {request_id!r} has an empty prompt; pass at least one token "
                             "(the chat template always adds some)")
        for i, t in enumerate(prompt):
            if isinstance(t, bool) or not isinstance(t, int) or t < 0:
                raise ValueError(f"request {request_id!r}: prompt_token_ids[{i}] must be a non-negative "
                                 f"int, got {type(t).__name__} {t!r}; pass tensor.tolist() for a tensor")
        self.request_id = request_id
        self.prompt_token_ids = prompt
        self.output_token_ids: list[int] = []
        self.max_tokens = positive_int("max_tokens", max_tokens)
        self.status = SequenceStatus.WAITING
        self.num_computed_tokens = 0   # leading prompt+output tokens whose KV is written
        self.num_cached_tokens = 0     # of those, served by the prefix cache at the latest admission
        self.arrival = -1              # order of Scheduler.add; set there (-1: not added yet)
        self.finish_reason: FinishReason | None = None
        self.num_preemptions = 0
        # Tokens that end this request with "stop" (its end tokens and stop tokens), on top of
        # the eos_ids the scheduler is given.
        self.stop_token_ids = frozenset(stop_token_ids)
        # The blocks holding its KV, in position order, while it runs (the block manager's own
        # table, kept here by the scheduler; empty while it waits or once it has finished).
        self.block_table: list[int] = []

    @property
    def token_ids(self) -> list[int]:
        """Prompt then output: position p of the sequence is ``token_ids[p]``."""
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_uncomputed(self) -> int:
        """Tokens still without KV; a running sequence always has at least one."""
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_prefill(self) -> bool:
        """More than the newest sampled token is left to compute (the prompt, or after a
        preemption the prompt and kept outputs); False means the next pass is a 1-token decode."""
        return not self.output_token_ids or self.num_uncomputed > 1

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def __repr__(self) -> str:
        reason = f", finish_reason={self.finish_reason!r}" if self.finish_reason else ""
        return (f"Sequence({self.request_id!r}, {self.status.name}, prompt={self.num_prompt_tokens}, "
                f"output={len(self.output_token_ids)}/{self.max_tokens}, "
                f"computed={self.num_computed_tokens}{reason})")
