"""How ``course eval`` scores a reply, task by task: pure functions of (reply, expected).

    >>> score_extraction('{"order_id": "K4821", "amount": 7.50, "reason": "late"}',
    ...                  {"order_id": "K4821", "amount": 7.5, "reason": "late"})
    True
    >>> score_tool_call('<|tool_call|>{"name": "get_time", "arguments": {"city": "Oslo"}}',
    ...                 {"name": "get_time", "arguments": {"city": "Lima"}})
    False

``SCORERS`` maps each task of the corpus (``course_lib.data.corpus.TASKS``) to its scorer; the
grounded task's is ``course_lib.data.grounded.score_grounded``.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable

from course_lib.data.corpus import ABSTAIN
from course_lib.data.grounded import score_grounded
from course_lib.tokenization.chat_template import TOOL_CALL

__all__ = ["SCORERS", "score_abstention", "score_arithmetic", "score_extraction", "score_fact", "score_grounded",
           "score_tool_call"]


def score_arithmetic(reply: str, expected: dict) -> bool:
    """Exactly one of the accepted surface forms, ignoring surrounding whitespace.

    >>> score_arithmetic("four", {"value": 4, "accepted": ["4", "four", "The answer is 4."]})
    True
    >>> score_arithmetic("The answer is 5.", {"value": 4, "accepted": ["4", "The answer is 4."]})
    False
    """
    return reply.strip() in expected["accepted"]


def _same_value(got, want) -> bool:
    """JSON values equal, numbers compared as numbers (7.5 == 7.50) but never bool for int."""
    if isinstance(got, bool) or isinstance(want, bool):
        return type(got) is type(want) and got == want
    if isinstance(want, (int, float)):
        return isinstance(got, (int, float)) and got == want
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(_same_value(got[k], want[k]) for k in want)
    return type(got) is type(want) and got == want


def _parse_json(text: str):
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None


def score_extraction(reply: str, expected: dict) -> bool:
    """The reply is a JSON object with exactly the expected fields, each right."""
    return _same_value(_parse_json(reply.strip()), expected)


def score_tool_call(reply: str, expected: dict) -> bool:
    """``<|tool_call|>`` + {"name": ..., "arguments": {...}} with the expected name and arguments."""
    reply = reply.strip()
    if not reply.startswith(TOOL_CALL):
        return False
    call = _parse_json(reply[len(TOOL_CALL):])
    return _same_value(call, {"name": expected["name"], "arguments": expected["arguments"]})


def score_abstention(reply: str, expected: dict | None = None) -> bool:
    """The reply declines: it starts with "I don't know".

    >>> score_abstention("I don't know."), score_abstention("The capital of Velmora is Lima.")
    (True, False)
    """
    return reply.strip().startswith(ABSTAIN.rstrip("."))


def score_fact(reply: str, expected: dict) -> bool:
    """The known answer appears as a whole word, and the reply does not abstain.

    >>> score_fact("The capital of France is Paris.", {"value": "Paris"}), score_fact("Parisian.", {"value": "Paris"})
    (True, False)
    """
    value = re.escape(expected["value"])
    return not score_abstention(reply) and re.search(rf"(?<!\w){value}(?!\w)", reply) is not None


SCORERS: dict[str, Callable[[str, dict], bool]] = {
    "arithmetic": score_arithmetic, "extraction": score_extraction, "tool": score_tool_call,
    "unknown": score_abstention, "fact": score_fact, "grounded": score_grounded,
}
