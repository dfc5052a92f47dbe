"""Parse a regex of the course subset into a small AST of code-point sets, sequences and repeats.

>>> parse(r"ab|[0-9]{2,}")
Alt(Concat(Chars('a'), Chars('b')), Repeat(Chars('0'-'9'), 2, None))
>>> parse(r"(?:x|)?")          # groups leave no node behind; an empty alternative is Concat()
Repeat(Alt(Chars('x'), Concat()), 0, 1)
>>> parse(r"a{1001}")
Traceback (most recent call last):
...
course_lib.structured.errors.UnsupportedPattern: unsupported regex construct {1001} at offset 1 ...

Semantics (those of Python's ``re.fullmatch(pattern, s, flags=re.ASCII)`` on this subset):
- ``.`` is any code point except ``\\n``; ``\\d`` = ``[0-9]``, ``\\w`` = ``[A-Za-z0-9_]``,
  ``\\s`` = ``[ \\t\\n\\r\\f\\v]`` (ASCII meanings, never Unicode digits or letters), and
  ``\\D \\W \\S`` are their complements.
- Surrogates (U+D800..U+DFFF) are in no set, not even ``[^a]`` or ``.``: they have no UTF-8
  encoding, so a model could never emit them.
- Groups ``( )`` and ``(?: )`` only group (nothing is captured); ``|`` may have empty sides.
- Quantifiers ``? * + {m} {m,} {,n} {m,n}``, with bounds up to ``MAX_REPEAT``.
- Escapes: ``\\n \\t \\r \\f \\v \\xHH \\uHHHH \\UHHHHHHHH``, and a backslash before any
  character that is not an ASCII letter or digit means that character.
- Inside ``[...]``: ranges, escapes, ``\\d \\w \\s`` and their negations; ``]`` first (after
  ``[`` or ``[^``) and ``-`` first or last are literal. An unescaped ``[`` is rejected.

Everything else (anchors, backreferences, lookarounds, flags, lazy or possessive quantifiers,
``\\p{..}``, an unescaped ``{`` that is not a quantifier, ...) raises ``UnsupportedPattern``
naming the construct, its offset and the fix. Patterns are always matched in full, so anchors
would add nothing but confusion.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from course_lib.structured.errors import UnsupportedPattern

MAX_CODE_POINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)
MAX_REPEAT = 1000             # largest bound in {m,n}; counted repeats are expanded in the NFA
MAX_POSITIONS = 100_000       # character sets after expanding every repeat: the NFA's size
MAX_NESTING = 100             # group depth; the parser and the NFA builder both recurse on it


@dataclass(frozen=True)
class Chars:
    """One character from a set: sorted, disjoint, non-adjacent inclusive code-point intervals."""
    intervals: tuple[tuple[int, int], ...]

    def __repr__(self) -> str:
        parts = [repr(chr(lo)) if lo == hi else f"{chr(lo)!r}-{chr(hi)!r}" for lo, hi in self.intervals]
        return f"Chars({', '.join(parts)})"


@dataclass(frozen=True)
class Concat:
    """Items one after another; ``Concat(())`` matches only the empty string."""
    items: tuple[Node, ...]

    def __repr__(self) -> str:
        return f"Concat({', '.join(map(repr, self.items))})"


@dataclass(frozen=True)
class Alt:
    """Any one of the options."""
    options: tuple[Node, ...]

    def __repr__(self) -> str:
        return f"Alt({', '.join(map(repr, self.options))})"


@dataclass(frozen=True)
class Repeat:
    """``item`` between ``min`` and ``max`` times; ``max=None`` is unbounded."""
    item: Node
    min: int
    max: int | None

    def __repr__(self) -> str:
        return f"Repeat({self.item!r}, {self.min}, {self.max})"


Node = Union[Chars, Concat, Alt, Repeat]


def char_set(intervals) -> tuple[tuple[int, int], ...]:
    """Sort and merge intervals and cut the surrogates out: [(98, 99), (97, 97)] -> ((97, 99),)."""
    merged: list[list[int]] = []
    for lo, hi in sorted(intervals):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    out = []
    for lo, hi in merged:
        if lo < SURROGATES[0]:
            out.append((lo, min(hi, SURROGATES[0] - 1)))
        if hi > SURROGATES[1]:
            out.append((max(lo, SURROGATES[1] + 1), hi))
    return tuple(out)


def complement(intervals) -> tuple[tuple[int, int], ...]:
    """Every encodable code point not in the set (the set must already be a ``char_set``)."""
    out, nxt = [], 0
    for lo, hi in intervals:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODE_POINT:
        out.append((nxt, MAX_CODE_POINT))
    return char_set(out)


_DIGIT = ((0x30, 0x39),)
_WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE = ((0x09, 0x0D), (0x20, 0x20))                   # \t \n \v \f \r and space
SHORTHANDS = {"d": _DIGIT, "w": _WORD, "s": _SPACE,
              "D": complement(_DIGIT), "W": complement(_WORD), "S": complement(_SPACE)}
DOT = complement(((0x0A, 0x0A),))
_CONTROL = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B}
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}
_ANCHOR_ESCAPES = "bBAZz"
_GROUP_KINDS = (("(?<=", "lookbehind"), ("(?<!", "negative lookbehind"), ("(?P<", "named group"),
                ("(?P=", "named backreference"), ("(?=", "lookahead"), ("(?!", "negative lookahead"),
                ("(?<", "named group"), ("(?#", "comment group"), ("(?>", "atomic group"),
                ("(?(", "conditional group"))
_SIMPLE_QUANTIFIERS = {"*": (0, None), "+": (1, None), "?": (0, 1)}
_DIGITS_AND_COMMA = frozenset("0123456789,")


def parse(pattern: str) -> Node:
    """The AST of ``pattern``, or ``UnsupportedPattern`` at the first construct outside the subset."""
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a str, got {type(pattern).__name__}")
    return _Parser(pattern).parse()


class _Parser:
    """Recursive descent: alternation -> concatenation -> quantified atom."""

    def __init__(self, pattern: str):
        self.pattern, self.pos, self.depth = pattern, 0, 0

    def error(self, construct: str, offset: int, hint: str = "") -> UnsupportedPattern:
        return UnsupportedPattern(self.pattern, construct, offset, hint)

    def peek(self, ahead: int = 0) -> str:
        i = self.pos + ahead
        return self.pattern[i] if i < len(self.pattern) else ""

    def parse(self) -> Node:
        node = self.alternation()
        if self.pos < len(self.pattern):      # only an unmatched ')' stops the top level early
            raise self.error("unbalanced ')'", self.pos, "remove it, add the '(' it closes, or escape it as \\)")
        self.check_size(node, 0)
        return node

    def check_size(self, node: Node, offset: int) -> None:
        size = _expanded_size(node)
        if size > MAX_POSITIONS:
            raise self.error(f"pattern expanding to {size} character positions", offset,
                             f"counted repeats are written out and at most {MAX_POSITIONS} fit; lower the bounds")

    def alternation(self) -> Node:
        options = [self.concatenation()]
        while self.peek() == "|":
            self.pos += 1
            options.append(self.concatenation())
        return options[0] if len(options) == 1 else Alt(tuple(options))

    def concatenation(self) -> Node:
        items = []
        while self.peek() not in ("", "|", ")"):
            items.append(self.quantified(self.atom()))
        return items[0] if len(items) == 1 else Concat(tuple(items))

    def quantified(self, node: Node) -> Node:
        start = self.pos
        bounds = self.quantifier()
        if bounds is None:
            return node
        after, written = self.peek(), self.pattern[start:self.pos + 1]
        if after == "?":
            raise self.error(f"lazy quantifier {written}", start, "the match is always the whole string; drop the '?'")
        if after == "+":
            raise self.error(f"possessive quantifier {written}", start, "drop the second '+'")
        if after and after in "*{" and self.quantifier_at(self.pos) is not None:
            raise self.error("multiple repeat", self.pos, "wrap the repeated part in (?:...) first")
        repeat = Repeat(node, *bounds)
        self.check_size(repeat, start)
        return repeat

    def quantifier(self) -> tuple[int, int | None] | None:
        """Consume a quantifier if one starts here; its (min, max)."""
        found = self.quantifier_at(self.pos)
        if found is None:
            return None
        bounds, end = found
        lo, hi = bounds
        if hi is not None and lo > hi:
            raise self.error(self.pattern[self.pos:end], self.pos, f"the minimum {lo} is above the maximum {hi}")
        if max(lo, hi or 0) > MAX_REPEAT:
            raise self.error(self.pattern[self.pos:end], self.pos,
                             f"bounds above {MAX_REPEAT} are not supported; use * or + if any count will do")
        self.pos = end
        return bounds

    def quantifier_at(self, i: int) -> tuple[tuple[int, int | None], int] | None:
        """((min, max), end offset) of the quantifier starting at offset ``i``, if any."""
        p = self.pattern
        if i < len(p) and p[i] in _SIMPLE_QUANTIFIERS:
            return _SIMPLE_QUANTIFIERS[p[i]], i + 1
        close = p.find("}", i)
        if not p.startswith("{", i) or close < 0:
            return None
        body = p[i + 1:close]
        low, comma, high = body.partition(",")
        if not set(body) <= _DIGITS_AND_COMMA or "," in high or not (low or comma):
            return None                     # {}, {x}, { 1}, {1,2,3}: not a quantifier
        return (int(low or 0), int(high) if high else None if comma else int(low)), close + 1

    def atom(self) -> Node:
        start, c = self.pos, self.peek()
        if c in "*+?{":
            if c != "{" or self.quantifier_at(start) is not None:
                raise self.error(f"nothing to repeat before {c!r}", start, f"escape it as \\{c} for a literal {c}")
            raise self.error("'{' that starts no quantifier", start, "escape it as \\{ for a literal {")
        if c in "^$":
            raise self.error(f"anchor {c}", start, "patterns always match the whole string; drop it, "
                             f"or escape it as \\{c} for a literal {c}")
        self.pos += 1
        if c == ".":
            return Chars(DOT)
        if c == "[":
            return Chars(self.char_class(start))
        if c == "(":
            return self.group(start)
        if c == "\\":
            intervals, _ = self.escape(in_class=False)
            return Chars(intervals)
        return Chars(char_set([(ord(c), ord(c))]))

    def group(self, start: int) -> Node:
        if self.peek() == "?":
            if self.peek(1) != ":":
                raise self.error(*self.group_kind(start))
            self.pos += 2
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(f"groups nested deeper than {MAX_NESTING}", start, "flatten the pattern")
        node = self.alternation()
        self.depth -= 1
        if self.peek() != ")":
            raise self.error("unbalanced '('", start, "add the ')' that closes it, or escape it as \\(")
        self.pos += 1
        return node

    def group_kind(self, start: int) -> tuple[str, int, str]:
        rest = self.pattern[start:]
        for prefix, name in _GROUP_KINDS:
            if rest.startswith(prefix):
                return f"{name} {prefix}", start, "only (...) and (?:...) groups are supported"
        flags = rest[2:].split(")")[0].split(":")[0]
        if not flags.isalpha():
            return f"group extension {rest[:3]}", start, "only (...) and (?:...) groups are supported"
        return f"inline flags (?{flags}", start, "flags are not supported; spell the characters out, e.g. [aA]"

    def escape(self, in_class: bool) -> tuple[tuple[tuple[int, int], ...], int | None]:
        """After a backslash: (the set it denotes, its code point if it is a single character)."""
        start, c = self.pos - 1, self.peek()
        if not c:
            raise self.error("trailing backslash", start, "escape it as \\\\ for a literal backslash")
        self.pos += 1
        if c in _CONTROL:
            return char_set([(_CONTROL[c],) * 2]), _CONTROL[c]
        if c in SHORTHANDS:
            return SHORTHANDS[c], None
        if c in _HEX_DIGITS:
            width = _HEX_DIGITS[c]
            digits = self.pattern[self.pos:self.pos + width]
            if len(digits) < width or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"incomplete escape \\{c}{digits}", start, f"\\{c} takes exactly {width} hex digits")
            cp = int(digits, 16)
            if cp > MAX_CODE_POINT:
                raise self.error(f"escape \\{c}{digits}", start, "code points stop at \\U0010FFFF")
            self.pos += width
            return char_set([(cp, cp)]), cp
        if c == "b" and in_class:
            raise self.error("\\b inside a class", start, "write \\x08 for a backspace")
        if c in _ANCHOR_ESCAPES:
            raise self.error(f"anchor \\{c}", start, "patterns always match the whole string; drop it")
        if c in "pP":
            raise self.error(f"Unicode property class \\{c}", start, "list the ranges in a [...] class instead")
        if c == "N":
            raise self.error("named character \\N", start, "write the character or \\uHHHH instead")
        if c == "0":
            raise self.error("octal escape \\0", start, "write \\x00 (or another \\xHH) instead")
        if c.isdigit() and c.isascii():
            construct = "octal escape" if in_class else "backreference"
            raise self.error(f"{construct} \\{c}", start, "backreferences are not regular; repeat the group's text")
        if c.isascii() and c.isalpha():
            raise self.error(f"unknown escape \\{c}", start, "escape only punctuation; write a letter plainly")
        return char_set([(ord(c), ord(c))]), ord(c)

    def char_class(self, start: int) -> tuple[tuple[int, int], ...]:
        negate = self.peek() == "^"
        self.pos += negate
        items: list[tuple[int, int]] = []
        first = True
        while True:
            c = self.peek()
            if not c:
                raise self.error("unterminated character class", start, "close it with ']', or escape it as \\[")
            if c == "]" and not first:
                self.pos += 1
                break
            first = False
            item_start = self.pos
            low_set, low = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                _, high = self.class_atom()
                if low is None or high is None or high < low:
                    raise self.error(f"bad character range {self.pattern[item_start:self.pos]}", item_start,
                                     "a range needs single characters, low to high; escape '-' as \\- for a literal")
                items.append((low, high))
            else:
                items.extend(low_set)
        found = char_set(items)
        return complement(found) if negate else found

    def class_atom(self) -> tuple[tuple[tuple[int, int], ...], int | None]:
        c = self.peek()
        if c == "[":
            raise self.error("'[' inside a class", self.pos, "escape it as \\[ (nested sets and [:alpha:] are not supported)")
        self.pos += 1
        if c == "\\":
            return self.escape(in_class=True)
        return char_set([(ord(c), ord(c))]), ord(c)


def _expanded_size(node: Node) -> int:
    """How many character sets the NFA holds once every counted repeat is written out."""
    if isinstance(node, Chars):
        return 1
    if isinstance(node, Repeat):
        copies = node.max if node.max is not None else node.min + 1
        return _expanded_size(node.item) * max(copies, 1)
    parts = node.items if isinstance(node, Concat) else node.options
    return sum(_expanded_size(part) for part in parts)
