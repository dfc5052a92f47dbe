"""The worked examples in the tokenization docstrings run and give what they show.

(bpe.py's examples rebuild cl100k_base several times, about a second each; they are exercised
by the tiktoken tests instead.)
"""
import doctest
import importlib
import warnings

import pytest

MODULES = ["pretokenize", "merge", "special", "train", "serialize", "cost", "samples", "display"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"course_lib.tokenization.{name}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an example that warns is a bad example
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
