"""SamplingParams: defaults are neutral, invalid settings are rejected with a clear message."""
from __future__ import annotations

import pytest

from course_lib.sampling import SamplingParams


def test_defaults_and_normalisation():
    p = SamplingParams(stop="END", stop_token_ids=[3])
    assert p.stop == ("END",) and p.stop_token_ids == (3,)
    assert not p.greedy and not p.uses_penalties
    assert SamplingParams(temperature=0).greedy
    assert SamplingParams(presence_penalty=0.1).uses_penalties


@pytest.mark.parametrize("kwargs, message", [
    ({"temperature": -0.5}, "temperature must be >= 0"),
    ({"temperature": float("nan")}, "temperature must be a finite number"),
    ({"top_k": -1}, "top_k must be >= 0"),
    ({"top_k": 2.5}, "top_k must be an int"),
    ({"top_p": 0}, r"top_p must be in \(0, 1\]"),
    ({"top_p": 1.2}, r"top_p must be in \(0, 1\]"),
    ({"top_p": -0.1}, r"top_p must be in \(0, 1\]"),
    ({"min_p": 1.5}, r"min_p must be in \[0, 1\]"),
    ({"frequency_penalty": 2.5}, r"frequency_penalty must be in \[-2, 2\]"),
    ({"presence_penalty": -3}, r"presence_penalty must be in \[-2, 2\]"),
    ({"repetition_penalty": 0}, "repetition_penalty must be > 0"),
    ({"repetition_penalty": -1.0}, "repetition_penalty must be > 0"),
    ({"max_new_tokens": 0}, "max_new_tokens must be >= 1"),
    ({"max_new_tokens": True}, "max_new_tokens must be an int"),
    ({"stop": ["ok", ""]}, "non-empty strings"),
    ({"stop_token_ids": [-1]}, "non-negative token IDs"),
    ({"seed": "42"}, "seed must be an int"),
])
def test_invalid_settings_are_rejected(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        SamplingParams(**kwargs)


def test_params_are_immutable():
    with pytest.raises(AttributeError):
        SamplingParams().temperature = 2.0  # type: ignore[misc]
