"""Hidden tests for 09_capstone, run in the grader's process (see course_lib/pipeline/hidden.py).

Where each exercise's expectations come from (none of them is the solution's code):

- guarantee_owners: the owners as the notebook attributes them, a table typed in below.
- latency_cost_budget: the budget's arithmetic in plain Python (``_budget``), written from the
  exercise text; the package's reference works the drills' formulas instead.
- diagnose_trace: hand-derived outcomes for the named traces, and for the random ones the
  outcome the generator planted (each trace kind is built to hit exactly one rule, the table
  ``PLANTED``), so no rule is evaluated here at all.

The budget and the diagnosis are tried on fixed cases for every rule and on fresh random
scenarios and traces each run (``random.Random()``), so an answer fitted to the cases the
notebook shows does not pass. The learner's answers are reached only through ``learner``;
one helper script returns the ``guarantee_owners`` dict as plain data.
"""
import copy
import random

from course_lib.pipeline.hidden import Once, message_of
from course_lib.pipeline.hidden import item as _item

REFERENCES = (
    "course_lib.drills.problem_formulas.request_cost_usd",
    "course_lib.drills.problem_formulas.time_to_first_token_s",
    "course_lib.drills.problem_formulas.request_latency_s",
    "course_lib.drills.problem_formulas.decode_step_floor_s",
    "course_lib.capstone.reference_budget",
    "course_lib.capstone.reference_diagnosis",
)



# -- exercise 1: who owns each guarantee -------------------------------------------------------------
COMPONENTS = ("model", "tokenizer", "context packer", "engine", "sampler", "grammar guide", "dispatcher",
              "grounding check", "trace log", "nobody")
OWNERS = {
    "prompt_fits": ("context packer", "the prompt with its reserved reply fits the window"),
    "template_billed": ("tokenizer", "the billed count includes the template's markers"),
    "kv_fits": ("engine", "a request is admitted only if its KV cache can fit the pool"),
    "length_capped": ("engine", "a reply never runs past max_new_tokens"),
    "seed_repeats": ("sampler", "the same seed repeats the same reply on the same hardware and batch shape"),
    "reply_parses": ("grammar guide", "a reply not cut at the cap matches its grammar"),
    "arguments_valid": ("dispatcher", "a tool runs only with arguments that fit its schema"),
    "tool_permitted": ("dispatcher", "a tool runs only with the session's permission"),
    "claim_supported": ("grounding check", "the reply's statement is checked against its cited passage"),
    "log_untampered": ("trace log", "an edited or deleted log line is detected, a cut tail given the head"),
    "no_pii_logged": ("trace log", "personal data its patterns match is not written to the log"),
    "answer_true": ("nobody", "the answer is true"),
}
OWNERS_SCRIPT = "def _capstone_owners():\n    return dict(guarantee_owners)\n"


def guarantee_owners(learner, check):
    replay = Once(learner.script(OWNERS_SCRIPT, "_capstone_owners"))
    check.that("guarantee_owners has exactly one entry per key of GUARANTEES", replay,
               lambda owners: isinstance(owners, dict) and set(owners) == set(OWNERS),
               "give every key of GUARANTEES an owner, and add no other key", edge=True)
    check.that("every owner is one of COMPONENTS, spelt exactly", replay,
               lambda owners: all(owner in COMPONENTS for owner in owners.values()),
               f"choose each owner from {', '.join(COMPONENTS)}", edge=True)
    check.that("the model owns no guarantee", replay,
               lambda owners: "model" not in owners.values(), "the model is the component allowed to be wrong",
               edge=True)
    for key, (_, rule) in OWNERS.items():
        check.equal(f"the owner of {key}: {rule}", _item(key, replay), OWNERS[key][0])


# -- exercise 2: the latency and cost budget ------------------------------------------------------
KEYS = ("prompt_tokens", "cached_tokens", "output_tokens", "queue_ms", "prefill_tokens_per_s", "n_params",
        "bytes_per_param", "kv_bytes_per_token", "bandwidth_gb_s", "bandwidth_utilization", "input_usd_per_mtok",
        "cached_usd_per_mtok", "output_usd_per_mtok", "requests_per_day", "ttft_slo_ms", "latency_slo_s")
NUMBERS = ("ttft_s", "decode_s_per_token", "latency_s", "usd_per_request", "usd_per_day")


def _budget(s):
    ttft = s["queue_ms"] / 1000 + (s["prompt_tokens"] - s["cached_tokens"]) / s["prefill_tokens_per_s"]
    read = s["n_params"] * s["bytes_per_param"] + s["kv_bytes_per_token"] * (s["prompt_tokens"] + s["output_tokens"])
    step = read / (s["bandwidth_gb_s"] * 1e9 * s["bandwidth_utilization"])
    latency = ttft + (s["output_tokens"] - 1) * step
    usd = ((s["prompt_tokens"] - s["cached_tokens"]) * s["input_usd_per_mtok"]
           + s["cached_tokens"] * s["cached_usd_per_mtok"] + s["output_tokens"] * s["output_usd_per_mtok"]) / 1e6
    return {"ttft_s": ttft, "decode_s_per_token": step, "latency_s": latency, "usd_per_request": usd,
            "usd_per_day": usd * s["requests_per_day"],
            "meets_slo": ttft * 1000 <= s["ttft_slo_ms"] and latency <= s["latency_slo_s"]}


BASE = {"prompt_tokens": 6_000, "cached_tokens": 4_500, "output_tokens": 500, "queue_ms": 120,
        "prefill_tokens_per_s": 12_000, "n_params": 70e9, "bytes_per_param": 1, "kv_bytes_per_token": 327_680,
        "bandwidth_gb_s": 4_800, "bandwidth_utilization": 0.65, "input_usd_per_mtok": 2.5, "cached_usd_per_mtok": 1.25,
        "output_usd_per_mtok": 10.0, "requests_per_day": 50_000, "ttft_slo_ms": 500, "latency_slo_s": 15.0}


def _scenario(rng):
    prompt = rng.randint(2, 100_000)
    return {"prompt_tokens": prompt, "cached_tokens": rng.choice([0, prompt - 1, rng.randint(0, prompt - 1)]),
            "output_tokens": rng.choice([1, rng.randint(1, 4_000)]), "queue_ms": rng.choice([0, rng.uniform(0, 2_000)]),
            "prefill_tokens_per_s": rng.uniform(100, 60_000), "n_params": rng.uniform(1e8, 4e11),
            "bytes_per_param": rng.choice([0.5, 1, 2, 4]), "kv_bytes_per_token": rng.choice([0, rng.randint(1, 10**6)]),
            "bandwidth_gb_s": rng.uniform(50, 10_000), "bandwidth_utilization": rng.choice([1.0, rng.uniform(0.05, 1)]),
            "input_usd_per_mtok": rng.uniform(0, 20), "cached_usd_per_mtok": rng.uniform(0, 5),
            "output_usd_per_mtok": rng.uniform(0, 80), "requests_per_day": rng.choice([0, rng.randint(1, 10**7)]),
            "ttft_slo_ms": rng.uniform(10, 20_000), "latency_slo_s": rng.uniform(0.5, 600)}


def _numbers(replay):
    def get():
        out = replay()
        return [out[key] for key in NUMBERS] if isinstance(out, dict) and all(k in out for k in NUMBERS) else out
    return get


def latency_cost_budget(learner, check):
    f = learner.function("latency_cost_budget")
    replay = Once(lambda: f(dict(BASE)))
    want = _budget(BASE)
    check.that("returns a dict with exactly the six keys", replay,
               lambda out: isinstance(out, dict) and set(out) == set(NUMBERS) | {"meets_slo"},
               "return ttft_s, decode_s_per_token, latency_s, usd_per_request, usd_per_day and meets_slo")
    rules = {"ttft_s": "TTFT = queue + uncached prompt tokens / prefill rate",
             "decode_s_per_token": "decode step = (weights + KV of prompt and output) / reached bandwidth",
             "latency_s": "latency = TTFT + (output - 1) decode steps",
             "usd_per_request": "cost per request: uncached, cached and output tokens at their prices per million",
             "usd_per_day": "cost per day = cost per request x requests_per_day"}
    for key, rule in rules.items():
        check.close(f"{rule} (a 70B int8 scenario)", _item(key, replay), want[key], atol=1e-12, rtol=1e-9)
    check.equal("meets_slo (a 70B int8 scenario)", _item("meets_slo", replay), want["meets_slo"])
    named = [
        ("no prefix cache: every prompt token is prefilled and billed at the input price", dict(BASE, cached_tokens=0)),
        ("all but the last prompt token cached", dict(BASE, cached_tokens=BASE["prompt_tokens"] - 1)),
        ("a one-token reply: latency equals TTFT", dict(BASE, output_tokens=1)),
        ("no queue", dict(BASE, queue_ms=0)),
        ("no KV cache read (kv_bytes_per_token = 0)", dict(BASE, kv_bytes_per_token=0)),
        ("full bandwidth utilization", dict(BASE, bandwidth_utilization=1.0)),
        ("int4 weights (half a byte per parameter)", dict(BASE, bytes_per_param=0.5)),
        ("no requests in a day", dict(BASE, requests_per_day=0)),
        ("the cached price differs from the input price", dict(BASE, cached_usd_per_mtok=0.1, input_usd_per_mtok=4.0)),
    ]
    for label, scenario in named:
        case = Once(lambda s=scenario: f(dict(s)))
        check.close(f"{label}: the five numbers", _numbers(case), [_budget(scenario)[k] for k in NUMBERS],
                    atol=1e-12, rtol=1e-9)
    exact = dict(BASE, prompt_tokens=1_000, cached_tokens=0, queue_ms=0, prefill_tokens_per_s=4_000,
                 n_params=1.5625e10, bytes_per_param=2, kv_bytes_per_token=0, bandwidth_gb_s=1_000,
                 bandwidth_utilization=0.5, output_tokens=17, ttft_slo_ms=250, latency_slo_s=1.25)
    check.equal("meets_slo: a TTFT and a latency exactly at their limits meet the SLO",
                lambda: _item("meets_slo", Once(lambda: f(dict(exact))))(), True)
    check.equal("meets_slo: a TTFT just over its limit fails the SLO",
                lambda: _item("meets_slo", Once(lambda: f(dict(exact, ttft_slo_ms=249.99, latency_slo_s=900))))(), False)
    check.equal("meets_slo: a latency just over its limit fails the SLO",
                lambda: _item("meets_slo", Once(lambda: f(dict(exact, ttft_slo_ms=90_000, latency_slo_s=1.249))))(),
                False)
    rng = random.Random()  # fresh scenarios every run
    for case in range(25):
        scenario = _scenario(rng)
        expected = _budget(scenario)
        answer = Once(lambda s=scenario: f(dict(s)))
        check.close(f"random scenario {case}: the five numbers", _numbers(answer), [expected[k] for k in NUMBERS],
                    atol=1e-12, rtol=1e-9)
        check.equal(f"random scenario {case}: meets_slo", _item("meets_slo", answer), expected["meets_slo"])
    missing = dict(BASE)
    del missing["prefill_tokens_per_s"]
    bad = [("prefill_tokens_per_s", "a missing key", missing),
           ("cached_tokens", "the whole prompt cached", dict(BASE, cached_tokens=BASE["prompt_tokens"])),
           ("cached_tokens", "more cached tokens than prompt tokens", dict(BASE, cached_tokens=9_000)),
           ("cached_tokens", "a negative cached_tokens", dict(BASE, cached_tokens=-3)),
           ("prompt_tokens", "an empty prompt", dict(BASE, prompt_tokens=0, cached_tokens=0)),
           ("output_tokens", "no output token", dict(BASE, output_tokens=0)),
           ("output_tokens", "a float output token count", dict(BASE, output_tokens=500.0)),
           ("prompt_tokens", "a float prompt token count", dict(BASE, prompt_tokens=6000.5)),
           ("cached_tokens", "a float cached_tokens", dict(BASE, cached_tokens=4_500.0)),
           ("requests_per_day", "a negative requests_per_day", dict(BASE, requests_per_day=-1)),
           ("requests_per_day", "a float requests_per_day", dict(BASE, requests_per_day=50_000.0)),
           ("prefill_tokens_per_s", "a prefill rate of 0", dict(BASE, prefill_tokens_per_s=0)),
           ("n_params", "no parameters", dict(BASE, n_params=0)),
           ("bytes_per_param", "no bytes per parameter", dict(BASE, bytes_per_param=0)),
           ("bandwidth_gb_s", "a negative bandwidth", dict(BASE, bandwidth_gb_s=-100)),
           ("prefill_tokens_per_s", "a NaN prefill rate", dict(BASE, prefill_tokens_per_s=float("nan"))),
           ("bandwidth_gb_s", "an infinite bandwidth", dict(BASE, bandwidth_gb_s=float("inf"))),
           ("n_params", "a parameter count given as a string", dict(BASE, n_params="70e9")),
           ("queue_ms", "a NaN queue time", dict(BASE, queue_ms=float("nan"))),
           ("bandwidth_utilization", "a utilization above 1", dict(BASE, bandwidth_utilization=1.01)),
           ("bandwidth_utilization", "a utilization of 0", dict(BASE, bandwidth_utilization=0))]
    # every key that may be 0 but not below: one negative case each (0 itself is in the named cases)
    bad += [(key, f"a negative {key}", dict(BASE, **{key: -0.5})) for key in
            ("queue_ms", "kv_bytes_per_token", "input_usd_per_mtok", "cached_usd_per_mtok", "output_usd_per_mtok",
             "ttft_slo_ms", "latency_slo_s")]
    check.raises("invalid input raises ValueError: an empty scenario (every key missing)", lambda: f({}), "ValueError")
    for key, label, scenario in bad:
        call = (lambda s: lambda: f(dict(s)))(scenario)
        check.raises(f"invalid input raises ValueError: {label}", call, "ValueError")
        check.that(f"the ValueError names the key: {label}", message_of(call),
                   lambda m, key=key: m is not None and key in m and sum(k in m for k in BASE) <= 3,
                   f"put the key's name ({key}) in the message, not the whole scenario (that names every key)")


# -- exercise 3: diagnosing a trace ---------------------------------------------------------------
STATES = ("answered", "abstained", "refused", "error")


def _trace(rng, *, state="answered", temperature=None, dropped=(), finish="stop", tool_error=None, validation=None):
    if temperature is None:
        temperature = rng.choice([0.0, round(rng.uniform(0.1, 1.0), 3), round(rng.uniform(1.001, 4.0), 3)])
    return {"request_id": f"r{rng.randint(0, 10**6)}", "timestamp": "2026-03-02T10:00:00Z", "app_version": "grader",
            "model": rng.choice(["tinychat", "tinychat-int8"]), "weights_sha256": "cd" * 32, "template": "tinychat-chat",
            "decoding": {"temperature": temperature, "top_p": rng.choice([1.0, 0.95]), "seed": rng.randint(0, 10**4),
                         "max_new_tokens": rng.randint(1, 128), "guided": rng.random() < 0.5},
            "retrieval": {"index_version": rng.randint(0, 9), "passage_ids": [str(rng.randint(1, 30))]},
            "tools_version": "t3", "policy_version": rng.choice(["passages-first", "drop-oldest"]),
            "validation": {} if validation is None else dict(validation),
            "tokens": {"prompt": rng.randint(10, 4000), "completion": rng.randint(0, 300)},
            "latency_ms": {"retrieve": rng.uniform(0, 2), "prefill": rng.uniform(1, 90)}, "cost_usd": rng.uniform(0, 1e-3),
            "final_state": state, "metadata": {"window": rng.choice([512, 4096]), "dropped": list(dropped),
                                               "finish_reason": finish, "tool_error": tool_error}}


def _grounded(rng, **overrides):
    """The validation of a grounded answer: every check present and passing unless overridden."""
    checks = {"format": True, "cited_shown": True, "claim_supported": True}
    checks.update(overrides)
    return checks


def _ids(rng):
    return [str(rng.randint(1, 40)) for _ in range(rng.randint(1, 4))]


def _random_trace(rng, kind):
    cool, hot = round(rng.uniform(0.0, 1.0), 3), round(rng.uniform(1.001, 4.0), 3)
    if kind == "healthy_answer":
        return _trace(rng, dropped=rng.choice([(), _ids(rng)]), validation=_grounded(rng))
    if kind == "healthy_abstention":
        return _trace(rng, state="abstained", validation=rng.choice([{"format": True}, {}]))
    if kind == "healthy_tool":
        return _trace(rng, validation=rng.choice([{}, {"schema": True}]))
    if kind == "permission":
        return _trace(rng, state="refused", tool_error="permission_denied", dropped=rng.choice([(), _ids(rng)]))
    if kind == "bad_call":
        return _trace(rng, state="error", tool_error=rng.choice(["invalid_arguments", "unknown_tool"]),
                      finish=rng.choice(["stop", "length"]))
    if kind == "overflow":
        state = rng.choice(["abstained", "error"])
        return _trace(rng, state=state, dropped=_ids(rng), finish=rng.choice(["stop", "length"]),
                      validation={"format": state == "abstained"})
    if kind == "hot":
        return _trace(rng, state="error", temperature=hot, finish=rng.choice(["stop", "length"]),
                      validation={"format": False})
    if kind == "cut":
        temperature = rng.choice([cool, hot])
        return _trace(rng, state="error", temperature=temperature, finish="length",
                      validation={"format": True} if temperature > 1.0 else rng.choice([{"format": False}, {}]))
    if kind == "unguided":
        return _trace(rng, state="error", temperature=rng.choice([cool, 1.0]), validation={"format": False})
    if kind == "not_shown":
        return _trace(rng, validation=_grounded(rng, cited_shown=False, claim_supported=rng.choice([True, False])))
    if kind == "unsupported":
        return _trace(rng, dropped=rng.choice([(), _ids(rng)]), validation=_grounded(rng, claim_supported=False))
    raise ValueError(kind)


KINDS = ("healthy_answer", "healthy_abstention", "healthy_tool", "permission", "bad_call", "overflow", "hot", "cut",
         "unguided", "not_shown", "unsupported")
# The [stage, fix] each kind of ``_random_trace`` is built to show: its one failure, or none.
PLANTED = {"healthy_answer": ["none", "none"], "healthy_abstention": ["none", "none"], "healthy_tool": ["none", "none"],
           "permission": ["tool", "none"], "bad_call": ["tool", "constrain_tool_call"],
           "overflow": ["packing", "shrink_context"], "hot": ["sampling", "lower_temperature"],
           "cut": ["decoding", "raise_max_tokens"], "unguided": ["decoding", "constrain_output"],
           "not_shown": ["grounding", "constrain_output"], "unsupported": ["grounding", "block_unsupported"]}


def diagnose_trace(learner, check):
    f = learner.function("diagnose_trace")
    rng = random.Random(2026)
    # (label, trace, [stage, fix] as the exercise's rules give it, worked by hand)
    named = [
        ("a healthy grounded answer -> none/none", _trace(rng, temperature=0.7, validation=_grounded(rng)),
         ["none", "none"]),
        ("a healthy abstention whose grounding checks are absent -> none/none",
         _trace(rng, state="abstained", temperature=0.2, validation={"format": True}), ["none", "none"]),
        ("a healthy answer at a high temperature: the temperature alone is no failure",
         _trace(rng, temperature=2.2, validation=_grounded(rng)), ["none", "none"]),
        ("an answer despite dropped passages is not a packing failure",
         _trace(rng, temperature=0.5, dropped=["3", "4"], validation=_grounded(rng)), ["none", "none"]),
        ("a permission refusal -> tool/none", _trace(rng, state="refused", tool_error="permission_denied"),
         ["tool", "none"]),
        ("a refusal with dropped passages: the tool rule comes first",
         _trace(rng, state="refused", tool_error="permission_denied", dropped=["1"], validation={"format": False}),
         ["tool", "none"]),
        ("arguments that did not fit -> tool/constrain_tool_call",
         _trace(rng, state="error", tool_error="invalid_arguments"), ["tool", "constrain_tool_call"]),
        ("an unknown tool -> tool/constrain_tool_call", _trace(rng, state="error", tool_error="unknown_tool"),
         ["tool", "constrain_tool_call"]),
        ("dropped passages and an abstention -> packing/shrink_context",
         _trace(rng, state="abstained", temperature=0.7, dropped=["1", "7", "5"], validation={"format": True}),
         ["packing", "shrink_context"]),
        ("dropped passages and a broken hot reply: the packing rule comes before the sampling rule",
         _trace(rng, state="error", temperature=3.0, dropped=["2"], validation={"format": False}),
         ["packing", "shrink_context"]),
        ("dropped passages and a reply cut at the cap: the packing rule comes before the length rule",
         _trace(rng, state="error", temperature=0.7, dropped=["6"], finish="length", validation={"format": False}),
         ["packing", "shrink_context"]),
        ("a broken reply at temperature above 1.0 -> sampling/lower_temperature",
         _trace(rng, state="error", temperature=1.5, validation={"format": False}), ["sampling", "lower_temperature"]),
        ("a broken hot reply cut at the cap: the sampling rule comes before the length rule",
         _trace(rng, state="error", temperature=2.0, finish="length", validation={"format": False}),
         ["sampling", "lower_temperature"]),
        ("a reply cut at the cap -> decoding/raise_max_tokens",
         _trace(rng, state="error", temperature=0.7, finish="length", validation={"format": False}),
         ["decoding", "raise_max_tokens"]),
        ("a hot reply cut at the cap whose format held -> decoding/raise_max_tokens",
         _trace(rng, state="error", temperature=2.5, finish="length", validation={"format": True}),
         ["decoding", "raise_max_tokens"]),
        ("a broken reply at exactly temperature 1.0 is not above 1.0 -> decoding/constrain_output",
         _trace(rng, state="error", temperature=1.0, validation={"format": False}), ["decoding", "constrain_output"]),
        ("a broken greedy reply -> decoding/constrain_output",
         _trace(rng, state="error", temperature=0.0, validation={"format": False}), ["decoding", "constrain_output"]),
        ("a citation of a passage that was not shown -> grounding/constrain_output",
         _trace(rng, temperature=0.7, validation=_grounded(rng, cited_shown=False)), ["grounding", "constrain_output"]),
        ("cited passage not shown and claim unsupported: the citation rule comes first",
         _trace(rng, temperature=0.7, validation=_grounded(rng, cited_shown=False, claim_supported=False)),
         ["grounding", "constrain_output"]),
        ("a claim its cited passage does not hold -> grounding/block_unsupported",
         _trace(rng, temperature=0.7, validation=_grounded(rng, claim_supported=False)),
         ["grounding", "block_unsupported"]),
    ]
    for label, record, expected in named:
        replay = Once(lambda r=record: f(copy.deepcopy(r)))
        check.that(f"returns a dict with exactly stage and fix ({label})", replay,
                   lambda out: isinstance(out, dict) and set(out) == {"stage", "fix"},
                   "return {'stage': ..., 'fix': ...}")
        check.equal(label, lambda r=replay: [_item("stage", r)(), _item("fix", r)()], expected)
    fresh = random.Random()  # fresh traces every run: rules, not remembered cases
    for case in range(44):
        kind = KINDS[case % len(KINDS)]
        record = _random_trace(fresh, kind)
        replay = Once(lambda r=record: f(copy.deepcopy(r)))
        check.equal(f"random trace {case} ({kind.replace('_', ' ')})",
                    lambda r=replay: [_item("stage", r)(), _item("fix", r)()], PLANTED[kind])
    # The state is checked before any rule: a record that would match one is still broken.
    bases = [("a healthy answer", _trace(rng, validation=_grounded(rng))),
             ("a permission refusal", _trace(rng, tool_error="permission_denied")),
             ("a rejected tool call", _trace(rng, tool_error="invalid_arguments")),
             ("dropped passages", _trace(rng, dropped=["2"], validation={"format": True})),
             ("an unsupported claim", _trace(rng, temperature=0.5, validation=_grounded(rng, claim_supported=False)))]
    for what, base in bases:
        for state in ("done", "", None):
            bad = dict(copy.deepcopy(base), final_state=state)
            check.raises(f"a final_state that is not one of the four raises ValueError, whatever the other fields "
                         f"hold ({what}, {state!r})", lambda b=bad: f(copy.deepcopy(b)), "ValueError")
