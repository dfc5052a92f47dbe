"""Calibration against a straightforward loop over the definitions, on seeded random data."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from course_lib.context.calibration import (Bin, Selective, accuracy_coverage, apply_threshold,  # noqa: E402
                                            choose_threshold, expected_calibration_error, plot_reliability,
                                            reliability_bins)


def naive_bins(conf, right, n_bins):
    """The definition, one answer and one bin at a time: lo <= c < hi, 1.0 in the last bin."""
    out = []
    for i in range(n_bins):
        lo, hi = i / n_bins, (i + 1) / n_bins
        members = [k for k, c in enumerate(conf) if lo <= c < hi or (i == n_bins - 1 and c == 1.0)]
        n = len(members)
        out.append((lo, hi, n,
                    sum(conf[k] for k in members) / n if n else math.nan,
                    sum(bool(right[k]) for k in members) / n if n else math.nan))
    return out


def naive_ece(conf, right, n_bins):
    return sum(n / len(conf) * abs(acc - mean) for _, _, n, mean, acc in naive_bins(conf, right, n_bins) if n)


def naive_selective(conf, right, threshold):
    answered = [k for k, c in enumerate(conf) if c >= threshold]
    n_right = sum(bool(right[k]) for k in answered)
    return len(answered) / len(conf), (n_right / len(answered) if answered else math.nan)


def random_case(seed, n=200):
    rng = np.random.default_rng(seed)
    # Rounded so that ties between confidences and values on bin edges actually occur.
    conf = np.round(rng.uniform(0, 1, n), 2)
    right = rng.uniform(0, 1, n) < conf ** 2  # overconfident on purpose
    return conf.tolist(), right.tolist()


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("n_bins", [1, 3, 10, 15, 49])
def test_bins_and_ece_match_the_definition(seed, n_bins):
    conf, right = random_case(seed)
    bins = reliability_bins(conf, right, n_bins=n_bins)
    expected = naive_bins(conf, right, n_bins)
    assert len(bins) == n_bins
    for b, (lo, hi, n, mean, acc) in zip(bins, expected):
        assert (b.lower, b.upper, b.count) == (lo, hi, n)
        assert same(b.mean_confidence, mean) and same(b.accuracy, acc)
    assert sum(b.count for b in bins) == len(conf)
    assert expected_calibration_error(conf, right, n_bins=n_bins) == pytest.approx(naive_ece(conf, right, n_bins),
                                                                                   abs=1e-12)


def test_bin_edges_are_half_open_even_where_floor_would_round_down():
    # 1/49 * 49 == 0.9999999999999999: a floor(c * n) binning would put 1/49 in bin 0.
    bins = reliability_bins([1 / 49, 0.5], [True, True], n_bins=49)
    assert bins[1].count == 1 and bins[0].count == 0


def test_numpy_inputs_and_int_flags_are_accepted():
    conf, right = random_case(7)
    as_lists = expected_calibration_error(conf, right)
    assert expected_calibration_error(np.array(conf), np.array(right)) == as_lists
    assert expected_calibration_error(conf, [int(r) for r in right]) == as_lists


def test_perfect_calibration_has_ece_near_zero():
    rng = np.random.default_rng(0)
    conf = rng.uniform(0, 1, 200_000)
    right = rng.uniform(0, 1, conf.size) < conf  # correct ~ Bernoulli(confidence)
    assert expected_calibration_error(conf, right, n_bins=10) < 0.01
    # ...and an overconfident model (right with probability conf**2) is far from it.
    assert expected_calibration_error(conf, rng.uniform(0, 1, conf.size) < conf ** 2) > 0.1


def test_exact_zero_and_one_go_in_the_first_and_last_bin():
    bins = reliability_bins([0.0, 1.0, 1.0], [False, True, False], n_bins=4)
    assert [b.count for b in bins] == [1, 0, 0, 2]
    assert bins[0].mean_confidence == 0.0 and bins[3].mean_confidence == 1.0 and bins[3].accuracy == 0.5
    assert math.isnan(bins[1].accuracy) and math.isnan(bins[1].mean_confidence)
    assert (bins[0].lower, bins[-1].upper) == (0.0, 1.0)


def test_all_answers_in_one_bin():
    bins = reliability_bins([0.71, 0.72, 0.79], [True, True, False], n_bins=10)
    assert [b.count for b in bins] == [0] * 7 + [3] + [0] * 2
    ece = expected_calibration_error([0.71, 0.72, 0.79], [True, True, False], n_bins=10)
    assert ece == pytest.approx(abs(2 / 3 - (0.71 + 0.72 + 0.79) / 3))


def test_single_bin_ece_is_the_overall_gap():
    conf, right = random_case(3)
    assert expected_calibration_error(conf, right, n_bins=1) == pytest.approx(abs(np.mean(right) - np.mean(conf)))


@pytest.mark.parametrize("seed", range(5))
def test_accuracy_coverage_matches_the_definition(seed):
    conf, right = random_case(seed, n=120)
    rows = accuracy_coverage(conf, right)
    thresholds = [t for t, _, _ in rows]
    assert thresholds == sorted(set(conf), reverse=True)
    for t, coverage, accuracy in rows:
        assert (coverage, accuracy) == pytest.approx(naive_selective(conf, right, t))
    assert [c for _, c, _ in rows] == sorted(c for _, c, _ in rows)
    assert rows[-1][1] == 1.0  # the lowest confidence answers everything
    assert all(type(x) is float for row in rows for x in row)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("target", [0.5, 0.7, 0.9, 1.0])
def test_choose_threshold_is_the_max_coverage_threshold_reaching_the_target(seed, target):
    conf, right = random_case(seed, n=120)
    reaching = [t for t in set(conf) if naive_selective(conf, right, t)[1] >= target]
    chosen = choose_threshold(conf, right, target_accuracy=target)
    if not reaching:
        assert chosen == math.inf
        return
    assert chosen == min(reaching)
    coverage, accuracy = naive_selective(conf, right, chosen)
    assert accuracy >= target
    # no threshold that answers more questions meets the target
    assert all(naive_selective(conf, right, t)[1] < target for t in set(conf) if t < chosen)


def test_choose_threshold_takes_the_lowest_even_when_accuracy_is_not_monotonic():
    conf = [0.9, 0.8, 0.7, 0.6]
    right = [True, False, True, True]  # accuracy 1.0, 0.5, 0.67, 0.75 as the threshold falls
    assert choose_threshold(conf, right, target_accuracy=0.75) == 0.6
    assert choose_threshold(conf, right, target_accuracy=0.8) == 0.9


def test_choose_threshold_exact_target_counts_as_reached():
    conf = [0.9] * 9 + [0.5]
    right = [True] * 8 + [False, True]  # threshold 0.5: 9 of 10 right
    assert choose_threshold(conf, right, target_accuracy=0.9) == 0.5


def test_unreachable_target_means_answer_nothing():
    conf, right = [0.9, 0.6, 0.3], [False, True, False]
    threshold = choose_threshold(conf, right, target_accuracy=0.95)
    assert threshold == math.inf
    result = apply_threshold(conf, right, threshold)
    assert (result.answered, result.abstained, result.coverage, result.wrong_answered) == (0, 3, 0.0, 0)
    assert math.isnan(result.accuracy_answered)


def test_apply_threshold_counts():
    conf = [0.95, 0.9, 0.8, 0.4, 0.1]
    right = [True, False, True, True, False]
    assert apply_threshold(conf, right, 0.8) == Selective(threshold=0.8, coverage=0.6, accuracy_answered=2 / 3,
                                                          answered=3, abstained=2, wrong_answered=1)
    everything = apply_threshold(conf, right, 0.0)
    assert (everything.answered, everything.accuracy_answered) == (5, 0.6)


@pytest.mark.parametrize("seed", range(3))
def test_apply_threshold_matches_the_definition(seed):
    conf, right = random_case(seed)
    for threshold in (0.0, 0.25, 0.5, 0.77, 1.0):
        result = apply_threshold(conf, right, threshold)
        coverage, accuracy = naive_selective(conf, right, threshold)
        assert result.coverage == pytest.approx(coverage) and same(result.accuracy_answered, accuracy)
        assert result.answered + result.abstained == len(conf)


BAD_INPUTS = [
    (([0.5, 0.6], [True]), ValueError, "entries"),
    (([], []), ValueError, "empty"),
    (([0.5, 1.2], [True, False]), ValueError, r"confidences\[1\]"),
    (([-0.1], [True]), ValueError, r"\[0, 1\]"),
    (([math.nan], [True]), ValueError, r"\[0, 1\]"),
    (([0.5], [0.7]), TypeError, "booleans"),
    (([0.5], ["yes"]), TypeError, "booleans"),
    (("0.5", [True]), TypeError, "list"),
    ((["a"], [True]), TypeError, "numbers"),
    (([[0.5]], [[True]]), ValueError, "1-D"),
]


@pytest.mark.parametrize("args, error, match", BAD_INPUTS)
def test_bad_inputs_are_refused_by_every_function(args, error, match):
    with pytest.raises(error, match=match):
        reliability_bins(*args)
    with pytest.raises(error, match=match):
        expected_calibration_error(*args)
    with pytest.raises(error, match=match):
        accuracy_coverage(*args)
    with pytest.raises(error, match=match):
        choose_threshold(*args, target_accuracy=0.9)
    with pytest.raises(error, match=match):
        apply_threshold(*args, 0.5)


@pytest.mark.parametrize("n_bins, error", [(0, ValueError), (-3, ValueError), (2.5, TypeError), (True, TypeError)])
def test_bad_n_bins(n_bins, error):
    with pytest.raises(error, match="n_bins"):
        reliability_bins([0.5], [True], n_bins=n_bins)


@pytest.mark.parametrize("target, error", [(0, ValueError), (1.5, ValueError), (-0.2, ValueError),
                                           (math.nan, ValueError), ("0.9", TypeError), (True, TypeError)])
def test_bad_target_accuracy(target, error):
    with pytest.raises(error, match="target_accuracy"):
        choose_threshold([0.5], [True], target_accuracy=target)


def test_bad_threshold():
    with pytest.raises(ValueError, match="nan"):
        apply_threshold([0.5], [True], math.nan)
    with pytest.raises(TypeError, match="threshold"):
        apply_threshold([0.5], [True], "0.5")


def test_plot_reliability_draws_one_bar_per_bin_and_the_diagonal():
    import matplotlib.pyplot as plt

    conf, right = random_case(0)
    bins = reliability_bins(conf, right, n_bins=8)
    ax = plot_reliability(bins, title="tinychat")
    try:
        assert ax.get_title() == "tinychat"
        assert len(ax.patches) == 8
        assert [t.get_text() for t in ax.texts] == [f"n={b.count}" for b in bins]
    finally:
        plt.close(ax.figure)
    fig, own_ax = plt.subplots()
    try:
        assert plot_reliability(reliability_bins([1.0], [True], n_bins=3), ax=own_ax) is own_ax
    finally:
        plt.close(fig)
    with pytest.raises(TypeError, match="reliability_bins"):
        plot_reliability([])
    with pytest.raises(TypeError, match="reliability_bins"):
        plot_reliability([(0.0, 1.0, 1, 0.5, 0.5)])
    assert isinstance(bins[0], Bin)
