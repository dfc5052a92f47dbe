"""Every construct outside the subset is an UnsupportedPattern naming it, its offset and the fix."""
from __future__ import annotations

import re
import warnings

import pytest

from course_lib.structured.dfa import compile_regex
from course_lib.structured.errors import UnsupportedPattern
from course_lib.structured.regex_parse import MAX_NESTING, MAX_REPEAT

# (pattern, words the construct must contain, offset); where Python's re rejects the pattern
# too, the offset is the one re.error reports.
UNSUPPORTED = [
    ("^a", "anchor ^", 0),
    ("a$", "anchor $", 1),
    (r"a\b", r"anchor \b", 1),
    (r"\Ba", r"anchor \B", 0),
    (r"\Aa", r"anchor \A", 0),
    (r"a\Z", r"anchor \Z", 1),
    (r"(a)\1", "backreference", 3),
    ("(?=a)", "lookahead", 0),
    ("(?!a)", "negative lookahead", 0),
    ("a(?<=a)", "lookbehind", 1),
    ("a(?<!a)", "negative lookbehind", 1),
    ("(?P<n>a)", "named group", 0),
    ("(?P=n)", "named backreference", 0),
    ("(?i)a", "inline flags (?i", 0),
    ("x(?i:a)", "inline flags (?i", 1),
    ("(?#c)a", "comment", 0),
    ("(?>a)", "atomic group", 0),
    ("a(?", "group extension (?", 1),
    ("(?-i:a)", "group extension (?-", 0),
    ("a*?", "lazy quantifier *?", 1),
    ("a+?", "lazy quantifier +?", 1),
    ("a??", "lazy quantifier ??", 1),
    ("ab{2}?", "lazy quantifier {2}?", 2),
    ("a*+", "possessive quantifier *+", 1),
    ("a++", "possessive quantifier ++", 1),
    (r"\p{L}", r"property class \p", 0),
    (r"a\P{L}", r"property class \P", 1),
    (r"\q", r"unknown escape \q", 0),
    (r"\N{EM DASH}", r"named character \N", 0),
    (r"\0", r"octal escape \0", 0),
    ("a\\", "trailing backslash", 1),
    ("(a", "unbalanced '('", 0),
    ("((a)", "unbalanced '('", 0),
    ("a)", "unbalanced ')'", 1),
    ("*a", "nothing to repeat", 0),
    ("a|*", "nothing to repeat", 2),
    ("(*)", "nothing to repeat", 1),
    ("{2}", "nothing to repeat", 0),
    ("a**", "multiple repeat", 2),
    ("a{2}{3}", "multiple repeat", 4),
    ("a*{2}", "multiple repeat", 2),
    ("a{", "'{' that starts no quantifier", 1),
    ("{", "'{' that starts no quantifier", 0),
    ("a{x}", "'{' that starts no quantifier", 1),
    ("a{1,2", "'{' that starts no quantifier", 1),
    ("a{ 1}", "'{' that starts no quantifier", 1),
    (f"a{{{MAX_REPEAT + 1}}}", f"{{{MAX_REPEAT + 1}}}", 1),
    (f"a{{0,{MAX_REPEAT + 1}}}", f"{{0,{MAX_REPEAT + 1}}}", 1),
    ("a{3,2}", "{3,2}", 1),
    ("(?:a{1000}){1000}", "1000000 character positions", 11),
    ("[a", "unterminated character class", 0),
    ("x[]", "unterminated character class", 1),
    ("[^]", "unterminated character class", 0),
    ("[z-a]", "bad character range z-a", 1),
    (r"[\d-z]", r"bad character range \d-z", 1),
    (r"[a-\w]", r"bad character range a-\w", 1),
    ("[[]", "'[' inside a class", 1),
    (r"[\b]", r"\b inside a class", 1),
    (r"\x4", r"incomplete escape \x4", 0),
    (r"\xg0", r"incomplete escape \xg0", 0),
    (r"\u12", r"incomplete escape \u12", 0),
    (r"\U00110000", r"escape \U00110000", 0),
]


@pytest.mark.parametrize("pattern, construct, offset", UNSUPPORTED)
def test_unsupported_construct_is_named_with_its_offset(pattern, construct, offset):
    with pytest.raises(UnsupportedPattern) as caught:
        compile_regex(pattern)
    error = caught.value
    assert construct in error.construct and error.offset == offset and error.pattern == pattern
    assert f"at offset {offset}" in str(error) and isinstance(error, ValueError)
    assert "; " in str(error), "every error carries a hint that says what to do"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            re.compile(pattern)
        except re.error as python_error:
            # re reports these where its own (semantic) check fires, past the construct's start.
            if pattern not in (r"\u12", "a{3,2}", "(?P=n)", "a(?"):
                assert python_error.pos == offset, "the same offset Python's re reports"


@pytest.mark.parametrize("pattern, fix", [
    ("a{", "\\{"), ("^a", "drop it"), ("a*?", "drop the '?'"), (r"\p{L}", "[...]"),
    ("a{2000}", "use * or +"), ("(a", "')'"), ("a**", "(?:...)"),
])
def test_hints_name_the_fix(pattern, fix):
    with pytest.raises(UnsupportedPattern, match=re.escape(fix)):
        compile_regex(pattern)


def test_long_patterns_report_the_offset_without_quoting():
    pattern = "a" * 100 + "$"
    with pytest.raises(UnsupportedPattern, match="at offset 100"):
        compile_regex(pattern)


def test_non_string_pattern_is_a_type_error():
    with pytest.raises(TypeError, match="must be a str"):
        compile_regex(b"abc")


def test_deep_nesting_is_refused_not_a_recursion_error():
    with pytest.raises(UnsupportedPattern, match="nested deeper"):
        compile_regex("(" * (MAX_NESTING + 1) + "a" + ")" * (MAX_NESTING + 1))
    assert compile_regex("(?:" * MAX_NESTING + "a" + ")*" * MAX_NESTING).fullmatch("aa")
