"""The course regex engine against Python's ``re`` (the oracle), on generated patterns and strings.

A hypothesis strategy builds random ASTs in the supported subset, renders them as pattern
text and draws strings biased toward each pattern: one that matches by construction, a mutation
of it, or a jumble of the pattern's own characters. For each case the character DFA must agree
with ``re.fullmatch(pattern, text, flags=re.ASCII)``, the byte DFA with the character DFA, and
both automata must be minimal with every state live.
"""
from __future__ import annotations

import copy as copy_module
import pickle
import re
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.structured.dfa import DFA, ByteDFA, compile_regex

# Characters the generated patterns and strings are made of: ASCII of every shorthand class,
# pattern metacharacters, and 2-, 3- and 4-byte UTF-8 characters.
ALPHABET = "abcZ09_ \n\t.-]^\\[é€中😀\x00\x7f\U0010ffff"
SPECIAL = set("\\.^$*+?{}[]|()")
SHORTHANDS = [r"\d", r"\D", r"\w", r"\W", r"\s", r"\S"]


def escape_literal(c: str, form: str) -> str:
    if form == "x" and ord(c) < 0x100:
        return f"\\x{ord(c):02x}"
    if form == "u" and ord(c) < 0x10000:
        return f"\\u{ord(c):04X}"
    if form == "U":
        return f"\\U{ord(c):08x}"
    if c == "\n":
        return "\\n"
    return "\\" + c if c in SPECIAL or c == "-" else c


def escape_in_class(c: str) -> str:
    # Punctuation is always escaped inside classes, so no generated class trips Python's
    # "possible nested set" FutureWarning ([[, --, &&, ||, ~~); bare '-' and ']' are tested by hand.
    if c.isascii() and not c.isalnum() and c not in " _":
        return "\\n" if c == "\n" else "\\t" if c == "\t" else "\\" + c
    return c


@st.composite
def char_classes(draw) -> str:
    items = draw(st.lists(st.one_of(
        st.sampled_from(ALPHABET).map(escape_in_class),
        st.lists(st.sampled_from(ALPHABET), min_size=2, max_size=2).map(sorted).map(
            lambda pair: f"{escape_in_class(pair[0])}-{escape_in_class(pair[1])}"),
        st.sampled_from(SHORTHANDS)), min_size=1, max_size=3))
    return "[" + ("^" if draw(st.booleans()) else "") + "".join(items) + "]"


# A test AST: ("set", text) for one character from a set, ("cat", items), ("alt", options),
# ("rep", item, quantifier text, min, max).
leaves = st.one_of(
    st.tuples(st.sampled_from(ALPHABET), st.sampled_from(["plain"] * 4 + ["x", "u", "U"])).map(
        lambda cf: ("set", escape_literal(*cf))),
    st.sampled_from(SHORTHANDS + ["."]).map(lambda t: ("set", t)),
    char_classes().map(lambda t: ("set", t)),
)

QUANTIFIERS = st.one_of(
    st.sampled_from([("*", 0, None), ("+", 1, None), ("?", 0, 1)]),
    st.integers(0, 3).map(lambda m: (f"{{{m}}}", m, m)),
    st.integers(0, 2).map(lambda m: (f"{{{m},}}", m, None)),
    st.integers(0, 3).map(lambda n: (f"{{,{n}}}", 0, n)),
    st.tuples(st.integers(0, 2), st.integers(0, 2)).map(lambda mk: (f"{{{mk[0]},{mk[0] + mk[1]}}}", mk[0], mk[0] + mk[1])),
)


def extend(children):
    return st.one_of(
        st.lists(children, max_size=3).map(lambda items: ("cat", items)),
        st.lists(children, min_size=2, max_size=3).map(lambda options: ("alt", options)),
        st.tuples(children, QUANTIFIERS).map(lambda nq: ("rep", nq[0], *nq[1])),
    )


trees = st.recursive(leaves, extend, max_leaves=8)


def render(node, top: bool = True) -> str:
    kind = node[0]
    if kind == "set":
        return node[1]
    if kind == "cat":
        return "".join(render(item, top=False) for item in node[1])
    if kind == "alt":
        text = "|".join(render(option) for option in node[1])
        return text if top else f"(?:{text})"
    _, item, quantifier, _, _ = node
    body = render(item)
    return (body if item[0] == "set" else f"(?:{body})") + quantifier


def sample_match(draw, node) -> str:
    """A string the node matches, drawn by hypothesis (a set with no members in ALPHABET fails)."""
    kind = node[0]
    if kind == "set":
        members = [c for c in ALPHABET if re.fullmatch(node[1], c, re.ASCII)]
        return draw(st.sampled_from(members)) if members else ALPHABET[0]
    if kind == "cat":
        return "".join(sample_match(draw, item) for item in node[1])
    if kind == "alt":
        return sample_match(draw, draw(st.sampled_from(node[1])))
    _, item, _, low, high = node
    count = draw(st.integers(low, low + 2 if high is None else high))
    return "".join(sample_match(draw, item) for _ in range(count))


@st.composite
def cases(draw) -> tuple[str, str]:
    tree = draw(trees)
    pattern = render(tree)
    own = [c for c in ALPHABET if c in pattern] or list(ALPHABET)
    how = draw(st.sampled_from(["match", "mutate", "jumble"]))
    if how == "jumble":
        text = "".join(draw(st.lists(st.sampled_from(own + list(ALPHABET[:4])), max_size=8)))
    else:
        text = sample_match(draw, tree)[:12]
        if how == "mutate":
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.sampled_from(["", *own])) + text[at + draw(st.integers(0, 1)):]
    return pattern, text


def oracle(pattern: str, text: str) -> bool:
    return re.fullmatch(pattern, text, flags=re.ASCII) is not None


def live_states(n_states: int, edges, accepting) -> set[int]:
    """States from which an accepting state is reachable, by a backward search."""
    incoming: list[list[int]] = [[] for _ in range(n_states)]
    for source, target in edges:
        incoming[target].append(source)
    live, queue = set(accepting), deque(accepting)
    while queue:
        for source in incoming[queue.popleft()]:
            if source not in live:
                live.add(source)
                queue.append(source)
    return live


def moore_classes(n_states: int, rows, accepting) -> int:
    """How many classes of equivalent states Moore's refinement finds (rows: state -> tuple of
    targets, one per symbol class, -1 = dead). Independent of the engine's Hopcroft."""
    label = [int(s in accepting) for s in range(n_states)]
    while True:
        signatures = {}
        new = [signatures.setdefault((label[s], tuple(label[t] if t >= 0 else -1 for t in rows[s])), len(signatures))
               for s in range(n_states)]
        if len(signatures) == len(set(label)):
            return len(signatures)
        label = new


def char_rows(dfa: DFA) -> list[tuple[int, ...]]:
    """The DFA's transition table over its own symbol classes (cut at every interval boundary)."""
    cuts = sorted({b for s in range(dfa.n_states) for lo, hi, _ in dfa.transitions(s) for b in (lo, hi + 1)})
    rows = []
    for s in range(dfa.n_states):
        rows.append(tuple(next((t for lo, hi, t in dfa.transitions(s) if lo <= c <= hi), -1) for c in cuts))
    return rows


def assert_well_formed(dfa: DFA) -> None:
    assert dfa.start == 0 and 0 <= len(dfa.accepting) <= dfa.n_states
    edges = []
    for s in range(dfa.n_states):
        previous_hi = -1
        for lo, hi, t in dfa.transitions(s):
            assert previous_hi < lo <= hi <= 0x10FFFF and 0 <= t < dfa.n_states
            assert not (lo <= 0xDFFF and hi >= 0xD800), "surrogates are never matched"
            previous_hi = hi
            edges.append((s, t))
    assert live_states(dfa.n_states, edges, dfa.accepting) == set(range(dfa.n_states))
    assert moore_classes(dfa.n_states, char_rows(dfa), dfa.accepting) == dfa.n_states


def assert_byte_well_formed(data: ByteDFA) -> None:
    table = data.table
    assert table.shape == (data.n_states, 256) and table.dtype == np.int32
    sources, symbols = np.nonzero(table >= 0)
    edges = list(zip(sources.tolist(), table[sources, symbols].tolist()))
    assert live_states(data.n_states, edges, data.accepting) == set(range(data.n_states))
    assert moore_classes(data.n_states, [tuple(row) for row in table.tolist()], data.accepting) == data.n_states


def check_case(pattern: str, text: str) -> bool:
    expected = oracle(pattern, text)
    try:
        dfa = compile_regex(pattern)
    except ValueError as error:             # e.g. [^\d\D]: no string at all
        assert "matches no string" in str(error)
        assert not expected
        return expected
    assert dfa.fullmatch(text) == expected, (pattern, text)
    data = dfa.to_bytes()
    assert data.fullmatch(text.encode()) == expected, (pattern, text)
    # Dead as characters exactly when dead as bytes, at every character boundary.
    state = dfa.start
    for i, char in enumerate(text):
        state = dfa.step(state, char)
        assert (state is None) == (data.walk(data.start, text[:i + 1].encode()) is None), (pattern, text[:i + 1])
        if state is None:
            break
    return expected


@settings(max_examples=300, deadline=None)
@given(cases())
def test_fullmatch_agrees_with_python_re(case):
    check_case(*case)


@settings(max_examples=60, deadline=None)
@given(trees.map(render))
def test_generated_automata_are_minimal_and_live(pattern):
    try:
        dfa = compile_regex(pattern)
    except ValueError:
        return
    assert_well_formed(dfa)
    assert_byte_well_formed(dfa.to_bytes())


def test_generated_strings_often_match():
    # The agreement test is only worth something if both answers occur often.
    outcomes = []

    @settings(max_examples=200, deadline=None, derandomize=True, database=None)
    @given(cases())
    def run(case):
        outcomes.append(check_case(*case))

    run()
    assert 0.25 <= sum(outcomes) / len(outcomes) <= 0.85


HAND_CASES = [
    ("", ["", "a"]),
    ("a|", ["", "a", "aa"]),
    ("|a|", ["", "a"]),
    ("()", ["", "a"]),
    ("(a)(?:b|c)", ["ab", "ac", "a", "abc"]),
    ("[]a]", ["]", "a", "b", "]a"]),
    ("[^]a]", ["]", "a", "b", "😀"]),
    ("[a-]", ["a", "-", "b"]),
    ("[-a]", ["a", "-", "b"]),
    ("[a-c-e]", ["b", "-", "d", "e"]),
    ("[\\d-]+", ["1-2", "-", "a"]),
    (r"[\w.]+@\w+\.\w{2,3}", ["a.b@c.de", "a@b.cdef", "é@b.cd"]),
    (r"\.\/\"\-\{\}\[\]\(\)\|\?\*\+\^\$\\", ['./"-{}[]()|?*+^$\\']),
    ("a}b]", ["a}b]"]),
    (r"\x41\u00e9\U0001F600", ["Aé😀", "Ae😀"]),
    ("x{,3}", ["", "xxx", "xxxx"]),
    ("x{2,}", ["x", "xx", "xxxxx"]),
    ("x{,}", ["", "xxxx"]),
    ("x{0}", ["", "x"]),
    ("(?:ab){2,3}", ["ab", "abab", "ababab", "abababab", "aba"]),
    (".", ["a", "\n", "é", "😀", "\x00", "\U0010ffff", ""]),
    ("[^a]", ["😀", "a", "é", "\n", "中"]),
    (r"\D\W\S", ["a!a", "1!a", "a a", "😀😀😀"]),
    (r"\s+", [" \t\n\r\f\v", "\xa0", "\u2003"]),
    (r"\d", ["5", "٣"]),
    (r"\w+", ["abc_09", "é", "中"]),
    ("[一-龥]+", ["中文字", "中a"]),
    ("caf[eé]|€{2}", ["cafe", "café", "€€", "€"]),
    ("(a|b)*abb", ["abb", "aabb", "babb", "ab", "abba"]),
    (r"[^\n]*", ["abc", "a\nb"]),
    ("a{200}", ["a" * 200, "a" * 199]),
]


@pytest.mark.parametrize("pattern, texts", HAND_CASES)
def test_hand_written_cases_agree_with_python_re(pattern, texts):
    dfa = compile_regex(pattern)
    data = dfa.to_bytes()
    for text in texts:
        assert dfa.fullmatch(text) == oracle(pattern, text), text
        assert data.fullmatch(text.encode()) == oracle(pattern, text), text
    assert_well_formed(dfa)


@pytest.mark.parametrize("pattern, n_states", [
    ("(a|b)*abb", 4), ("a*", 1), ("", 1), ("[ab]*|a+", 1), ("(?:a|b)(?:a|b)", 3), ("a{3}", 4),
    ("a{0,3}", 4), ("(?:aa)*", 2), ("a{1000}", 1001), ("a{0,1000}", 1001), (".*", 1), ("x(?:a|b|c|[d-z])", 3),
])
def test_minimal_state_counts(pattern, n_states):
    assert compile_regex(pattern).n_states == n_states


def test_adjacent_intervals_to_one_target_are_merged():
    assert compile_regex("x(?:a|b|c|[d-z])").transitions(1) == ((ord("a"), ord("z"), 2),)


def test_dfa_interface():
    dfa = compile_regex("(a|b)*abb")
    assert dfa.pattern == "(a|b)*abb" and dfa.start == 0 and dfa.accepting == frozenset({3})
    assert dfa.transitions(0) == ((97, 97, 1), (98, 98, 0))
    assert dfa.step(0, "a") == 1 and dfa.step(0, "c") is None and dfa.step(0, "`") is None
    assert dfa.is_accepting(3) and not dfa.is_accepting(0)
    assert repr(dfa) == "DFA('(a|b)*abb', n_states=4, accepting=[3])"
    assert dfa.to_bytes() is dfa.to_bytes()
    with pytest.raises(AttributeError, match="immutable"):
        dfa.start = 1


def test_byte_dfa_interface():
    data = compile_regex("(a|b)*abb").to_bytes()
    assert (data.start, data.n_states, data.accepting) == (0, 4, frozenset({3}))
    assert data.step(0, ord("a")) == 1 and data.step(0, ord("c")) is None
    assert data.walk(0, b"ab") == 2 and data.walk(0, b"abc") is None and data.walk(0, b"") == 0
    assert data.fullmatch(b"aabb") and not data.fullmatch(b"aab")
    assert data.is_accepting(3) and repr(data).startswith("ByteDFA('(a|b)*abb', n_states=4")
    assert not data.table.flags.writeable
    with pytest.raises(ValueError):
        data.table[0, 0] = 2
    for bad in (lambda: data.step(-1, 97), lambda: data.walk(-1, b"a"), lambda: data.step(0, 256),
                lambda: compile_regex("a").step(-1, "a")):
        with pytest.raises(ValueError, match="not a state|0..255"):
            bad()


def test_automata_survive_pickle_and_deepcopy():
    dfa = compile_regex("(a|b)*abb")
    for copy in (pickle.loads(pickle.dumps(dfa)), copy_module.deepcopy(dfa)):
        assert copy.fullmatch("babb") and copy.n_states == 4 and copy.transitions(0) == dfa.transitions(0)
        data = pickle.loads(pickle.dumps(copy.to_bytes()))
        assert data.fullmatch(b"babb") and np.array_equal(data.table, dfa.to_bytes().table)
        assert not data.table.flags.writeable


def test_surrogates_are_never_matched():
    for pattern in (".", "[^a]", r"\D", r"[\ud000-\ue000]", r"[^\x00-\x7f]"):
        assert not compile_regex(pattern).fullmatch("\ud800"), pattern
    assert compile_regex(r"[\ud000-\ue000]").fullmatch("\ud7ff")
    assert compile_regex(r"[\ud000-\ue000]").fullmatch("\ue000")
    with pytest.raises(ValueError, match="matches no string"):
        compile_regex(r"\ud800")


@pytest.mark.parametrize("pattern", [r"[^\x00-\U0010FFFF]", r"[^\d\D]", r"a[^\s\S]|[^\w\W]b"])
def test_pattern_matching_nothing_is_a_value_error(pattern):
    with pytest.raises(ValueError, match="matches no string"):
        compile_regex(pattern)


def json_object_pattern() -> str:
    """A pattern of the size a JSON Schema with ten properties compiles to (a few hundred chars)."""
    ws = r"[ \n\t]{0,2}"
    string = r'"(?:[^"\\\x00-\x1F]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){0,40}"'
    integer = r"-?(?:0|[1-9][0-9]{0,15})"
    number = integer + r"(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
    array = r"\[" + ws + r"(?:" + string + r"(?:" + ws + "," + ws + string + r"){0,9})?" + ws + r"\]"
    values = [string, integer, number, "(?:true|false)", array, '(?:"red"|"green"|"ultra violet")',
              string, number, string, "null"]
    members = [f'"p{i}"{ws}:{ws}{value}' for i, value in enumerate(values)]
    return r"\{" + ws + f"{ws},{ws}".join(members) + ws + r"\}"


def test_json_sized_pattern_agrees_with_python_re():
    pattern = json_object_pattern()
    dfa = compile_regex(pattern)
    data = dfa.to_bytes()
    values = ['"héllo 😀 \\" \\u00e9"', "12", "-3.5e2", "true", '["a", "b\\"c"]', '"ultra violet"',
              '""', "0", '"' + "x" * 40 + '"', "null"]
    good = "{" + ", ".join(f'"p{i}": {v}' for i, v in enumerate(values)) + "}"
    too_long = good.replace("x" * 40, "x" * 41)
    bad_escape = good.replace("\\u00e9", "\\u00g9")
    for text in (good, too_long, bad_escape, good[:-1]):
        assert dfa.fullmatch(text) == oracle(pattern, text) == data.fullmatch(text.encode())
    assert dfa.fullmatch(good) and not dfa.fullmatch(too_long)


def test_the_engine_does_not_use_python_regexes():
    # re is only the oracle: the engine's own modules never import it (or the regex package).
    import ast
    import importlib

    for name in ("regex_parse", "automata", "dfa"):
        module = importlib.import_module(f"course_lib.structured.{name}")
        tree = ast.parse(open(module.__file__, encoding="utf-8").read())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names}
        imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not imported & {"re", "regex", "sre_parse", "sre_compile"}, name
