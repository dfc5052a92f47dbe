r"""Counts as regexes: integer ranges (every integer in [minimum, maximum], spelled the JSON way,
and nothing else), and counted repeats within the engine's limit.

>>> print(integer_range_regex(0, 255))
(?:\d|[1-9]\d|1\d{2}|2[0-4]\d|25[0-5])
>>> print(integer_range_regex(-3, 12))   # the zero crossing: negative part | non-negative part
(?:-[1-3]|(?:\d|1[0-2]))
>>> print(integer_range_regex(minimum=42))  # one-sided: 42-99, then any longer number
(?:4[2-9]|[5-9]\d|[1-9]\d{2,})
>>> print(integer_range_regex())         # unbounded: the JSON grammar's integer, -0 included
-?(?:0|[1-9]\d*)

Rules (tested exhaustively over a window, against plain comparisons):
- JSON spelling only: no leading zeros, no ``+``. A bounded range spells zero ``0``, never
  ``-0``; the unbounded regex is the JSON grammar's own integer, which allows ``-0`` (it is
  valid JSON for the integer 0).
- A bound may be ``None`` (unbounded on that side). Negatives are ``-`` followed by a
  magnitude range, so the zero crossing is just "negative part | non-negative part".
- The regex is built by number of digits: for each length between the bounds' lengths, one
  same-length digit range, split digit by digit (the classic "0-255" construction). Its size
  grows with the number of digits, not with the width of the range.
- ``repeat_regex`` writes ``atom{m,n}`` as chunks of at most MAX_REPEAT when m or n exceeds it.
"""
from __future__ import annotations

from course_lib.structured.regex_parse import MAX_REPEAT  # the engine's cap on {m,n}

INTEGER = r"-?(?:0|[1-9]\d*)"


def integer_range_regex(minimum: int | None = None, maximum: int | None = None) -> str:
    """A regex matching exactly the JSON integers n with minimum <= n <= maximum (None: unbounded)."""
    for name, bound in (("minimum", minimum), ("maximum", maximum)):
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int)):
            raise TypeError(f"{name} must be an int or None, got {bound!r}; round float bounds first")
        if bound is not None and len(str(abs(bound))) > MAX_REPEAT:
            raise ValueError(f"{name} has more than {MAX_REPEAT} digits, beyond the regex engine's "
                             "repeat limit; use a smaller bound")
    if minimum is not None and maximum is not None and minimum > maximum:
        raise ValueError(f"minimum {minimum} > maximum {maximum}: the range is empty")
    if minimum is None and maximum is None:
        return INTEGER
    parts = []
    # Negative part: -m for magnitudes m in [max(1, -maximum), -minimum].
    if minimum is None or minimum < 0:
        low_mag = 1 if maximum is None or maximum >= 0 else -maximum
        high_mag = None if minimum is None else -minimum
        parts.append("-" + _natural_range(low_mag, high_mag))
    # Non-negative part: [max(0, minimum), maximum].
    if maximum is None or maximum >= 0:
        low = 0 if minimum is None or minimum < 0 else minimum
        parts.append(_natural_range(low, maximum))
    return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"


def _natural_range(low: int, high: int | None) -> str:
    """Regex for the integers in [low, high] (high None: unbounded), 0 <= low, no leading zeros.

    It is one concatenation or one (?:...) group, so a prefix such as "-" binds to all of it.
    """
    alternatives = _natural_alternatives(low, high)
    return alternatives[0] if len(alternatives) == 1 else "(?:" + "|".join(alternatives) + ")"


def _natural_alternatives(low: int, high: int | None) -> list[str]:
    if high is None:
        if low == 0:
            return ["0", r"[1-9]\d*"]
        digits = len(str(low))
        if low == 10 ** (digits - 1):  # low is 1, 10, 100...: "digits or more digits" exactly
            return ["[1-9]" + _at_least_digits(digits - 1)]
        # [low, 99..9] at low's length, then every longer number (no leading zero).
        return _natural_alternatives(low, 10 ** digits - 1) + ["[1-9]" + _at_least_digits(digits)]
    alternatives = []
    for length in range(len(str(low)), len(str(high)) + 1):
        lo = str(low) if length == len(str(low)) else "1" + "0" * (length - 1)
        hi = str(high) if length == len(str(high)) else "9" * length
        alternatives.extend(_same_length_range(lo, hi))
    return alternatives


def _same_length_range(lo: str, hi: str) -> list[str]:
    r"""Alternatives matching the digit strings s with lo <= s <= hi, all of the same length.

    >>> print(*_same_length_range("25", "61"), sep=" | ")
    2[5-9] | [3-5]\d | 6[01]
    """
    if not lo:
        return [""]
    rest = len(lo) - 1
    if lo[0] == hi[0]:
        return [lo[0] + tail for tail in _same_length_range(lo[1:], hi[1:])]
    # Split into: lo's first digit with a tail >= lo[1:], a middle block of free tails, and
    # hi's first digit with a tail <= hi[1:]. A tail that is already "all of them" (000..
    # or 999..) folds its digit into the middle block, keeping the regex short.
    low_digit, high_digit = int(lo[0]), int(hi[0])
    alternatives = []
    if lo[1:] != "0" * rest:
        alternatives += [lo[0] + tail for tail in _same_length_range(lo[1:], "9" * rest)]
        low_digit += 1
    tail_high = hi[1:] != "9" * rest
    if tail_high:
        high_digit -= 1
    if low_digit <= high_digit:
        alternatives.append(_digit_class(low_digit, high_digit) + _any_digits(rest))
    if tail_high:
        alternatives += [hi[0] + tail for tail in _same_length_range("0" * rest, hi[1:])]
    return alternatives


def _digit_class(low: int, high: int) -> str:
    if low == high:
        return str(low)
    if (low, high) == (0, 9):
        return r"\d"
    return f"[{low}{high}]" if high == low + 1 else f"[{low}-{high}]"


def _at_least_digits(count: int) -> str:
    return r"\d*" if count == 0 else r"\d+" if count == 1 else rf"\d{{{count},}}"


def _any_digits(count: int) -> str:
    return "" if count == 0 else r"\d" if count == 1 else rf"\d{{{count}}}"


def repeat_regex(atom: str, low: int, high: int | None) -> str:
    r"""``atom{low,high}`` (high None: unbounded), split so that no bound exceeds MAX_REPEAT.

    >>> print(repeat_regex("a", 0, 2500))
    (?:a{0,1000}|a{1000}(?:a{1,1000}|a{1000}a{1,500}))
    """
    fixed = ""
    while low > MAX_REPEAT:
        fixed += f"{atom}{{{MAX_REPEAT}}}"
        low, high = low - MAX_REPEAT, None if high is None else high - MAX_REPEAT
    if high is None:
        return fixed + atom + ("*" if low == 0 else "+" if low == 1 else f"{{{low},}}")
    return fixed + _bounded_repeat(atom, low, high)


def _bounded_repeat(atom: str, low: int, high: int) -> str:
    if high <= MAX_REPEAT:
        return _counted(atom, low, high)
    # At most MAX_REPEAT copies, or exactly MAX_REPEAT and then at least one more. Splitting
    # by count (not a{0,1000}a{0,1000}, which is ambiguous) keeps Python's backtracking linear
    # and the DFA construction's state sets small.
    rest = _bounded_repeat(atom, 1, high - MAX_REPEAT)
    return f"(?:{_counted(atom, low, MAX_REPEAT)}|{atom}{{{MAX_REPEAT}}}{rest})"


def _counted(atom: str, low: int, high: int) -> str:
    if high == 0:
        return ""
    if (low, high) == (1, 1):
        return atom
    if (low, high) == (0, 1):
        return atom + "?"
    return f"{atom}{{{low}}}" if low == high else f"{atom}{{{low},{high}}}"
