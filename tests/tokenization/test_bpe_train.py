"""Training: a hand-checked example, equality with the textbook algorithm, special tokens, errors."""
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.tokenization import GPT4_PATTERN, BPETokenizer
from course_lib.tokenization.chat_template import SPECIAL_TOKENS
from course_lib.tokenization.merge import get_pair_counts, merge_pair
from course_lib.tokenization.samples import synthetic_corpus
from course_lib.tokenization.train import count_chunks, train_merges, train_merges_reference


def test_hand_checked_example():
    # "aaabdaaabac": (a,a) occurs 4 times -> 256. Then (a,b) and (256,a) tie at 2; the smaller
    # pair (97, 98) wins -> 257. (256, 257) occurs twice -> 258. Then all pairs occur once:
    # (97, 99) is the smallest -> 259, then (100, 258) -> 260.
    tok = BPETokenizer.train("aaabdaaabac", 261)
    assert list(tok.merges.items()) == [((97, 97), 256), ((97, 98), 257), ((256, 257), 258),
                                        ((97, 99), 259), ((100, 258), 260)]
    assert tok.vocab[258] == b"aaab" and tok.vocab[260] == b"daaab"
    assert tok.encode("aaabdaaabac") == [258, 260, 259]
    assert tok.decode([258, 260, 259]) == "aaabdaaabac"


def test_pair_counts_and_merge_primitives():
    assert get_pair_counts([1, 2, 3, 1, 2]) == {(1, 2): 2, (2, 3): 1, (3, 1): 1}
    assert merge_pair([1, 2, 3, 1, 2], (1, 2), 4) == [4, 3, 4]
    assert merge_pair([5, 5, 5, 5, 5], (5, 5), 9) == [9, 9, 5]


def test_incremental_trainer_equals_textbook_on_a_medium_corpus():
    counts = count_chunks(synthetic_corpus(60_000, seed=3))
    reference = train_merges_reference(counts, 300)
    assert len(reference) == 300
    assert train_merges(counts, 300) == reference


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet="aab c\n1é", max_size=120), merges=st.integers(1, 40))
def test_incremental_trainer_equals_textbook_on_tie_heavy_text(text, merges):
    counts = count_chunks(text)
    assert train_merges(counts, merges) == train_merges_reference(counts, merges)


def test_training_is_deterministic_and_round_trips():
    text = synthetic_corpus(20_000, seed=7)
    first = BPETokenizer.train(text, 400)
    second = BPETokenizer.train(text, 400)
    assert first.merges == second.merges and len(first.merges) == 144
    sample = text[:3000] + " unseen words: Zyxwv 🤖 中文"
    assert first.decode(first.encode(sample)) == sample
    assert len(first.encode(sample)) < len(sample.encode("utf-8")) / 2  # the merges compress


_SMALL_TRAINED = BPETokenizer.train(synthetic_corpus(5_000, seed=2), 320, special_tokens=list(SPECIAL_TOKENS))


@settings(max_examples=100, deadline=None)
@given(text=st.text())
def test_trained_tokenizer_round_trips_any_text(text):
    tok = _SMALL_TRAINED
    assert tok.decode(tok.encode_ordinary(text)) == text



def test_special_tokens_get_ids_after_the_merges_in_order():
    tok = BPETokenizer.train(synthetic_corpus(5_000, seed=2), 320, special_tokens=list(SPECIAL_TOKENS))
    n_merges = 320 - 256 - len(SPECIAL_TOKENS)
    assert len(tok.merges) == n_merges
    assert list(tok.special_tokens.values()) == list(range(256 + n_merges, 320))
    assert list(tok.special_tokens) == list(SPECIAL_TOKENS)
    assert tok.n_vocab == 320
    text = "<|user|>hi<|end|>"
    assert tok.encode(text, allowed_special="all")[0] == tok.special_tokens["<|user|>"]
    assert tok.decode(tok.encode(text, allowed_special="all")) == text


def test_explicit_special_token_ids_are_kept():
    tok = BPETokenizer.train("hello hello", 260, special_tokens={"<|endoftext|>": 1000})
    assert tok.special_tokens == {"<|endoftext|>": 1000}
    assert tok.encode("<|endoftext|>", allowed_special="all") == [1000]
    with pytest.raises(ValueError, match="distinct and >= "):
        BPETokenizer.train("hello hello", 260, special_tokens={"<|endoftext|>": 100})


def test_special_strings_in_the_corpus_never_become_merges():
    text = "<|endoftext|>".join(["abc"] * 50)
    with pytest.warns(UserWarning, match="ran out of pairs"):  # only "abc" is left to merge
        tok = BPETokenizer.train(text, 300, special_tokens=["<|endoftext|>"])
    assert len(tok.merges) == 2
    assert not any(b"<|" in tok.vocab[i] or b"|>" in tok.vocab[i] for i in tok.merges.values())


def test_running_out_of_pairs_warns_and_keeps_ids_dense():
    with pytest.warns(UserWarning, match="ran out of pairs after 2 of"):
        tok = BPETokenizer.train("abc", 400, special_tokens=["<|end|>"])
    assert tok.special_tokens == {"<|end|>": 258}


def test_vocab_size_too_small_names_the_minimum():
    with pytest.raises(ValueError, match="at least 263"):
        BPETokenizer.train("hello", 262, special_tokens=list(SPECIAL_TOKENS))
    with pytest.raises(ValueError, match="at least 256"):
        BPETokenizer.train("hello", 100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(BPETokenizer.train("hello", 256).merges) == 0


@pytest.mark.parametrize("bad_call, error", [
    (lambda: BPETokenizer.train(b"bytes", 300), TypeError),
    (lambda: BPETokenizer.train(None, 300), TypeError),
    (lambda: BPETokenizer.train("text", 300.0), TypeError),
    (lambda: BPETokenizer.train("text", 300, special_tokens="<|end|>"), TypeError),
    (lambda: BPETokenizer.train("text", 300, special_tokens=["<|a|>", "<|a|>"]), ValueError),
    (lambda: BPETokenizer.train("text", 300, special_tokens=[""]), TypeError),
    (lambda: BPETokenizer.train("text", 300, pattern="(unclosed"), ValueError),
])
def test_bad_arguments_are_clear_errors(bad_call, error):
    with pytest.raises(error):
        bad_call()


def test_pattern_is_respected():
    # With a pattern that splits every character, no merge is possible at all.
    with pytest.warns(UserWarning, match="after 0 of"):
        tok = BPETokenizer.train("aaaa bbbb", 300, pattern=r"(?s).")
    assert tok.merges == {} and tok.pattern == r"(?s)."
    assert BPETokenizer.train("x", 256).pattern == GPT4_PATTERN
