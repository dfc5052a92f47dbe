"""The capstone's menus: what notebook 09's exercises choose from.

The notebook's setup cell imports these (they must exist while grading, when the visible
checks are not importable), and its visible checks read the same tuples, so the text a learner
reads and the checks cannot drift apart:

    >>> "engine" in COMPONENTS and "block_unsupported" in FIXES
    True

It also holds the package's reference answers to exercises 2 and 3, which the visible checks
compute their expectations with (both are stubbed out while grading; see the hidden tests'
``REFERENCES``): ``reference_budget`` works a scenario with the drills' own formulas, and
``reference_diagnosis`` reads ``DIAGNOSIS_RULES``, the exercise's rules as a table of data:

    >>> reference_diagnosis({"final_state": "error", "decoding": {"temperature": 1.5},
    ...                      "validation": {"format": False},
    ...                      "metadata": {"tool_error": None, "dropped": [], "finish_reason": "length"}})
    {'stage': 'sampling', 'fix': 'lower_temperature'}
"""
from __future__ import annotations

import math
from numbers import Real

# -- exercise 1: who owns each guarantee ------------------------------------------------------------
COMPONENTS = ("model", "tokenizer", "context packer", "engine", "sampler", "grammar guide", "dispatcher",
              "grounding check", "trace log", "nobody")
GUARANTEES = {
    "prompt_fits": "the prompt, with room kept for the reply, fits the context window",
    "template_billed": "the token count that is billed includes the chat template's markers",
    "kv_fits": "a request is admitted only when its KV cache can have room in the memory pool",
    "length_capped": "a reply never runs past max_new_tokens",
    "seed_repeats": "the same prompt, parameters and seed give the same reply, on the same hardware and in a batch "
                    "of the same shape",
    "reply_parses": "a reply that ends on its own (not cut off at max_new_tokens) matches its grammar (the JSON "
                    "schema, or the cited-answer format)",
    "arguments_valid": "a tool runs only with arguments that fit the tool's schema",
    "tool_permitted": "a tool runs only when the session holds the tool's permission",
    "claim_supported": "the reply's statement is checked against the text of the passage it cites",
    "log_untampered": "an edited, inserted or deleted line of the trace log is detected; lines cut from its end "
                      "only when verify is given the head kept elsewhere",
    "no_pii_logged": "an email address or card number in a form the redaction patterns match is never written to "
                     "the trace log",
    "answer_true": "the answer is true",
}

# -- exercise 3: diagnosing a failing trace -------------------------------------------------------
STAGES = ("none", "packing", "sampling", "decoding", "tool", "grounding")
FIXES = ("none", "shrink_context", "lower_temperature", "raise_max_tokens", "constrain_output", "block_unsupported",
         "constrain_tool_call")
FINAL_STATES = ("answered", "abstained", "refused", "error")


# -- exercise 2: the budget, worked with the drills' formulas ----------------------------------------
SCENARIO_KEYS = ("prompt_tokens", "cached_tokens", "output_tokens", "queue_ms", "prefill_tokens_per_s", "n_params",
                 "bytes_per_param", "kv_bytes_per_token", "bandwidth_gb_s", "bandwidth_utilization",
                 "input_usd_per_mtok", "cached_usd_per_mtok", "output_usd_per_mtok", "requests_per_day",
                 "ttft_slo_ms", "latency_slo_s")
BUDGET_KEYS = ("decode_s_per_token", "latency_s", "meets_slo", "ttft_s", "usd_per_day", "usd_per_request")
POSITIVE = ("prefill_tokens_per_s", "n_params", "bytes_per_param", "bandwidth_gb_s")
NON_NEGATIVE = ("queue_ms", "kv_bytes_per_token", "input_usd_per_mtok", "cached_usd_per_mtok", "output_usd_per_mtok",
                "ttft_slo_ms", "latency_slo_s")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


def reference_budget(scenario: dict) -> dict:
    """Exercise 2's rules, worked with the drills' formulas (``course_lib.drills.problem_formulas``)."""
    from course_lib.drills.problem_formulas import decode_step_floor_s, request_cost_usd, request_latency_s, \
        time_to_first_token_s

    for key in SCENARIO_KEYS:
        if key not in scenario:
            raise ValueError(f"the scenario has no {key}")
    s = scenario
    for key in ("prompt_tokens", "output_tokens"):
        if not _is_int(s[key]) or s[key] < 1:
            raise ValueError(f"{key} must be an int >= 1, got {s[key]!r}")
    if not _is_int(s["requests_per_day"]) or s["requests_per_day"] < 0:
        raise ValueError(f"requests_per_day must be an int >= 0, got {s['requests_per_day']!r}")
    if not _is_int(s["cached_tokens"]) or not 0 <= s["cached_tokens"] <= s["prompt_tokens"] - 1:
        raise ValueError(f"cached_tokens must be an int from 0 to prompt_tokens - 1, got {s['cached_tokens']!r}")
    for key in POSITIVE:
        if not _is_number(s[key]) or s[key] <= 0:
            raise ValueError(f"{key} must be a number > 0, got {s[key]!r}")
    for key in NON_NEGATIVE:
        if not _is_number(s[key]) or s[key] < 0:
            raise ValueError(f"{key} must be a number >= 0, got {s[key]!r}")
    if not _is_number(s["bandwidth_utilization"]) or not 0 < s["bandwidth_utilization"] <= 1:
        raise ValueError(f"bandwidth_utilization must be in (0, 1], got {s['bandwidth_utilization']!r}")
    prompt, cached, output = s["prompt_tokens"], s["cached_tokens"], s["output_tokens"]
    ttft = time_to_first_token_s(prompt - cached, s["prefill_tokens_per_s"], queue_s=s["queue_ms"] / 1000)
    bytes_read = s["n_params"] * s["bytes_per_param"] + s["kv_bytes_per_token"] * (prompt + output)
    step = decode_step_floor_s(bytes_read, s["bandwidth_gb_s"] * s["bandwidth_utilization"])
    latency = request_latency_s(prompt - cached, output, s["prefill_tokens_per_s"], step, queue_s=s["queue_ms"] / 1000)
    usd = request_cost_usd(prompt, output, cached_tokens=cached, input_usd_per_mtok=s["input_usd_per_mtok"],
                           cached_usd_per_mtok=s["cached_usd_per_mtok"], output_usd_per_mtok=s["output_usd_per_mtok"])
    return {"ttft_s": ttft, "decode_s_per_token": step, "latency_s": latency, "usd_per_request": usd,
            "usd_per_day": usd * s["requests_per_day"],
            "meets_slo": ttft * 1000 <= s["ttft_slo_ms"] and latency <= s["latency_slo_s"]}


# -- exercise 3: the diagnosis rules, as data ---------------------------------------------------------
def _failed(record: dict, check: str) -> bool:
    """Only the value False is a failure: a check that did not apply is absent."""
    return record["validation"].get(check) is False


# (applies to the record, stage, fix), in the exercise's order; the first that applies decides.
DIAGNOSIS_RULES = (
    (lambda r: r["metadata"]["tool_error"] == "permission_denied", "tool", "none"),
    (lambda r: r["metadata"]["tool_error"] is not None, "tool", "constrain_tool_call"),
    (lambda r: bool(r["metadata"]["dropped"]) and r["final_state"] != "answered", "packing", "shrink_context"),
    (lambda r: _failed(r, "format") and r["decoding"]["temperature"] > 1.0, "sampling", "lower_temperature"),
    (lambda r: r["metadata"]["finish_reason"] == "length", "decoding", "raise_max_tokens"),
    (lambda r: _failed(r, "format"), "decoding", "constrain_output"),
    (lambda r: _failed(r, "cited_shown"), "grounding", "constrain_output"),
    (lambda r: _failed(r, "claim_supported"), "grounding", "block_unsupported"),
)
HEALTHY = ("none", "none")


def reference_diagnosis(record: dict) -> dict:
    """Exercise 3: the first of ``DIAGNOSIS_RULES`` that applies, else healthy."""
    if record.get("final_state") not in FINAL_STATES:
        raise ValueError(f"final_state must be one of {FINAL_STATES}, got {record.get('final_state')!r}")
    stage, fix = next(((stage, fix) for applies, stage, fix in DIAGNOSIS_RULES if applies(record)), HEALTHY)
    return {"stage": stage, "fix": fix}
