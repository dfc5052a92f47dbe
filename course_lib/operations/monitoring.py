"""Monitoring by slice: the rates that tell a broken slice from a healthy average.

An **event** is one served request as the monitor sees it: its slice fields (task, prompt length,
model) and one flag per thing that can go wrong. ``events_from_trace`` builds them from the lines
``course serve --trace-log`` wrote, joined by request id with what the client received (the trace
log holds the redacted request, not the reply, and nothing of a request the server rejected).
``slice_report`` counts each flag per slice and raises an alert when a rate is above its
threshold, but only for slices with at least ``min_count`` requests: one refusal out of two
requests is a 50% rate that means nothing.

    >>> events = [{"task": "a", "error": False}, {"task": "a", "error": True}, {"task": "b", "error": False}] * 10
    >>> [(row["slice"], row["count"], row["rates"]["error"], row["alerts"]) for row in
    ...  slice_report(events, "task", {"error": 0.2}, min_count=5)]
    [('a', 20, 0.5, ['error']), ('b', 10, 0.0, [])]
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from course_lib.context import safety
from course_lib.data.corpus import ABSTAIN
from course_lib.data.grounded import GROUNDED_ABSTAIN

__all__ = ["RATES", "events_from_trace", "length_bucket", "slice_report"]

RATES = ("error", "truncated", "invalid_schema", "refusal", "safety")
LENGTH_EDGES = (32, 64)  # prompt tokens: short below 32, medium below 64, long from 64


def length_bucket(prompt_tokens: int) -> str:
    """A prompt-length slice: "short" (< 32 tokens), "medium" (< 64) or "long"."""
    return "short" if prompt_tokens < LENGTH_EDGES[0] else "medium" if prompt_tokens < LENGTH_EDGES[1] else "long"


def events_from_trace(entries: Sequence[Mapping], outcomes: Sequence[Mapping]) -> list[dict]:
    """One event per request the client sent, joined by request id with the trace log's entries
    ({"hash", "prev", "record"}, as the log stores them).

    ``outcomes``: what the client saw, one dict per request: ``{"task": its tag, "request_id": the
    response's id, or None when the request failed, "reply": the reply text or None}``. A request
    the server rejected has no trace line (it never reached the engine), so it counts as an error
    with an "unknown" length and model: a monitor that reads only the trace log never sees it.
    For the others, the slice fields come from the record (its ``metadata``'s request tags, its
    model, its prompt length) and so do most flags (final state, finish reason, schema
    validation); a decline counts as a refusal, a matching output safety rule as a safety event."""
    by_id = {entry["record"]["request_id"]: entry["record"] for entry in entries}
    events = []
    for outcome in outcomes:
        record, reply = by_id.get(outcome["request_id"]), outcome["reply"]
        if record is None:
            events.append({"task": outcome["task"], "model": "unknown", "length": "unknown", "error": True,
                           **{name: False for name in RATES if name != "error"}})
            continue
        tags = record["metadata"].get("request_metadata") or {}
        events.append({
            "task": tags.get("task", "untagged"), "model": record["model"],
            "length": length_bucket(record["tokens"]["prompt"]),
            "error": record["final_state"] == "error" or reply is None,
            "truncated": record["metadata"].get("finish", "").startswith("length"),
            "invalid_schema": record["validation"].get("json_schema") is False,
            "refusal": reply is not None and reply.strip() in (ABSTAIN, GROUNDED_ABSTAIN),
            "safety": reply is not None and not safety.check_output(reply).allowed,
        })
    return events


def slice_report(events: Sequence[Mapping], by: str, thresholds: Mapping[str, float], min_count: int) -> list[dict]:
    """Per value of ``events[i][by]`` (sorted by str): count, each threshold's rate, and the alerts."""
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
        raise ValueError(f"min_count must be an int >= 1, got {min_count!r}")
    for name, limit in thresholds.items():
        if not 0 <= limit <= 1:
            raise ValueError(f"the threshold for {name!r} must be a rate in [0, 1], got {limit!r}")
    groups: dict = {}
    for index, event in enumerate(events):
        missing = [key for key in (by, *thresholds) if key not in event]
        if missing:
            raise ValueError(f"event {index} has no {', '.join(missing)}")
        groups.setdefault(event[by], []).append(event)
    rows = []
    for value in sorted(groups, key=str):
        members = groups[value]
        rates = {name: sum(bool(e[name]) for e in members) / len(members) for name in thresholds}
        enough = len(members) >= min_count
        alerts = [name for name in thresholds if enough and rates[name] > thresholds[name]]
        rows.append({"slice": value, "count": len(members), "rates": rates, "alerts": alerts, "enough": enough})
    return rows
