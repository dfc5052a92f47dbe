"""The trace record of an X-rayed request: the redacted, hash-chained line a product keeps
(``course_lib.context.trace_log``), written by ``course serve`` when the request ends and
shown at the end of its X-ray.

>>> doc = {"params": {"temperature": 0.0, "top_p": 1.0, "seed": None, "max_tokens": 8, "structured": False},
...        "prompt": {"count": 11}, "tokens": [{}, {}], "timing": {"ttft_ms": 4.0, "elapsed_ms": 9.5},
...        "finish": {"reason": "stop", "cause": "end token"}, "validation": None}
>>> record = trace_record(doc, request_id="chatcmpl-1", model_name="tinychat", weights_sha256="ab" * 32,
...                       user_message="mail me at ann@example.com")
>>> record.tokens, record.final_state, record.metadata["finish"]
({'prompt': 11, 'completion': 2}, 'answered', 'stop (end token)')
"""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

from course_lib.context.trace_log import TraceRecord

__all__ = ["last_entry", "trace_record", "weights_fingerprint"]


def weights_fingerprint(model) -> str:
    """sha256 hex of the served weights: every tensor's name and bytes, in name order."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def trace_record(doc: dict, *, request_id: str, model_name: str, weights_sha256: str, user_message: str,
                 request_metadata: dict | None = None) -> TraceRecord:
    """The TraceRecord of one X-ray document (a finished or abandoned choice). ``request_metadata``
    (the request's OpenAI ``metadata``: string tags such as {"task": "extraction"}) is kept in the
    record's metadata, so a monitor can slice the log by it."""
    params, finish = doc["params"], doc["finish"]
    validation = {} if doc.get("validation") is None else {"json_schema": doc["validation"]["ok"]}
    return TraceRecord(
        request_id=request_id, timestamp=datetime.now(timezone.utc).isoformat(), app_version="course-serve",
        model=model_name, weights_sha256=weights_sha256, template="tinychat-chat",
        decoding={k: params.get(k) for k in ("temperature", "top_p", "top_k", "min_p", "seed", "max_tokens",
                                              "structured")},
        retrieval={"index_version": 0, "passage_ids": []}, tools_version="none", policy_version="none",
        validation=validation, tokens={"prompt": doc["prompt"]["count"], "completion": len(doc["tokens"])},
        latency_ms={k: v for k, v in (("ttft", doc["timing"]["ttft_ms"]), ("total", doc["timing"]["elapsed_ms"]))
                    if v is not None},
        cost_usd=0.0, final_state="answered" if finish is not None and finish["reason"] != "abort" else "error",
        metadata={"finish": "aborted" if finish is None else f"{finish['reason']} ({finish['cause']})",
                  "user_message": user_message, "request_metadata": dict(request_metadata or {})})


def last_entry(path: str | Path) -> dict:
    """The newest line of a trace log, as written: {"hash", "prev", "record"} (redacted)."""
    lines = [line for line in Path(path).read_text(encoding="utf-8").split("\n") if line.strip()]
    return json.loads(lines[-1])
