"""Fixtures shared by the serving tests (and tests/api's): the shipped tinychat and its tokenizer."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def model(tinychat_model):
    """The shipped tinychat on the CPU: tests/conftest.py's, loaded once and checked unchanged."""
    return tinychat_model


@pytest.fixture(scope="session")
def tok(tinychat_tokenizer):
    return tinychat_tokenizer
