"""Choosing a model by what a *successful* task costs, not what a request costs.

    >>> prices = [ModelPrice("small", input_per_million=0.10, output_per_million=0.40),
    ...           ModelPrice("large", input_per_million=1.00, output_per_million=4.00)]
    >>> runs = [TaskRun("small", "extract", requests=100, successes=8, prompt_tokens=50_000, completion_tokens=10_000),
    ...         TaskRun("large", "extract", requests=100, successes=95, prompt_tokens=50_000, completion_tokens=5_000)]
    >>> print(cost_table(runs, prices))
    task     model  requests  success  $/request  $/success
    extract  small       100     8.0%   0.000090   0.001125
    extract  large       100    95.0%   0.000700   0.000737  *
    * cheapest per success within its task
    >>> cheapest(runs, prices, by="request"), cheapest(runs, prices, by="success")
    ({'extract': 'small'}, {'extract': 'large'})

Per request the small model is almost 8x cheaper; it succeeds on 8% of the requests and the
large one on 95%, so per success the large one is cheaper.

The arithmetic, for one model on one task over ``requests`` requests:

    total cost        = prompt_tokens * input_per_million / 1e6 + completion_tokens * output_per_million / 1e6
    cost per request  = total cost / requests
    cost per success  = total cost / successes      (inf when nothing succeeded)

Cost per success is what a product pays for a result: the failed requests were paid for too,
and a user whose task failed retries, escalates or leaves. A cheap model that fails often can
cost more per success than a dear one that rarely fails. The token totals are what was actually
billed, retries and all, so the comparison needs measured runs, not a price list alone.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

BY = ("success", "request")


def _check_price(owner: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{owner}: {name} must be a number, got {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{owner}: {name} must be a finite number >= 0, got {value!r}")


def _check_name(owner: str, field_name: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{owner}: {field_name} must be a non-empty str, got {value!r}")


@dataclass(frozen=True)
class ModelPrice:
    name: str                  # must equal TaskRun.model for the runs it prices
    input_per_million: float   # USD per 1M prompt tokens
    output_per_million: float  # USD per 1M completion tokens

    def __post_init__(self) -> None:
        _check_name("ModelPrice", "name", self.name)
        for field_name in ("input_per_million", "output_per_million"):
            _check_price(f"ModelPrice {self.name!r}", field_name, getattr(self, field_name))


@dataclass(frozen=True)
class TaskRun:
    model: str
    task: str
    requests: int           # requests sent, retries included: every one was billed
    successes: int          # requests whose answer passed the task's check
    prompt_tokens: int      # totals over all the requests
    completion_tokens: int

    def __post_init__(self) -> None:
        _check_name("TaskRun", "model", self.model)
        _check_name("TaskRun", "task", self.task)
        owner = f"TaskRun {self.model!r} on {self.task!r}"
        for field_name in ("requests", "successes", "prompt_tokens", "completion_tokens"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{owner}: {field_name} must be an int count, got {value!r}")
            if value < 0:
                raise ValueError(f"{owner}: {field_name} must be >= 0, got {value}")
        if self.requests == 0:
            raise ValueError(f"{owner}: requests is 0; a run with no requests has no cost per request, leave it out")
        if self.successes > self.requests:
            raise ValueError(f"{owner}: successes ({self.successes}) cannot exceed requests ({self.requests}); "
                             "count each request at most once")


def _check_pair(run: Any, price: Any) -> None:
    if not isinstance(run, TaskRun):
        raise TypeError(f"run must be a TaskRun, got {type(run).__name__}")
    if not isinstance(price, ModelPrice):
        raise TypeError(f"price must be a ModelPrice, got {type(price).__name__}")
    if price.name != run.model:
        raise ValueError(f"the price is for model {price.name!r} but the run used model {run.model!r}; "
                         "pass the price of the model that produced the run")


def total_cost(run: TaskRun, price: ModelPrice) -> float:
    """USD for all of the run's tokens: prompt at the input price, completion at the output price."""
    _check_pair(run, price)
    return run.prompt_tokens * price.input_per_million / 1e6 + run.completion_tokens * price.output_per_million / 1e6


def cost_per_request(run: TaskRun, price: ModelPrice) -> float:
    """USD per request sent, failed ones included."""
    return total_cost(run, price) / run.requests


def cost_per_success(run: TaskRun, price: ModelPrice, failure_cost: float = 0.0) -> float:
    """USD per request that succeeded: every request's cost spread over the successes; inf when none did.

    ``failure_cost`` is what each failed request costs the product beyond its tokens (a retry,
    a person's time, a user lost), carried by the successes too.

    >>> run = TaskRun("m", "t", requests=4, successes=0, prompt_tokens=1000, completion_tokens=100)
    >>> cost_per_success(run, ModelPrice("m", 1.0, 2.0))
    inf
    >>> cost_per_success(TaskRun("m", "t", 4, 2, 0, 0), ModelPrice("m", 1.0, 2.0), failure_cost=0.5)
    0.5
    """
    cost = bill(run, price, failure_cost)
    return cost / run.successes if run.successes else math.inf


def bill(run: TaskRun, price: ModelPrice, failure_cost: float = 0.0) -> float:
    """What the run cost the product: its tokens, plus ``failure_cost`` per failed request."""
    if not isinstance(failure_cost, Real) or isinstance(failure_cost, bool) or not 0 <= failure_cost < math.inf:
        raise ValueError(f"failure_cost must be >= 0 (USD per failed request), got {failure_cost!r}")
    return total_cost(run, price) + (run.requests - run.successes) * failure_cost


def price_from_throughput(name: str, tokens_per_second: float, dollars_per_hour: float,
                          input_ratio: float = 0.25) -> ModelPrice:
    """A per-token price for a model you host yourself, from what the machine costs and how fast it generates.

    The assumption, stated: the machine is rented at ``dollars_per_hour``, is kept busy, and
    generates ``tokens_per_second`` output tokens in total (all concurrent requests together), so

        output_per_million = dollars_per_hour / 3600 / tokens_per_second * 1e6
        input_per_million  = output_per_million * input_ratio

    Input tokens are cheaper because prefill processes the whole prompt in one forward pass,
    many tokens per pass and compute-bound, while decode makes one pass per output token,
    bound by reading the weights and the KV cache from memory. Hosted APIs price input at
    roughly a quarter to a fifth of output for the same reason, hence the default 0.25. An idle
    machine still costs its hourly rate: at half utilisation the real price per token doubles.

    >>> price = price_from_throughput("tinychat", tokens_per_second=1000, dollars_per_hour=3.6)
    >>> price.output_per_million, price.input_per_million
    (1.0, 0.25)
    """
    _check_name("price_from_throughput", "name", name)
    if isinstance(tokens_per_second, bool) or not isinstance(tokens_per_second, Real):
        raise TypeError(f"tokens_per_second must be a number, got {tokens_per_second!r}")
    if not (math.isfinite(tokens_per_second) and tokens_per_second > 0):
        raise ValueError(f"tokens_per_second must be a finite number > 0 (measured output tokens per second), "
                         f"got {tokens_per_second!r}")
    _check_price("price_from_throughput", "dollars_per_hour", dollars_per_hour)
    _check_price("price_from_throughput", "input_ratio", input_ratio)
    output_per_million = dollars_per_hour / 3600 / tokens_per_second * 1e6
    return ModelPrice(name, input_per_million=output_per_million * input_ratio, output_per_million=output_per_million)


def _price_book(prices: Iterable[ModelPrice] | Mapping[str, ModelPrice]) -> dict[str, ModelPrice]:
    if isinstance(prices, ModelPrice):
        prices = [prices]
    elif isinstance(prices, Mapping):
        for key, price in prices.items():
            if isinstance(price, ModelPrice) and key != price.name:
                raise ValueError(f"prices[{key!r}] is the price of {price.name!r}; key each price by its own name")
        prices = list(prices.values())
    book: dict[str, ModelPrice] = {}
    for i, price in enumerate(prices):
        if not isinstance(price, ModelPrice):
            raise TypeError(f"prices[{i}] must be a ModelPrice, got {type(price).__name__}")
        if price.name in book and book[price.name] != price:
            raise ValueError(f"two different prices for model {price.name!r}; keep one")
        book[price.name] = price
    return book


def _checked_runs(runs: Iterable[TaskRun], book: Mapping[str, ModelPrice]) -> list[TaskRun]:
    if isinstance(runs, TaskRun):
        runs = [runs]
    runs = list(runs)
    if not runs:
        raise ValueError("no runs given; pass at least one TaskRun")
    seen: set[tuple[str, str]] = set()
    for i, run in enumerate(runs):
        if not isinstance(run, TaskRun):
            raise TypeError(f"runs[{i}] must be a TaskRun, got {type(run).__name__}")
        if run.model not in book:
            raise ValueError(f"runs[{i}] used model {run.model!r}, which has no price; priced models: "
                             f"{', '.join(sorted(book)) or 'none'}")
        if (run.task, run.model) in seen:
            raise ValueError(f"two runs of model {run.model!r} on task {run.task!r}; "
                             "merge them into one TaskRun by adding their totals")
        seen.add((run.task, run.model))
    return runs


def _by_task(runs: Sequence[TaskRun]) -> dict[str, list[TaskRun]]:
    tasks: dict[str, list[TaskRun]] = {}
    for run in runs:
        tasks.setdefault(run.task, []).append(run)  # tasks and models keep their input order
    return tasks


def cheapest(runs: Iterable[TaskRun], prices: Iterable[ModelPrice] | Mapping[str, ModelPrice],
             by: str = "success", *, failure_cost: float = 0.0) -> dict[str, str]:
    """``{task: model}``: the model with the lowest cost per success (``by="success"``, each failure
    charged ``failure_cost`` on top) or per request (``by="request"``) on each task. A tie goes to
    the model listed first.

    A task on which no model succeeded has no cheapest model per success and is left out of
    the ``by="success"`` result.
    """
    if by not in BY:
        raise ValueError(f"by must be one of {', '.join(map(repr, BY))}, got {by!r}")
    book = _price_book(prices)  # failure_cost is checked by bill(), through cost_per_success
    if by == "success":
        def per(run, price):
            return cost_per_success(run, price, failure_cost)
    else:
        per = cost_per_request
    result = {}
    for task, task_runs in _by_task(_checked_runs(runs, book)).items():
        costs = [(per(run, book[run.model]), run.model) for run in task_runs]
        best = min(costs, key=lambda item: item[0])  # min keeps the first of equal costs
        if math.isfinite(best[0]):
            result[task] = best[1]
    return result


def _decimals(costs: Iterable[float]) -> int:
    """Decimals for a column of USD: 6, or enough to show 2 significant digits of the smallest cost."""
    smallest = min((c for c in costs if 0 < c < math.inf), default=1.0)
    return min(12, max(6, 1 - math.floor(math.log10(smallest))))


def cost_table(runs: Iterable[TaskRun], prices: Iterable[ModelPrice] | Mapping[str, ModelPrice]) -> str:
    """A plain-text table, one row per (task, model) in input order, grouped by task: requests,
    success rate, USD per request and per success; ``*`` marks the cheapest per success in
    each task. ``prices``: ModelPrices, or a mapping from model name to its ModelPrice.

    Costs are printed with 6 decimals, or more when the smallest would otherwise show fewer
    than 2 significant digits; a model that never succeeded shows ``never`` per success."""
    book = _price_book(prices)
    runs = _checked_runs(runs, book)
    best = cheapest(runs, book, by="success")
    header = ("task", "model", "requests", "success", "$/request", "$/success")
    per_request = [cost_per_request(run, book[run.model]) for run in runs]
    per_success = [cost_per_success(run, book[run.model]) for run in runs]
    decimals = _decimals(per_request + per_success)  # one precision for the table: the columns line up

    def dollars(value: float) -> str:
        return f"{value:.{decimals}f}" if math.isfinite(value) else "never"

    index = {id(run): i for i, run in enumerate(runs)}
    rows = []
    for task, task_runs in _by_task(runs).items():
        for run in task_runs:
            i = index[id(run)]
            rows.append((task, run.model, str(run.requests), f"{run.successes / run.requests:.1%}",
                         dollars(per_request[i]), dollars(per_success[i]), "*" if best.get(task) == run.model else ""))
    task_width = max(len(header[0]), *(len(r[0]) for r in rows)) + 2
    model_width = max(len(header[1]), *(len(r[1]) for r in rows)) + 2
    number_widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(2, 6)]

    def line(cells: Sequence[str], marker: str = "") -> str:
        numbers = "  ".join(f"{cell:>{width}}" for cell, width in zip(cells[2:], number_widths))
        return f"{cells[0]:<{task_width}}{cells[1]:<{model_width}}{numbers}{'  ' + marker if marker else ''}"

    lines = [line(header)] + [line(row[:6], row[6]) for row in rows]
    lines.append("* cheapest per success within its task")
    return "\n".join(lines)


def plot_cost(runs: Iterable[TaskRun], prices: Iterable[ModelPrice] | Mapping[str, ModelPrice],
              ax: Any = None) -> Any:
    """Grouped bars: cost per success for each task (a group) and model (a colour). Returns the Axes.

    A model that never succeeded on a task has no bar; its slot is labelled "never".
    """
    book = _price_book(prices)
    runs = _checked_runs(runs, book)
    import matplotlib.pyplot as plt  # lazily: importing this module must not need pyplot

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    tasks = _by_task(runs)
    models = list(dict.fromkeys(run.model for run in runs))
    width = 0.8 / len(models)
    for m, model in enumerate(models):
        xs, heights = [], []
        for t, task_runs in enumerate(tasks.values()):
            run = next((r for r in task_runs if r.model == model), None)
            if run is None:
                continue
            x = t - 0.4 + width * (m + 0.5)
            cost = cost_per_success(run, book[model])
            if math.isfinite(cost):
                xs.append(x)
                heights.append(cost)
            else:
                ax.annotate("never", (x, 0), ha="center", va="bottom", rotation=90, fontsize=8)
        ax.bar(xs, heights, width=width, label=model)
    ax.set_xticks(range(len(tasks)), list(tasks))
    ax.set_ylabel("USD per successful task")
    ax.set_title("Cost per success")
    ax.legend(title="model", fontsize=8)
    return ax
