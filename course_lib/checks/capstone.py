"""Visible checks for notebook 09 (the capstone: one request end to end).

One case per rule each exercise states. The menus the exercises choose from
(``COMPONENTS``, ``GUARANTEES``, ``STAGES``, ``FIXES``) live in ``course_lib.capstone``, which the
notebook's setup imports, so the text and the checks cannot drift apart. The right owner of each guarantee is stored only as a
hash, so reading this file does not give the answers away; a wrong owner is named, never
corrected. Expectations for the budget and the diagnosis come from ``course_lib.capstone``:
``reference_budget`` works each scenario with the drills' own formulas, and ``reference_diagnosis``
reads the exercise's rules as a table of data (``DIAGNOSIS_RULES``); the diagnosis is tried on
generated traces of every kind.
"""
from __future__ import annotations

import copy
import hashlib
import random

from course_lib.capstone import (BUDGET_KEYS, COMPONENTS, GUARANTEES, NON_NEGATIVE, POSITIVE, reference_budget,
                                 reference_diagnosis)
from course_lib.checks.report import CheckFailed, expect_close, expect_equal, expect_raises

# -- exercise 1: who owns each guarantee ------------------------------------------------------------
# sha256 of "capstone:<key>=<owner>" for the right owner of each guarantee
OWNER_DIGESTS = {
    "prompt_fits": "9607599a27bb93ca8ddde5050c2eef3780a793b54ed1d3c17e54007a8819246a",
    "template_billed": "865312e1602434b682c014a633195548c2485cd5f56fc2de21b030f7751a0d28",
    "kv_fits": "12e7865ee169f76546f1a46cdc770ab9cd9935117cd09331dc3d69a1c411f7f2",
    "length_capped": "bbf85871248c84c57ef643fb3007af4a6f20b559a170d39532fceafb8385983e",
    "seed_repeats": "e4096acbb6668fa565e8b9db46ec9b5acc1969235c0c07ba3147b1da8c178c09",
    "reply_parses": "be31377734b27542a95f5b896d1d8e77a7188cfc39f826d1e8878ddec16b47c8",
    "arguments_valid": "6839d638737e804d85af7c5c3a9691fba82fa61ee88a66abfc9100f031a7c5ed",
    "tool_permitted": "bfbe68a2aaf65cffb4df3dea9f9a85c9f8fd703c52be72b49714427a27af2add",
    "claim_supported": "47d2ea012db99f71324c26f8980db2f1c1b60583a9a8f8976a238bb92fa4f5c9",
    "log_untampered": "82d701470410156775c580bf70fb8322c84b40745dfd00cb70218e368b39e9eb",
    "no_pii_logged": "a59c90a7a97c88e3195144b2b65d41ae1453a3023a44127710bb3f01683fcd73",
    "answer_true": "ed522d924c833686589e1865b6545fecc7e4f357af8315fedd683a86ae196a3b",
}


def _owner_is_right(key: str, owner: object) -> bool:
    return isinstance(owner, str) and \
        hashlib.sha256(f"capstone:{key}={owner}".encode()).hexdigest() == OWNER_DIGESTS[key]


def guarantee_owners(owners) -> None:
    if not isinstance(owners, dict):
        raise CheckFailed(f"guarantee_owners must be a dict, got {type(owners).__name__}")
    if owners and all(owner is None for owner in owners.values()):  # the template, untouched
        raise NotImplementedError("guarantee_owners is still the template: give every key one of COMPONENTS")
    expect_equal("one entry per guarantee: the keys are exactly those of GUARANTEES", sorted(owners),
                 sorted(GUARANTEES), hint="start from {key: None for key in GUARANTEES} and fill in every value")
    off_menu = {key: owner for key, owner in owners.items() if owner not in COMPONENTS}
    expect_equal("every owner is one of COMPONENTS, spelt exactly", off_menu, {},
                 hint=f"choose from {', '.join(COMPONENTS)}")
    expect_equal("the model owns no guarantee (it is the part allowed to be wrong)",
                 sorted(key for key, owner in owners.items() if owner == "model"), [],
                 hint="ask which code makes the property hold whatever the model writes")
    for key, text in GUARANTEES.items():
        if not _owner_is_right(key, owners[key]):
            raise CheckFailed(f"{key} ({text}): {owners[key]!r} is not its owner. Hint: find the cell that "
                              "raised, refused, masked or detected it; if no code enforces it, the owner is 'nobody'")
        print(f"✓ {key}: {owners[key]}")


# -- exercise 2: the latency and cost budget ------------------------------------------------------
def production_scenario() -> dict:
    """The notebook's stated scenario: an 8B model in bf16 on one H100-class GPU, representative figures."""
    return {"prompt_tokens": 3_000, "cached_tokens": 2_000, "output_tokens": 300, "queue_ms": 40,
            "prefill_tokens_per_s": 10_000, "n_params": 8e9, "bytes_per_param": 2, "kv_bytes_per_token": 131_072,
            "bandwidth_gb_s": 3_350, "bandwidth_utilization": 0.7, "input_usd_per_mtok": 3.0,
            "cached_usd_per_mtok": 0.3, "output_usd_per_mtok": 15.0, "requests_per_day": 200_000,
            "ttft_slo_ms": 300, "latency_slo_s": 4.0}


def random_scenario(rng: random.Random) -> dict:
    prompt = rng.randint(1, 60_000)
    return {"prompt_tokens": prompt, "cached_tokens": rng.choice([0, rng.randint(0, prompt - 1)]),
            "output_tokens": rng.randint(1, 2_000), "queue_ms": rng.choice([0, rng.uniform(0, 500)]),
            "prefill_tokens_per_s": rng.uniform(500, 40_000), "n_params": rng.uniform(0.5e9, 70e9),
            "bytes_per_param": rng.choice([0.5, 1, 2]), "kv_bytes_per_token": rng.choice([0, 32_768, 131_072, 327_680]),
            "bandwidth_gb_s": rng.uniform(100, 8_000), "bandwidth_utilization": rng.uniform(0.2, 1.0),
            "input_usd_per_mtok": rng.uniform(0, 10), "cached_usd_per_mtok": rng.uniform(0, 1),
            "output_usd_per_mtok": rng.uniform(0, 60), "requests_per_day": rng.randint(0, 2_000_000),
            "ttft_slo_ms": rng.uniform(50, 5_000), "latency_slo_s": rng.uniform(1, 120)}


def _budget_values(result):
    return [result[key] for key in ("ttft_s", "decode_s_per_token", "latency_s", "usd_per_request", "usd_per_day")]


def _message(call) -> str:
    try:
        call()
    except ValueError as exc:
        return str(exc)
    except Exception as exc:  # the wrong kind of error
        raise CheckFailed(f"expected ValueError, got {type(exc).__name__}: {exc}") from None
    raise CheckFailed("expected ValueError, got no error")


def latency_cost_budget(fn) -> None:
    def run(scenario):
        return fn(copy.deepcopy(scenario))

    base = production_scenario()
    got = run(base)
    want = reference_budget(base)
    expect_equal("returns a dict with exactly the six keys", sorted(got) if isinstance(got, dict) else got,
                 list(BUDGET_KEYS))
    expect_close("TTFT = queue + (prompt - cached) tokens / prefill rate, in seconds", got["ttft_s"], want["ttft_s"],
                 rtol=1e-9, hint="queue_ms / 1000 + (prompt_tokens - cached_tokens) / prefill_tokens_per_s")
    expect_close("decode step = (weights + KV of prompt and output) / (bandwidth x utilization), in seconds",
                 got["decode_s_per_token"], want["decode_s_per_token"], rtol=1e-9,
                 hint="(n_params * bytes_per_param + kv_bytes_per_token * (prompt + output)) / "
                      "(bandwidth_gb_s * 1e9 * bandwidth_utilization)")
    expect_close("latency = TTFT + (output - 1) x decode step (the first token comes from prefill)",
                 got["latency_s"], want["latency_s"], rtol=1e-9)
    expect_close("cost per request: uncached input, cached input and output, each at its price per million",
                 got["usd_per_request"], want["usd_per_request"], rtol=1e-9)
    expect_close("cost per day = cost per request x requests_per_day", got["usd_per_day"], want["usd_per_day"],
                 rtol=1e-9)
    expect_equal("meets_slo: TTFT within ttft_slo_ms and latency within latency_slo_s", got["meets_slo"],
                 want["meets_slo"])
    no_cache = dict(base, cached_tokens=0)
    expect_close("with no cache hit every prompt token is prefilled and billed at the input price",
                 _budget_values(run(no_cache)), _budget_values(reference_budget(no_cache)), rtol=1e-9)
    full = dict(base, bandwidth_utilization=1.0)
    expect_close("full bandwidth utilization (1.0) is allowed: the five numbers", _budget_values(run(full)),
                 _budget_values(reference_budget(full)), rtol=1e-9, hint="bandwidth_utilization may be 1, not above")
    nearly_all = dict(base, cached_tokens=base["prompt_tokens"] - 1)
    expect_close("all but the last prompt token cached (cached_tokens = prompt_tokens - 1) is allowed",
                 _budget_values(run(nearly_all)), _budget_values(reference_budget(nearly_all)), rtol=1e-9,
                 hint="cached_tokens may be anything from 0 to prompt_tokens - 1, both ends included")
    one = dict(base, output_tokens=1)
    expect_close("a one-token reply: latency equals TTFT", run(one)["latency_s"], reference_budget(one)["ttft_s"],
                 rtol=1e-9)
    exact = dict(base, prompt_tokens=1_000, cached_tokens=0, queue_ms=0, prefill_tokens_per_s=4_000,
                 n_params=1.5625e10, bytes_per_param=2, kv_bytes_per_token=0, bandwidth_gb_s=1_000,
                 bandwidth_utilization=0.5, output_tokens=17, ttft_slo_ms=250, latency_slo_s=1.25)
    expect_equal("meets_slo: a TTFT and a latency exactly at their limits meet the SLO (<=)", run(exact)["meets_slo"],
                 True, hint="use <= for both limits")
    expect_equal("meets_slo: a TTFT over its limit fails, however short the latency",
                 run(dict(exact, ttft_slo_ms=249.9, latency_slo_s=100))["meets_slo"], False)
    expect_equal("meets_slo: a latency over its limit fails, however short the TTFT",
                 run(dict(exact, ttft_slo_ms=10_000, latency_slo_s=1.2))["meets_slo"], False)
    rng = random.Random(808)
    for case in range(20):
        scenario = random_scenario(rng)
        got, want = run(scenario), reference_budget(scenario)
        expect_close(f"random scenario {case}: the five numbers", _budget_values(got), _budget_values(want), atol=1e-12,
                     rtol=1e-9)
        expect_equal(f"random scenario {case}: meets_slo", got["meets_slo"], want["meets_slo"])
    bad = [("cached_tokens", "all of the prompt cached (cached_tokens = prompt_tokens)",
            dict(base, cached_tokens=base["prompt_tokens"])),
           ("cached_tokens", "a negative cached_tokens", dict(base, cached_tokens=-1)),
           ("prompt_tokens", "prompt_tokens = 0", dict(base, prompt_tokens=0, cached_tokens=0)),
           ("output_tokens", "output_tokens = 0", dict(base, output_tokens=0)),
           ("output_tokens", "a float token count (300.0)", dict(base, output_tokens=300.0)),
           ("cached_tokens", "a float cached_tokens (2000.0)", dict(base, cached_tokens=2_000.0)),
           ("requests_per_day", "a negative requests_per_day", dict(base, requests_per_day=-5)),
           ("requests_per_day", "a float requests_per_day (200000.0)", dict(base, requests_per_day=200_000.0)),
           ("prefill_tokens_per_s", "a NaN prefill rate", dict(base, prefill_tokens_per_s=float("nan"))),
           ("bandwidth_utilization", "a utilization above 1", dict(base, bandwidth_utilization=1.5)),
           ("bandwidth_utilization", "a utilization of 0", dict(base, bandwidth_utilization=0))]
    bad += [(key, f"{key} = 0 (it must be above 0)", dict(base, **{key: 0})) for key in POSITIVE]
    bad += [(key, f"a negative {key}", dict(base, **{key: -1.0})) for key in NON_NEGATIVE]
    missing = dict(base)
    del missing["bandwidth_gb_s"]
    bad.append(("bandwidth_gb_s", "a missing key", missing))
    expect_raises("an empty scenario (every key missing) raises ValueError", lambda: run({}), ValueError)
    for key, label, scenario in bad:
        message = _message(lambda: run(scenario))
        if key not in message or sum(k in message for k in base) > 3:
            raise CheckFailed(f"{label}: the ValueError must name the key {key!r} (not echo the whole scenario, "
                              f"which names every key), got {message!r}")
        print(f"✓ {label} raises ValueError naming {key} -> {message!r}")


# -- exercise 3: diagnosing a failing trace -------------------------------------------------------


TRACE_KINDS = ("answered", "abstained", "tool_ok", "permission", "bad_call", "overflow", "hot", "cut",
               "unguided", "not_shown", "unsupported")


def make_trace(kind: str, rng: random.Random) -> dict:
    """A trace record (``TraceRecord.to_dict()`` shape) with one failure of ``kind``, or a healthy one
    ("answered", "abstained", "tool_ok"); the fields that do not matter to the kind are drawn at random."""
    cool, hot = round(rng.uniform(0, 1.0), 2), round(rng.uniform(1.01, 3.0), 2)
    temperature = rng.choice([cool, hot])
    checks = {"format": True, "cited_shown": True, "claim_supported": True}
    meta = {"window": rng.choice([256, 384, 512]), "dropped": [], "finish_reason": "stop", "tool_error": None}
    state, guided, passages = "answered", rng.random() < 0.5, [str(rng.randint(1, 9)) for _ in range(rng.randint(1, 3))]
    if kind == "answered":
        meta["dropped"] = rng.choice([[], [str(rng.randint(10, 20))]])
    elif kind == "abstained":
        state, checks = "abstained", {"format": True}
    elif kind == "tool_ok":
        checks = rng.choice([{}, {"schema": True}])
    elif kind == "permission":
        state, checks, meta["tool_error"] = "refused", {}, "permission_denied"
        meta["dropped"] = rng.choice([[], ["4"]])
    elif kind == "bad_call":
        state, checks = "error", {}
        meta["tool_error"] = rng.choice(["invalid_arguments", "unknown_tool"])
    elif kind == "overflow":
        meta["dropped"] = [str(rng.randint(1, 9)) for _ in range(rng.randint(1, 3))]
        state = rng.choice(["abstained", "error"])
        checks = {"format": True} if state == "abstained" else {"format": False}
        temperature, passages = rng.choice([cool, hot]), []
    elif kind == "hot":
        temperature, state, checks, guided = hot, "error", {"format": False}, False
        meta["finish_reason"] = rng.choice(["stop", "length"])
    elif kind == "cut":
        state, meta["finish_reason"] = "error", "length"
        checks = rng.choice([{"format": False}, {"format": True}]) if temperature <= 1.0 else {"format": True}
    elif kind == "unguided":
        temperature, state, checks, guided = rng.choice([cool, 1.0]), "error", {"format": False}, False
    elif kind == "not_shown":
        checks = {"format": True, "cited_shown": False, "claim_supported": rng.choice([False, True])}
    elif kind == "unsupported":
        checks["claim_supported"] = False
        meta["dropped"] = rng.choice([[], ["8"]])
    else:
        raise ValueError(f"unknown trace kind {kind!r}; kinds: {', '.join(TRACE_KINDS)}")
    return {"request_id": f"req-{rng.randint(1000, 9999)}", "timestamp": "2026-01-15T09:30:00Z",
            "app_version": "notebook-08", "model": "tinychat", "weights_sha256": "ab" * 32, "template": "tinychat-chat",
            "decoding": {"temperature": temperature, "top_p": rng.choice([0.9, 1.0]), "seed": rng.randint(0, 99),
                         "max_new_tokens": 2 if kind == "cut" and rng.random() < 0.5 else 48, "guided": guided},
            "retrieval": {"index_version": 1, "passage_ids": passages}, "tools_version": "tinychat-tools",
            "policy_version": "passages-first", "validation": checks,
            "tokens": {"prompt": rng.randint(40, 400), "completion": rng.randint(1, 48)},
            "latency_ms": {"prefill": round(rng.uniform(1, 30), 3), "decode": round(rng.uniform(5, 300), 3)},
            "cost_usd": 0.0, "final_state": state, "metadata": meta}


def diagnose_trace(fn) -> None:
    def run(record):
        return fn(copy.deepcopy(record))

    rng = random.Random(8)
    first = run(make_trace("answered", rng))
    expect_equal("returns a dict with exactly the keys stage and fix", sorted(first) if isinstance(first, dict) else first,
                 ["fix", "stage"])
    named = [
        ("answered", "a healthy answer (every check passed) -> none, none (the strings, not None)"),
        ("abstained", "a healthy abstention: checks that did not apply are absent, not failed -> none, none"),
        ("tool_ok", "a tool call that ran -> none, none"),
        ("permission", "a permission refusal is the dispatcher doing its job -> tool, none"),
        ("bad_call", "a call the dispatcher rejected for its arguments or name -> tool, constrain_tool_call"),
        ("overflow", "passages dropped and no answer -> packing, shrink_context"),
        ("hot", "the format failed at a temperature above 1.0 -> sampling, lower_temperature"),
        ("cut", "the reply stopped at max_new_tokens -> decoding, raise_max_tokens"),
        ("unguided", "the format failed at a temperature of 1.0 or less -> decoding, constrain_output"),
        ("not_shown", "the reply cites a passage that was not shown -> grounding, constrain_output"),
        ("unsupported", "the cited passage does not hold the reply's statement -> grounding, block_unsupported"),
    ]
    for kind, label in named:
        record = make_trace(kind, rng)
        expect_equal(label, run(record), reference_diagnosis(record))
    specials = [
        ("passages were dropped but the request was answered: not a packing failure",
         dict(make_trace("unsupported", rng), metadata={"window": 256, "dropped": ["3"], "finish_reason": "stop",
                                                        "tool_error": None})),
        ("a hot but healthy answer: the temperature alone is not a failure",
         _with(make_trace("answered", rng), decoding_temperature=2.5)),
        ("a hot reply cut at the length cap: the sampling rule comes before the length rule",
         _with(make_trace("hot", rng), finish_reason="length")),
        ("a temperature of exactly 1.0 is not above 1.0", _with(make_trace("unguided", rng), decoding_temperature=1.0)),
        ("a refusal with dropped passages: the tool rule comes first",
         _with(make_trace("permission", rng), dropped=["2", "5"])),
        ("cited passage not shown and claim unsupported: the citation rule comes first",
         _with(make_trace("not_shown", rng), claim_supported=False)),
        ("an unknown tool is a rejected call too -> tool, constrain_tool_call",
         _with(make_trace("bad_call", rng), tool_error="unknown_tool")),
        ("passages dropped and a broken reply (state error, not only an abstention) -> packing, shrink_context",
         _with(make_trace("hot", rng), dropped=["3"], finish_reason="stop")),
        ("passages dropped and a reply cut at the cap: the packing rule comes before the length rule",
         _with(make_trace("cut", rng), dropped=["1", "6"])),
        ("a cool reply cut at the cap whose format failed: the length rule comes before the format rule",
         _with(make_trace("unguided", rng), finish_reason="length", decoding_temperature=0.5)),
    ]
    for label, record in specials:
        expect_equal(label, run(record), reference_diagnosis(record))
    for case in range(40):
        record = make_trace(TRACE_KINDS[case % len(TRACE_KINDS)], rng)
        expect_equal(f"random trace {case} ({TRACE_KINDS[case % len(TRACE_KINDS)]})", run(record),
                     reference_diagnosis(record))
    expect_raises("a final_state outside answered/abstained/refused/error raises ValueError",
                  lambda: run(dict(make_trace("answered", rng), final_state="done")), ValueError)
    for kind, what in (("permission", "a permission refusal"), ("overflow", "dropped passages"),
                       ("unsupported", "an unsupported claim")):
        broken = dict(make_trace(kind, rng), final_state="done")
        expect_raises(f"the final_state is checked before any rule: {what} with final_state 'done' raises ValueError",
                      lambda b=broken: run(b), ValueError)


def _with(record: dict, *, decoding_temperature=None, finish_reason=None, dropped=None, claim_supported=None,
          tool_error=None) -> dict:
    record = copy.deepcopy(record)
    if tool_error is not None:
        record["metadata"]["tool_error"] = tool_error
    if decoding_temperature is not None:
        record["decoding"]["temperature"] = decoding_temperature
    if finish_reason is not None:
        record["metadata"]["finish_reason"] = finish_reason
    if dropped is not None:
        record["metadata"]["dropped"] = dropped
    if claim_supported is not None:
        record["validation"]["claim_supported"] = claim_supported
    return record


HINTS = {
    "guarantee_owners": [
        "For each guarantee, scroll back to the cell where the property was enforced: something raised, refused, "
        "masked a token or flagged a line. The component that ran that code is the owner.",
        "The model appears in the menu to be ruled out: it produces a distribution over tokens and nothing more. "
        "A property that no cell enforced, whatever the model writes, belongs to 'nobody'.",
        "Two owners appear twice: one component both checks arguments and checks permissions, and one both "
        "redacts and chains hashes. The engine (scheduler and block manager) owns two as well.",
    ],
    "latency_cost_budget": [
        "Validate first, key by key, and put the key's name in every ValueError message. cached_tokens may be at "
        "most prompt_tokens - 1: the last prompt token is always computed, it yields the first output token.",
        "ttft_s = queue_ms / 1000 + (prompt_tokens - cached_tokens) / prefill_tokens_per_s. decode_s_per_token = "
        "(n_params * bytes_per_param + kv_bytes_per_token * (prompt_tokens + output_tokens)) / (bandwidth_gb_s * "
        "1e9 * bandwidth_utilization).",
        "latency_s = ttft_s + (output_tokens - 1) * decode_s_per_token. usd_per_request = ((prompt - cached) * "
        "input price + cached * cached price + output * output price) / 1e6. meets_slo uses <= for both limits.",
    ],
    "diagnose_trace": [
        "Read four places: record['metadata'] (tool_error, dropped, finish_reason), record['validation'], "
        "record['decoding']['temperature'] and record['final_state']. Check final_state first and raise "
        "ValueError if it is not one of the four.",
        "Apply the rules in the stated order and return at the first that matches; a validation key that is absent "
        "did not apply, so test `checks.get('format') is False`, not `not checks.get('format')`.",
        "The order: tool error; dropped passages without an answer; format failed above temperature 1.0; length; "
        "format failed; citation not shown; claim unsupported; otherwise {'stage': 'none', 'fix': 'none'}.",
    ],
}
