"""The chi-square helper against textbook critical values and closed forms."""
from __future__ import annotations

import math

import pytest
import torch

from course_lib.sampling import chi_square_gof, chi_square_p_value, frequencies


@pytest.mark.parametrize("statistic, dof, p", [
    (3.841, 1, 0.05), (6.635, 1, 0.01), (5.991, 2, 0.05), (18.307, 10, 0.05), (23.209, 10, 0.01),
    (124.342, 100, 0.05),
])
def test_p_values_match_the_textbook_table(statistic, dof, p):
    assert math.isclose(chi_square_p_value(statistic, dof), p, rel_tol=2e-3)


@pytest.mark.parametrize("x", [0.0, 0.5, 3.0, 10.0])
def test_two_degrees_of_freedom_closed_form(x):
    assert math.isclose(chi_square_p_value(x, 2), math.exp(-x / 2), rel_tol=1e-12)


def test_goodness_of_fit_by_hand():
    result = chi_square_gof([30, 20, 50], [0.25, 0.25, 0.5])
    # (30-25)^2/25 + (20-25)^2/25 + 0 = 2
    assert result.statistic == pytest.approx(2.0) and result.dof == 2
    assert result.p_value == pytest.approx(math.exp(-1))


def test_rare_bins_are_pooled():
    result = chi_square_gof([95, 3, 2], [0.95, 0.03, 0.02])  # expected 3 and 2 < 5: one pooled bin 5
    assert result.bins == 2 and result.dof == 1 and result.statistic == pytest.approx(0.0)


def test_impossible_outcomes_reject_outright():
    result = chi_square_gof([10, 1], [1.0, 0.0])
    assert result.p_value == 0.0 and result.impossible_hits == 1 and not result.consistent()


def test_type_one_error_rate_is_about_alpha():
    """Under the null, p < 0.05 about 5% of the time (200 seeded multinomial experiments)."""
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    rejections = 0
    for _ in range(200):
        counts = torch.bincount(torch.multinomial(probs, 500, replacement=True, generator=g), minlength=4)
        rejections += chi_square_gof(counts, probs).p_value < 0.05
    assert 2 <= rejections <= 22  # Binomial(200, 0.05): mean 10, this range holds > 99.9%


def test_bad_input():
    with pytest.raises(ValueError, match="sum to 1"):
        chi_square_gof([1, 2], [0.5, 0.6])
    with pytest.raises(ValueError, match="same non-zero length"):
        chi_square_gof([1, 2, 3], [0.5, 0.5])
    with pytest.raises(ValueError, match="no observations"):
        chi_square_gof([0, 0], [0.5, 0.5])
    with pytest.raises(ValueError, match="dof must be a positive int"):
        chi_square_p_value(1.0, 0)


def test_frequencies():
    assert frequencies("abca") == [("a", 2, 0.5), ("b", 1, 0.25), ("c", 1, 0.25)]
