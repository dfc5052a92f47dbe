"""Serving building blocks: paged KV blocks with prefix caching, paged attention, the
speculative-decoding accept/resample rule, and int8 weight-only quantization.

>>> from course_lib.serving import BlockManager
>>> BlockManager(num_blocks=4, block_size=16).allocate("req-1", [1, 2, 3])
Allocation(block_table=[0], num_cached_tokens=0)

The engine that schedules requests over these pieces (continuous batching, chunked prefill,
preemption) is the next layer; each piece here is tested on its own against an oracle.
"""
from course_lib.serving.block_manager import (
    Allocation,
    BlockManager,
    BlockManagerStats,
    NoFreeBlocksError,
    block_hash,
)
from course_lib.serving.paged_attention import KVPool, pad_block_tables, paged_attention, paged_prefill_attention
from course_lib.serving.quantize import Int8Linear, dequantize, quantize_int8, quantize_per_channel, weight_bytes
from course_lib.serving.speculative import (
    SpeculativeResult,
    accept_greedy,
    accept_or_resample,
    acceptance_rate,
    expected_tokens_per_round,
    ngram_propose,
)
from course_lib.serving.scheduler import ScheduledSeq, Scheduler, SchedulerOutput
from course_lib.serving.sequence import FinishReason, Sequence, SequenceStatus

__all__ = [
    "Allocation", "BlockManager", "BlockManagerStats", "Int8Linear", "KVPool", "NoFreeBlocksError",
    "SpeculativeResult", "accept_greedy", "accept_or_resample", "acceptance_rate", "block_hash", "dequantize",
    "expected_tokens_per_round", "ngram_propose", "pad_block_tables", "paged_attention", "paged_prefill_attention",
    "quantize_int8", "quantize_per_channel", "weight_bytes",
    "FinishReason", "ScheduledSeq", "Scheduler", "SchedulerOutput", "Sequence", "SequenceStatus",
]
