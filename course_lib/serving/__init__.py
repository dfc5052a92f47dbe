"""Serving: an engine with continuous batching over paged KV blocks, and its building blocks.

>>> from course_lib.serving import BlockManager
>>> BlockManager(num_blocks=4, block_size=16).allocate("req-1", [1, 2, 3])
Allocation(block_table=[0], num_cached_tokens=0)

``Engine`` (add_request / step / generate / stream) drives a ``Scheduler`` (decodes first,
chunked prefill, FCFS admission, recompute preemption) over a ``BlockManager`` (paged blocks,
verified prefix caching) and a ``ModelRunner`` (the course model's own layers reading keys and
values through block tables). ``Engine(speculative=...)`` verifies guesses from ``drafting``
(prompt lookup or a draft model) with the rule in ``speculative``/``verify``;
``batch_invariant=True`` makes greedy output independent of batching; ``quantize`` gives int8
per-channel weights the engine serves like any other model.
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
from course_lib.serving.model_runner import Chunk, ModelRunner, RaggedBatch, build_batch
from course_lib.serving.request import Completion, RequestOutput
from course_lib.serving.engine import Engine
from course_lib.serving.verify import SpeculativeStats
from course_lib.serving.xray import RequestXray

__all__ = [
    "Allocation", "BlockManager", "BlockManagerStats", "Int8Linear", "KVPool", "NoFreeBlocksError",
    "SpeculativeResult", "accept_greedy", "accept_or_resample", "acceptance_rate", "block_hash", "dequantize",
    "expected_tokens_per_round", "ngram_propose", "pad_block_tables", "paged_attention", "paged_prefill_attention",
    "quantize_int8", "quantize_per_channel", "weight_bytes",
    "FinishReason", "ScheduledSeq", "Scheduler", "SchedulerOutput", "Sequence", "SequenceStatus",
    "Chunk", "Completion", "Engine", "SpeculativeStats", "ModelRunner", "RaggedBatch", "RequestOutput", "build_batch",
    "RequestXray",
]
