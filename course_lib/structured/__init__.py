"""Structured output: regex -> DFA, JSON Schema -> regex, token masks, constrained generation.

    >>> from course_lib.structured import RegexGuide, TokenVocabulary
    >>> guide = RegexGuide("(?:yes|no)", TokenVocabulary.from_token_bytes([b"y", b"es", b"n", b"o"], eos_id=4))
    >>> guide.allowed_tokens(guide.initial_state)
    [0, 2]

The pieces, in the order a request meets them: ``schema_to_regex`` (a JSON Schema subset to
a regex, exact), ``compile_regex`` (the regex to a minimal DFA, and ``to_bytes()`` to the
same language over UTF-8 bytes), ``RegexGuide`` / ``JSONGuide`` (per DFA state, the tokens
that keep the output a live prefix), ``generate_structured`` (the mask as one more logits
processor), and ``parse_with_retries`` (the fallback when no mask is available: validate,
feed the error back, retry a capped number of times).
"""
from course_lib.structured.dfa import DFA, ByteDFA, compile_regex
from course_lib.structured.errors import UnsatisfiableSchema, UnsupportedPattern, UnsupportedSchema
from course_lib.structured.generate import (StructuredResult, build_guide, generate_structured,
                                            generate_structured_many)
from course_lib.structured.guide import JSONGuide, RegexGuide, token_masks
from course_lib.structured.retry import RetryOutcome, json_schema_validator, parse_with_retries
from course_lib.structured.schema import integer_range_regex, json_string_regex, schema_to_regex
from course_lib.structured.vocabulary import TokenVocabulary

__all__ = [
    "DFA", "ByteDFA", "JSONGuide", "RegexGuide", "RetryOutcome", "StructuredResult", "TokenVocabulary",
    "UnsatisfiableSchema", "UnsupportedPattern", "UnsupportedSchema", "build_guide", "compile_regex",
    "generate_structured", "generate_structured_many", "integer_range_regex", "json_schema_validator",
    "json_string_regex", "parse_with_retries", "schema_to_regex", "token_masks",
]
