"""What text costs in tokens: per category, per encoding, and per templated chat.

Works with any encoding that has ``encode_ordinary`` (a ``tiktoken.Encoding`` or a
``BPETokenizer``). User text is always counted as ordinary text: a special-token string
typed by a user is text, never a control token.

    >>> from course_lib.tokenization import get_encoding
    >>> enc = get_encoding("cl100k_base")
    >>> text_cost("hello world", enc).tokens
    2
    >>> chat = count_chat_tokens([{"role": "user", "content": "hello world"}], enc)
    >>> (chat.content, chat.total)
    ([2], 17)

Under cl100k_base the course's role markers are not special tokens, so each marker is
spelled out in several ordinary tokens: 15 of those 17 tokens are template overhead.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from course_lib.tokenization.chat_template import END, role_marker


def _check_encoding(encoding) -> None:
    if not callable(getattr(encoding, "encode_ordinary", None)):
        raise TypeError(
            f"encoding must be a tiktoken.Encoding or a BPETokenizer (anything with encode_ordinary), "
            f"got {type(encoding).__name__}"
        )


def encoding_name(encoding) -> str:
    return getattr(encoding, "name", type(encoding).__name__)


@dataclass(frozen=True)
class TextCost:
    """Token counts of one text under one encoding."""

    category: str  # e.g. "prose", "code", "cjk"
    encoding: str  # the encoding's name
    characters: int  # Unicode code points
    words: int  # whitespace-separated words (CJK has few spaces: prefer tokens_per_char there)
    tokens: int

    @property
    def tokens_per_word(self) -> float:
        return self.tokens / self.words if self.words else float("nan")

    @property
    def tokens_per_char(self) -> float:
        return self.tokens / self.characters if self.characters else float("nan")

    @property
    def chars_per_token(self) -> float:
        return self.characters / self.tokens if self.tokens else float("nan")


def count_tokens(text: str, encoding) -> int:
    """How many tokens ``text`` is, with special-token strings counted as plain text."""
    _check_encoding(encoding)
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    return len(encoding.encode_ordinary(text))


def text_cost(text: str, encoding, category: str = "text") -> TextCost:
    """Characters, words and tokens of one text.

    >>> from course_lib.tokenization import BPETokenizer
    >>> text_cost("aaab", BPETokenizer.train("aaab", 259)).tokens
    1
    """
    tokens = count_tokens(text, encoding)
    return TextCost(category, encoding_name(encoding), len(text), len(text.split()), tokens)


def cost_table(samples: Mapping[str, str], encodings: Iterable) -> list[TextCost]:
    """One row per (category, encoding), categories in the order given."""
    encodings = list(encodings)
    for encoding in encodings:
        _check_encoding(encoding)
    return [text_cost(text, encoding, category) for category, text in samples.items() for encoding in encodings]


def format_cost_table(rows: Iterable[TextCost]) -> str:
    """A plain-text table of cost rows (the notebook also plots them)."""
    lines = [f"{'category':<12} {'encoding':<14} {'chars':>6} {'words':>6} {'tokens':>7} "
             f"{'tok/word':>9} {'tok/char':>9}"]
    for r in rows:
        lines.append(f"{r.category:<12} {r.encoding:<14} {r.characters:>6} {r.words:>6} {r.tokens:>7} "
                     f"{r.tokens_per_word:>9.2f} {r.tokens_per_char:>9.3f}")
    return "\n".join(lines)


# ----- chats -------------------------------------------------------------------------------
def _marker_ids(marker: str, encoding) -> list[int]:
    """A template marker: its special ID if the encoding reserves one, else its text's tokens."""
    if marker in encoding.special_tokens_set:
        return [encoding.encode_single_token(marker)]
    return encoding.encode_ordinary(marker)


@dataclass(frozen=True)
class ChatTokenCount:
    """How a templated chat's tokens split into message content and template overhead."""

    ids: list[int]  # the whole encoded chat
    content: list[int]  # tokens of each message's content
    overhead: list[int]  # template tokens around each message (role marker + end marker)
    generation_prompt: int  # tokens of the trailing assistant marker (0 if not added)

    @property
    def total(self) -> int:
        return len(self.ids)

    @property
    def template_tokens(self) -> int:
        return sum(self.overhead) + self.generation_prompt


def count_chat_tokens(messages: Iterable[Mapping[str, str]], encoding, *,
                      add_generation_prompt: bool = True) -> ChatTokenCount:
    """Encode a chat with the course template, piece by piece, and count each piece.

    Markers become special IDs where the encoding has them; message content is always
    ordinary text, so a user who types ``<|end|>`` cannot close their own turn. Each piece is
    encoded on its own, as a chat runtime does: the total is the sum of the parts.

    >>> from course_lib.tokenization import BPETokenizer
    >>> from course_lib.tokenization.chat_template import SPECIAL_TOKENS
    >>> tok = BPETokenizer.train("hi there", 269, special_tokens=list(SPECIAL_TOKENS))
    >>> count_chat_tokens([{"role": "user", "content": "hi"}], tok).overhead
    [2]
    """
    _check_encoding(encoding)
    ids: list[int] = []
    content: list[int] = []
    overhead: list[int] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or "role" not in message or "content" not in message:
            raise ValueError(f"message {i} must be a mapping with 'role' and 'content', got {message!r}")
        if not isinstance(message["content"], str):
            raise TypeError(f"message {i}: content must be str, got {type(message['content']).__name__}")
        opening = _marker_ids(role_marker(message["role"]), encoding)
        body = encoding.encode_ordinary(message["content"])
        closing = _marker_ids(END, encoding)
        ids += opening + body + closing
        content.append(len(body))
        overhead.append(len(opening) + len(closing))
    prompt = _marker_ids(role_marker("assistant"), encoding) if add_generation_prompt else []
    ids += prompt
    return ChatTokenCount(ids, content, overhead, len(prompt))
