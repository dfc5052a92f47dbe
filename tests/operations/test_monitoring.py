"""Events from trace-log lines and replies, and rates by slice, against counts made by hand."""
from __future__ import annotations

import random

import pytest

from course_lib.context.trace_log import TraceRecord
from course_lib.operations.monitoring import RATES, events_from_trace, length_bucket, slice_report


def test_length_bucket_edges():
    assert [length_bucket(n) for n in (0, 31, 32, 63, 64, 500)] == ["short", "short", "medium", "medium",
                                                                      "long", "long"]


def _brute_force(events, by, thresholds, min_count):
    values = sorted({e[by] for e in events}, key=str)
    rows = []
    for value in values:
        count = 0
        tallies = dict.fromkeys(thresholds, 0)
        for e in events:
            if e[by] == value:
                count += 1
                for name in thresholds:
                    tallies[name] += 1 if e[name] else 0
        hits = {name: tallies[name] / count for name in thresholds}
        alerts = [name for name in thresholds if count >= min_count and hits[name] > thresholds[name]]
        rows.append((value, count, hits, alerts, count >= min_count))
    return rows


def test_slice_report_matches_a_brute_force_recount():
    rng = random.Random(11)
    for _ in range(60):
        events = [{"task": rng.choice(["qa", "extract", "tool", 7]), "model": rng.choice(["a", "b"]),
                   **{name: rng.random() < rng.random() for name in RATES}}
                  for _ in range(rng.randint(1, 80))]
        thresholds = {name: rng.choice([0.0, 0.1, 0.25, 0.5, 1.0]) for name in rng.sample(RATES, 3)}
        by, min_count = rng.choice(["task", "model"]), rng.randint(1, 15)
        rows = slice_report(events, by, thresholds, min_count)
        got = [(r["slice"], r["count"], r["rates"], r["alerts"], r["enough"]) for r in rows]
        expected = _brute_force(events, by, thresholds, min_count)
        assert [g[:2] for g in got] == [e[:2] for e in expected]
        for g, e in zip(got, expected):
            assert g[2] == pytest.approx(e[2]) and g[3] == e[3] and g[4] == e[4]
        assert sum(r["count"] for r in rows) == len(events)


def test_no_alert_below_the_minimum_count_and_none_at_exactly_the_threshold():
    events = [{"task": "rare", "refusal": True}] * 2 + [{"task": "common", "refusal": i < 5} for i in range(20)]
    rows = {r["slice"]: r for r in slice_report(events, "task", {"refusal": 0.25}, min_count=5)}
    assert rows["rare"]["rates"]["refusal"] == 1.0 and rows["rare"]["alerts"] == [] and not rows["rare"]["enough"]
    assert rows["common"]["rates"]["refusal"] == 0.25 and rows["common"]["alerts"] == []  # 5/20 is not above 0.25
    assert slice_report(events, "task", {"refusal": 0.24}, min_count=5)[0]["alerts"] == ["refusal"]


def test_slice_report_raises_on_bad_arguments():
    events = [{"task": "a", "error": False}]
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="min_count must be an int >= 1"):
            slice_report(events, "task", {"error": 0.1}, min_count=bad)
    for limit in (-0.1, 1.1):
        with pytest.raises(ValueError, match="threshold for 'error' must be a rate in"):
            slice_report(events, "task", {"error": limit}, min_count=1)
    with pytest.raises(ValueError, match="event 1 has no task"):
        slice_report([{"task": "a", "error": True}, {"error": True}], "task", {"error": 0.1}, min_count=1)
    with pytest.raises(ValueError, match="event 0 has no safety"):
        slice_report(events, "task", {"safety": 0.1}, min_count=1)


# --- events from trace lines ------------------------------------------------------------------

def _entry(request_id, *, prompt=10, finish="stop (end token)", final_state="answered", schema=None,
           tags=None, model="tinychat"):
    metadata = {"finish": finish, "user_message": "hi"}
    if tags is not None:
        metadata["request_metadata"] = tags
    record = TraceRecord(request_id=request_id, timestamp="2024-05-01T12:00:00Z", app_version="course-serve",
                         model=model, weights_sha256="ab" * 32, template="tinychat-chat",
                         decoding={"temperature": 0.0}, retrieval={"index_version": 0, "passage_ids": []},
                         tools_version="none", policy_version="none",
                         validation={} if schema is None else {"json_schema": schema},
                         tokens={"prompt": prompt, "completion": 3}, latency_ms={"total": 5.0}, cost_usd=0.0,
                         final_state=final_state, metadata=metadata)
    return {"hash": "h-" + request_id, "prev": "p-" + request_id, "record": record.to_dict()}


def test_events_from_trace_by_hand():
    entries = [
        _entry("r1", prompt=12, tags={"task": "qa"}),
        _entry("r2", prompt=40, finish="length (max_tokens)", schema=False, tags={"task": "x"}),
        _entry("r3", prompt=80, tags={"task": "grounded"}, model="tinychat-v2"),
        _entry("r4", prompt=5, tags={"task": "qa"}),
        _entry("r5", prompt=33, final_state="error", schema=True),           # no request tags
        _entry("r6", prompt=64, tags={}),                                    # empty tags
    ]
    outcomes = [
        {"task": "qa", "request_id": "r1", "reply": "4"},
        {"task": "x", "request_id": "r2", "reply": '{"name": '},
        {"task": "grounded", "request_id": "r3", "reply": "  The passages do not say.\n"},
        {"task": "qa", "request_id": "r4", "reply": "Write to bob@example.com for that."},
        {"task": "ignored", "request_id": "r5", "reply": "ok"},
        {"task": "extract", "request_id": None, "reply": None},            # the server rejected it
        {"task": "qa", "request_id": "r6", "reply": None},                 # no reply reached the client
        {"task": "qa", "request_id": "r1-not-logged", "reply": "4"},       # not in the log
    ]
    events = events_from_trace(entries, outcomes)
    none = dict.fromkeys(RATES, False)
    assert events == [
        {"task": "qa", "model": "tinychat", "length": "short", **none},
        {"task": "x", "model": "tinychat", "length": "medium", **none, "truncated": True, "invalid_schema": True},
        {"task": "grounded", "model": "tinychat-v2", "length": "long", **none, "refusal": True},
        {"task": "qa", "model": "tinychat", "length": "short", **none, "safety": True},
        {"task": "untagged", "model": "tinychat", "length": "medium", **none, "error": True},
        {"task": "extract", "model": "unknown", "length": "unknown", **none, "error": True},
        {"task": "untagged", "model": "tinychat", "length": "long", **none, "error": True},
        {"task": "qa", "model": "unknown", "length": "unknown", **none, "error": True},
    ]
    rows = {r["slice"]: r for r in slice_report(events, "length", {"error": 0.5}, min_count=2)}
    assert rows["unknown"]["count"] == 2 and rows["unknown"]["alerts"] == ["error"]


def test_the_course_abstention_is_a_refusal_and_an_answer_is_not():
    entries = [_entry("a", tags={"task": "fact"}), _entry("b", tags={"task": "fact"}),
               _entry("c", tags={"task": "fact"})]
    outcomes = [{"task": "fact", "request_id": "a", "reply": "I don't know."},
                {"task": "fact", "request_id": "b", "reply": "I don't know what a tarn is, but it is wet."},
                {"task": "fact", "request_id": "c", "reply": "The passages do not say much."}]
    assert [e["refusal"] for e in events_from_trace(entries, outcomes)] == [True, False, False]
