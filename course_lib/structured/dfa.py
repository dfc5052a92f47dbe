"""Compile a regex into a minimal DFA over code points, and that DFA into one over UTF-8 bytes.

>>> dfa = compile_regex(r"[0-9]+(?:\\.[0-9]{1,2})?")
>>> dfa.fullmatch("3.14"), dfa.fullmatch("3."), dfa.fullmatch("x3")
(True, False, False)
>>> dfa.n_states, dfa.transitions(dfa.start)          # (lo, hi, target): '0'..'9' -> 1
(5, ((48, 57, 1),))
>>> state = dfa.step(dfa.start, "7")
>>> dfa.is_accepting(state), dfa.step(state, "x")     # None: no string continues with 'x'
(True, None)
>>> data = compile_regex("café|€+").to_bytes()
>>> data.fullmatch("café".encode()), data.fullmatch(b"caf\\xc3")   # half an é is not a match
(True, False)
>>> data.walk(data.start, b"\\xe2\\x82") is not None, data.walk(data.start, b"\\xe2\\x28")  # 2/3 of €; junk
(True, None)
>>> int(data.table[data.start, ord("c")]), int(data.table[data.start, ord("x")])   # -1 = dead
(1, -1)

A constrained decoder walks these: the character DFA says which characters may come next, the
byte DFA which token byte strings may (a token can end in the middle of a character). Matching
is always full (like ``re.fullmatch``): a pattern has no anchors because it needs none.
Every state left can still reach acceptance, so "not dead" means "some continuation matches".
"""
from __future__ import annotations

from bisect import bisect_right

import numpy as np

from course_lib.structured.automata import NFA, IntervalDFA, build_dfa, thompson
from course_lib.structured.regex_parse import SURROGATES, parse

__all__ = ["DFA", "ByteDFA", "compile_regex", "utf8_sequences"]

# Python would read state -1 as "the last state"; -1 in a table means dead, so refuse it loudly.
_NEGATIVE_STATE = "state {} is not a state (-1 in the table means dead; step and walk return None)"


def compile_regex(pattern: str) -> DFA:
    """The minimal full-match DFA for ``pattern`` (the subset of ``regex_parse``).

    Raises ``UnsupportedPattern`` for constructs outside the subset and ``ValueError`` for a
    pattern that matches no string at all.
    """
    automaton = build_dfa(thompson(parse(pattern)))
    if automaton is None:
        raise ValueError(f"the pattern {pattern!r} matches no string (an empty class such as "
                         "[^\\x00-\\U0010FFFF], or only surrogates); fix the pattern or drop the constraint")
    return DFA(pattern, automaton)


class DFA:
    """A character-level DFA: per state, sorted disjoint (lo, hi, target) code-point intervals.

    Immutable; build it with ``compile_regex``. ``step`` is a binary search over one state's
    intervals, so a class like ``[^"]`` costs the same as ``a``.
    """

    __slots__ = ("_pattern", "_automaton", "_lows", "_bytes")

    def __init__(self, pattern: str, automaton: IntervalDFA):
        object.__setattr__(self, "_pattern", pattern)
        object.__setattr__(self, "_automaton", automaton)
        object.__setattr__(self, "_lows", tuple(tuple(lo for lo, _, _ in edges) for edges in automaton.transitions))
        object.__setattr__(self, "_bytes", None)

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable; compile a new pattern instead")

    def __reduce__(self):                  # pickle and deepcopy rebuild rather than set attributes
        return DFA, (self._pattern, self._automaton)

    pattern = property(lambda self: self._pattern, doc="The source pattern.")
    start = property(lambda self: self._automaton.start, doc="The start state (always 0).")
    accepting = property(lambda self: self._automaton.accepting, doc="The accepting states.")
    n_states = property(lambda self: self._automaton.n_states, doc="How many states (all live).")

    def transitions(self, state: int) -> tuple[tuple[int, int, int], ...]:
        """``state``'s edges as sorted, disjoint (lo, hi inclusive, target) code-point intervals."""
        return self._automaton.transitions[state]

    def is_accepting(self, state: int) -> bool:
        return state in self._automaton.accepting

    def step(self, state: int, char: str) -> int | None:
        """The state after reading ``char`` (one character), or None if no match can follow."""
        if state < 0:
            raise ValueError(_NEGATIVE_STATE.format(state))
        code = ord(char)
        i = bisect_right(self._lows[state], code) - 1
        if i >= 0:
            lo, hi, target = self._automaton.transitions[state][i]
            if code <= hi:
                return target
        return None

    def fullmatch(self, text: str) -> bool:
        """Whether the whole of ``text`` matches (as ``re.fullmatch`` would)."""
        state = self._automaton.start
        for char in text:
            state = self.step(state, char)
            if state is None:
                return False
        return state in self._automaton.accepting

    def to_bytes(self) -> ByteDFA:
        """The same language over UTF-8 bytes (built once, then cached)."""
        if self._bytes is None:
            automaton = _byte_automaton(self._automaton)
            table = np.full((automaton.n_states, 256), -1, dtype=np.int32)   # (n_states, 256)
            for state, edges in enumerate(automaton.transitions):
                for lo, hi, target in edges:
                    table[state, lo:hi + 1] = target
            object.__setattr__(self, "_bytes", ByteDFA(self._pattern, automaton.start, automaton.accepting, table))
        return self._bytes

    def __repr__(self) -> str:
        return (f"DFA({self._pattern!r}, n_states={self.n_states}, "
                f"accepting={sorted(self.accepting)})")


class ByteDFA:
    """A DFA over UTF-8 bytes: ``table[state, byte]`` is the next state, -1 when dead.

    It accepts ``data`` exactly when ``data`` is valid UTF-8 and its text matches the pattern; a
    byte string that is not a prefix of valid UTF-8 is never a live prefix either. Immutable;
    build it with ``DFA.to_bytes()``.
    """

    __slots__ = ("_pattern", "_start", "_accepting", "_table", "_rows")

    def __init__(self, pattern: str, start: int, accepting: frozenset[int], table: np.ndarray):
        table = np.array(table, dtype=np.int32)          # (n_states, 256), a private copy
        if table.ndim != 2 or table.shape[1] != 256 or table.shape[0] == 0:
            raise ValueError(f"table must have shape (n_states, 256), got {table.shape}; use DFA.to_bytes()")
        table.flags.writeable = False
        object.__setattr__(self, "_pattern", pattern)
        object.__setattr__(self, "_start", start)
        object.__setattr__(self, "_accepting", frozenset(accepting))
        object.__setattr__(self, "_table", table)
        # Per-state views of the same memory for the Python-level walk: indexing a memoryview
        # gives a plain int, several times faster than indexing numpy scalar by scalar.
        flat = memoryview(table.reshape(-1))
        object.__setattr__(self, "_rows", tuple(flat[s * 256:(s + 1) * 256] for s in range(table.shape[0])))

    def __reduce__(self):
        return ByteDFA, (self._pattern, self._start, self._accepting, self._table)

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable; compile a new pattern instead")

    pattern = property(lambda self: self._pattern, doc="The source pattern.")
    start = property(lambda self: self._start, doc="The start state (always 0).")
    accepting = property(lambda self: self._accepting, doc="The accepting states.")
    table = property(lambda self: self._table, doc="(n_states, 256) int32, read-only; -1 = dead.")
    n_states = property(lambda self: len(self._rows), doc="How many states (all live).")

    def is_accepting(self, state: int) -> bool:
        return state in self._accepting

    def step(self, state: int, byte: int) -> int | None:
        """The state after ``byte`` (0..255), or None if no match can follow."""
        if state < 0 or not 0 <= byte <= 255:
            raise ValueError(f"byte must be in 0..255, got {byte}" if state >= 0 else _NEGATIVE_STATE.format(state))
        target = self._rows[state][byte]
        return None if target < 0 else target

    def walk(self, state: int, data: bytes) -> int | None:
        """The state after every byte of ``data``, or None as soon as it dies."""
        if state < 0:
            raise ValueError(_NEGATIVE_STATE.format(state))
        rows = self._rows
        for byte in data:
            state = rows[state][byte]
            if state < 0:
                return None
        return state

    def fullmatch(self, data: bytes) -> bool:
        state = self.walk(self._start, data)
        return state is not None and state in self._accepting

    def __repr__(self) -> str:
        return (f"ByteDFA({self._pattern!r}, n_states={self.n_states}, "
                f"accepting={sorted(self._accepting)})")


_LENGTH_ENDS = (0x7F, 0x7FF, 0xFFFF)               # last code point with 1, 2 and 3 UTF-8 bytes


def utf8_sequences(lo: int, hi: int) -> list[tuple[tuple[int, int], ...]]:
    """Split code points lo..hi (minus surrogates) into UTF-8 byte-range sequences.

    Each sequence is a tuple of (byte lo, byte hi) ranges; the strings they match, taken
    together, are exactly the encodings of lo..hi. A range is split until every byte position
    varies independently: first by encoded length, then where a continuation byte wraps.

    >>> [[f"{a:02X}-{b:02X}" for a, b in seq] for seq in utf8_sequences(0x7E, 0x800)]
    [['7E-7F'], ['C2-DF', '80-BF'], ['E0-E0', 'A0-A0', '80-80']]
    >>> utf8_sequences(0xD7FF, 0xE000) == [((0xED,) * 2, (0x9F,) * 2, (0xBF,) * 2),
    ...                                     ((0xEE,) * 2, (0x80,) * 2, (0x80,) * 2)]
    True
    """
    out: list[tuple[tuple[int, int], ...]] = []
    stack = [(lo, hi)]
    while stack:
        lo, hi = stack.pop()
        if lo <= SURROGATES[1] and hi >= SURROGATES[0]:         # cut the surrogates out
            if hi > SURROGATES[1]:
                stack.append((SURROGATES[1] + 1, hi))
            if lo < SURROGATES[0]:
                stack.append((lo, SURROGATES[0] - 1))
            continue
        split = _split_point(lo, hi)
        if split is not None:                                   # lower half is popped first
            stack.append((split + 1, hi))
            stack.append((lo, split))
            continue
        out.append(tuple(zip(chr(lo).encode(), chr(hi).encode())))
    return out


def _split_point(lo: int, hi: int) -> int | None:
    """Where lo..hi must be cut so that both halves have the same length and free trailing bytes."""
    for end in _LENGTH_ENDS:
        if lo <= end < hi:
            return end
    if hi <= 0x7F:
        return None
    for i in (1, 2, 3):                 # i trailing continuation bytes, 6 bits each
        mask = (1 << (6 * i)) - 1
        if lo & ~mask != hi & ~mask:
            if lo & mask:
                return lo | mask         # lo's trailing bytes are not all 0x80: end lo's block
            if hi & mask != mask:
                return (hi & ~mask) - 1  # hi's trailing bytes are not all 0xBF: start hi's block
    return None


def _byte_automaton(chars: IntervalDFA) -> IntervalDFA:
    """Expand each code-point edge into byte-range paths, then determinize and minimize again."""
    nfa = NFA()
    for _ in chars.transitions:                  # states 0..n-1 are the character DFA's
        nfa.add_state()
    nfa.start, nfa.accept = chars.start, nfa.add_state()
    for state in chars.accepting:
        nfa.add_eps(state, nfa.accept)
    suffixes: dict[tuple, int] = {}              # (remaining byte ranges, target) -> NFA state

    def entry(ranges: tuple[tuple[int, int], ...], target: int) -> int:
        """A state from which ``ranges`` lead to ``target``; shared by every edge that needs it."""
        key = (ranges, target)
        state = suffixes.get(key)
        if state is None:
            state = suffixes[key] = nfa.add_state()
            after = target if len(ranges) == 1 else entry(ranges[1:], target)
            nfa.add_edge(state, ranges[0][0], ranges[0][1], after)
        return state

    split: dict[tuple[int, int], list] = {}     # states share classes like [^"], split them once
    for source, edges in enumerate(chars.transitions):
        for lo, hi, target in edges:
            sequences = split.get((lo, hi))
            if sequences is None:
                sequences = split[lo, hi] = utf8_sequences(lo, hi)
            for sequence in sequences:
                (first_lo, first_hi), rest = sequence[0], sequence[1:]
                nfa.add_edge(source, first_lo, first_hi, entry(rest, target) if rest else target)
    automaton = build_dfa(nfa)
    assert automaton is not None, "a non-empty language of scalars has a non-empty UTF-8 encoding"
    return automaton
