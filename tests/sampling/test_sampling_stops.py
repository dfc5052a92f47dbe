"""Stop sequences: matched across piece boundaries, trimmed, and never shown early."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.sampling import (
    StopSequenceMatcher,
    find_stop,
    held_back_length,
    stream_until_stop,
    trim_at_stop,
)


def test_stop_split_over_three_pieces():
    assert stream_until_stop(["The end is E", "N", "D. more"], ["END"]) == ("The end is ", "END")


def test_earliest_stop_wins_and_no_stop_keeps_everything():
    assert trim_at_stop("a STOP b END", ["END", "STOP"]) == ("a ", "STOP")
    assert trim_at_stop("nothing here", ["END"]) == ("nothing here", None)
    assert find_stop("xxabc", ["abc", "ab"]) == (2, "abc")


def test_matcher_holds_back_a_possible_stop_prefix():
    m = StopSequenceMatcher(["\n\nUser:"])
    assert m.feed("Four.\n") == "Four."          # "\n" could start the stop: held back
    assert m.feed("\nUs") == ""                    # still a possible stop
    assert m.feed("ually") == "\n\nUsually"        # it was not one: release
    assert m.feed("\n\nUser: hi") == ""
    assert m.stopped and m.text == "Four.\n\nUsually" and m.matched == "\n\nUser:"
    with pytest.raises(RuntimeError, match="already matched"):
        m.feed("more")


def test_flush_releases_the_tail_at_the_end_of_the_stream():
    m = StopSequenceMatcher(["END"])
    assert m.feed("almost EN") == "almost "
    assert m.flush() == "EN" and not m.stopped


def test_held_back_length():
    assert held_back_length("abc", ["xyz"]) == 0
    assert held_back_length("ab", ["abc", "b"]) == 2
    assert held_back_length("", ["abc"]) == 0


def test_no_stops_means_no_holding_back():
    m = StopSequenceMatcher([])
    assert m.feed("abc") == "abc" and not m.stopped


def test_bad_stops_are_rejected():
    with pytest.raises(ValueError, match="non-empty strings"):
        StopSequenceMatcher(["ok", ""])
    with pytest.raises(TypeError, match="pieces must be str"):
        StopSequenceMatcher(["a"]).feed(b"bytes")


alphabet = st.sampled_from(list("abE ND\n"))
stop_strings = st.text(alphabet, min_size=1, max_size=4)


def cut(text: str, cuts: list[int]) -> list[str]:
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def stream(pieces: list[str], stops: list[str]) -> tuple[str, StopSequenceMatcher]:
    m = StopSequenceMatcher(stops)
    shown = ""
    for piece in pieces:
        shown += m.feed(piece)
        if m.stopped:
            return shown, m
    return shown + m.flush(), m


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet, max_size=40), cuts=st.lists(st.integers(0, 40), max_size=10), stop=stop_strings)
def test_one_stop_streaming_equals_trimming_the_whole_text(text, cuts, stop):
    """However the text is cut into pieces, the shown text is the whole text cut at the stop."""
    expected_text, expected_stop = trim_at_stop(text, [stop])
    shown, m = stream(cut(text, cuts), [stop])
    assert shown == m.text == expected_text and m.matched == expected_stop


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet, max_size=40), cuts=st.lists(st.integers(0, 40), max_size=10),
       stops=st.lists(stop_strings, min_size=1, max_size=3))
def test_many_stops_first_to_complete_wins(text, cuts, stops):
    """Generation halts at the first piece that completes any stop; within that text the
    earliest-starting stop is cut. Nothing shown before then is ever part of a stop."""
    pieces = cut(text, cuts)
    seen = ""
    expected = (text, None)
    for piece in pieces:
        seen += piece
        if find_stop(seen, stops) is not None:
            expected = trim_at_stop(seen, stops)
            break
    shown, m = stream(pieces, stops)
    assert (shown, m.matched) == expected and m.text == shown
