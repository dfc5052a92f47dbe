"""Route by task, and fall back only when there is something to fall back from.

**The router** is a table: task -> model, the model with the lowest measured cost per successful
task (notebook 07's arithmetic, with a price on each failure), so a small model takes the tasks
it gets right and the large one the rest. ``mix_cost_per_success`` prices a whole routed mix the
same way.

**The fallback chain** (``serve_with_fallback``) tries its backends in order and moves on only
for an outage (``TimeoutError``, ``ConnectionError``) or a reply that fails validation. Any other
exception is a bug in the caller or the backend: falling back would hide it, so it propagates.

    >>> def down(request):
    ...     raise TimeoutError("no reply in 2 s")
    >>> served = serve_with_fallback("2+2?", [("large", down), ("small", lambda r: "4")], str.isdigit)
    >>> served["reply"], served["served_by"], served["attempts"], served["fell_back"]
    ('4', 'small', [['large', 'unavailable'], ['small', 'ok']], True)

A fallback is a second deployment: it needs its own evaluation. One that was never measured on
the traffic it catches returns replies that look fine and are silently worse, with no error to
alert on; the notebook measures that cost.
"""
from __future__ import annotations

import math

from collections.abc import Callable, Iterable, Mapping, Sequence

from course_lib.context.cost import ModelPrice, TaskRun, bill, cheapest
from course_lib.sampling import SamplingParams
from course_lib.serving import Engine

__all__ = ["OUTCOMES", "UNAVAILABLE", "engine_backend", "mix_cost_per_success", "route_by_task",
           "serve_with_fallback"]

UNAVAILABLE = (TimeoutError, ConnectionError)  # the failures a fallback exists for
OUTCOMES = ("ok", "invalid", "unavailable")


def serve_with_fallback(request, backends: Sequence[tuple[str, Callable]], validate: Callable[[str], bool]) -> dict:
    """Try ``backends`` ((name, call) pairs) in order until one returns a reply ``validate`` accepts."""
    if not backends:
        raise ValueError("give at least one backend, as (name, call) pairs")
    names = [name for name, _ in backends]
    if len(set(names)) != len(names):
        raise ValueError(f"backend names must be distinct, got {names}")
    attempts = []
    for name, call in backends:
        try:
            reply = call(request)
        except UNAVAILABLE:
            attempts.append([name, "unavailable"])
            continue
        if validate(reply):
            attempts.append([name, "ok"])
            return {"reply": reply, "served_by": name, "attempts": attempts, "fell_back": len(attempts) > 1}
        attempts.append([name, "invalid"])
    return {"reply": None, "served_by": None, "attempts": attempts, "fell_back": len(attempts) > 1}


def route_by_task(runs: Iterable[TaskRun], prices: Iterable[ModelPrice] | Mapping[str, ModelPrice], *,
                  failure_cost: float = 0.0) -> dict[str, str]:
    """task -> the model that is cheapest per successful task on the measured runs, each failed
    request charged ``failure_cost`` on top of its tokens (``course_lib.context.cost.cheapest``)."""
    return cheapest(runs, prices, by="success", failure_cost=failure_cost)


def mix_cost_per_success(runs: Iterable[TaskRun], prices: Iterable[ModelPrice] | Mapping[str, ModelPrice],
                         route: Mapping[str, str], *, failure_cost: float = 0.0) -> float:
    """What a success costs when each task goes to ``route[task]``: the routed runs' bills (tokens,
    plus ``failure_cost`` per failed request) over their successes; inf without a success."""
    book = dict(prices) if isinstance(prices, Mapping) else {p.name: p for p in prices}
    chosen = [run for run in runs if route.get(run.task) == run.model]
    missing = set(route) - {run.task for run in chosen}
    if missing:
        raise ValueError(f"no measured run for {sorted(missing)} on the model the route names")
    successes = sum(run.successes for run in chosen)
    total = sum(bill(run, book[run.model], failure_cost) for run in chosen)
    return total / successes if successes else math.inf


def engine_backend(model, tokenizer, *, max_new_tokens: int = 48) -> Callable[[list[dict]], str]:
    """A backend for ``serve_with_fallback``: one chat in, the greedy reply's text out (one engine, reused)."""
    engine = Engine.for_job(model, tokenizer, rows=1)
    params = SamplingParams(temperature=0, max_new_tokens=max_new_tokens)

    def call(messages: list[dict]) -> str:
        return engine.generate([messages], params)[0].text

    return call
