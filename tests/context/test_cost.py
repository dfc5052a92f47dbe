"""Cost per request and per success against values computed by hand."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from course_lib.context.cost import (ModelPrice, TaskRun, cheapest, cost_per_request, cost_per_success,  # noqa: E402
                                     cost_table, plot_cost, price_from_throughput, total_cost)

SMALL = ModelPrice("small", input_per_million=0.5, output_per_million=1.5)
LARGE = ModelPrice("large", input_per_million=5.0, output_per_million=15.0)


def test_hand_computed_costs():
    run = TaskRun("small", "qa", requests=10, successes=4, prompt_tokens=2_000_000, completion_tokens=400_000)
    # 2M prompt tokens at $0.5/M = $1.00; 0.4M completion tokens at $1.5/M = $0.60
    assert total_cost(run, SMALL) == pytest.approx(1.60)
    assert cost_per_request(run, SMALL) == pytest.approx(0.16)
    assert cost_per_success(run, SMALL) == pytest.approx(0.40)


def test_free_model_costs_nothing():
    run = TaskRun("free", "qa", requests=3, successes=1, prompt_tokens=100, completion_tokens=50)
    price = ModelPrice("free", 0, 0)
    assert cost_per_request(run, price) == 0.0 and cost_per_success(run, price) == 0.0


def test_zero_successes_cost_infinity_per_success():
    run = TaskRun("small", "qa", requests=5, successes=0, prompt_tokens=1000, completion_tokens=200)
    assert cost_per_success(run, SMALL) == math.inf
    assert cost_per_request(run, SMALL) == pytest.approx((1000 * 0.5 + 200 * 1.5) / 1e6 / 5)


RUNS = [
    # small: $0.05 + $0.03 = $0.08 over 100 requests -> $0.0008/request, 10 successes -> $0.008/success
    TaskRun("small", "extract", requests=100, successes=10, prompt_tokens=100_000, completion_tokens=20_000),
    # large: $0.50 + $0.15 = $0.65 over 100 requests -> $0.0065/request, 90 successes -> $0.00722/success
    TaskRun("large", "extract", requests=100, successes=90, prompt_tokens=100_000, completion_tokens=10_000),
    # on an easy task both succeed almost always: small is cheapest both ways
    TaskRun("small", "classify", requests=50, successes=49, prompt_tokens=20_000, completion_tokens=1_000),
    TaskRun("large", "classify", requests=50, successes=50, prompt_tokens=20_000, completion_tokens=1_000),
]


def test_cheapest_per_request_is_not_cheapest_per_success():
    assert cost_per_request(RUNS[0], SMALL) == pytest.approx(0.0008)
    assert cost_per_success(RUNS[0], SMALL) == pytest.approx(0.008)
    assert cost_per_request(RUNS[1], LARGE) == pytest.approx(0.0065)
    assert cost_per_success(RUNS[1], LARGE) == pytest.approx(0.65 / 90)
    assert cheapest(RUNS, [SMALL, LARGE], by="request") == {"extract": "small", "classify": "small"}
    assert cheapest(RUNS, [SMALL, LARGE], by="success") == {"extract": "large", "classify": "small"}
    assert cheapest(RUNS, [SMALL, LARGE]) == cheapest(RUNS, [SMALL, LARGE], by="success")


def test_cheapest_ties_go_to_the_first_listed_and_no_success_leaves_the_task_out():
    twin = ModelPrice("twin", SMALL.input_per_million, SMALL.output_per_million)
    runs = [TaskRun("small", "t", 10, 5, 1000, 100), TaskRun("twin", "t", 10, 5, 1000, 100),
            TaskRun("small", "hopeless", 10, 0, 1000, 100), TaskRun("twin", "hopeless", 10, 0, 1000, 100)]
    assert cheapest(runs, [SMALL, twin]) == {"t": "small"}
    assert cheapest(runs, [SMALL, twin], by="request") == {"t": "small", "hopeless": "small"}
    assert cheapest(list(reversed(runs)), {"small": SMALL, "twin": twin}) == {"t": "twin"}


def test_cost_table_rows_and_marker():
    table = cost_table(RUNS, {"small": SMALL, "large": LARGE})
    lines = table.splitlines()
    assert lines[0].split() == ["task", "model", "requests", "success", "$/request", "$/success"]
    assert lines[1].split() == ["extract", "small", "100", "10.0%", "0.000800", "0.008000"]
    assert lines[2].split() == ["extract", "large", "100", "90.0%", "0.006500", "0.007222", "*"]
    # classify, small: $0.01 + $0.0015 = $0.0115; large: $0.10 + $0.015 = $0.115
    assert lines[3].split() == ["classify", "small", "50", "98.0%", "0.000230", "0.000235", "*"]
    assert lines[4].split() == ["classify", "large", "50", "100.0%", "0.002300", "0.002300"]
    assert lines[-1].startswith("*")
    assert len({len(line) for line in lines[1:5] if not line.endswith("*")} | {len(lines[0])}) == 1  # aligned


def test_cost_table_never_and_tiny_costs():
    runs = [TaskRun("small", "t", requests=4, successes=0, prompt_tokens=2, completion_tokens=0)]
    row = cost_table(runs, [SMALL]).splitlines()[1].split()
    assert row[-1] == "never"  # no marker: nothing succeeded
    assert float(row[-2]) == pytest.approx(2.5e-7)  # shown with enough decimals, not as 0.000000


def test_price_from_throughput():
    price = price_from_throughput("self-hosted", tokens_per_second=2000, dollars_per_hour=2.0)
    # 2000 tok/s -> 7.2M tokens an hour for $2 -> $2 / 7.2 per 1M
    assert price.output_per_million == pytest.approx(2.0 / 7.2)
    assert price.input_per_million == pytest.approx(2.0 / 7.2 * 0.25)
    assert price.name == "self-hosted"
    same = price_from_throughput("x", 100, 1.0, input_ratio=1.0)
    assert same.input_per_million == same.output_per_million


def test_price_name_must_match_the_run():
    run = TaskRun("small", "qa", 1, 1, 10, 10)
    for fn in (total_cost, cost_per_request, cost_per_success):
        with pytest.raises(ValueError, match="'large'.*'small'"):
            fn(run, LARGE)
    with pytest.raises(TypeError, match="ModelPrice"):
        cost_per_request(run, {"input_per_million": 1})
    with pytest.raises(TypeError, match="TaskRun"):
        cost_per_request(("small", "qa"), SMALL)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(name="", input_per_million=1, output_per_million=1), TypeError, "name"),
    (dict(name="m", input_per_million=-1, output_per_million=1), ValueError, "input_per_million"),
    (dict(name="m", input_per_million=1, output_per_million=math.inf), ValueError, "output_per_million"),
    (dict(name="m", input_per_million=math.nan, output_per_million=1), ValueError, "input_per_million"),
    (dict(name="m", input_per_million="1", output_per_million=1), TypeError, "input_per_million"),
    (dict(name="m", input_per_million=True, output_per_million=1), TypeError, "input_per_million"),
])
def test_bad_model_price(kwargs, error, match):
    with pytest.raises(error, match=match):
        ModelPrice(**kwargs)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(successes=11), ValueError, "cannot exceed"),
    (dict(requests=0, successes=0), ValueError, "requests is 0"),
    (dict(prompt_tokens=-1), ValueError, "prompt_tokens"),
    (dict(completion_tokens=1.5), TypeError, "completion_tokens"),
    (dict(successes=True), TypeError, "successes"),
    (dict(task=""), TypeError, "task"),
    (dict(model=None), TypeError, "model"),
])
def test_bad_task_run(kwargs, error, match):
    fields = dict(model="m", task="t", requests=10, successes=5, prompt_tokens=100, completion_tokens=10)
    with pytest.raises(error, match=match):
        TaskRun(**{**fields, **kwargs})


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(tokens_per_second=0), ValueError, "tokens_per_second"),
    (dict(tokens_per_second=-5), ValueError, "tokens_per_second"),
    (dict(tokens_per_second="fast"), TypeError, "tokens_per_second"),
    (dict(dollars_per_hour=-1), ValueError, "dollars_per_hour"),
    (dict(input_ratio=-0.1), ValueError, "input_ratio"),
    (dict(name=3), TypeError, "name"),
])
def test_bad_throughput(kwargs, error, match):
    with pytest.raises(error, match=match):
        price_from_throughput(**{**dict(name="m", tokens_per_second=100, dollars_per_hour=1.0), **kwargs})


def test_bad_runs_and_prices_for_tables():
    with pytest.raises(ValueError, match="no price"):
        cost_table(RUNS, [SMALL])
    with pytest.raises(ValueError, match="merge"):
        cost_table([RUNS[0], RUNS[0]], [SMALL])
    with pytest.raises(ValueError, match="no runs"):
        cost_table([], [SMALL])
    with pytest.raises(TypeError, match=r"runs\[0\]"):
        cheapest(["run"], [SMALL])
    with pytest.raises(TypeError, match=r"prices\[0\]"):
        cheapest(RUNS, ["small"])
    with pytest.raises(ValueError, match="key each price"):
        cheapest(RUNS, {"small": LARGE, "large": SMALL})
    with pytest.raises(ValueError, match="two different prices"):
        cheapest(RUNS, [SMALL, LARGE, ModelPrice("small", 9, 9)])
    with pytest.raises(ValueError, match="by must be"):
        cheapest(RUNS, [SMALL, LARGE], by="token")


def test_plot_cost_draws_a_bar_per_finite_cost():
    import matplotlib.pyplot as plt

    runs = RUNS + [TaskRun("small", "hopeless", 10, 0, 1000, 100), TaskRun("large", "hopeless", 10, 1, 1000, 100)]
    ax = plot_cost(runs, [SMALL, LARGE])
    try:
        assert len(ax.patches) == 5  # 6 runs, one never succeeded
        assert [t.get_text() for t in ax.texts] == ["never"]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["extract", "classify", "hopeless"]
        heights = sorted(p.get_height() for p in ax.patches)
        expected = sorted(cost_per_success(r, {"small": SMALL, "large": LARGE}[r.model]) for r in runs
                          if r.successes)
        assert heights == pytest.approx(expected)
    finally:
        plt.close(ax.figure)
    fig, own = plt.subplots()
    try:
        assert plot_cost(RUNS, [SMALL, LARGE], ax=own) is own
    finally:
        plt.close(fig)
