"""Context engineering: choosing what goes into the model's window.

``budget``: the token budget and the packer that fits system, tools, history and retrieved
passages into it, counting tokens exactly through the chat template.
``trace_log``: the redacted, hash-chained log of every served request, and ``course trace verify``.
``bm25``: the passage store those passages come from, ranked by BM25 (rank-bm25's BM25Okapi).

Measured on the course model (import the submodules themselves):
``grounding``: grounded answers scored, the lost-in-the-middle sweep, prompt injection fenced
and unfenced, and each reply's probability; ``calibration``: reliability bins, expected
calibration error and an abstention threshold; ``cost`` and ``model_selection``: cost per
successful task from measured throughput; ``safety``: a rule-based input and output filter.
"""
from course_lib.context.bm25 import BM25Index, UnknownPassageError, terms
from course_lib.context.trace_log import (DEFAULT_PATTERNS, TraceLog, TraceLogError, TraceRecord, VerifyResult,
                                          redact, redact_record, verify)
from course_lib.context.budget import POLICIES, ContextBudget, ContextOverflow, Dropped, PackedContext, pack_context, render_tools
from course_lib.data.passages import Passage, render_passages, user_with_passages

__all__ = [
    "DEFAULT_PATTERNS",
    "POLICIES",
    "BM25Index",
    "ContextBudget",
    "ContextOverflow",
    "Dropped",
    "PackedContext",
    "Passage",
    "TraceLog",
    "TraceLogError",
    "TraceRecord",
    "UnknownPassageError",
    "VerifyResult",
    "pack_context",
    "redact",
    "redact_record",
    "render_passages",
    "render_tools",
    "terms",
    "user_with_passages",
    "verify",
]
