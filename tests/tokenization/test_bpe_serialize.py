"""save/load: a round trip keeps every ID; damaged files are clear errors."""
import json

import pytest

from course_lib.tokenization import BPETokenizer, TokenizerFileError
from course_lib.tokenization.chat_template import SPECIAL_TOKENS
from course_lib.tokenization.samples import synthetic_corpus

TEXT = "Hello, world! def f(x): return x  # 中文 🎉 <|end|>"


@pytest.fixture(scope="module")
def trained():
    return BPETokenizer.train(synthetic_corpus(10_000, seed=5), 400, special_tokens=list(SPECIAL_TOKENS))


@pytest.fixture
def saved(trained, tmp_path):
    return trained.save(tmp_path / "tok.json")


def test_round_trip_of_a_trained_tokenizer(trained, saved):
    loaded = BPETokenizer.load(saved)
    assert loaded.merges == trained.merges and list(loaded.merges) == list(trained.merges)
    assert loaded.special_tokens == trained.special_tokens and loaded.pattern == trained.pattern
    assert loaded.encode(TEXT, allowed_special="all") == trained.encode(TEXT, allowed_special="all")


def test_round_trip_of_cl100k_keeps_the_byte_permutation(course_tokenizers, tiktoken_encodings, tmp_path):
    path = course_tokenizers["cl100k_base"].save(tmp_path / "cl100k.json")
    loaded = BPETokenizer.load(path)
    assert loaded.byte_ids == course_tokenizers["cl100k_base"].byte_ids
    assert loaded.name == "cl100k_base"
    assert loaded.encode(TEXT) == tiktoken_encodings["cl100k_base"].encode(TEXT)


def test_file_is_plain_versioned_and_readable(trained, saved):
    text = saved.read_text(encoding="utf-8")
    data = json.loads(text)
    assert data["format"] == "course-bpe" and data["version"] == 1
    first = data["merges"][0]
    left, right, new_id, shown = first
    assert new_id == 256 and shown == trained.vocab[256].decode("utf-8", "replace")
    assert text.count("\n") > len(trained.merges)  # one merge per line


def test_truncated_file(saved):
    saved.write_text(saved.read_text(encoding="utf-8")[: 2000], encoding="utf-8")
    with pytest.raises(TokenizerFileError, match="truncated or not JSON"):
        BPETokenizer.load(saved)


def test_corrupt_merge_is_caught_by_the_checksum(saved):
    data = json.loads(saved.read_text(encoding="utf-8"))
    data["merges"][5][0] = 7
    saved.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(TokenizerFileError, match="corrupt"):
        BPETokenizer.load(saved)


def test_unknown_version_and_wrong_format(saved):
    data = json.loads(saved.read_text(encoding="utf-8"))
    saved.write_text(json.dumps({**data, "version": 99}), encoding="utf-8")
    with pytest.raises(TokenizerFileError, match="version 99"):
        BPETokenizer.load(saved)
    saved.write_text(json.dumps({"hello": 1}), encoding="utf-8")
    with pytest.raises(TokenizerFileError, match="not a course-bpe file"):
        BPETokenizer.load(saved)
    saved.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TokenizerFileError):
        BPETokenizer.load(saved)


def test_missing_field(saved):
    data = json.loads(saved.read_text(encoding="utf-8"))
    del data["byte_ids"]
    saved.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(TokenizerFileError, match="missing a field"):
        BPETokenizer.load(saved)
