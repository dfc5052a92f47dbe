"""Stop sequences: find them in the text even when they straddle token boundaries.

A model emits tokens, not characters, so a stop string such as ``"\\n\\n"`` or ``"END"`` may
arrive split across two or three tokens (``"EN"`` then ``"D"``). Matching therefore runs on
the decoded text, never on single tokens, and a streaming server must hold back any tail of
the text that could still grow into a stop string.

>>> trim_at_stop("The answer is 4.\\nUser: thanks", ["\\nUser:"])
('The answer is 4.', '\\nUser:')
>>> matcher = StopSequenceMatcher(["END"])
>>> [matcher.feed(piece) for piece in ["4 E", "N", "D and more"]]
['4 ', '', '']
>>> matcher.stopped, matcher.text
(True, '4 ')
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence


def _check_stops(stops: Iterable[str] | str) -> tuple[str, ...]:
    stops = (stops,) if isinstance(stops, str) else tuple(stops)
    for s in stops:
        if not isinstance(s, str) or not s:
            raise ValueError(f"stop sequences must be non-empty strings, got {s!r}")
    return stops


def find_stop(text: str, stops: Sequence[str], start: int = 0) -> tuple[int, str] | None:
    """Earliest occurrence of any stop string in ``text[start:]``: (index, stop) or None.

    When two stops begin at the same index the longer one is reported (the trimmed text is
    the same either way).

    >>> find_stop("a--b==c", ["==", "--"])
    (1, '--')
    """
    best: tuple[int, str] | None = None
    for stop in _check_stops(stops):
        index = text.find(stop, start)
        if index != -1 and (best is None or index < best[0] or (index == best[0] and len(stop) > len(best[1]))):
            best = (index, stop)
    return best


def trim_at_stop(text: str, stops: Sequence[str]) -> tuple[str, str | None]:
    """Cut ``text`` just before the first stop string; also say which stop matched."""
    hit = find_stop(text, stops)
    return (text, None) if hit is None else (text[: hit[0]], hit[1])


def held_back_length(text: str, stops: Sequence[str]) -> int:
    """Length of the longest tail of ``text`` that is the start of some stop string.

    That tail must not be shown yet: the next token may complete the stop.

    >>> held_back_length("the end is E", ["END"]), held_back_length("the end is EN", ["END"])
    (1, 2)
    """
    longest = 0
    for stop in _check_stops(stops):
        for size in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:size]):
                longest = size
                break
    return longest


class StopSequenceMatcher:
    """Feed decoded text pieces in order; get back the part that is safe to show.

    Generation halts at the first piece that completes any stop string, as serving engines
    do: with overlapping stops such as "a" and "DaD", the text "Da" + "D" stops at "a"
    (shown: "D") because "DaD" never gets the chance to finish. Within the piece that
    completes a stop, the earliest-starting stop is cut. After a stop is found, ``text`` holds everything before it and ``matched`` names it;
    feeding more pieces is an error. At the natural end of a stream call ``flush()`` to
    release the held-back tail.
    """

    def __init__(self, stops: Iterable[str] | str):
        self.stops = _check_stops(stops)
        self._longest = max((len(s) for s in self.stops), default=0)
        self._buffer = ""     # all text fed so far (cut at the stop once one is found)
        self._emitted = 0     # characters of _buffer already returned by feed/flush
        self.matched: str | None = None

    @property
    def stopped(self) -> bool:
        return self.matched is not None

    @property
    def text(self) -> str:
        """The output so far: everything fed, minus the stop string and what follows it."""
        return self._buffer

    def feed(self, piece: str) -> str:
        if self.stopped:
            raise RuntimeError(f"stop sequence {self.matched!r} already matched; start a new matcher")
        if not isinstance(piece, str):
            raise TypeError(f"pieces must be str (decoded text), got {type(piece).__name__}")
        old_length = len(self._buffer)
        self._buffer += piece
        # A new match must end inside the new piece, so it starts at most longest-1 chars earlier.
        hit = find_stop(self._buffer, self.stops, max(0, old_length - self._longest + 1)) if self.stops else None
        if hit is not None:
            self._buffer = self._buffer[: hit[0]]
            self.matched = hit[1]
            safe_end = len(self._buffer)
        else:
            safe_end = len(self._buffer) - held_back_length(self._buffer, self.stops)
        out = self._buffer[self._emitted: safe_end]
        self._emitted = max(self._emitted, safe_end)
        return out

    def flush(self) -> str:
        """The stream ended without a stop: release whatever was held back."""
        out = self._buffer[self._emitted:]
        self._emitted = len(self._buffer)
        return out


def stream_until_stop(pieces: Iterable[str], stops: Iterable[str] | str) -> tuple[str, str | None]:
    """Consume text pieces until a stop string completes; return (text before it, stop or None).

    >>> stream_until_stop(["Hel", "lo\\n", "\\nBye"], ["\\n\\n"])
    ('Hello', '\\n\\n')
    """
    matcher = StopSequenceMatcher(stops)
    for piece in pieces:
        matcher.feed(piece)
        if matcher.stopped:
            break
    return matcher.text, matcher.matched
