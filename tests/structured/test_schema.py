"""schema_to_regex against real oracles: ``json.loads`` + ``jsonschema`` (Draft 2020-12).

Every matching test runs on both matchers: Python's ``re.fullmatch(p, s, flags=re.ASCII)``
and the course engine's ``compile_regex(p).fullmatch(s)``.
- Completeness: hypothesis-jsonschema draws values; each is serialised in schema order
  (compact, and with one space in every whitespace slot) and must match.
- Soundness (the exact direction): strings drawn from the regex itself (random walks on the
  course DFA) and mutations of valid instances; whatever matches must parse and validate.
- Integer ranges, string lengths, array sizes and the object comma logic are checked
  exhaustively against plain comparisons; every error path names its keyword and pointer.
hypothesis-jsonschema 0.23 cannot draw objects under this hypothesis version (it calls the
removed ``many.more()``), so objects, arrays, anyOf and $ref are composed here with hypothesis
strategies, and only the leaves come from ``from_schema``.
"""
from __future__ import annotations

import functools
import json
import random
import re
from collections import deque
from itertools import combinations, permutations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from jsonschema import Draft202012Validator

from course_lib.structured.dfa import compile_regex
from course_lib.structured.errors import UnsatisfiableSchema, UnsupportedSchema
from course_lib.structured.schema import json_string_regex, schema_to_regex
from course_lib.structured.schema_numbers import integer_range_regex, repeat_regex

FAST = settings(max_examples=25, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@functools.lru_cache(maxsize=None)
def _compiled(kind: str, pattern: str):
    return re.compile(pattern, re.ASCII).fullmatch if kind == "re" else compile_regex(pattern).fullmatch


@pytest.fixture(params=["re", "dfa"])
def matches(request):
    """matches(pattern, text) on one matcher: Python's re, or the course DFA."""
    return lambda pattern, text: bool(_compiled(request.param, pattern)(text))


def _strict_constant(name):
    raise ValueError(f"{name} is not JSON")


def accepted(text: str, schema) -> bool:
    """The oracle: strict JSON, and valid under the schema."""
    try:
        value = json.loads(text, parse_constant=_strict_constant)
    except ValueError:
        return False
    return Draft202012Validator(schema).is_valid(value)


TICKET = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 1, "maximum": 99999},
        "title": {"type": "string", "minLength": 1, "maxLength": 40, "description": "one line"},
        "priority": {"enum": ["low", "medium", "high", "urgent"]},
        "severity": {"type": "integer", "minimum": -3, "exclusiveMaximum": 4.5},
        "open": {"type": "boolean"},
        "reporter": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 12},
            "team": {"type": "string", "pattern": "^[a-z]{2,6}(?:-[0-9]{1,2})?$"}},
            "required": ["name"], "additionalProperties": False},
        "tags": {"type": "array", "items": {"enum": ["bug", "ui", "backend", "docs"]},
                 "minItems": 1, "maxItems": 3},
        "assignee": {"anyOf": [{"type": "string", "maxLength": 10}, {"type": "null"}]},
        "due": {"$ref": "#/$defs/date"},
        "estimate": {"type": "number"},
    },
    "required": ["id", "title", "priority", "severity", "open", "reporter", "tags", "assignee", "due"],
    "additionalProperties": False,
    "$defs": {"date": {"type": "string", "pattern": "^2[0-9]{3}-(?:0[1-9]|1[0-2])-[0-2][0-9]$"}},
}

SCHEMAS = {
    "ticket": TICKET,
    "string": {"type": "string"},
    "number": {"type": "number"},
    "nullable_count": {"type": ["integer", "null"], "minimum": 0, "title": "count"},
    "points": {"type": "array", "maxItems": 3, "items": {
        "type": "object", "properties": {"x": {"type": "integer", "minimum": -5, "maximum": 5},
                                         "label": {"type": "string", "maxLength": 2}},
        "required": ["label"]}},
    "all_optional": {"type": "object", "properties": {
        "a": {"type": "boolean"}, "b": {"type": "object", "properties": {}},
        "c": {"type": "array", "items": {"type": "null"}}}},
    "mixed_enum": {"enum": [1, "a.b", None, True, {"k": [1, 2]}, [1, "x"], 2.5, "é\n\"(?)"]},
    "any_of": {"anyOf": [{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
                         {"type": "array", "items": {"type": "string", "maxLength": 1}, "minItems": 2}]},
    "escaped_ref": {"definitions": {"a/b~c d": {"const": "x"}}, "$ref": "#/definitions/a~1b~0c%20d"},
}


def _resolve(schema, root):
    while "$ref" in schema:
        section, name = schema["$ref"][2:].split("/", 1)
        schema = root[section][name.replace("%20", " ").replace("~1", "/").replace("~0", "~")]
    return schema


def values(schema, root):
    """A strategy for values of `schema` inside the regex's language (closed objects)."""
    schema = _resolve(schema, root)
    if "enum" in schema or "const" in schema:
        return from_schema(schema)
    if "anyOf" in schema:
        return st.one_of([values(branch, root) for branch in schema["anyOf"]])
    types = [schema["type"]] if isinstance(schema["type"], str) else schema["type"]
    if len(types) > 1:
        return st.one_of([values({**schema, "type": t}, root) for t in types])
    if types == ["object"]:
        properties, required = schema.get("properties", {}), schema.get("required", [])
        return st.fixed_dictionaries(
            {k: values(v, root) for k, v in properties.items() if k in required},
            optional={k: values(v, root) for k, v in properties.items() if k not in required})
    if types == ["array"]:
        return st.lists(values(schema["items"], root), min_size=schema.get("minItems", 0),
                        max_size=schema.get("maxItems"))
    return from_schema(schema)


def dump(value, schema, root, space: str = "") -> str:
    """Serialise like the regex: properties in schema order, `space` in every whitespace slot."""
    schema = _resolve(schema, root)
    if "enum" in schema or "const" in schema:  # enum values are written compactly, no slots
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if "anyOf" in schema:
        validator = Draft202012Validator(root)
        branch = next(b for b in schema["anyOf"] if validator.evolve(schema=b).is_valid(value))
        return dump(value, branch, root, space)
    comma = f"{space},{space}"
    if isinstance(value, dict):
        properties = schema["properties"]
        items = [json.dumps(k, ensure_ascii=False) + f"{space}:{space}" + dump(value[k], properties[k], root, space)
                 for k in properties if k in value]
        return "{" + space + comma.join(items) + (space if items else "") + "}"
    if isinstance(value, list):
        items = [dump(v, schema["items"], root, space) for v in value]
        return "[" + space + comma.join(items) + (space if items else "") + "]"
    if isinstance(value, float) and value.is_integer() and "integer" in str(schema.get("type")):
        value = int(value)  # the regex spells integers canonically: 3, never 3.0
    if isinstance(value, str):
        assume(not any(0xD800 <= ord(c) <= 0xDFFF for c in value))
    return json.dumps(value, ensure_ascii=False)


@pytest.mark.parametrize("name", SCHEMAS)
def test_generated_instances_match(name, matches):
    schema = SCHEMAS[name]
    spaced, compact = schema_to_regex(schema), schema_to_regex(schema, whitespace="")

    @FAST
    @given(values(schema, schema))
    def check(value):
        assert Draft202012Validator(schema).is_valid(value)
        text = dump(value, schema, schema)
        assert matches(compact, text), text
        assert matches(spaced, text), text
        assert matches(spaced, dump(value, schema, schema, " "))

    check()


def _random_walks(dfa, rng: random.Random, count: int, soft_length: int = 60):
    """Strings the DFA accepts: random edges, then straight for acceptance past soft_length."""
    reverse = {s: [] for s in range(dfa.n_states)}
    for s in range(dfa.n_states):
        for _, _, t in dfa.transitions(s):
            reverse[t].append(s)
    distance = {s: 0 for s in dfa.accepting}
    queue = deque(dfa.accepting)
    while queue:
        s = queue.popleft()
        for p in reverse[s]:
            if p not in distance:
                distance[p] = distance[s] + 1
                queue.append(p)
    for _ in range(count):
        state, chars = dfa.start, []
        while not (dfa.is_accepting(state) and (len(chars) >= soft_length or rng.random() < 0.15
                                                or not dfa.transitions(state))):
            edges = dfa.transitions(state)
            if len(chars) >= soft_length:
                edges = [e for e in edges if distance[e[2]] < distance[state]]
            lo, hi, state = rng.choice(edges)
            chars.append(chr(rng.choice([lo, hi, rng.randint(lo, hi), rng.randint(lo, max(lo, min(hi, 0x7F)))])))
        yield "".join(chars)


@pytest.mark.parametrize("whitespace", [r"[ ]?", "", r"[ \n]{0,2}"])
@pytest.mark.parametrize("name", SCHEMAS)
def test_strings_drawn_from_the_regex_are_valid(name, whitespace):
    schema = SCHEMAS[name]
    pattern = schema_to_regex(schema, whitespace=whitespace)
    dfa = compile_regex(pattern)
    for text in _random_walks(dfa, random.Random(f"{name}{whitespace}"), 60):
        assert re.fullmatch(pattern, text, flags=re.ASCII), text   # the two matchers agree
        assert accepted(text, schema), text


MUTATION_ALPHABET = '{}[],:" \\-.0123456789eE+truefalsn\nx\x01é'


@pytest.mark.parametrize("name", SCHEMAS)
def test_mutated_instances_match_only_if_valid(name):
    schema = SCHEMAS[name]
    pattern = schema_to_regex(schema)

    @settings(max_examples=40, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(values(schema, schema), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 2),
                                                      st.sampled_from(MUTATION_ALPHABET)), min_size=1, max_size=3))
    def check(value, edits):
        text = dump(value, schema, schema, " ")
        for position, kind, char in edits:
            i = position % (len(text) + 1)
            text = [text[:i] + char + text[i:], text[:i] + text[i + 1:], text[:i] + char + text[i + 1:]][kind]
        by_re = bool(re.fullmatch(pattern, text, flags=re.ASCII))
        assert by_re == _compiled("dfa", pattern)(text), text
        if by_re:
            assert accepted(text, schema), text

    check()


BOUNDS = [None, -1000, -101, -100, -99, -10, -9, -1, 0, 1, 9, 10, 11, 99, 100, 199, 555, 1000]
WINDOW = [str(n) for n in range(-1100, 1101)] + ["-0", "00", "01", "-01", "+1", "", "1.0", "1e2"]


@pytest.mark.parametrize("minimum", BOUNDS)
def test_integer_ranges_exhaustively(minimum, matches):
    for maximum in BOUNDS:
        if minimum is not None and maximum is not None and minimum > maximum:
            continue
        pattern = integer_range_regex(minimum, maximum)
        for text in WINDOW:
            canonical = re.fullmatch(r"-?(?:0|[1-9]\d*)", text) and (text != "-0" or minimum is None is maximum)
            inside = bool(canonical) and (minimum is None or int(text) >= minimum) \
                and (maximum is None or int(text) <= maximum)
            assert matches(pattern, text) == inside, (minimum, maximum, text)


@pytest.mark.parametrize("bounds", [
    {"minimum": 2.5, "exclusiveMaximum": 7}, {"exclusiveMinimum": -2.5, "maximum": 3.9},
    {"exclusiveMinimum": -3, "exclusiveMaximum": 3}, {"minimum": -7, "exclusiveMinimum": -9},
    {"maximum": -4.0}, {"exclusiveMinimum": 17}, {"minimum": 0, "maximum": 0}])
def test_integer_bounds_match_jsonschema(bounds, matches):
    schema = {"type": "integer", **bounds}
    pattern = schema_to_regex(schema)
    for n in range(-60, 61):
        assert matches(pattern, str(n)) == Draft202012Validator(schema).is_valid(n), (bounds, n)


@pytest.mark.parametrize("low,high", [(0, None), (0, 0), (2, 2), (1, 4), (3, None)])
def test_string_lengths_are_exact(low, high, matches):
    pattern = json_string_regex(low, high)

    @FAST
    @given(st.text(max_size=7))
    def check(text):
        fits = low <= len(text) and (high is None or len(text) <= high)
        spellings = [json.dumps(text, ensure_ascii=False)]
        if all(ord(c) < 0x10000 for c in text):  # \uXXXX escapes, but never surrogate pairs
            spellings.append(json.dumps(text))
        for spelling in spellings:
            assert matches(pattern, spelling) == fits, spelling

    check()
    assert not matches(pattern, r'"\ud83d\ude00"')   # a surrogate pair is two escapes, one code point


def test_repeats_beyond_the_engine_limit_are_split_exactly(matches):
    assert matches(json_string_regex(0, 1001), '"' + "é" * 1001 + '"')
    assert not matches(json_string_regex(0, 1001), '"' + "é" * 1002 + '"')
    for low, high in [(0, 2500), (999, 1001), (1200, None), (2001, 2002), (1000, 2000)]:
        pattern = repeat_regex("a", low, high)
        for n in range(0, 3100, 7) if high is None else range(0, high + 3):
            assert matches(pattern, "a" * n) == (n >= low and (high is None or n <= high)), (low, high, n)


@pytest.mark.parametrize("required", [set(s) for k in range(4) for s in combinations("abc", k)])
def test_object_commas_for_every_mix_of_required(required, matches):
    schema = {"type": "object", "properties": {k: {"type": "null"} for k in "abc"}, "required": sorted(required)}
    pattern = schema_to_regex(schema)
    for k in range(4):
        for present in permutations("abc", k):
            for space in ("", " "):
                text = "{" + space + f"{space},{space}".join(f'"{p}"{space}:{space}null' for p in present) \
                    + (space if present else "") + "}"
                expected = required <= set(present) and list(present) == sorted(present)
                assert matches(pattern, text) == expected, (required, text)


@pytest.mark.parametrize("low,high", [(0, None), (0, 0), (1, 1), (2, 4), (0, 2)])
def test_array_sizes(low, high, matches):
    schema = {"type": "array", "items": {"type": "integer"}, "minItems": low}
    schema |= {} if high is None else {"maxItems": high}
    pattern = schema_to_regex(schema)
    for n in range(7):
        expected = n >= low and (high is None or n <= high)
        assert matches(pattern, json.dumps(list(range(n)))) == expected, n
        assert matches(pattern, json.dumps(list(range(n)), separators=(",", ":"))) == expected


def test_whitespace_is_bounded_by_default_and_checked(matches):
    pattern = schema_to_regex({"type": "object", "properties": {"a": {"type": "null"}}})
    assert matches(pattern, '{ "a" : null }') and not matches(pattern, '{"a":  null}')
    assert not matches(pattern, '{\n"a":null}')
    newline = schema_to_regex({"type": "array", "items": {"type": "null"}}, whitespace="\n| |")
    assert matches(newline, "[\nnull, null\n]") and not matches(newline, "[\n\nnull]")
    with pytest.raises(TypeError, match="whitespace must be a regex string"):
        schema_to_regex({"type": "null"}, whitespace=None)
    with pytest.raises(ValueError, match="JSON whitespace"):
        schema_to_regex({"type": "null"}, whitespace="[ x]?")


def test_enum_values_are_compact_literals_filtered_by_their_siblings(matches):
    pattern = schema_to_regex(SCHEMAS["mixed_enum"])
    assert matches(pattern, '{"k":[1,2]}') and not matches(pattern, '{"k": [1, 2]}')
    assert matches(pattern, '"é\\n\\"(?)"') and not matches(pattern, '"aXb"') and matches(pattern, '"a.b"')
    assert schema_to_regex({"type": "string", "enum": [1, "x", "y", "x"], "maxLength": 1}) == '(?:"x"|"y")'
    assert schema_to_regex({"type": "integer", "const": 3}) == "3"


def test_annotations_are_ignored():
    notes = {"title": "t", "description": "d", "examples": [1], "default": 1, "$comment": "c",
             "deprecated": False, "readOnly": True, "writeOnly": False}
    plain = {"type": "integer", "minimum": 1}
    root = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "https://x.test/s",
            "$defs": {"unused": {"not": {}}}, **notes, **plain}
    assert schema_to_regex(root) == schema_to_regex(plain)
    assert schema_to_regex({"$defs": {"p": {**notes, **plain}}, "$ref": "#/$defs/p"}) == schema_to_regex(plain)


def test_pattern_instances_match(matches):
    schema = {"type": "string", "pattern": r"^[a-z]{2,6}(?:-[0-9]{1,2})?$"}
    pattern = schema_to_regex(schema)

    @FAST
    @given(from_schema(schema))
    def check(value):
        assert matches(pattern, json.dumps(value))

    check()
    assert not matches(pattern, '"ab-123"')


def _bad(schema, **kwargs):
    return pytest.param(schema, kwargs, id=json.dumps(schema)[:60])


NESTED = {"type": "object", "properties": {"items": {"type": "array", "items": {"oneOf": [{"type": "null"}]}}}}
SELF = {"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"}
CYCLE = {"$defs": {"a": {"type": "array", "items": {"$ref": "#/$defs/b"}},
                   "b": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}
UNSUPPORTED = [
    (NESTED, "oneOf", "/properties/items/items"),
    ({"type": "object", "properties": {"a/b~": {"allOf": [{"type": "null"}]}}}, "allOf", "/properties/a~1b~0"),
    ({"not": {"type": "null"}}, "not", "/"),
    ({"type": "integer", "if": {"minimum": 1}, "then": {"maximum": 3}}, "if", "/"),
    ({"type": "object", "patternProperties": {"^x": {"type": "null"}}}, "patternProperties", "/"),
    ({"type": "object", "dependentRequired": {"a": ["b"]}}, "dependentRequired", "/"),
    ({"type": "object", "properties": {"a": {"type": "null"}}, "additionalProperties": True},
     "additionalProperties", "/"),
    ({"type": "object", "additionalProperties": {"type": "null"}}, "additionalProperties", "/"),
    ({"type": "string", "format": "date"}, "format", "/"),
    ({"type": "string", "pattern": "[a-z]+"}, "pattern", "/"),
    ({"type": "string", "pattern": r"^ab\$"}, "pattern", "/"),
    ({"type": "string", "pattern": "^[a-z]+$", "maxLength": 3}, "pattern", "/"),
    ({"type": "string", "pattern": "^.{2}$"}, "pattern", "/"),
    ({"type": "string", "pattern": '^a"b$'}, "pattern", "/"),
    ({"type": "string", "pattern": r"^[^a]$"}, "pattern", "/"),
    ({"type": "string", "pattern": "^(?=a)a$"}, "pattern", "/"),
    ({"type": "integer", "multipleOf": 2}, "multipleOf", "/"),
    ({"type": "number", "maximum": 2}, "maximum", "/"),
    ({"type": "array"}, "items", "/"),
    ({"type": "array", "prefixItems": [{"type": "null"}], "items": {"type": "null"}}, "prefixItems", "/"),
    ({"type": "array", "items": {"type": "null"}, "uniqueItems": True}, "uniqueItems", "/"),
    ({"type": "array", "items": {"type": "null"}, "contains": {"type": "null"}}, "contains", "/"),
    (SELF, "$ref", "/$defs/n/properties/next"),
    (CYCLE, "$ref", "/$defs/b/anyOf/1"),
    ({"$ref": "https://example.com/s.json"}, "$ref", "/"),
    ({"$ref": "#/properties/a"}, "$ref", "/"),
    ({}, "type", "/"),
    (True, "type", "/"),
    ({"title": "only words"}, "type", "/"),
    ({"type": "array", "items": True}, "type", "/items"),
    ({"type": "string", "minimum": 1}, "minimum", "/"),
    ({"type": "null", "anyOf": [{"type": "null"}]}, "type", "/"),
    ({"$defs": {"x": {"type": "null"}}, "$ref": "#/$defs/x", "maxLength": 2}, "maxLength", "/"),
    ({"type": "object", "properties": {"a": {"$id": "other", "type": "null"}}}, "$id", "/properties/a"),
    ({"type": "object", "minProperties": 1}, "minProperties", "/"),
    ({"type": "null", "x-custom": 1}, "x-custom", "/"),
]


@pytest.mark.parametrize("schema,keyword,pointer", UNSUPPORTED, ids=lambda v: json.dumps(v)[:50])
def test_unsupported_keywords_are_named_with_their_pointer(schema, keyword, pointer):
    with pytest.raises(UnsupportedSchema) as raised:
        schema_to_regex(schema)
    assert (raised.value.keyword, raised.value.pointer) == (keyword, pointer)
    assert repr(keyword) in str(raised.value) and f" at {pointer}" in str(raised.value)


UNSATISFIABLE = [
    ({"type": "object", "properties": {"a": {"type": "null"}}, "required": ["b"]}, "/", "'b'"),
    ({"type": "string", "minLength": 3, "maxLength": 2}, "/", "minLength 3 > maxLength 2"),
    ({"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 3}}},
     "/properties/n", "maximum=3"),
    ({"type": "integer", "exclusiveMinimum": 2.5, "exclusiveMaximum": 3}, "/", "exclusiveMinimum=2.5"),
    ({"type": "array", "items": {"type": "null"}, "minItems": 3, "maxItems": 1}, "/", "minItems 3 > maxItems 1"),
    ({"enum": []}, "/", "enum is empty"),
    ({"type": "string", "enum": [1, None]}, "/", "enum"),
    ({"type": "integer", "const": "3"}, "/", "const"),
    (False, "/", "false"),
    ({"type": "string", "pattern": "^[^\\x00-\\U0010ffff]$"}, "/", "matches no string"),
    ({"type": "array", "items": False}, "/items", "false"),
]


@pytest.mark.parametrize("schema,pointer,reason", UNSATISFIABLE, ids=lambda v: json.dumps(v)[:50])
def test_unsatisfiable_schemas_are_named_with_their_pointer(schema, pointer, reason):
    with pytest.raises(UnsatisfiableSchema) as raised:
        schema_to_regex(schema)
    assert raised.value.pointer == pointer and f"at {pointer}:" in str(raised.value)
    assert reason in str(raised.value)


def test_invalid_inputs_say_what_to_fix():
    with pytest.raises(TypeError, match="schema must be a dict"):
        schema_to_regex('{"type": "null"}')
    with pytest.raises(ValueError, match=r"invalid JSON Schema at /properties/a/type: 'strin'"):
        schema_to_regex({"type": "object", "properties": {"a": {"type": "strin"}}})
    with pytest.raises(ValueError, match="invalid JSON Schema at /anyOf: .*non-empty"):
        schema_to_regex({"anyOf": []})
    with pytest.raises(ValueError, match=r"points to nothing; define 'b' under \$defs"):
        schema_to_regex({"$defs": {"a": {"type": "null"}}, "$ref": "#/$defs/b"})
    with pytest.raises(ValueError, match="min_length 3 > max_length 1"):
        json_string_regex(3, 1)
    with pytest.raises(ValueError, match="range is empty"):
        integer_range_regex(2, 1)
    with pytest.raises(TypeError, match="round float bounds first"):
        integer_range_regex(1.5)


def test_shared_definitions_are_not_mistaken_for_recursion():
    schema = {"$defs": {"p": {"type": "integer", "minimum": 0, "maximum": 9}}, "type": "object",
              "properties": {"a": {"$ref": "#/$defs/p"}, "b": {"$ref": "#/$defs/p"}}, "required": ["a", "b"]}
    assert re.fullmatch(schema_to_regex(schema), '{"a":1,"b":9}')
