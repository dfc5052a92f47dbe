"""The errors of constrained decoding: each names what was wrong, where, and what to do.

All are ``ValueError`` subclasses, so a caller that validates input with ``except ValueError``
catches them too.
"""
from __future__ import annotations


class UnsupportedPattern(ValueError):
    """A regex construct outside the course engine's subset (``construct`` at ``offset``)."""

    def __init__(self, pattern: str, construct: str, offset: int, hint: str = ""):
        self.pattern, self.construct, self.offset = pattern, construct, offset
        where = f"{pattern[:offset]}>>>{pattern[offset:]}" if len(pattern) <= 80 else f"offset {offset}"
        super().__init__(f"unsupported regex construct {construct} at offset {offset} ({where})"
                         + (f"; {hint}" if hint else ""))


class UnsupportedSchema(ValueError):
    """A JSON Schema keyword the compiler cannot honour exactly (``keyword`` at ``pointer``).

    Dropping it silently would let the model emit output the schema rejects, so it is an error.
    """

    def __init__(self, keyword: str, pointer: str, hint: str = ""):
        self.keyword, self.pointer = keyword, pointer or "/"
        super().__init__(f"unsupported JSON Schema keyword {keyword!r} at {self.pointer}"
                         + (f"; {hint}" if hint else ""))


class UnsatisfiableSchema(ValueError):
    """A schema (or pattern) that no JSON value (or string) can satisfy, at ``pointer``."""

    def __init__(self, pointer: str, reason: str):
        self.pointer, self.reason = pointer or "/", reason
        super().__init__(f"no value can satisfy the schema at {self.pointer}: {reason}")
