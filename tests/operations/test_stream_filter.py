"""The streaming banned-phrase filter against a brute-force oracle over random chunkings."""
from __future__ import annotations

import random

import pytest

from course_lib.operations.stream_filter import StreamFilter, filter_stream

BANNED_SETS = [("password",), ("pass", "password"), ("ab", "bab"), ("aaa",), ("secret", "cre", "et a"),
               ("Word",), ("xx", "x y x")]


def _chunks(rng, text):
    """``text`` split at random points (empty chunks included)."""
    cuts = sorted(rng.randint(0, len(text)) for _ in range(rng.randint(0, 8)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def _occurrences(text, banned):
    """Every (start, end) where a banned phrase occurs in ``text``, case-insensitive."""
    low, found = text.lower(), []
    for phrase in (p.lower() for p in banned):
        found += [(s, s + len(phrase)) for s in range(len(low) - len(phrase) + 1) if low[s:s + len(phrase)] == phrase]
    return found


def _hold(text, banned):
    """The longest tail of ``text`` that is a proper beginning of a banned phrase (its length)."""
    low, phrases = text.lower(), [p.lower() for p in banned]
    return max((n for n in range(1, len(low) + 1) if any(p.startswith(low[-n:]) and p != low[-n:] for p in phrases)),
               default=0)


def _random_text(rng, banned):
    pieces = list(banned) + [p.upper() for p in banned] + [p[:-1] for p in banned] + ["a", "b", " ", "x", "y", "pa"]
    return "".join(rng.choice(pieces) if rng.random() < 0.5 else rng.choice("abxy sPW") for _ in range(rng.randint(0, 12)))


def test_released_text_against_a_brute_force_oracle_on_random_chunkings():
    rng = random.Random(8)
    blocked_seen = passed_seen = 0
    for _ in range(3000):
        banned = rng.choice(BANNED_SETS)
        text = _random_text(rng, banned)
        chunks = _chunks(rng, text)
        result = filter_stream(chunks, banned)
        released = "".join(result["released"])
        assert text.startswith(released)
        assert not _occurrences(released, banned), (chunks, banned)
        # the chunk that blocks is the first after which the text so far holds a phrase
        fed, block_at = "", None
        for i, chunk in enumerate(chunks):
            fed += chunk
            if _occurrences(fed, banned):
                block_at = i
                break
        assert result["blocked"] is (block_at is not None)
        if block_at is None:
            passed_seen += 1
            assert released == text and len(result["released"]) == len(chunks) + 1
        else:
            blocked_seen += 1
            assert len(result["released"]) == block_at + 1 and result["released"][-1] == ""
            # nothing of a phrase that was complete when the stream stopped was released
            assert all(len(released) <= start for start, end in _occurrences(fed, banned))
        longest = max(map(len, banned))
        assert result["held_max"] <= longest - 1
    assert blocked_seen > 300 and passed_seen > 300


def test_each_chunk_releases_all_but_the_longest_tail_that_could_grow_into_a_phrase():
    rng = random.Random(3)
    for _ in range(1500):
        banned = rng.choice(BANNED_SETS)
        chunks = _chunks(rng, _random_text(rng, banned))
        stream, fed, total, held_max = StreamFilter(banned), "", 0, 0
        for chunk in chunks:
            out = stream.feed(chunk)
            fed += chunk
            if stream.blocked:
                assert out == ""
                break
            total += len(out)
            assert total == len(fed) - _hold(fed, banned), (chunks, banned)
            held_max = max(held_max, _hold(fed, banned))
        if not stream.blocked:
            assert stream.close() == fed[total:]
        assert stream.held_max == held_max


def test_a_phrase_split_across_tokens_is_caught_and_case_does_not_matter():
    result = filter_stream(["My PAS", "sWo", "rd is x"], ["password"])
    assert result == {"released": ["My ", "", ""], "blocked": True, "held_max": 6}
    assert filter_stream(["pas", "ta"], ["password"]) == {"released": ["", "pasta", ""], "blocked": False,
                                                          "held_max": 3}


def test_a_blocked_stream_stays_silent():
    stream = StreamFilter(["bad"])
    assert stream.feed("so bad") == "" and stream.blocked
    assert stream.feed(" more") == "" and stream.close() == ""


def test_an_empty_banned_list_or_phrase_raises():
    for banned in ([], [""], ["ok", ""]):
        with pytest.raises(ValueError, match="at least one banned phrase, none of them empty"):
            StreamFilter(banned)


def test_a_character_whose_lowercase_is_longer_keeps_the_released_text_aligned():
    # "İ".lower() is two characters; a filter that lowercased whole strings would cut the
    # original at shifted positions, dropping or leaking characters.
    result = filter_stream(["İa", "bc"], ["password"])
    assert "".join(result["released"]) == "İabc" and not result["blocked"]
    result = filter_stream(["İ" * 8 + "passwor", "d"], ["password"])
    assert result["blocked"] and "passwor" not in "".join(result["released"])
