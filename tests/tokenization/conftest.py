"""Shared fixtures: the course tokenizers rebuilt from tiktoken's rank files, and tiktoken itself.

Rebuilding an encoding's merge table takes about a second, so each is built once per session.
"""
import pytest

from course_lib.tokenization import BPETokenizer, get_encoding

ENCODING_NAMES = ("cl100k_base", "o200k_base")


@pytest.fixture(scope="session")
def course_tokenizers() -> dict:
    return {name: BPETokenizer.from_tiktoken(name) for name in ENCODING_NAMES}


@pytest.fixture(scope="session")
def tiktoken_encodings() -> dict:
    return {name: get_encoding(name) for name in ENCODING_NAMES}


@pytest.fixture(params=ENCODING_NAMES)
def pair(request, course_tokenizers, tiktoken_encodings):
    """(course tokenizer, tiktoken encoding) for one encoding name."""
    return course_tokenizers[request.param], tiktoken_encodings[request.param]
