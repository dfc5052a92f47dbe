r"""JSON Schema -> regex: every string the regex matches in full is JSON the schema accepts.

>>> schema = {"type": "object", "properties": {"hour": {"type": "integer", "minimum": 0,
...           "maximum": 23}, "ok": {"type": "boolean"}}, "required": ["hour"]}
>>> print(schema_to_regex(schema, whitespace=""))
\{"hour":(?:\d|1\d|2[0-3])(?:,"ok":(?:true|false))?\}
>>> bool(re.fullmatch(schema_to_regex(schema), '{"hour": 7, "ok": true}'))
True
>>> bool(re.fullmatch(schema_to_regex(schema), '{"hour": 24}'))   # out of range: no match
False

The direction that is exact: a match is valid JSON (``json.loads``) and valid under the
schema (``jsonschema``, Draft 2020-12). The other direction is "as much as these rules allow";
each rule below says what it leaves out. A keyword the rules do not cover raises
``UnsupportedSchema(keyword, pointer, hint)``; none is dropped silently (a production engine
once ignored ``allOf`` without a word, and its output broke the schema). A schema no value can
satisfy raises ``UnsatisfiableSchema(pointer, reason)``. Rules:

- Whitespace: ``whitespace`` (a regex, default ``[ ]?``) sits between structural tokens:
  after ``{ [ , :`` and before ``} ] , :``. It is bounded by default on purpose (see
  ``DEFAULT_WHITESPACE``). It must only produce JSON whitespace.
- object: properties appear in the order of ``properties``, with commas between those
  present; a ``required`` one always, an optional one may be absent (any mix, all-optional
  and ``{}`` included). ``additionalProperties`` absent is treated as closed (only listed
  properties are emitted); ``false`` is fine; ``true`` or a schema is unsupported. A
  ``required`` name missing from ``properties`` is unsatisfiable under that closed rule.
- string: characters other than ``"``, ``\`` and controls, or the escapes ``\" \\ \/ \b \f
  \n \r \t`` and ``\uXXXX`` without surrogates (D800-DFFF), so every unit decodes to exactly
  one code point and ``minLength``/``maxLength`` (a ``{m,n}`` on the unit) are exact. The
  price: a character beyond U+FFFF is written raw, never as a surrogate-pair escape.
  ``pattern`` is supported only anchored (``^...$``), alone (no min/maxLength), and when its
  body can never produce ``"``, ``\``, a control character or a surrogate (checked on the
  body's DFA); the body is then embedded between the quotes. ``format`` is unsupported.
- integer: ``-?(?:0|[1-9]\d*)``; ``minimum``/``maximum``/``exclusiveMinimum``/
  ``exclusiveMaximum`` (float bounds rounded inward) become an exact integer-range regex
  (``schema_numbers``). Integer ranges are regular, so this is exact, not an approximation.
  Integers are spelled canonically (never ``1.0`` or ``1e0``). ``multipleOf`` is unsupported.
- number: ``-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?``; any bound on a number is
  unsupported (decimal ranges are not worth a regex here: use integer, or check server-side).
- boolean ``true|false``, null ``null``; a list of types is the alternation of each type,
  and each keyword must apply to one of the listed types.
- array: ``items`` is required (any item schema), ``minItems``/``maxItems`` (absent: no
  upper bound); ``prefixItems``, ``contains``, ``uniqueItems: true`` are unsupported.
- enum/const: the listed values that the whole subschema accepts (checked with
  ``jsonschema``, so ``type`` and every sibling keyword are honoured exactly), each written
  compactly (``json.dumps(v, ensure_ascii=False, separators=(",", ":"))``). An object or
  array value therefore matches only in that exact compact spelling and key order.
- anyOf: the alternation of its branches, with no sibling keywords (move them into each
  branch). oneOf, allOf, not, if/then/else, patternProperties, dependentRequired, ... are
  unsupported.
- ``$ref``: only ``#/$defs/Name`` or ``#/definitions/Name`` (``~0 ~1`` and ``%XX`` decoded),
  inlined, with no siblings; errors inside point into ``$defs``. Recursion (direct or
  indirect) is unsupported: a recursive schema has no finite regex.
- Ignored annotations: title, description, examples, default, $schema, $id (root only),
  $comment, deprecated, readOnly, writeOnly, and ``$defs``/``definitions`` themselves.
- A schema must say what its value is (``type``, ``enum``, ``const``, ``anyOf`` or ``$ref``);
  ``{}`` and ``true`` are unsupported, ``false`` is unsatisfiable. An unsatisfiable part is an
  error even where the parent could do without it (an optional property, an anyOf branch):
  it is almost always a mistake.
"""
from __future__ import annotations

import json
import math
import re
from urllib.parse import unquote

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from course_lib.structured.dfa import compile_regex
from course_lib.structured.errors import UnsatisfiableSchema, UnsupportedPattern, UnsupportedSchema
from course_lib.structured.schema_numbers import integer_range_regex, repeat_regex

__all__ = ["schema_to_regex", "json_string_regex", "integer_range_regex", "DEFAULT_WHITESPACE"]

# At most one space. An unbounded `[ \t\n]*` lets a model that has lost the thread emit
# whitespace until max_tokens: still "valid" by the grammar, but the JSON never closes and
# the request ends truncated. A bound keeps every structural token within reach.
DEFAULT_WHITESPACE = r"[ ]?"

STRING_UNIT = (r'(?:[^"\\\x00-\x1f\uD800-\uDFFF]|\\["\\/bfnrt]'
               r"|\\u(?:[0-9A-Ca-cE-Fe-f][0-9A-Fa-f]{3}|[Dd][0-7][0-9A-Fa-f]{2}))")
NUMBER = r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+\-]?\d+)?"
LITERAL_TYPES = {"boolean": "(?:true|false)", "null": "null"}

ANNOTATIONS = {"title", "description", "examples", "default", "$schema", "$id", "$comment",
               "deprecated", "readOnly", "writeOnly", "$defs", "definitions"}
NUMERIC_BOUNDS = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
TYPE_KEYWORDS = {  # the keywords each type compiles; a keyword no listed type uses is an error
    "string": {"minLength", "maxLength", "pattern"},
    "integer": NUMERIC_BOUNDS, "number": NUMERIC_BOUNDS, "boolean": set(), "null": set(),
    "array": {"items", "minItems", "maxItems", "uniqueItems"},
    "object": {"properties", "required", "additionalProperties"},
}
HINTS = {
    "oneOf": "use anyOf if the branches cannot both match",
    "allOf": "merge the branches into one schema",
    "format": "use a pattern (^...$) or validate the format server-side",
    "multipleOf": "list the values with enum, or validate server-side",
    "patternProperties": "list each property under properties",
    "prefixItems": "use one items schema for every element",
    "contains": "validate it server-side",
    "uniqueItems": "a regex cannot compare items with each other; validate it server-side",
}
GENERIC_HINT = "the course compiler does not support it; remove it or validate it server-side"
# What the string between the quotes must never contain raw: the quote, the backslash,
# control characters (JSON forbids them unescaped), and surrogates (no UTF-8 encoding).
FORBIDDEN_IN_STRING = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0xD800, 0xDFFF))
CONTROL_ESCAPES = {"\n": r"\n", "\t": r"\t", "\r": r"\r", "\f": r"\f", "\v": r"\v"}


def schema_to_regex(schema: dict | bool, *, whitespace: str = DEFAULT_WHITESPACE) -> str:
    """A regex (course subset, matched in full) for JSON values the schema accepts; rules above."""
    if not isinstance(whitespace, str):
        raise TypeError(f"whitespace must be a regex string such as {DEFAULT_WHITESPACE!r}, "
                        f"got {type(whitespace).__name__}")
    if not isinstance(schema, (dict, bool)):
        raise TypeError(f"schema must be a dict (a JSON Schema object) or a bool, got "
                        f"{type(schema).__name__}; parse JSON text with json.loads first")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        raise ValueError(f"invalid JSON Schema at {_pointer('', *error.path) or '/'}: {error.message}") from None
    _check_whitespace(whitespace)
    # A top-level | would split the surrounding tokens, so an alternation is grouped.
    ws = f"(?:{whitespace})" if "|" in whitespace else whitespace
    return _Compiler(schema, ws).compile(schema, "")


def json_string_regex(min_length: int = 0, max_length: int | None = None) -> str:
    r"""A JSON string literal of min_length..max_length code points (None: no upper bound).

    >>> bool(re.fullmatch(json_string_regex(1, 3), r'"a\u00e9\n"'))  # 3 units, 3 code points
    True
    """
    for name, value in (("min_length", min_length), ("max_length", max_length)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    if max_length is not None and min_length > max_length:
        raise ValueError(f"min_length {min_length} > max_length {max_length}: no string fits")
    return '"' + repeat_regex(STRING_UNIT, min_length, max_length) + '"'


class _Compiler:
    """Walks one schema document; `pointer` is where each subschema sits, for the errors."""

    def __init__(self, root: dict | bool, ws: str):
        self.root, self.ws = root, ws
        self.validator = Draft202012Validator(root)
        self.resolving: list[str] = []  # the $ref chain being inlined, to catch recursion

    def compile(self, schema: dict | bool, pointer: str) -> str:
        if schema is True or schema == {}:
            raise UnsupportedSchema("type", pointer, "say what type the value has (it accepts anything)")
        if schema is False:
            raise UnsatisfiableSchema(pointer, "the schema false accepts no value")
        for keyword in schema:
            if keyword not in ANNOTATIONS and keyword not in {"type", "enum", "const", "anyOf", "$ref"} \
                    and not any(keyword in used for used in TYPE_KEYWORDS.values()):
                raise UnsupportedSchema(keyword, pointer, HINTS.get(keyword, GENERIC_HINT))
        if "$id" in schema and pointer:
            raise UnsupportedSchema("$id", pointer, "a nested $id changes what $ref points to; remove it")
        if "enum" in schema or "const" in schema:
            return self._values(schema, pointer)
        for keyword in ("anyOf", "$ref"):
            if keyword in schema:
                extra = sorted(set(schema) - ANNOTATIONS - {keyword})
                if extra:
                    raise UnsupportedSchema(extra[0], pointer, f"it sits beside {keyword}; move it into the "
                                            f"{'branches' if keyword == 'anyOf' else 'referenced schema'}")
        if "anyOf" in schema:
            # check_schema has already rejected an empty anyOf.
            return _alternation([self.compile(branch, _pointer(pointer, "anyOf", i))
                                 for i, branch in enumerate(schema["anyOf"])])
        if "$ref" in schema:
            return self._ref(schema["$ref"], pointer)
        if "type" not in schema:
            raise UnsupportedSchema("type", pointer, "say what type the value has")
        types = [schema["type"]] if isinstance(schema["type"], str) else schema["type"]
        for keyword in schema:
            if keyword not in ANNOTATIONS | {"type"} and not any(keyword in TYPE_KEYWORDS[t] for t in types):
                raise UnsupportedSchema(keyword, pointer, f"it applies to no type in type={schema['type']!r}; "
                                        "fix the type or remove it")
        return _alternation([LITERAL_TYPES.get(t) or getattr(self, "_" + t)(schema, pointer) for t in types])

    def _values(self, schema: dict, pointer: str) -> str:
        values = schema["enum"] if "enum" in schema else [schema["const"]]
        if not values:
            raise UnsatisfiableSchema(pointer, "enum is empty")
        # The same validator as the tests' oracle, so siblings (type, maxLength, ...) are exact.
        check = self.validator.evolve(schema=schema)
        spellings = []
        for value in values:
            if check.is_valid(value):
                literal = _escape(json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False))
                if literal not in spellings:
                    spellings.append(literal)
        if not spellings:
            raise UnsatisfiableSchema(pointer, f"no {'enum' if 'enum' in schema else 'const'} value "
                                      "satisfies the other keywords beside it (type, ...)")
        return _alternation(spellings)

    def _ref(self, ref: str, pointer: str) -> str:
        match = re.fullmatch(r"#/(\$defs|definitions)/([^/]+)", ref)
        if not match:
            raise UnsupportedSchema("$ref", pointer, f"{ref!r} is not local; only #/$defs/Name and "
                                    "#/definitions/Name are supported")
        section, name = match[1], unquote(match[2]).replace("~1", "/").replace("~0", "~")
        target = self.root.get(section, {}).get(name) if isinstance(self.root, dict) else None
        if target is None:
            raise ValueError(f"$ref {ref!r} at {pointer or '/'} points to nothing; define {name!r} "
                             f"under {section}")
        if ref in self.resolving:
            chain = " -> ".join(self.resolving + [ref])
            raise UnsupportedSchema("$ref", pointer, f"recursive schemas have no finite regex ({chain}); "
                                    "unroll the recursion to a fixed depth")
        self.resolving.append(ref)
        try:
            return self.compile(target, _pointer("", section, name))
        finally:
            self.resolving.pop()

    def _string(self, schema: dict, pointer: str) -> str:
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        if high is not None and low > high:
            raise UnsatisfiableSchema(pointer, f"minLength {low} > maxLength {high}")
        if "pattern" not in schema:
            return json_string_regex(low, high)
        if "minLength" in schema or "maxLength" in schema:
            raise UnsupportedSchema("pattern", pointer, "it sits beside minLength/maxLength; put the "
                                    "length into the pattern, e.g. ^[a-z]{2,8}$")
        return '"(?:' + _pattern_body(schema["pattern"], pointer) + ')"'

    def _integer(self, schema: dict, pointer: str) -> str:
        if "multipleOf" in schema:
            raise UnsupportedSchema("multipleOf", pointer, HINTS["multipleOf"])
        lows = [math.ceil(schema["minimum"])] if "minimum" in schema else []
        lows += [math.floor(schema["exclusiveMinimum"]) + 1] if "exclusiveMinimum" in schema else []
        highs = [math.floor(schema["maximum"])] if "maximum" in schema else []
        highs += [math.ceil(schema["exclusiveMaximum"]) - 1] if "exclusiveMaximum" in schema else []
        low, high = max(lows, default=None), min(highs, default=None)
        if low is not None and high is not None and low > high:
            bounds = ", ".join(f"{k}={schema[k]}" for k in sorted(NUMERIC_BOUNDS) if k in schema)
            raise UnsatisfiableSchema(pointer, f"no integer satisfies {bounds}")
        return integer_range_regex(low, high)

    def _number(self, schema: dict, pointer: str) -> str:
        bounds = sorted(NUMERIC_BOUNDS & set(schema))
        if bounds:
            raise UnsupportedSchema(bounds[0], pointer, "bounds on a number are not supported; use type "
                                    "integer with bounds, or check the range server-side")
        return NUMBER

    def _array(self, schema: dict, pointer: str) -> str:
        if schema.get("uniqueItems"):
            raise UnsupportedSchema("uniqueItems", pointer, HINTS["uniqueItems"])
        if "items" not in schema:
            raise UnsupportedSchema("items", pointer, "give items: a schema for every element")
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        if high is not None and low > high:
            raise UnsatisfiableSchema(pointer, f"minItems {low} > maxItems {high}")
        ws = self.ws
        empty = rf"\[{ws}\]"
        if high == 0:
            return empty
        item = self.compile(schema["items"], _pointer(pointer, "items"))
        more = repeat_regex(f"(?:{ws},{ws}{item})", max(low - 1, 0), None if high is None else high - 1)
        if low == 0:
            return rf"\[{ws}(?:{item}{more}{ws})?\]"
        return rf"\[{ws}{item}{more}{ws}\]"

    def _object(self, schema: dict, pointer: str) -> str:
        extra = schema.get("additionalProperties", False)
        if extra is not False:
            raise UnsupportedSchema("additionalProperties", pointer, "list every property under "
                                    "properties and set additionalProperties to false (or leave it out)")
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        for name in required:
            if name not in properties:
                raise UnsatisfiableSchema(pointer, f"required property {name!r} is not in properties, "
                                          "and objects are closed (only listed properties are emitted)")
        ws = self.ws
        members = [(_escape(json.dumps(name, ensure_ascii=False)) + f"{ws}:{ws}"
                    + self.compile(sub, _pointer(pointer, "properties", name)), name in required)
                   for name, sub in properties.items()]
        if not members:
            return rf"\{{{ws}\}}"

        def after(start: int) -> str:  # members from `start` on, once one has been written
            return "".join(f"{ws},{ws}{m}" if needed else f"(?:{ws},{ws}{m})?" for m, needed in members[start:])

        # The first member written is some optional one before the first required one, or the
        # first required one itself; each choice is one alternative (they start differently).
        firsts = []
        for i, (member, needed) in enumerate(members):
            firsts.append(member + after(i + 1))
            if needed:
                break
        body = _alternation(firsts)
        if any(needed for _, needed in members):
            return rf"\{{{ws}{body}{ws}\}}"
        return rf"\{{{ws}(?:{body}{ws})?\}}"


def _pattern_body(pattern: str, pointer: str) -> str:
    """The body of an anchored ``^...$`` pattern, if it can only produce raw string characters."""
    trailing_backslashes = len(pattern[:-1]) - len(pattern[:-1].rstrip("\\"))
    if len(pattern) < 2 or not (pattern.startswith("^") and pattern.endswith("$")) \
            or trailing_backslashes % 2:
        raise UnsupportedSchema("pattern", pointer, f"{pattern!r} is unanchored (JSON Schema patterns "
                                "search anywhere in the string); write it as ^...$ to match all of it")
    body = pattern[1:-1]
    try:
        dfa = compile_regex(body)
    except UnsupportedPattern as error:
        raise UnsupportedSchema("pattern", pointer, f"its body is outside the course regex subset: "
                                f"{error}") from None
    except ValueError as error:  # the engine's "matches no string"
        raise UnsatisfiableSchema(pointer, str(error)) from None
    for state in range(dfa.n_states):  # every state of a course DFA can still reach acceptance
        for lo, hi, _ in dfa.transitions(state):
            for bad_lo, bad_hi in FORBIDDEN_IN_STRING:
                if bad_lo <= hi and lo <= bad_hi:
                    raise UnsupportedSchema("pattern", pointer, f"its body can produce "
                                            f"{chr(max(lo, bad_lo))!r}, which a JSON string cannot hold raw; "
                                            r'exclude " \ and control characters, e.g. [^"\\\x00-\x1f]')
    return body


def _check_whitespace(whitespace: str) -> None:
    """The whitespace regex must be in the course subset and produce only JSON whitespace."""
    dfa = compile_regex(whitespace)
    for state in range(dfa.n_states):
        for lo, hi, _ in dfa.transitions(state):
            # An interval of more than four code points cannot fit in {\t, \n, \r, space}.
            bad = [chr(c) for c in range(lo, min(hi, lo + 4) + 1) if chr(c) not in " \t\n\r"]
            if bad:
                raise ValueError(f"whitespace {whitespace!r} can produce {bad[0]!r}; JSON whitespace is "
                                 r"only space, \t, \n and \r, e.g. [ ]? or [ \n]{0,2}")


def _alternation(regexes: list[str]) -> str:
    return regexes[0] if len(regexes) == 1 else "(?:" + "|".join(regexes) + ")"


def _escape(text: str) -> str:
    """A regex matching exactly `text`, using only the course subset's escapes."""
    def one(char: str) -> str:
        code = ord(char)
        if char in "\\.[](){}|?*+^$":
            return "\\" + char
        if code < 0x20 or 0x7F <= code <= 0x9F:
            return CONTROL_ESCAPES.get(char, f"\\x{code:02x}")
        return f"\\u{code:04x}" if 0xD800 <= code <= 0xDFFF else char

    return "".join(map(one, text))


def _pointer(base: str, *tokens: object) -> str:
    """Append JSON-pointer tokens (``~`` -> ``~0``, ``/`` -> ``~1``)."""
    return base + "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in tokens)
