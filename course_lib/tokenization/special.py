"""The special-token policy, with tiktoken's semantics.

Special tokens (``<|endoftext|>``, chat-template role markers) have reserved IDs that
ordinary text can never produce. If user text containing the *string* ``<|end|>`` were
encoded as the *ID* of ``<|end|>``, a user could close their own turn and write the
assistant's. So, as in tiktoken:

- by default, text that contains a special token's string raises ``ValueError``;
- ``allowed_special="all"`` or a set of strings maps those strings to their IDs;
- ``disallowed_special=()`` encodes them as ordinary text (the safe choice for user input).
"""
from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping

import regex


def disallowed_special_error(token: str, all_special: Collection[str]) -> ValueError:
    """The error for a forbidden special-token string: names it and says how to proceed."""
    others = sorted(set(all_special) - {token})
    return ValueError(
        f"Encountered text corresponding to disallowed special token {token!r}.\n"
        f"If you want this text to be encoded as a special token, pass it to `allowed_special`, "
        f"e.g. `allowed_special={{{token!r}, ...}}`.\n"
        f"If you want this text to be encoded as normal text, disable the check for this token "
        f"by passing `disallowed_special=(tok.special_tokens_set - {{{token!r}}})` "
        f"(the other special tokens are {others}).\n"
        f"To disable this check for all special tokens, pass `disallowed_special=()`.\n"
    )


def resolve_policy(
    special_tokens: Mapping[str, int], allowed_special, disallowed_special
) -> tuple[frozenset[str], frozenset[str]]:
    """Normalise the two arguments to (allowed, disallowed) sets, exactly as tiktoken does.

    >>> resolve_policy({"<|a|>": 5, "<|b|>": 6}, {"<|a|>"}, "all")
    (frozenset({'<|a|>'}), frozenset({'<|b|>'}))
    """
    every = frozenset(special_tokens)
    if allowed_special == "all":
        allowed = every
    elif isinstance(allowed_special, str):
        raise TypeError(
            f"allowed_special must be 'all' or a set of special-token strings, got the string "
            f"{allowed_special!r}; wrap a single token in a set: {{{allowed_special!r}}}"
        )
    else:
        allowed = frozenset(allowed_special)
    if disallowed_special == "all":
        disallowed = every - allowed
    elif isinstance(disallowed_special, str):
        raise TypeError(
            f"disallowed_special must be 'all' or a collection of strings, got the string "
            f"{disallowed_special!r}"
        )
    else:
        disallowed = frozenset(disallowed_special)
    return allowed, disallowed


def _alternation(tokens: Collection[str]) -> regex.Pattern:
    # Longest first, so that of two specials starting at one place the longer one wins.
    return regex.compile("|".join(regex.escape(t) for t in sorted(tokens, key=lambda t: (-len(t), t))))


def check_disallowed(text: str, disallowed: Collection[str], all_special: Collection[str]) -> None:
    """Raise the policy error if ``text`` contains any disallowed special-token string."""
    if disallowed and (found := _alternation(disallowed).search(text)):
        raise disallowed_special_error(found.group(), all_special)


def split_on_special(text: str, allowed: Collection[str]) -> Iterator[tuple[str, bool]]:
    """Yield (piece, is_special) in order; only allowed specials are cut out.

    >>> list(split_on_special("a<|x|>b", {"<|x|>"}))
    [('a', False), ('<|x|>', True), ('b', False)]
    """
    if not allowed:
        if text:
            yield text, False
        return
    start = 0
    for found in _alternation(allowed).finditer(text):
        if found.start() > start:
            yield text[start : found.start()], False
        yield found.group(), True
        start = found.end()
    if start < len(text):
        yield text[start:], False
