"""The fallback chain (what moves it on, what stops it) and the router priced per success, by hand."""
from __future__ import annotations

import math

import pytest

from course_lib.context.cost import ModelPrice, TaskRun
from course_lib.operations.routing import (OUTCOMES, engine_backend, mix_cost_per_success, route_by_task,
                                           serve_with_fallback)
from course_lib.sampling import SamplingParams
from course_lib.serving import Engine


class Backend:
    """A backend that records its calls and answers with ``reply`` or raises ``error``."""

    def __init__(self, log, name, reply=None, error=None):
        self.log, self.name, self.reply, self.error = log, name, reply, error

    def __call__(self, request):
        self.log.append((self.name, request))
        if self.error is not None:
            raise self.error
        return self.reply


def _chain(log, *specs):
    return [(name, Backend(log, name, **options)) for name, options in specs]


def test_backends_are_tried_in_order_each_at_most_once_until_one_is_valid():
    log = []
    backends = _chain(log, ("a", {"error": TimeoutError("slow")}), ("b", {"error": ConnectionRefusedError()}),
                      ("c", {"reply": "four"}), ("d", {"reply": "4"}), ("e", {"reply": "5"}))
    served = serve_with_fallback("2+2?", backends, str.isdigit)
    assert log == [("a", "2+2?"), ("b", "2+2?"), ("c", "2+2?"), ("d", "2+2?")]  # e never called
    assert (served["reply"], served["served_by"], served["fell_back"]) == ("4", "d", True)
    assert served["attempts"] == [["a", "unavailable"], ["b", "unavailable"], ["c", "invalid"], ["d", "ok"]]
    assert {outcome for _, outcome in served["attempts"]} <= set(OUTCOMES)


def test_the_first_valid_reply_serves_without_a_fallback():
    log = []
    served = serve_with_fallback("q", _chain(log, ("a", {"reply": "7"}), ("b", {"reply": "8"})), str.isdigit)
    assert log == [("a", "q")] and served["served_by"] == "a" and served["fell_back"] is False
    assert served["attempts"] == [["a", "ok"]]


def test_outage_subclasses_fall_back():
    for error in (ConnectionRefusedError(), ConnectionResetError(), BrokenPipeError(), TimeoutError()):
        log = []
        served = serve_with_fallback("q", _chain(log, ("a", {"error": error}), ("b", {"reply": "1"})), str.isdigit)
        assert served["served_by"] == "b" and served["attempts"][0] == ["a", "unavailable"], error


def test_a_bug_propagates_and_nothing_after_it_is_called():
    for error in (KeyError("choices"), FileNotFoundError("weights.bin"), ValueError("bad"), TypeError("x")):
        log = []
        backends = _chain(log, ("a", {"error": TimeoutError()}), ("b", {"error": error}), ("c", {"reply": "1"}))
        with pytest.raises(type(error)):
            serve_with_fallback("q", backends, str.isdigit)
        assert [name for name, _ in log] == ["a", "b"], error


def test_when_every_backend_fails_there_is_no_reply():
    log = []
    served = serve_with_fallback("q", _chain(log, ("a", {"reply": "x"}), ("b", {"error": TimeoutError()}),
                                             ("c", {"reply": ""})), str.isdigit)
    assert (served["reply"], served["served_by"], served["fell_back"]) == (None, None, True)
    assert served["attempts"] == [["a", "invalid"], ["b", "unavailable"], ["c", "invalid"]]
    assert [name for name, _ in log] == ["a", "b", "c"]
    alone = serve_with_fallback("q", _chain([], ("only", {"error": TimeoutError()})), str.isdigit)
    assert alone["reply"] is None and alone["fell_back"] is False


def test_bad_chains_raise_before_any_call():
    with pytest.raises(ValueError, match="at least one backend"):
        serve_with_fallback("q", [], str.isdigit)
    log = []
    with pytest.raises(ValueError, match="names must be distinct"):
        serve_with_fallback("q", _chain(log, ("a", {"reply": "1"}), ("a", {"reply": "2"})), str.isdigit)
    assert log == []


# --- the router, priced by hand ---------------------------------------------------------------

SMALL = ModelPrice("small", input_per_million=0.5, output_per_million=1.5)
LARGE = ModelPrice("large", input_per_million=5.0, output_per_million=15.0)
RUNS = [
    # extract: small $0.05 + $0.03 = $0.08 for 10 successes; large $0.50 + $0.15 = $0.65 for 90
    TaskRun("small", "extract", requests=100, successes=10, prompt_tokens=100_000, completion_tokens=20_000),
    TaskRun("large", "extract", requests=100, successes=90, prompt_tokens=100_000, completion_tokens=10_000),
    # summarise: small $0.08 for 80 successes (20 failures); large $0.65 for 99 (1 failure)
    TaskRun("small", "summarise", requests=100, successes=80, prompt_tokens=100_000, completion_tokens=20_000),
    TaskRun("large", "summarise", requests=100, successes=99, prompt_tokens=100_000, completion_tokens=10_000),
]


def test_route_by_task_picks_the_cheapest_per_success_by_hand():
    # extract: small 0.08 / 10 = 0.008, large 0.65 / 90 = 0.0072; summarise: small 0.001, large 0.00657
    assert route_by_task(RUNS, [SMALL, LARGE]) == {"extract": "large", "summarise": "small"}
    assert route_by_task(RUNS, {"small": SMALL, "large": LARGE}) == {"extract": "large", "summarise": "small"}


def test_a_price_on_failures_moves_a_task_to_the_large_model_past_the_break_even():
    # summarise: (0.08 + 20 f) / 80 = (0.65 + f) / 99  <=>  1900 f = 44.08  <=>  f = 0.0232
    assert route_by_task(RUNS, [SMALL, LARGE], failure_cost=0.02)["summarise"] == "small"
    assert route_by_task(RUNS, [SMALL, LARGE], failure_cost=0.03)["summarise"] == "large"


def test_route_ties_go_to_the_model_measured_first():
    twin = ModelPrice("twin", SMALL.input_per_million, SMALL.output_per_million)
    runs = [TaskRun("small", "t", 10, 5, 1000, 100), TaskRun("twin", "t", 10, 5, 1000, 100)]
    assert route_by_task(runs, [SMALL, twin]) == {"t": "small"}
    assert route_by_task(runs[::-1], [SMALL, twin]) == {"t": "twin"}


def test_route_by_task_refuses_a_negative_failure_cost():
    with pytest.raises(ValueError, match="failure_cost must be >= 0"):
        route_by_task(RUNS, [SMALL, LARGE], failure_cost=-0.01)


def test_mix_cost_per_success_by_hand():
    route = {"extract": "large", "summarise": "small"}
    # no failure cost: (0.65 + 0.08) / (90 + 80)
    assert mix_cost_per_success(RUNS, [SMALL, LARGE], route) == pytest.approx(0.73 / 170)
    # $0.01 per failure: large extract 0.65 + 10 * 0.01, small summarise 0.08 + 20 * 0.01 -> 1.03 / 170
    assert mix_cost_per_success(RUNS, [SMALL, LARGE], route, failure_cost=0.01) == pytest.approx(1.03 / 170)
    # everything on large: (0.65 + 0.65 + 11 * 0.01) / 189
    everything_large = {"extract": "large", "summarise": "large"}
    assert mix_cost_per_success(RUNS, {"small": SMALL, "large": LARGE}, everything_large,
                                failure_cost=0.01) == pytest.approx(1.41 / 189)


def test_a_route_with_no_success_costs_infinity_and_an_unmeasured_route_raises():
    runs = [TaskRun("small", "hard", 10, 0, 1000, 100)]
    assert mix_cost_per_success(runs, [SMALL], {"hard": "small"}) == math.inf
    with pytest.raises(ValueError, match=r"no measured run for \['extract'\]"):
        mix_cost_per_success(RUNS, [SMALL, LARGE], {"extract": "medium", "summarise": "small"})
    with pytest.raises(ValueError, match=r"no measured run for \['translate'\]"):
        mix_cost_per_success(RUNS, [SMALL, LARGE], {"translate": "small"})


# --- a real backend ---------------------------------------------------------------------------

CHAT = [{"role": "user", "content": "What is 2 + 2?"}]


def test_engine_backend_returns_the_engines_greedy_reply(tinychat):
    model, tok = tinychat
    call = engine_backend(model, tok, max_new_tokens=16)
    expected = Engine.for_job(model, tok, rows=1).generate(
        [CHAT], SamplingParams(temperature=0, max_new_tokens=16))[0].text
    assert expected and call(CHAT) == expected and call(CHAT) == expected  # the engine is reused
    served = serve_with_fallback(CHAT, [("down", Backend([], "down", error=TimeoutError())), ("tinychat", call)],
                                 lambda reply: bool(reply.strip()))
    assert (served["reply"], served["served_by"]) == (expected, "tinychat")
