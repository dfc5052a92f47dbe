"""Parse-and-retry: validate a model's reply, feed the error back, try again, and stop in time.

    >>> replies = iter(['{"amount": "7.50"}', '{"amount": 7.5}'])
    >>> outcome = parse_with_retries(lambda messages: next(replies),
    ...                              json_schema_validator({"type": "object",
    ...                                                     "properties": {"amount": {"type": "number"}}}),
    ...                              [{"role": "user", "content": "Extract the refund as JSON."}])
    >>> outcome.ok, outcome.value, len(outcome.attempts)
    (True, {'amount': 7.5}, 2)
    >>> outcome.attempts[0].error
    "schema violation at $.amount: '7.50' is not of type 'number'"
    >>> print(outcome.messages[-2]["content"])  # what the model read before its second try
    Your reply was rejected: schema violation at $.amount: '7.50' is not of type 'number'. Reply again ...

The loop is capped: ``max_retries`` retries after the first attempt, so at most
``max_retries + 1`` calls to ``propose``, whatever the model does. The error it reads is
bounded (``max_error_chars``): a validator that echoes a 10 kB input must not flood the context.
Retrying fixes syntax slips; it cannot make a wrong value right (that is what server-side
semantic validation is for), and constrained decoding removes syntax failures before they
happen.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema
import pydantic

from course_lib.validation import non_negative_int

TRUNCATION_MARKER = " ...[truncated]"
MIN_ERROR_CHARS = 32  # room for the marker and a few words of the error itself
# What a validator may raise to say "this reply is wrong"; anything else is a bug and propagates.
# (json.JSONDecodeError and pydantic.ValidationError are both ValueErrors.)
VALIDATION_ERRORS = (ValueError, jsonschema.ValidationError)


def bounded_text(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` characters, marked when it was cut.

    >>> bounded_text("x" * 50, 40)
    'xxxxxxxxxxxxxxxxxxxxxxxxx ...[truncated]'
    >>> len(bounded_text("x" * 50, 40)), bounded_text("short", 40)
    (40, 'short')
    """
    check_max_error_chars(max_chars)
    if len(text) <= max_chars:
        return text
    return text[: max_chars - len(TRUNCATION_MARKER)] + TRUNCATION_MARKER


def check_max_error_chars(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_ERROR_CHARS:
        raise ValueError(f"max_error_chars must be an int >= {MIN_ERROR_CHARS} (room for the truncation "
                         f"marker), got {type(value).__name__} {value!r}")
    return value


def describe_error(error: BaseException) -> str:
    """One line a model (or a person) can act on, for each kind of validation error.

    >>> describe_error(json.JSONDecodeError("Expecting value", '{"a": }', 6))
    'not valid JSON: Expecting value: line 1 column 7 (char 6)'
    """
    if isinstance(error, json.JSONDecodeError):
        return f"not valid JSON: {error}"
    if isinstance(error, jsonschema.ValidationError):
        return f"schema violation at {error.json_path}: {error.message}"
    if isinstance(error, pydantic.ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in error.errors())
    return str(error) or type(error).__name__


def json_schema_validator(schema: Mapping[str, Any]) -> Callable[[str], Any]:
    """A ``validate(text)`` that parses JSON and checks it against ``schema`` (Draft 2020-12).

    It returns the parsed value or raises json.JSONDecodeError / jsonschema.ValidationError
    (the most relevant error, as jsonschema's ``best_match`` picks it).

    >>> validate = json_schema_validator({"type": "integer"})
    >>> validate("42")
    42
    >>> json_schema_validator({"type": "integr"})
    Traceback (most recent call last):
    ...
    ValueError: schema is not a valid JSON Schema (Draft 2020-12): ...
    """
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as error:
        raise ValueError(f"schema is not a valid JSON Schema (Draft 2020-12): {error.message} "
                         f"at {error.json_path}; fix the schema before validating replies with it") from None
    validator = jsonschema.Draft202012Validator(schema)

    def validate(text: str) -> Any:
        value = json.loads(text)
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is not None:
            raise error
        return value

    return validate


@dataclass(frozen=True)
class Attempt:
    text: str            # what propose() returned
    error: str | None    # the bounded error fed back, or None when the reply validated


@dataclass(frozen=True)
class RetryOutcome:
    value: Any                       # validate()'s return on success, None otherwise
    attempts: tuple[Attempt, ...]    # every try, in order: at most max_retries + 1
    ok: bool                         # the last attempt validated
    messages: list[dict[str, str]]   # the conversation as the model last saw it, plus its last reply


def feedback_message(error: str) -> dict[str, str]:
    """The user turn that carries a rejected reply's error back to the model."""
    return {"role": "user",
            "content": f"Your reply was rejected: {error}. Reply again with only the corrected output."}


def parse_with_retries(propose: Callable[[list[dict[str, str]]], str], validate: Callable[[str], Any],
                       messages: Sequence[Mapping[str, str]], *, max_retries: int = 2,
                       max_error_chars: int = 300) -> RetryOutcome:
    """Call ``propose(messages)`` until ``validate`` accepts the reply or the retries run out.

    On a rejected reply the model's text goes in as an assistant turn and the error as a user
    turn (``feedback_message``), so the next try sees what it wrote and why it failed. The
    caller's ``messages`` are never modified.
    """
    if not callable(propose) or not callable(validate):
        raise TypeError("propose and validate must be callables: propose(messages) -> str, "
                        "validate(text) -> value (raising ValueError on a bad reply)")
    non_negative_int("max_retries", max_retries)
    check_max_error_chars(max_error_chars)
    conversation = [dict(m) for m in messages]
    attempts: list[Attempt] = []
    for _ in range(max_retries + 1):  # a for loop, not a while: the cap holds whatever the model does
        text = propose([dict(m) for m in conversation])
        if not isinstance(text, str):
            raise TypeError(f"propose must return the reply as a str, got {type(text).__name__}")
        conversation.append({"role": "assistant", "content": text})
        try:
            value = validate(text)
        except VALIDATION_ERRORS as error:
            message = bounded_text(describe_error(error), max_error_chars)
            attempts.append(Attempt(text, message))
            if len(attempts) <= max_retries:
                conversation.append(feedback_message(message))
            continue
        attempts.append(Attempt(text, None))
        return RetryOutcome(value, tuple(attempts), True, conversation)
    return RetryOutcome(None, tuple(attempts), False, conversation)
