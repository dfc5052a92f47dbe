"""Every hidden test passes on the notebook's own solutions, through the plain-data contract."""
from __future__ import annotations

import pytest

from tests.hidden.conftest import EXERCISES, failures, verdict


@pytest.mark.parametrize("name, exercise", EXERCISES)
def test_reference_answers_pass_every_hidden_check(name, exercise):
    result = verdict(name, exercise)
    assert result.passed, failures(result)
    assert len(result.results) >= 3, "a hidden test should try several cases"
