"""Model selection by cost per successful task, measured on the course models.

``measure_runs`` serves the same held-out conversations with each candidate model on the
course engine (greedy), times each model (the median of a few rounds, the models taking turns
within each round, so a burst of load on a shared machine cannot land on one model alone),
and counts per task the requests, the successes
(``course_lib.data.scoring.SCORERS``) and the prompt and completion tokens. ``priced`` turns each
model's measured throughput into a price per token under one stated assumption: every model
runs on the same rented machine at ``dollars_per_hour`` (``cost.price_from_throughput``), so a
faster model is a cheaper one per token. ``course_lib.context.cost`` then divides cost by
successes: a model that is cheap per request but fails often can cost more per success.

    >>> from course_lib.context.cost import TaskRun
    >>> m = Measured({"a": [TaskRun("a", "tool", 10, 5, 300, 100)]}, {"a": 2.0}, {"a": 200})
    >>> [p.output_per_million for p in priced(m, dollars_per_hour=0.36)]  # 200 tokens in 2 s: 100 tok/s
    [1.0]
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from course_lib.context.cost import ModelPrice, TaskRun, price_from_throughput
from course_lib.data.scoring import SCORERS
from course_lib.generation.replies import BATCH_ROWS
from course_lib.sampling import SamplingParams
from course_lib.serving import Engine

# A small cloud instance with 2 vCPUs, roughly what the course machine is: an assumption stated
# once, so every price below can be traced to it and changed in one place.
DEFAULT_DOLLARS_PER_HOUR = 0.10


@dataclass(frozen=True)
class Measured:
    runs: dict[str, list[TaskRun]]   # model name -> one TaskRun per task
    seconds: dict[str, float]        # model name -> wall time serving all the conversations (median round)
    completion_tokens: dict[str, int]

    @property
    def tokens_per_second(self) -> dict[str, float]:
        return {name: self.completion_tokens[name] / self.seconds[name] for name in self.seconds}

    def all_runs(self) -> list[TaskRun]:
        return [run for runs in self.runs.values() for run in runs]


def measure_runs(models: Mapping[str, object], tokenizer, conversations: Sequence, *,
                 max_new_tokens: int = 64, rounds: int = 3) -> Measured:
    """Serve ``conversations`` (course ``Conversation`` objects) greedily with each model;
    each model's time is the median of ``rounds`` timed passes, taken in turn with the others."""
    if not models:
        raise ValueError("give at least one model, as {name: model}")
    if not conversations:
        raise ValueError("give at least one conversation to serve")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an int >= 1, got {rounds!r}")
    params = SamplingParams(temperature=0, max_new_tokens=max_new_tokens)
    prompts = [c.prompt_messages for c in conversations]
    engines = {name: Engine.for_job(model, tokenizer, rows=min(BATCH_ROWS, len(conversations)))
               for name, model in models.items()}
    for engine in engines.values():
        # One untimed request first: a model's first pass pays one-off costs (allocations,
        # kernel selection) that would otherwise be billed to whichever model is measured first.
        engine.generate([prompts[0]], params)
    timings: dict[str, list[float]] = {name: [] for name in engines}
    served = {}
    for _ in range(rounds):
        for name, engine in engines.items():
            start = time.perf_counter()
            served[name] = engine.generate(prompts, params)  # greedy: the same replies every round
            timings[name].append(time.perf_counter() - start)
    runs, produced = {}, {}
    seconds = {name: statistics.median(times) for name, times in timings.items()}
    for name, completions in served.items():
        totals: dict[str, list[int]] = {}
        for convo, done in zip(conversations, completions):
            row = totals.setdefault(convo.task, [0, 0, 0, 0])
            row[0] += 1
            row[1] += bool(SCORERS[convo.task](done.text, convo.expected))
            row[2] += len(done.prompt_ids)
            row[3] += len(done.token_ids)
        runs[name] = [TaskRun(name, task, *row) for task, row in totals.items()]
        produced[name] = sum(row[3] for row in totals.values())
    return Measured(runs, seconds, produced)


def priced(measured: Measured, *, dollars_per_hour: float = DEFAULT_DOLLARS_PER_HOUR) -> list[ModelPrice]:
    """One price per model from its measured throughput on the same machine."""
    return [price_from_throughput(name, tps, dollars_per_hour) for name, tps in measured.tokens_per_second.items()]
