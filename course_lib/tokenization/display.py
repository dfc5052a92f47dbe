"""See token boundaries: text coloured token by token, as HTML for a notebook.

    >>> from course_lib.tokenization import get_encoding
    >>> token_pieces("hello world", get_encoding("cl100k_base"))
    ['hello', ' world']
    >>> html = token_boundaries_html("hi 🎉", get_encoding("cl100k_base"))
    >>> html.count("<span"), "split over 3 tokens" in html
    (3, True)

A character whose UTF-8 bytes are spread over several tokens (an emoji, a rare CJK
character) cannot be coloured as one token; it is drawn once, underlined in red, and its
tooltip names the tokens it spans.
"""
from __future__ import annotations

import html as html_lib
import re

PALETTE = ("#fde68a", "#bfdbfe", "#bbf7d0", "#fbcfe8", "#ddd6fe", "#fed7aa")


def token_pieces(text: str, encoding) -> list[str]:
    """The text of each token (bytes that are not whole characters show as U+FFFD)."""
    ids = encoding.encode_ordinary(text)
    return [encoding.decode_bytes([i]).decode("utf-8", "replace") for i in ids]


def visible_token(raw: bytes) -> str:
    """A token's bytes as text a reader can see: spaces as "·", newlines "↵", tabs "→", and
    bytes that are not a whole UTF-8 character as <0xNN> (a piece of an emoji, say).

    >>> visible_token(b" the"), visible_token(b"\\n"), visible_token("🎉".encode()[:2])
    ('·the', '↵', '<0xF0><0x9F>')
    >>> visible_token(b"\\\\x41")              # a backslash in the text stays text
    '\\\\x41'
    """
    text = raw.decode("utf-8", errors="surrogateescape")  # a stray byte 0xNN becomes U+DCNN
    text = text.replace(" ", "·").replace("\n", "↵").replace("\t", "→")
    return re.sub("[\udc80-\udcff]", lambda m: f"<0x{ord(m.group()) - 0xDC00:02X}>", text)


def _visible(chars: str) -> str:
    """Escape for HTML and make whitespace visible (a space is easy to miss in a token)."""
    out = html_lib.escape(chars)
    return out.replace("\n", "↵<br>").replace("\t", "→")


def token_boundaries_html(text: str, encoding, *, title: str | None = None) -> str:
    """HTML that colours each token of ``text`` (encoded as ordinary text) differently."""
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    ids = encoding.encode_ordinary(text)
    # Byte offset at which each token ends, then, per character, the tokens its bytes touch.
    ends, position = [], 0
    for token_id in ids:
        position += len(encoding.decode_bytes([token_id]))
        ends.append(position)
    spans: list[tuple[str, list[int]]] = []  # (characters, token indices they belong to)
    token, byte_at = 0, 0
    for char in text:
        width = len(char.encode("utf-8"))
        first = token
        while ends[token] < byte_at + width:
            token += 1
        owners = list(range(first, token + 1))
        byte_at += width
        if spans and len(owners) == 1 and spans[-1][1] == owners:
            spans[-1] = (spans[-1][0] + char, owners)
        else:
            spans.append((char, owners))
        if byte_at == ends[token]:
            token += 1
    parts = []
    for chars, owners in spans:
        if len(owners) == 1:
            colour = PALETTE[owners[0] % len(PALETTE)]
            parts.append(f'<span title="token {ids[owners[0]]}" style="background:{colour};'
                         f'border-radius:3px;padding:1px 0;margin-right:1px">{_visible(chars)}</span>')
        else:
            names = ", ".join(str(ids[k]) for k in owners)
            parts.append(f'<span title="split over {len(owners)} tokens: {names}" style="background:#e5e7eb;'
                         f'text-decoration:underline wavy #dc2626;margin-right:1px">{_visible(chars)}</span>')
    name = getattr(encoding, "name", type(encoding).__name__)
    header = html_lib.escape(title or f"{name}: {len(ids)} tokens, {len(text)} characters")
    return (f'<div style="font-family:monospace;line-height:1.9;white-space:pre-wrap">'
            f"<b>{header}</b><br>{''.join(parts)}</div>")
