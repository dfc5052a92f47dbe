"""Tool calls on the wire: tinychat's one-call turns and OpenAI's Chat Completions format.

tinychat (the course model's template) writes a call as an assistant turn and reads the result
as a ``tool`` turn with no id; the pairing is by position:

    {"role": "assistant", "content": '<|tool_call|>{"name": "get_time", "arguments": {"city": "Oslo"}}'}
    {"role": "tool", "content": '{"city": "Oslo", "time": "09:30"}'}

OpenAI gives each call an id, sends ``arguments`` as a JSON *string*, and answers by id:

    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_...", "type": "function",
        "function": {"name": "get_time", "arguments": "{\\"city\\": \\"Oslo\\"}"}}]}
    {"role": "tool", "tool_call_id": "call_...", "content": '{"city": "Oslo", "time": "09:30"}'}

    >>> call = parse_tinychat_tool_call('<|tool_call|>{"name": "get_time", "arguments": {"city": "Oslo"}}')
    >>> call.name, call.arguments, call.id.startswith("call_")
    ('get_time', {'city': 'Oslo'}, True)
    >>> openai_tool_call(call)["function"]["arguments"]
    '{"city": "Oslo"}'

An OpenAI assistant message with several ``tool_calls`` becomes several tinychat turns, each
followed by its own result (``from_openai_messages``), because tinychat holds one call per turn.
Ids are deterministic (a hash of the call and its position), so a conversion is repeatable.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from course_lib.tokenization.chat_template import TOOL_CALL

PLAIN_ROLES = ("system", "user")


@dataclass(frozen=True)
class ToolCall:
    id: str                                   # "call_..." pairs the call with its result
    name: str                                 # which tool the model asked for (not yet checked)
    arguments: dict[str, Any] | str = field(hash=False)  # a dict, or OpenAI's raw JSON string;
                                              # the dispatcher parses and validates either

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not isinstance(self.name, str):
            raise TypeError(f"ToolCall id and name must be str, got {self.id!r} and {self.name!r}")
        if not isinstance(self.arguments, (dict, str)):
            raise TypeError(f"ToolCall arguments must be a dict or a JSON string, got {type(self.arguments).__name__}")


def call_fingerprint(name: str, arguments: Mapping[str, Any]) -> str:
    """Canonical JSON of a call: equal for the same name and arguments, whatever the key order.

    >>> call_fingerprint("f", {"b": 1, "a": 2}) == call_fingerprint("f", {"a": 2, "b": 1})
    True
    """
    return json.dumps({"name": name, "arguments": arguments}, sort_keys=True, separators=(",", ":"))


def call_id(name: str, arguments: Mapping[str, Any], index: int = 0) -> str:
    """A deterministic OpenAI-style id; ``index`` (the call's position) keeps repeats apart."""
    digest = hashlib.sha256(f"{index}:{call_fingerprint(name, arguments)}".encode()).hexdigest()
    return f"call_{digest[:24]}"


def _loads(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{what} is not valid JSON ({error}); write it as one JSON object") from None
    except RecursionError:
        raise ValueError(f"{what} nests too deeply to parse") from None


def parse_tinychat_tool_call(text: str, *, index: int = 0) -> ToolCall:
    """The JSON after ``<|tool_call|>`` -> ToolCall (the marker itself is optional).

    Checks the shape only: a JSON object with a str ``name`` and an object ``arguments``.
    Whether the tool exists and the arguments fit its schema is the dispatcher's job.

    >>> parse_tinychat_tool_call('{"name": "get_time", "arguments": ["Oslo"]}')
    Traceback (most recent call last):
    ...
    ValueError: the tool call's "arguments" must be a JSON object such as {"city": "Paris"}, got list
    """
    if not isinstance(text, str):
        raise TypeError(f"a tool call is text, got {type(text).__name__}")
    body = text.strip()
    if body.startswith(TOOL_CALL):
        body = body[len(TOOL_CALL):].strip()
    payload = _loads(body, "the tool call")
    if not isinstance(payload, dict):
        raise ValueError(f'a tool call must be a JSON object {{"name": ..., "arguments": {{...}}}}, '
                         f"got {type(payload).__name__}")
    unexpected = sorted(set(payload) - {"name", "arguments"})
    if unexpected:
        raise ValueError(f"a tool call has only \"name\" and \"arguments\"; unexpected key(s): {', '.join(unexpected)}")
    if not isinstance(payload.get("name"), str) or not payload["name"]:
        raise ValueError(f"the tool call needs a \"name\" (a non-empty string), got {payload.get('name')!r}")
    if "arguments" not in payload:
        raise ValueError('the tool call needs "arguments" (a JSON object; {} when the tool takes none)')
    if not isinstance(payload["arguments"], dict):
        raise ValueError('the tool call\'s "arguments" must be a JSON object such as {"city": "Paris"}, '
                         f"got {type(payload['arguments']).__name__}")
    name, arguments = payload["name"], payload["arguments"]
    return ToolCall(call_id(name, arguments, index), name, arguments)


def tinychat_tool_call(call: ToolCall) -> str:
    """The assistant turn's content for ``call``, exactly as the course corpus writes it."""
    return TOOL_CALL + json.dumps({"name": call.name, "arguments": _arguments_dict(call, "the call")})


def openai_tool_call(call: ToolCall) -> dict[str, Any]:
    """One entry of an assistant message's ``tool_calls``; arguments become a JSON string."""
    arguments = _arguments_dict(call, "the call")
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": json.dumps(arguments)}}


def _arguments_dict(call: ToolCall, where: str) -> dict[str, Any]:
    if not isinstance(call, ToolCall):
        raise TypeError(f"expected a ToolCall, got {type(call).__name__}")
    if isinstance(call.arguments, dict):
        return call.arguments
    arguments = _loads(call.arguments, f"{where}'s arguments")
    if not isinstance(arguments, dict):
        raise ValueError(f"{where}'s arguments must be a JSON object, got {type(arguments).__name__}")
    return arguments


def _check_message(i: int, message: object) -> str:
    if not isinstance(message, Mapping) or "role" not in message:
        raise ValueError(f"message {i} must be a mapping with a 'role', got {message!r}")
    return message["role"]


def _text(i: int, message: Mapping, role: str) -> str:
    content = message.get("content")
    if not isinstance(content, str):
        raise TypeError(f"message {i} ({role}): content must be a str, got {type(content).__name__}; "
                        "join a list of content parts into one string first")
    return content


def to_openai_messages(messages: Sequence[Mapping[str, str]]) -> list[dict[str, Any]]:
    """A tinychat transcript -> OpenAI Chat Completions messages.

    Each tool message answers the call just before it; a call left unanswered is allowed only
    as the last message (the model has just proposed it), since OpenAI rejects a conversation
    whose tool_calls are not all answered.
    """
    converted: list[dict[str, Any]] = []
    pending: tuple[int, ToolCall] | None = None  # the call waiting for its tool message
    for i, message in enumerate(messages):
        role = _check_message(i, message)
        content = _text(i, message, role)
        if role == "tool":
            if pending is None:
                raise ValueError(f"message {i} is a tool result, but the message before it is not a tool call; "
                                 "each tool message must directly follow the call it answers")
            converted.append({"role": "tool", "tool_call_id": pending[1].id, "content": content})
            pending = None
            continue
        if pending is not None:
            raise ValueError(f"the tool call in message {pending[0]} has no result: message {i} is {role!r}, "
                             "not a tool message; append the tool's result after the call")
        if role in PLAIN_ROLES:
            converted.append({"role": role, "content": content})
        elif role == "assistant" and content.lstrip().startswith(TOOL_CALL):
            call = parse_tinychat_tool_call(content, index=i)
            converted.append({"role": "assistant", "content": None, "tool_calls": [openai_tool_call(call)]})
            pending = (i, call)
        elif role == "assistant":
            converted.append({"role": "assistant", "content": content})
        else:
            raise ValueError(f"message {i} has unknown role {role!r}; tinychat's roles are "
                             "system, user, assistant and tool")
    return converted


def _openai_call(i: int, entry: object) -> tuple[str, ToolCall]:
    """One ``tool_calls`` entry -> (its id, the call with parsed arguments)."""
    if not isinstance(entry, Mapping) or entry.get("type", "function") != "function" \
            or not isinstance(entry.get("function"), Mapping):
        raise ValueError(f"message {i}: each tool_calls entry must be "
                         '{"id": ..., "type": "function", "function": {"name": ..., "arguments": "..."}}, '
                         f"got {entry!r}")
    function = entry["function"]
    if not isinstance(entry.get("id"), str) or not isinstance(function.get("name"), str):
        raise ValueError(f"message {i}: a tool call needs a str id and a str function name, got {entry!r}")
    raw = function.get("arguments")
    if not isinstance(raw, str):
        raise TypeError(f"message {i}: arguments must be a JSON string (json.dumps the dict), "
                        f"got {type(raw).__name__}")
    arguments = _loads(raw, f"message {i}'s tool call arguments")
    if not isinstance(arguments, dict):
        raise ValueError(f"message {i}: tool call arguments must encode a JSON object, got {type(arguments).__name__}")
    return entry["id"], ToolCall(entry["id"], function["name"], arguments)


def from_openai_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """OpenAI Chat Completions messages -> a tinychat transcript.

    An assistant message with n tool calls becomes n call turns, each followed by the tool
    message whose ``tool_call_id`` matches it (in the order of the calls). ``developer`` (the
    newer name for system) becomes ``system``. An assistant message may carry text or calls,
    not both, because a tinychat turn is one or the other.
    """
    converted: list[dict[str, str]] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        role = _check_message(i, message)
        if role in (*PLAIN_ROLES, "developer"):
            converted.append({"role": "system" if role == "developer" else role, "content": _text(i, message, role)})
        elif role == "assistant" and message.get("tool_calls"):
            if message.get("content"):
                raise ValueError(f"message {i} has both content and tool_calls; a tinychat turn is either text "
                                 "or one call, so send the text as its own assistant message")
            entries = [_openai_call(i, entry) for entry in message["tool_calls"]]
            calls = dict(entries)
            if len(calls) != len(entries):
                raise ValueError(f"message {i}: two tool calls share an id; every call needs its own id")
            results: dict[str, str] = {}
            j = i + 1
            while j < len(messages) and _check_message(j, messages[j]) == "tool":
                answered = messages[j].get("tool_call_id")
                if answered not in calls:
                    raise ValueError(f"message {j}: tool_call_id {answered!r} matches no call in message {i} "
                                     f"(its calls: {', '.join(calls)})")
                if answered in results:
                    raise ValueError(f"message {j}: call {answered!r} already has a result; answer each call once")
                results[answered] = _text(j, messages[j], "tool")
                j += 1
            unanswered = [cid for cid in calls if cid not in results]
            if unanswered and (results or j < len(messages) or len(calls) > 1):
                raise ValueError(f"message {i}: tool call(s) {', '.join(unanswered)} have no tool message; "
                                 "answer every call before the conversation goes on")
            for cid, call in calls.items():
                converted.append({"role": "assistant", "content": tinychat_tool_call(call)})
                if cid in results:
                    converted.append({"role": "tool", "content": results[cid]})
            i = j
            continue
        elif role == "assistant":
            converted.append({"role": "assistant", "content": _text(i, message, role)})
        elif role == "tool":
            raise ValueError(f"message {i}: tool_call_id {message.get('tool_call_id')!r} matches no call; "
                             "a tool message must follow the assistant message whose tool_calls it answers")
        else:
            raise ValueError(f"message {i} has unknown role {role!r}; expected system, developer, user, "
                             "assistant or tool")
        i += 1
    return converted
