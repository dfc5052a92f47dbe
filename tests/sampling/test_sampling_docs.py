"""The worked examples in the sampling docstrings run and stay true."""
import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["", ".params", ".processors", ".sampler", ".stops", ".stats"])
def test_docstring_examples(name):
    module = importlib.import_module("course_lib.sampling" + name)
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
