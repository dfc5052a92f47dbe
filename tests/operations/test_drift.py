"""The paired comparison against the discordant-pair algebra, and the spread of repeated trials."""
from __future__ import annotations

import math
import random

import pytest

from course_lib.operations.drift import VERDICTS, compare_paired, sampling_spread


def _by_discordant_pairs(before, after, z=1.96):
    """Only the flipped inputs matter: b right->wrong, c wrong->right, out of n."""
    n = len(before)
    b = sum(1 for x, y in zip(before, after) if x and not y)
    c = sum(1 for x, y in zip(before, after) if y and not x)
    mean = (c - b) / n
    var = (b + c - n * mean ** 2) / (n - 1)
    se = math.sqrt(max(var, 0.0) / n)
    return b, c, mean, se, mean - z * se, mean + z * se


def test_delta_and_standard_error_follow_the_discordant_pair_algebra_on_random_cases():
    rng = random.Random(20240501)
    for _ in range(400):
        n = rng.randint(2, 80)
        p_before, p_flip = rng.random(), rng.random() * 0.5
        before = [rng.random() < p_before for _ in range(n)]
        after = [(not x) if rng.random() < p_flip else x for x in before]
        z = rng.choice([1.0, 1.645, 1.96, 2.576])
        b, c, mean, se, low, high = _by_discordant_pairs(before, after, z)
        result = compare_paired(before, after, z=z)
        assert (result["right_to_wrong"], result["wrong_to_right"]) == (b, c)
        assert result["delta"] == pytest.approx(mean, abs=1e-12)
        assert result["se"] == pytest.approx(se, abs=1e-12)
        assert result["low"] == pytest.approx(low, abs=1e-12) and result["high"] == pytest.approx(high, abs=1e-12)
        if abs(high) > 1e-9 and abs(low) > 1e-9:  # clear of the float boundary
            expected = "worse" if high < 0 else "better" if low > 0 else "noise"
            assert result["verdict"] == expected
        assert result["verdict"] in VERDICTS


def test_the_delta_is_the_accuracy_difference():
    rng = random.Random(7)
    before = [rng.random() < 0.7 for _ in range(50)]
    after = [rng.random() < 0.6 for _ in range(50)]
    assert compare_paired(before, after)["delta"] == pytest.approx(sum(after) / 50 - sum(before) / 50)


def test_two_flips_in_100_are_noise_and_the_same_flips_in_500_are_worse_by_hand():
    before, after = [True] * 98 + [False] * 2, [True] * 96 + [False] * 4
    # n=100, b=2, c=0: var = (2 - 100 * 0.02^2) / 99 = 1.96 / 99; se = sqrt(var / 100) = 0.014071
    small = compare_paired(before, after)
    assert small["se"] == pytest.approx(math.sqrt(1.96 / 99 / 100))
    assert small["high"] == pytest.approx(-0.02 + 1.96 * 0.0140705, abs=1e-6) and small["verdict"] == "noise"
    # n=500, b=10: var = (10 - 500 * 0.0004) / 499 = 9.8 / 499; se = 0.0062673; high = -0.00772 < 0
    large = compare_paired(before * 5, after * 5)
    assert large["se"] == pytest.approx(math.sqrt(9.8 / 499 / 500)) and large["verdict"] == "worse"
    # a narrower interval (z below 0.02 / 0.01407 = 1.42) calls the 100-input case worse too
    assert compare_paired(before, after, z=1.4)["verdict"] == "worse"
    assert compare_paired(before, after, z=1.45)["verdict"] == "noise"


def test_one_flip_each_way_cancels_and_is_noise():
    result = compare_paired([True, False], [False, True])
    # diffs -1, +1: mean 0, sample var 2, se = sqrt(2 / 2) = 1
    assert (result["delta"], result["se"], result["verdict"]) == (0.0, 1.0, "noise")
    assert (result["right_to_wrong"], result["wrong_to_right"]) == (1, 1)


def test_zero_standard_error_verdicts():
    same = compare_paired([True, False, True], [True, False, True])
    assert (same["delta"], same["se"], same["low"], same["high"], same["verdict"]) == (0.0, 0.0, 0.0, 0.0, "noise")
    all_worse = compare_paired([True] * 3, [False] * 3)
    assert (all_worse["delta"], all_worse["se"], all_worse["verdict"]) == (-1.0, 0.0, "worse")
    all_better = compare_paired([False] * 4, [True] * 4)
    assert (all_better["delta"], all_better["se"], all_better["verdict"]) == (1.0, 0.0, "better")


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="same inputs: got 3 and 2"):
        compare_paired([True] * 3, [True] * 2)
    with pytest.raises(ValueError, match="at least 2 inputs"):
        compare_paired([True], [False])
    with pytest.raises(ValueError, match="at least 2 inputs"):
        compare_paired([], [])
    with pytest.raises(ValueError, match="must be a bool"):
        compare_paired([1, 0], [True, False])
    with pytest.raises(ValueError, match="must be a bool"):
        compare_paired([True, False], [True, None])
    for z in (0, -1.96, math.nan, math.inf, True, "1.96"):
        with pytest.raises(ValueError, match="z must be a positive number"):
            compare_paired([True, False], [True, True], z=z)


def test_sampling_spread_by_hand():
    spread = sampling_spread([0.5, 0.7, 0.6])
    # deviations -0.1, +0.1, 0: sample variance 0.02 / 2 = 0.01
    assert spread["mean"] == pytest.approx(0.6) and spread["stdev"] == pytest.approx(0.1)
    assert (spread["min"], spread["max"]) == (0.5, 0.7) and spread["range"] == pytest.approx(0.2)
    assert sampling_spread([0.8, 0.8])["stdev"] == 0.0


def test_sampling_spread_needs_two_trials():
    for trials in ([], [0.9]):
        with pytest.raises(ValueError, match="at least 2 trials"):
            sampling_spread(trials)
