"""A banned-phrase filter on a token stream, and the hold-back it needs.

A streamed reply reaches the user a token at a time, and a phrase can arrive split across tokens
("pass" + "word"). A filter that checks each token alone misses it; one that checks the whole text
after the last token is too late, because the user has already read the rest. The streaming
filter checks the text so far after every token and holds back the longest tail that could still
grow into a banned phrase, releasing everything before it; on a match it stops the stream, and
nothing of the phrase was ever released.

    >>> stream = StreamFilter(["password"])
    >>> [stream.feed(piece) for piece in ["Your ", "pass", "port is ready"]], stream.close()
    (['Your ', '', 'passport is ready'], '')
    >>> stream = StreamFilter(["password"])
    >>> [stream.feed(piece) for piece in ["The ", "pass", "word", " is hunter2"]], stream.blocked
    (['The ', '', '', ''], True)

Matching is case-insensitive (``fold``: ``str.lower`` one character at a time, so the folded
text lines up with the original). The hold-back is at most the longest phrase's
length minus one character: what it costs is latency on exactly those characters, paid only when
the text could be the start of a phrase.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["StreamFilter", "filter_stream"]


def fold(text: str) -> str:
    """Lowercase, one character for one: a character whose lowercase is longer ("İ" -> "i̇") is
    kept as it is, so positions in the folded text are positions in the original."""
    return "".join(ch.lower() if len(ch.lower()) == 1 else ch for ch in text)


class StreamFilter:
    def __init__(self, banned: Iterable[str]):
        self.banned = tuple(fold(phrase) for phrase in banned)
        if not self.banned or not all(self.banned):
            raise ValueError("give at least one banned phrase, none of them empty")
        self.text = ""          # everything fed so far, lowercased for matching
        self.original = ""      # ... as it came
        self.released = 0       # characters released to the user
        self.blocked = False
        self.held_max = 0

    def _held_from(self) -> int:
        """Where the longest tail that is still the start of a banned phrase begins (len(text) if none)."""
        for start in range(max(self.released, len(self.text) - max(map(len, self.banned)) + 1), len(self.text)):
            tail = self.text[start:]
            if any(phrase.startswith(tail) for phrase in self.banned):
                return start
        return len(self.text)

    def feed(self, piece: str) -> str:
        """Add one token's text; return the text that is now safe to show ('' once blocked)."""
        if self.blocked:
            return ""
        self.original += piece
        self.text += fold(piece)
        if any(phrase in self.text for phrase in self.banned):
            self.blocked = True
            return ""
        cut = self._held_from()
        out, self.released = self.original[self.released:cut], cut
        self.held_max = max(self.held_max, len(self.text) - self.released)
        return out

    def close(self) -> str:
        """The stream ended: release what was held ('' when blocked)."""
        if self.blocked:
            return ""
        out, self.released = self.original[self.released:], len(self.original)
        return out


def filter_stream(chunks: Sequence[str], banned: Sequence[str]) -> dict:
    """Run ``chunks`` through one StreamFilter: what each chunk released, then the final flush."""
    stream = StreamFilter(banned)
    released = []
    for piece in chunks:
        released.append(stream.feed(piece))
        if stream.blocked:
            break
    if not stream.blocked:
        released.append(stream.close())
    return {"released": released, "blocked": stream.blocked, "held_max": stream.held_max}
