"""Inside a course kernel, plain `tiktoken.get_encoding` works with no network at all."""
from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from course_lib.tokenization import prime_tiktoken_cache

CELL = """
import tiktoken, tiktoken.load

def no_network(*args, **kwargs):
    raise AssertionError("tiktoken tried to download a rank file")

tiktoken.load.read_file = no_network          # any download attempt now fails loudly
print(tiktoken.get_encoding("cl100k_base").encode("hello world"),
      tiktoken.get_encoding("o200k_base").encode("hello world"))
"""


@pytest.mark.slow  # it starts a kernel
def test_plain_tiktoken_works_offline_in_a_kernel(tmp_path, monkeypatch):
    cache = prime_tiktoken_cache(tmp_path / "tiktoken")  # what `course lab` does before starting
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CELL)])
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    assert nb.cells[0].outputs[0]["text"].strip() == "[15339, 1917] [24912, 2375]"
