"""The UTF-8 byte DFA: the same language as the character DFA, and nothing that is not UTF-8."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.structured.dfa import compile_regex, utf8_sequences

ANY_TEXT = r"[\x00-\U0010FFFF]*"          # every string: its byte DFA is a UTF-8 validator


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")                  # strict: rejects overlongs, surrogates, > U+10FFFF
    except UnicodeDecodeError:
        return False
    return True


def is_utf8_prefix(data: bytes) -> bool:
    """Whether some bytes can follow ``data`` to make valid UTF-8.

    (Python's incremental decoder is too lenient here: it buffers ED A0, the start of a
    surrogate.) Only a sequence's first continuation byte is constrained (E0: A0.., ED: ..9F,
    F0: 90.., F4: ..8F), so trying 80, 90 and A0 for it, then 80s, finds a completion if any exists.
    """
    return any(is_utf8(data + bytes([first]) + b"\x80" * more)
               for first in (0x80, 0x90, 0xA0) for more in range(3)) or is_utf8(data)


@pytest.fixture(scope="module")
def validator():
    return compile_regex(ANY_TEXT).to_bytes()


def test_every_one_and_two_byte_string_is_judged_like_the_utf8_decoder(validator):
    for length in (1, 2):
        for data in map(bytes, itertools.product(range(256), repeat=length)):
            assert validator.fullmatch(data) == is_utf8(data), data
            assert (validator.walk(validator.start, data) is not None) == is_utf8_prefix(data), data


@pytest.mark.parametrize("data", [
    b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xf0\x80\x80\x80",    # overlong encodings
    b"\xed\xa0\x80", b"\xed\xbf\xbf",                                   # surrogates
    b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff",                  # above U+10FFFF, never-bytes
    b"\x80", b"a\xbf", b"\xc3", b"\xe2\x82", b"\xc3a",                  # stray / cut / interrupted
])
def test_invalid_utf8_is_never_accepted(validator, data):
    assert not validator.fullmatch(data)
    assert not compile_regex(".*").to_bytes().fullmatch(data)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=8), st.text(max_size=4).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_random_bytes_are_judged_like_the_utf8_decoder(validator, data):
    assert validator.fullmatch(data) == is_utf8(data)
    assert (validator.walk(validator.start, data) is not None) == is_utf8_prefix(data)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 0x10FFFF), st.integers(0, 0x10FFFF), st.integers(0, 0x10FFFF))
def test_utf8_sequences_cover_exactly_the_range(a, b, probe):
    lo, hi = min(a, b), max(a, b)
    sequences = utf8_sequences(lo, hi)
    encodable = (hi - lo + 1) - max(0, min(hi, 0xDFFF) - max(lo, 0xD800) + 1)
    # Each sequence's byte strings are all encodings inside lo..hi (checked at the corners,
    # which suffices because every position varies freely), and together they count the range.
    count = 0
    for sequence in sequences:
        low, high = bytes(r[0] for r in sequence), bytes(r[1] for r in sequence)
        assert lo <= ord(low.decode()) <= ord(high.decode()) <= hi
        size = 1
        for first, last in sequence:
            size *= last - first + 1
        count += size
    assert count == encodable
    if not 0xD800 <= probe <= 0xDFFF:
        encoded = chr(probe).encode()
        hits = [s for s in sequences
                if len(s) == len(encoded) and all(x <= byte <= y for byte, (x, y) in zip(encoded, s))]
        assert len(hits) == (1 if lo <= probe <= hi else 0)


@pytest.mark.parametrize("pattern, text, expected", [
    ("[^a]", "😀", True), ("[^a]", "a", False), ("[^a]", "é", True), (".", "€", True),
    (".", "\n", False), ("[é€😀中]{4}", "é€😀中", True), ("[^é]", "é", False), ("[^é]", "è", True),
    (r"[\u4e00-\u9fff]+", "中文字", True), (r"[\u4e00-\u9fff]+", "中a", False),
    (r"[\u0080-\U0010FFFF]", "\x7f", False), (r"[\u0080-\U0010FFFF]", "\U0010ffff", True),
    (r"[\ud7ff\ue000]", "\ue000", True), (r"[^\x00-\x7f]+", "héllo", False),
])
def test_multibyte_text(pattern, text, expected):
    dfa = compile_regex(pattern)
    assert dfa.fullmatch(text) == expected
    assert dfa.to_bytes().fullmatch(text.encode()) == expected


def test_a_character_cut_in_half_is_a_live_prefix_but_not_a_match():
    data = compile_regex("😀+").to_bytes()
    emoji = "😀".encode()
    for cut in range(1, 4):
        state = data.walk(data.start, emoji[:cut])
        assert state is not None and not data.is_accepting(state)
        assert data.walk(state, emoji[cut:]) is not None
    assert data.fullmatch(emoji * 2) and not data.fullmatch(emoji + emoji[:2])
    assert data.walk(data.start, emoji[:2] + b"a") is None


def test_byte_dfa_is_small_for_wide_classes():
    # A class over all of Unicode needs only the UTF-8 structure: a character boundary, 1, 2 or 3
    # continuation bytes to go, and the four lead bytes whose next byte is restricted
    # (E0 and F0 against overlongs, ED against surrogates, F4 against > U+10FFFF).
    assert compile_regex(ANY_TEXT).to_bytes().n_states == 8
    assert compile_regex(r"[^a]").to_bytes().n_states == 9     # start and accept are now two
