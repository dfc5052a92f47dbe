"""Known-wrong answers to notebook 09, each with the rule it breaks (run by test_wrong_answers.py)."""
from __future__ import annotations

import re

from tests.hidden.mutants import moved, mutant

A = "09_capstone"

RIGHT_OWNERS = {
    "prompt_fits": "context packer", "template_billed": "tokenizer", "kv_fits": "engine", "length_capped": "engine",
    "seed_repeats": "sampler", "reply_parses": "grammar guide", "arguments_valid": "dispatcher",
    "tool_permitted": "dispatcher", "claim_supported": "grounding check", "log_untampered": "trace log",
    "no_pii_logged": "trace log", "answer_true": "nobody",
}


def _owners(**changes):
    owners = {**RIGHT_OWNERS, **changes}
    return {key: owner for key, owner in owners.items() if owner is not None}


def _budget_mutant(label, *edits):
    return mutant(A, "latency_cost_budget", *edits, label=label)


def _diagnose_mutant(label, *edits):
    return mutant(A, "diagnose_trace", *edits, label=label)


def _budget_entry(fragment, label, *edits):
    """A WRONG_ANSWERS entry: the budget solution with ``edits``, failing the check named by ``fragment``."""
    return "latency_cost_budget", {"latency_cost_budget": _budget_mutant(label, *edits)}, fragment


def _diagnose_entry(fragment, label, *edits):
    return "diagnose_trace", {"diagnose_trace": _diagnose_mutant(label, *edits)}, fragment


# Lines of the solutions that the edits below move (each starts exactly one line).
_STATE_CHECK, _UNPACK = '    if record.get("final_state") not in', "    meta, checks = "
_TOOL, _PACKING = '    if meta["tool_error"] is not None', '    if meta["dropped"] and'
_SAMPLING, _LENGTH = '    if checks.get("format") is False and', '    if meta["finish_reason"] == "length"'
_FORMAT, _SHOWN = '    if checks.get("format") is False:', '    if checks.get("cited_shown")'
_HEALTHY = '    return {"stage": "none", "fix": "none"}'
_NON_NEGATIVE = ('("queue_ms", "kv_bytes_per_token", "input_usd_per_mtok", "cached_usd_per_mtok", "output_usd_per_mtok",\n'
                 '                "ttft_slo_ms", "latency_slo_s")')
_POSITIVE = '("prefill_tokens_per_s", "n_params", "bytes_per_param", "bandwidth_gb_s")'


def _non_negative_without(key):
    return _NON_NEGATIVE, _NON_NEGATIVE.replace(f'"{key}", ', "").replace(f', "{key}"', "")


def _positive_to_non_negative(key):
    """A learner who files a key that must be above 0 under "0 or more" (both tuples edited at once)."""
    def edit(source):
        source = source.replace(_POSITIVE, _POSITIVE.replace(f'"{key}", ', "").replace(f', "{key}"', ""), 1)
        return source.replace('("queue_ms", ', f'("queue_ms", "{key}", ', 1)
    return edit


# -- latency_cost_budget -------------------------------------------------------------------------
def _budget_with(*, cache_skips_prefill=True, queue_to_s=True, kv=True, kv_output=True, utilization=True,
                 gb=1e9, decode_steps="output-1", cached_price=True, per=1e6, per_day=True, slo="<=",
                 slo_latency=True, ttft_slo_in_ms=True, cached_max="prompt-1", validate=True, name_key=True,
                 int_tokens=True, utilization_max=1.0):
    def latency_cost_budget(scenario):
        keys = ("prompt_tokens", "cached_tokens", "output_tokens", "queue_ms", "prefill_tokens_per_s", "n_params",
                "bytes_per_param", "kv_bytes_per_token", "bandwidth_gb_s", "bandwidth_utilization",
                "input_usd_per_mtok", "cached_usd_per_mtok", "output_usd_per_mtok", "requests_per_day",
                "ttft_slo_ms", "latency_slo_s")
        s = scenario

        def fail(key):
            raise ValueError(f"bad value for {key}" if name_key else "bad scenario")

        if validate:
            for key in keys:
                if key not in s:
                    fail(key)
            for key in ("prompt_tokens", "output_tokens"):
                whole = isinstance(s[key], int) if int_tokens else s[key] == int(s[key])
                if isinstance(s[key], bool) or not whole or s[key] < 1:
                    fail(key)
            if not isinstance(s["requests_per_day"], int) or s["requests_per_day"] < 0:
                fail("requests_per_day")
            top = s["prompt_tokens"] - 1 if cached_max == "prompt-1" else s["prompt_tokens"]
            if not isinstance(s["cached_tokens"], int) or not 0 <= s["cached_tokens"] <= top:
                fail("cached_tokens")
            for key in ("prefill_tokens_per_s", "n_params", "bytes_per_param", "bandwidth_gb_s"):
                if s[key] <= 0:
                    fail(key)
            if not 0 < s["bandwidth_utilization"] <= utilization_max:
                fail("bandwidth_utilization")
            for key in ("queue_ms", "kv_bytes_per_token", "input_usd_per_mtok", "cached_usd_per_mtok",
                        "output_usd_per_mtok", "ttft_slo_ms", "latency_slo_s"):
                if s[key] < 0:
                    fail(key)
        prompt, cached, output = s["prompt_tokens"], s["cached_tokens"], s["output_tokens"]
        prefilled = prompt - cached if cache_skips_prefill else prompt
        ttft = (s["queue_ms"] / 1000 if queue_to_s else s["queue_ms"]) + prefilled / s["prefill_tokens_per_s"]
        context = prompt + output if kv_output else prompt
        read = s["n_params"] * s["bytes_per_param"] + (s["kv_bytes_per_token"] * context if kv else 0)
        step = read / (s["bandwidth_gb_s"] * gb * (s["bandwidth_utilization"] if utilization else 1))
        latency = ttft + (output - 1 if decode_steps == "output-1" else output) * step
        cached_rate = s["cached_usd_per_mtok"] if cached_price else s["input_usd_per_mtok"]
        usd = ((prompt - cached) * s["input_usd_per_mtok"] + cached * cached_rate + output * s["output_usd_per_mtok"]) / per
        ttft_ok = (ttft * 1000 if ttft_slo_in_ms else ttft)
        if slo == "<=":
            meets = ttft_ok <= s["ttft_slo_ms"] and (latency <= s["latency_slo_s"] or not slo_latency)
        else:
            meets = ttft_ok < s["ttft_slo_ms"] and (latency < s["latency_slo_s"] or not slo_latency)
        return {"ttft_s": ttft, "decode_s_per_token": step, "latency_s": latency, "usd_per_request": usd,
                "usd_per_day": usd * s["requests_per_day"] if per_day else usd, "meets_slo": meets}
    flags = (("prefills_cached", not cache_skips_prefill), ("queue_in_s", not queue_to_s), ("no_kv", not kv),
             ("kv_prompt_only", not kv_output), ("no_utilization", not utilization), ("gib", gb != 1e9),
             ("output_steps", decode_steps != "output-1"), ("cached_at_input_price", not cached_price),
             ("per_thousand", per != 1e6), ("no_per_day", not per_day), ("strict_slo", slo != "<="),
             ("ttft_only_slo", not slo_latency), ("slo_seconds", not ttft_slo_in_ms),
             ("whole_prompt_cached", cached_max != "prompt-1"), ("no_validation", not validate),
             ("unnamed_errors", not name_key), ("float_tokens", not int_tokens),
             ("utilization_above_1", utilization_max != 1.0))
    latency_cost_budget.__name__ = "_budget_" + "_".join(name for name, on in flags if on)
    return latency_cost_budget


# -- diagnose_trace ------------------------------------------------------------------------------
def _diagnose_with(*, healthy="none", absent_fails=False, hot_alone=False, dropped_alone=False,
                   permission_fix="none", tool_first=True, sampling_first=True, threshold=">", temperature_rule=True,
                   not_shown_fix="constrain_output", citation_first=True, validate=True, hard_coded=False):
    def diagnose_trace(record):
        if validate and record.get("final_state") not in ("answered", "abstained", "refused", "error"):
            raise ValueError("bad final_state")
        meta, checks, t = record["metadata"], record["validation"], record["decoding"]["temperature"]
        if hard_coded:  # fitted to the first three of the notebook's failing traces
            if meta["dropped"]:
                return {"stage": "packing", "fix": "shrink_context"}
            if meta["finish_reason"] == "length" and t <= 1.0:
                return {"stage": "decoding", "fix": "raise_max_tokens"}
            return {"stage": "sampling", "fix": "lower_temperature"}

        def failed(key):
            return checks.get(key, False) is False if absent_fails else checks.get(key) is False

        hot = t > 1.0 if threshold == ">" else t >= 1.0
        rules = []
        tool = ((lambda: meta["tool_error"] is not None),
                {"stage": "tool", "fix": permission_fix if meta["tool_error"] == "permission_denied"
                 else "constrain_tool_call"})
        packing = ((lambda: bool(meta["dropped"]) and (dropped_alone or record["final_state"] != "answered")),
                   {"stage": "packing", "fix": "shrink_context"})
        rules += [tool, packing] if tool_first else [packing, tool]
        sampling = ((lambda: temperature_rule and hot and (hot_alone or failed("format"))),
                    {"stage": "sampling", "fix": "lower_temperature"})
        length = ((lambda: meta["finish_reason"] == "length"), {"stage": "decoding", "fix": "raise_max_tokens"})
        rules += [sampling, length] if sampling_first else [length, sampling]
        rules.append(((lambda: failed("format")), {"stage": "decoding", "fix": "constrain_output"}))
        shown = ((lambda: failed("cited_shown")), {"stage": "grounding", "fix": not_shown_fix})
        claim = ((lambda: failed("claim_supported")), {"stage": "grounding", "fix": "block_unsupported"})
        rules += [shown, claim] if citation_first else [claim, shown]
        for applies, answer in rules:
            if applies():
                return dict(answer)
        return {"stage": healthy, "fix": healthy}
    flags = ((f"healthy_{healthy}", healthy != "none"), ("absent_fails", absent_fails), ("hot_alone", hot_alone),
             ("dropped_alone", dropped_alone), (f"permission_{permission_fix}", permission_fix != "none"),
             ("packing_first", not tool_first), ("length_first", not sampling_first),
             ("threshold_ge", threshold != ">"), ("no_temperature_rule", not temperature_rule),
             (f"not_shown_{not_shown_fix}", not_shown_fix != "constrain_output"),
             ("claim_first", not citation_first), ("no_validation", not validate), ("hard_coded", hard_coded))
    diagnose_trace.__name__ = "_diagnose_" + "_".join(name for name, on in flags if on)
    return diagnose_trace


# (exercise, replaced names, fragment of the hidden check it breaks): see test_wrong_answers.py
WRONG_ANSWERS = [
    ("guarantee_owners", {"guarantee_owners": _owners(reply_parses="model")}, "the model owns no guarantee"),
    ("guarantee_owners", {"guarantee_owners": _owners(seed_repeats="engine")}, "the owner of seed_repeats"),
    ("guarantee_owners", {"guarantee_owners": _owners(answer_true="grounding check")}, "the owner of answer_true"),
    ("guarantee_owners", {"guarantee_owners": _owners(prompt_fits="engine")}, "the owner of prompt_fits"),
    ("guarantee_owners", {"guarantee_owners": _owners(template_billed="context packer")},
     "the owner of template_billed"),
    ("guarantee_owners", {"guarantee_owners": _owners(claim_supported="grammar guide")}, "the owner of claim_supported"),
    ("guarantee_owners", {"guarantee_owners": _owners(tool_permitted="grounding check")}, "the owner of tool_permitted"),
    ("guarantee_owners", {"guarantee_owners": _owners(log_untampered="nobody")}, "the owner of log_untampered"),
    ("guarantee_owners", {"guarantee_owners": _owners(length_capped="sampler")}, "the owner of length_capped"),
    ("guarantee_owners", {"guarantee_owners": _owners(no_pii_logged=None)}, "exactly one entry per key"),
    ("guarantee_owners", {"guarantee_owners": _owners(arguments_valid="Dispatcher")}, "one of COMPONENTS"),
    ("latency_cost_budget", {"latency_cost_budget": _budget_with(cache_skips_prefill=False)},
     "TTFT = queue + uncached prompt tokens / prefill rate"),
    ("latency_cost_budget", {"latency_cost_budget": _budget_with(queue_to_s=False)}, "TTFT = queue"),
    ("latency_cost_budget", {"latency_cost_budget": _budget_with(kv=False)}, "decode step = (weights + KV"),
    ("latency_cost_budget", {"latency_cost_budget": _budget_with(kv_output=False)}, "decode step = (weights + KV"),
    ("latency_cost_budget", {"latency_cost_budget": _budget_with(utilization=False)}, "decode step = (weights + KV"),
    ("latency_cost_budget", {"latency_cost_budget": _budget_with(gb=2**30)}, "decode step = (weights + KV"),
    ("latency_cost_budget", {"latency_cost_budget": _budget_with(decode_steps="output")},
     "latency = TTFT + (output - 1) decode steps"),
    ("latency_cost_budget", {"latency_cost_budget": _budget_with(cached_price=False)}, "cost per request"),
    ("latency_cost_budget", {"latency_cost_budget": _budget_with(per=1e3)}, "cost per request"),
    ("latency_cost_budget", {"latency_cost_budget": _budget_with(per_day=False)}, "cost per day"),
    ("latency_cost_budget", {"latency_cost_budget": _budget_with(slo="<")}, "exactly at their limits"),
    ("latency_cost_budget", {"latency_cost_budget": _budget_with(slo_latency=False)}, "a latency just over its limit"),
    ("latency_cost_budget", {"latency_cost_budget": _budget_with(ttft_slo_in_ms=False)}, "a TTFT just over its limit"),
    ("latency_cost_budget", {"latency_cost_budget": _budget_with(cached_max="prompt")}, "the whole prompt cached"),
    ("latency_cost_budget", {"latency_cost_budget": _budget_with(validate=False)}, "invalid input raises ValueError"),
    ("latency_cost_budget", {"latency_cost_budget": _budget_with(name_key=False)}, "the ValueError names the key"),
    # Every message the whole scenario's repr: it holds the offending key's name among all the others.
    _budget_entry("the ValueError names the key", "_budget_echoes_the_scenario",
                  lambda source: re.sub(r'raise ValueError\(f".*"\)', 'raise ValueError(f"bad scenario: {scenario!r}")',
                                        source)),
    ("latency_cost_budget", {"latency_cost_budget": _budget_with(int_tokens=False)}, "a float output token count"),
    ("latency_cost_budget", {"latency_cost_budget": _budget_with(utilization_max=2.0)}, "a utilization above 1"),
    ("diagnose_trace", {"diagnose_trace": _diagnose_with(healthy=None)}, "a healthy grounded answer"),
    ("diagnose_trace", {"diagnose_trace": _diagnose_with(absent_fails=True)},
     "a healthy abstention whose grounding checks are absent"),
    ("diagnose_trace", {"diagnose_trace": _diagnose_with(hot_alone=True)}, "a healthy answer at a high temperature"),
    ("diagnose_trace", {"diagnose_trace": _diagnose_with(dropped_alone=True)}, "an answer despite dropped passages"),
    ("diagnose_trace", {"diagnose_trace": _diagnose_with(permission_fix="constrain_tool_call")},
     "a permission refusal -> tool/none"),
    ("diagnose_trace", {"diagnose_trace": _diagnose_with(tool_first=False)},
     "a refusal with dropped passages: the tool rule comes first"),
    ("diagnose_trace", {"diagnose_trace": _diagnose_with(sampling_first=False)},
     "a broken hot reply cut at the cap: the sampling rule comes before the length rule"),
    ("diagnose_trace", {"diagnose_trace": _diagnose_with(threshold=">=")}, "exactly temperature 1.0"),
    ("diagnose_trace", {"diagnose_trace": _diagnose_with(temperature_rule=False)},
     "a broken reply at temperature above 1.0"),
    ("diagnose_trace", {"diagnose_trace": _diagnose_with(not_shown_fix="block_unsupported")},
     "a citation of a passage that was not shown"),
    ("diagnose_trace", {"diagnose_trace": _diagnose_with(citation_first=False)}, "the citation rule comes first"),
    ("diagnose_trace", {"diagnose_trace": _diagnose_with(validate=False)}, "a final_state that is not one of the four"),
    ("diagnose_trace", {"diagnose_trace": _diagnose_with(hard_coded=True)}, "a healthy grounded answer"),
    # Added for the rule sentences the entries above left without a wrong answer of their own.
    ("guarantee_owners", {"guarantee_owners": _owners(kv_fits="context packer")}, "the owner of kv_fits"),
    ("guarantee_owners", {"guarantee_owners": _owners(arguments_valid="grammar guide")},
     "the owner of arguments_valid"),
    ("guarantee_owners", {"guarantee_owners": _owners(reply_parses="engine")}, "the owner of reply_parses"),
    ("guarantee_owners", {"guarantee_owners": _owners(seed_repeats="nobody")}, "the owner of seed_repeats"),
    ("guarantee_owners", {"guarantee_owners": _owners(no_pii_logged="nobody")}, "the owner of no_pii_logged"),
    ("guarantee_owners", {"guarantee_owners": {**RIGHT_OWNERS, "json_valid": "grammar guide"}},
     "exactly one entry per key"),
    _budget_entry("returns a dict with exactly the six keys", "_budget_extra_key",
                  ('return {"ttft_s": ttft,', 'return {"prefill_s": ttft - s["queue_ms"] / 1000, "ttft_s": ttft,')),
    _budget_entry("invalid input raises ValueError: a missing key", "_budget_key_error_when_missing",
                  ('            raise ValueError(f"the scenario has no {key}")', "            pass")),
    _budget_entry("a negative cached_tokens", "_budget_cached_no_lower_bound",
                  ('not 0 <= s["cached_tokens"] < s["prompt_tokens"]', 'not s["cached_tokens"] < s["prompt_tokens"]')),
    _budget_entry("all but the last prompt token cached", "_budget_cached_one_short",
                  ('0 <= s["cached_tokens"] < s["prompt_tokens"]', '0 <= s["cached_tokens"] < s["prompt_tokens"] - 1')),
    _budget_entry("a float cached_tokens", "_budget_float_cached",
                  ('if not is_int(s["cached_tokens"]) or not', "if not")),
    _budget_entry("a float requests_per_day", "_budget_float_requests",
                  ('if not is_int(s["requests_per_day"]) or s["requests_per_day"] < 0:',
                   'if s["requests_per_day"] < 0:')),
    _budget_entry("a prefill rate of 0", "_budget_zero_allowed_above_0",
                  ("if not is_number(s[key]) or s[key] <= 0:", "if not is_number(s[key]) or s[key] < 0:")),
    _budget_entry("no bytes per parameter", "_budget_bytes_per_param_may_be_0",
                  _positive_to_non_negative("bytes_per_param")),
    _budget_entry("no parameters", "_budget_n_params_may_be_0", _positive_to_non_negative("n_params")),
    _budget_entry("a NaN prefill rate", "_budget_nan_passes",
                  ("if not is_number(s[key]) or s[key] <= 0:", "if s[key] <= 0:")),
    _budget_entry("a utilization of 0", "_budget_utilization_0",
                  ('not 0 < s["bandwidth_utilization"] <= 1', 'not 0 <= s["bandwidth_utilization"] <= 1')),
    _budget_entry("full bandwidth utilization", "_budget_utilization_1_refused",
                  ('not 0 < s["bandwidth_utilization"] <= 1', 'not 0 < s["bandwidth_utilization"] < 1')),
    _budget_entry("no queue", "_budget_zero_refused_for_0_or_more",
                  ("if not is_number(s[key]) or s[key] < 0:", "if not is_number(s[key]) or s[key] <= 0:")),
    _budget_entry("a negative kv_bytes_per_token", "_budget_negative_kv_passes",
                  _non_negative_without("kv_bytes_per_token")),
    _budget_entry("a negative ttft_slo_ms", "_budget_negative_ttft_limit_passes", _non_negative_without("ttft_slo_ms")),
    _budget_entry("a negative cached_usd_per_mtok", "_budget_negative_cached_price_passes",
                  _non_negative_without("cached_usd_per_mtok")),
    _budget_entry("cost per request", "_budget_whole_prompt_at_input_price",
                  ('((prompt - cached) * s["input_usd_per_mtok"]', '(prompt * s["input_usd_per_mtok"]')),
    _budget_entry("cost per request", "_budget_output_at_input_price",
                  ('output * s["output_usd_per_mtok"]', 'output * s["input_usd_per_mtok"]')),
    _diagnose_entry("whatever the other fields hold (a permission refusal", "_diagnose_state_checked_after_tool_rule",
                    moved(_STATE_CHECK, _UNPACK, _PACKING)),
    _diagnose_entry("whatever the other fields hold (an unsupported claim", "_diagnose_state_checked_when_healthy",
                    moved(_STATE_CHECK, _UNPACK, _HEALTHY)),
    _diagnose_entry("an unknown tool -> tool/constrain_tool_call", "_diagnose_unknown_tool_missed",
                    ('if meta["tool_error"] is not None:',
                     'if meta["tool_error"] in ("permission_denied", "invalid_arguments"):')),
    _diagnose_entry("the packing rule comes before the sampling rule", "_diagnose_packing_only_for_abstentions",
                    ('record["final_state"] != "answered"', 'record["final_state"] == "abstained"')),
    _diagnose_entry("a healthy abstention whose grounding checks are absent", "_diagnose_empty_dropped_counts",
                    ('if meta["dropped"] and', 'if meta["dropped"] is not None and')),
    _diagnose_entry("the packing rule comes before the sampling rule", "_diagnose_sampling_before_packing",
                    moved(_SAMPLING, _LENGTH, _PACKING)),
    _diagnose_entry("the packing rule comes before the length rule", "_diagnose_length_before_packing",
                    moved(_LENGTH, _FORMAT, _PACKING)),
    _diagnose_entry("a reply cut at the cap -> decoding/raise_max_tokens", "_diagnose_format_before_length",
                    moved(_FORMAT, _SHOWN, _LENGTH)),
]
