"""Generated drill problems against independent arithmetic, for every kind and 50 seeds each.

The expected answers below are plain arithmetic on the drawn inputs (``Problem.params``), written
here without the course's helpers, so a wrong formula in a generator or in the reference code
it calls shows up as a mismatch that names the kind and seed.
"""
from __future__ import annotations

import dataclasses
import math
import random
import re
import statistics

import numpy as np
import pytest

from course_lib.drills import KINDS, TOPICS, Generator, Problem, kinds_for, make_problem
from course_lib.drills.problem_formulas import request_cost_usd

SEEDS = range(50)
BYTE_UNITS = {"GiB": 2**30, "GB": 10**9, "MiB": 2**20, "MB": 10**6}


def kv_bytes(layers, kv_heads, head_dim, element, tokens, batch=1):
    return 2 * layers * kv_heads * head_dim * element * tokens * batch


def expected_kv_cache_bytes_real(p):
    total = kv_bytes(p["n_layers"], p["n_kv_heads"], p["head_dim"], p["bytes_per_element"], p["seq_len"], p["batch"])
    return total / BYTE_UNITS[p["unit"]]


def expected_kv_cache_bytes_invented(p):
    kv_heads = {"MHA": p["n_heads"], "MQA": 1}.get(p["attention"])
    if p["attention"] == "GQA":
        assert p["n_heads"] % p["group_size"] == 0
        kv_heads = p["n_heads"] // p["group_size"]
    total = kv_bytes(p["n_layers"], kv_heads, p["head_dim"], p["bytes_per_element"], p["seq_len"], p["batch"])
    return total / BYTE_UNITS[p["unit"]]


def free_bytes(p):
    return (p["n_devices"] * p["memory_gb"] * 10**9 - p["n_params"] * p["weight_bytes_per_param"]
            - p["reserve_gb"] * 10**9)


def expected_max_batch_fits(p):
    per_sequence = kv_bytes(p["n_layers"], p["n_kv_heads"], p["head_dim"], p["kv_bytes_per_element"], p["seq_len"])
    return math.floor(free_bytes(p) / per_sequence)


def expected_max_context_fits(p):
    per_token = kv_bytes(p["n_layers"], p["n_kv_heads"], p["head_dim"], p["kv_bytes_per_element"], 1)
    return math.floor(free_bytes(p) / (per_token * p["batch"]))


def expected_softmax_probability(p):
    weights = [math.exp(z / p["temperature"]) for z in p["logits"]]
    return weights[p["labels"].index(p["token"])] / sum(weights)


def expected_nucleus_set_size(p):
    weights = [math.exp(z) for z in p["logits"]]
    probs = sorted((w / sum(weights) for w in weights), reverse=True)
    total = 0.0
    for size, prob in enumerate(probs, start=1):
        total += prob
        if total >= p["p"]:
            return size
    return len(probs)


def expected_prompt_tokens(p):
    return sum(w / p["words_per_token"] for w in p["words"]) + p["overhead_per_message"] * len(p["words"])


def expected_request_cost(p):
    cached = p.get("cached_tokens", 0)
    usd = ((p["input_tokens"] - cached) * p["input_usd_per_mtok"] + cached * p.get("cached_usd_per_mtok", 0)
           + p["output_tokens"] * p["output_usd_per_mtok"]) / 1e6
    return usd * p["requests_per_day"]


def expected_request_latency(p):
    ttft_ms = p.get("queue_ms", 0) + p["prompt_tokens"] / p["prefill_tokens_per_s"] * 1000
    if p["asked"] == "ttft":
        return ttft_ms
    step_ms = p["decode_ms_per_token"] if "decode_ms_per_token" in p else 1000 / p["decode_tokens_per_s"]
    return (ttft_ms + (p["output_tokens"] - 1) * step_ms) / 1000


def expected_decode_bandwidth_floor(p):
    read = p["params_billion"] * 1e9 * p["weight_bytes_per_param"] + p["context_tokens"] * p["kv_kib_per_token"] * 1024
    seconds = read / (p["bandwidth_gb_s"] * 1e9)
    return seconds * 1000 if p["asked"] == "ms_per_token" else 1 / seconds


def expected_flops_per_token(p):
    if p["asked"] == "per_token":
        return 2 * p["params_billion"]  # GFLOP
    tflop = 2 * p["params_billion"] * 1e9 * p["prompt_tokens"] / 1e12
    return tflop if p["asked"] == "prefill" else tflop / p["peak_tflops"] * 1000


def expected_speculative_tokens_per_pass(p):
    return sum(p["alpha"] ** i for i in range(p["k"] + 1))  # 1 + a + ... + a^k, the same series summed


def expected_context_budget(p):
    room = p["window"] - p["reserve_output"] - p["margin"] - p["system_tokens"]
    return room if p["asked"] == "room" else (room - p["history_tokens"]) // p["passage_tokens"]


def paired_differences(p):
    return [-1] * p["right_to_wrong"] + [1] * p["wrong_to_right"] + [0] * (
        p["n_items"] - p["right_to_wrong"] - p["wrong_to_right"])


def expected_paired_delta_interval(p):
    d = paired_differences(p)
    return 1.96 * statistics.stdev(d) / math.sqrt(len(d)) * 100  # percentage points


def expected_canary_sample_size(p):
    p_s, p_c, k = p["stable_error_pct"] / 100, p["canary_error_pct"] / 100, p["stable_to_canary"]
    # Var(p_c_hat - p_s_hat) with n_s = k n_c, set equal to (delta / (z_a + z_b))^2 and solved for n_c.
    target_se = (p_c - p_s) / (p["z_alpha"] + p["z_beta"])
    n_canary = math.ceil((p_c * (1 - p_c) + p_s * (1 - p_s) / k) / target_se**2)
    return n_canary if p["asked"] == "canary" else n_canary * (1 + k)


def expected_routed_cost_per_success(p):
    requests = 1_000_000  # simulate the bill and the successes of a million requests
    small = requests * p["small_share_pct"] / 100
    fallen = small * p["fallback_pct"] / 100
    large_calls = requests - small + fallen
    bill = (small * p["small_usd_per_1k"] + large_calls * p["large_usd_per_1k"]) / 1000
    solved = (small - fallen) * p["small_success_pct"] / 100 + large_calls * p["large_success_pct"] / 100
    routed = bill / solved * 1000
    if p["asked"] == "routed":
        return routed
    return p["large_usd_per_1k"] / (p["large_success_pct"] / 100) - routed


EXPECTED = {name.removeprefix("expected_"): fn for name, fn in globals().items() if name.startswith("expected_")}

# Each phrase of issue 14's list of generated problems, and the kind that answers it.
ISSUE_KINDS = {
    "KV-cache bytes for a random real geometry": "kv_cache_bytes_real",
    "KV-cache bytes for an invented geometry (MHA vs GQA vs MQA)": "kv_cache_bytes_invented",
    "the largest batch that fits an accelerator's memory after the weights": "max_batch_fits",
    "the largest context that fits an accelerator's memory after the weights": "max_context_fits",
    "softmax probabilities at a temperature": "softmax_probability",
    "nucleus set size for given logits and p": "nucleus_set_size",
    "tokens of a request": "prompt_tokens",
    "cost of a request at given prices": "request_cost",
    "TTFT and total time from prefill and decode rates": "request_latency",
    "decode's memory-bandwidth floor": "decode_bandwidth_floor",
    "FLOPs per token (about 2 x parameters)": "flops_per_token",
    "speculative decoding's expected tokens per target pass": "speculative_tokens_per_pass",
    "the context budget": "context_budget",
}
# Variants each kind must reach within the 50 seeds: (param, values).
VARIANTS = {
    "kv_cache_bytes_invented": ("attention", {"MHA", "GQA", "MQA"}),
    "kv_cache_bytes_real": ("unit", {"GiB", "GB", "MiB", "MB"}),
    "request_latency": ("asked", {"ttft", "total"}),
    "decode_bandwidth_floor": ("asked", {"ms_per_token", "tokens_per_s"}),
    "flops_per_token": ("asked", {"per_token", "prefill", "prefill_ms"}),
    "context_budget": ("asked", {"room", "passages"}),
    "canary_sample_size": ("asked", {"canary", "total"}),
    "routed_cost_per_success": ("asked", {"routed", "saving"}),
}
EXACT_KINDS = {"max_batch_fits", "nucleus_set_size", "context_budget"}


@pytest.fixture(scope="module")
def problems():
    return {kind: [make_problem(kind, seed) for seed in SEEDS] for kind in KINDS}


def test_every_kind_named_in_the_issue_exists():
    assert set(ISSUE_KINDS.values()) <= set(KINDS), set(ISSUE_KINDS.values()) - set(KINDS)
    assert set(EXPECTED) == set(KINDS), "every kind needs an independent computation in this file"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_answer_equals_an_independent_computation(problems, kind):
    for p in problems[kind]:
        expected = EXPECTED[kind](p.params)
        assert math.isclose(p.answer, expected, rel_tol=1e-9, abs_tol=1e-12), (kind, p.seed, p.answer, expected)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_answers_are_sensible_and_counts_are_whole(problems, kind):
    for p in problems[kind]:
        assert 1e-3 < p.answer < 1e7, (kind, p.seed, p.answer)
        if kind in EXACT_KINDS:
            assert p.answer == int(p.answer) >= 1 and p.tolerance == p.abs_tolerance == 0, (kind, p.seed)
        else:
            assert 0 < p.tolerance <= 0.05, (kind, p.seed)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_same_kind_and_seed_give_the_same_problem(problems, kind):
    for p in problems[kind]:
        again = make_problem(kind, p.seed)
        assert again == p and again.question == p.question and again.solution == p.solution
        assert (p.kind, p.topic) == (kind, KINDS[kind].topic)
    assert len({p.question for p in problems[kind]}) >= 40, "seeds should give different problems"
    drawn = KINDS[kind](random.Random(11))
    assert drawn == KINDS[kind](random.Random(11)) == make_problem(kind, drawn.seed), "the recorded seed replays it"


@pytest.mark.parametrize("kind", sorted(VARIANTS))
def test_every_variant_is_reached(problems, kind):
    key, values = VARIANTS[kind]
    assert {p.params[key] for p in problems[kind]} == values


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_grade_accepts_within_the_tolerance_and_rejects_outside(problems, kind):
    for p in problems[kind]:
        assert p.grade(p.answer) and p.grade(np.float64(p.answer))
        bound = p.allowed_error
        assert bound == max(p.abs_tolerance, p.tolerance * abs(p.answer))
        if bound:
            assert p.grade(p.answer + 0.99 * bound) and p.grade(p.answer - 0.99 * bound), (kind, p.seed)
            assert not p.grade(p.answer + 1.01 * bound) and not p.grade(p.answer - 1.01 * bound), (kind, p.seed)
        else:
            assert p.grade(int(p.answer))
            assert not any(p.grade(p.answer + d) for d in (-1, -0.5, 0.5, 1)), (kind, p.seed)
        assert not any(p.grade(x) for x in (math.nan, math.inf, -math.inf))


def _renderings(value) -> set[str]:
    forms = {str(value), f"{value:,}", f"{value:g}", f"{value:,g}"}
    if float(value).is_integer():
        forms |= {str(int(value)), f"{int(value):,}"}
    if isinstance(value, float):
        forms.add(f"{value:.1f}")
    return forms


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_question_states_every_input_number_and_the_tolerance(problems, kind):
    for p in problems[kind]:
        for key, value in p.params.items():
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, (int, float)) and not isinstance(item, bool):
                    assert any(form in p.question for form in _renderings(item)), (kind, p.seed, key, item)
                elif isinstance(item, str) and key in ("token", "labels", "unit"):
                    assert item in p.question, (kind, p.seed, key, item)
        last = p.question.splitlines()[-1]
        assert last == ("Only the exact answer is accepted." if kind in EXACT_KINDS
                        else f"Accepted {p.tolerance_text} of the exact answer."), (kind, p.seed)


ANSWER = re.compile(r"^Answer: (-?[\d,]*\.?\d+)( .*)?$")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_solution_shows_its_steps_and_ends_with_the_answer(problems, kind):
    for p in problems[kind]:
        lines = p.solution.splitlines()
        assert len(lines) >= 3, (kind, p.seed, p.solution)
        match = ANSWER.match(lines[-1])
        assert match, (kind, p.seed, lines[-1])
        shown = float(match.group(1).replace(",", ""))
        assert math.isclose(shown, p.answer, rel_tol=1e-3), (kind, p.seed, lines[-1], p.answer)
        assert (match.group(2) or "").strip() == p.unit
        assert lines[-1].removeprefix("Answer: ").split(" ")[0] in "\n".join(lines[:-1]), \
            (kind, p.seed, "the result appears in the worked steps before the answer line")


def test_paired_delta_verdicts_go_both_ways_and_name_the_drop(problems):
    verdicts = set()
    for p in problems["paired_delta_interval"]:
        d = paired_differences(p.params)
        drop = -100 * sum(d) / len(d)
        assert drop > 0, (p.seed, "the new stack scores lower")
        outside = drop > p.answer
        assert abs(drop - p.answer) >= 0.1 * p.answer, (p.seed, "the verdict is clear")
        assert ("is outside" if outside else "is inside") in p.solution, p.seed
        verdicts.add(outside)
    assert verdicts == {True, False}, "some drops are noise and some are real"


def test_a_bigger_stable_arm_needs_fewer_canary_requests_but_never_below_the_limit():
    from course_lib.drills.problem_formulas import canary_requests_needed

    sizes = [canary_requests_needed(0.02, 0.03, k) for k in (1, 4, 19, 1e9)]
    assert sizes == sorted(sizes, reverse=True)
    limit = (1.645 + 0.8416) ** 2 * 0.03 * 0.97 / 0.01**2  # the canary's own noise alone
    assert math.isclose(sizes[-1], limit, rel_tol=1e-6)
    with pytest.raises(ValueError, match="must be above"):
        canary_requests_needed(0.03, 0.02)


def test_topics_cover_every_kind():
    assert {generator.topic for generator in KINDS.values()} == set(TOPICS)
    by_topic = [kind for topic in TOPICS for kind in kinds_for(topic)]
    assert sorted(by_topic) == sorted(KINDS) and len(by_topic) == len(set(by_topic))
    assert kinds_for("sampling") == ("softmax_probability", "nucleus_set_size")
    assert kinds_for("operations") == ("paired_delta_interval", "canary_sample_size", "routed_cost_per_success")
    assert TOPICS[-2:] == ("context", "operations"), "course order: notebook 08 comes after 07"


def test_bad_kind_topic_and_seed_are_refused():
    with pytest.raises(ValueError) as error:
        make_problem("kv_bytes", 1)
    assert all(kind in str(error.value) for kind in KINDS)
    with pytest.raises(ValueError, match="known topics: tokenization"):
        kinds_for("attention")
    for seed in (1.5, "1", True, None):
        with pytest.raises(TypeError, match="seed must be an int"):
            make_problem("context_budget", seed)
    with pytest.raises(TypeError, match="kind must be a str"):
        make_problem(["context_budget"], 1)
    with pytest.raises(TypeError, match="random.Random"):
        KINDS["context_budget"](7)
    assert make_problem("context_budget", -3) == make_problem("context_budget", -3)


def test_grade_refuses_text_and_problems_are_frozen():
    p = make_problem("speculative_tokens_per_pass", 0)
    for given in ("2.5", True, None):
        with pytest.raises(TypeError, match="parse the answer"):
            p.grade(given)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.answer = 1.0
    assert isinstance(p, Problem) and isinstance(KINDS[p.kind], Generator)


def test_problem_refuses_a_non_finite_answer_or_negative_tolerance():
    with pytest.raises(ValueError, match="finite"):
        Problem("k", "serving", 0, "?", math.nan, "", 0.02, "")
    with pytest.raises(ValueError, match="tolerances"):
        Problem("k", "serving", 0, "?", 1.0, "", -0.02, "")


def test_request_cost_refuses_a_cache_longer_than_the_input():
    with pytest.raises(ValueError, match="cannot exceed"):
        request_cost_usd(100, 10, cached_tokens=200, input_usd_per_mtok=1.0, output_usd_per_mtok=2.0)
