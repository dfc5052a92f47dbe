"""Dispatcher: the code that disposes. A proposed call runs only after four checks, in order.

1. allow-list: the name is a registered tool                       -> "unknown_tool"
2. arguments: JSON (a dict or a string) that fits the tool's schema -> "invalid_arguments"
3. permission: the caller holds the tool's permission               -> "permission_denied"
4. idempotency: a side-effecting tool needs a key; a repeated key   -> "missing_idempotency_key"
   returns the first outcome, a reused key with other arguments     -> "idempotency_conflict"
   Keys belong to their caller: the store holds (caller, key), so one caller that sends another's
   key starts its own request instead of reading the other's stored result.

Then ``fn(**arguments)`` runs; an exception it raises becomes a result ("tool_error"), never a
crash, because the error goes back to the model as a tool message it can react to.

    >>> from course_lib.tools.tool import Tool
    >>> from course_lib.tools.registry import ToolRegistry
    >>> from course_lib.tools.wire import ToolCall
    >>> square = Tool("square", "x squared.", {"type": "object", "properties": {"x": {"type": "number"}},
    ...                                       "required": ["x"]}, lambda x: x * x)
    >>> dispatcher = Dispatcher(ToolRegistry([square]))
    >>> dispatcher.dispatch(ToolCall("call_1", "square", '{"x": 3}')).content
    '9'
    >>> bad = dispatcher.dispatch(ToolCall("call_2", "square", {"x": "3"}))
    >>> bad.ok, bad.error_kind, bad.content
    (False, 'invalid_arguments', "error (invalid_arguments): square's arguments at $.x: '3' is not of type 'number'")

Errors in the *proposal* are results; errors in the *caller's code* (a permissions argument
that is a bare string, a key that is not a string) raise, because no model can fix those.
"""
from __future__ import annotations

import json
from collections.abc import Collection, MutableMapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import jsonschema

from course_lib.structured.retry import bounded_text, check_max_error_chars
from course_lib.tools.registry import ToolRegistry
from course_lib.tools.wire import ToolCall, call_fingerprint

ERROR_KINDS = ("unknown_tool", "invalid_arguments", "permission_denied", "missing_idempotency_key",
               "idempotency_conflict", "tool_error")


@dataclass(frozen=True)
class ToolResult:
    call_id: str             # the call this answers (OpenAI's tool_call_id)
    name: str                # the tool the call named
    ok: bool
    content: str             # JSON of the tool's return value, or a bounded error text
    error_kind: str | None   # one of ERROR_KINDS when not ok
    replayed: bool = False   # True: an idempotency key's stored outcome, the function did not run again

    def as_message(self) -> dict[str, str]:
        """The tinychat tool turn (paired with its call by position)."""
        return {"role": "tool", "content": self.content}

    def as_openai_message(self) -> dict[str, str]:
        return {"role": "tool", "tool_call_id": self.call_id, "content": self.content}


class IdempotencyEntry(NamedTuple):
    request: str         # call_fingerprint of the first call made with the key
    result: ToolResult   # its outcome, returned again for every repeat


def check_permissions(permissions: object) -> frozenset[str]:
    if isinstance(permissions, str) or not isinstance(permissions, Collection) \
            or not all(isinstance(p, str) for p in permissions):
        # A bare "refunds:write" would be read as the set of its characters.
        raise TypeError(f"permissions must be a collection of str such as frozenset({{'refunds:write'}}), "
                        f"got {permissions!r}")
    return frozenset(permissions)


class Dispatcher:
    def __init__(self, registry: ToolRegistry, *,
                 idempotency_store: MutableMapping[tuple[str | None, str], IdempotencyEntry] | None = None,
                 max_error_chars: int = 300):
        if not isinstance(registry, ToolRegistry):
            raise TypeError(f"registry must be a ToolRegistry, got {type(registry).__name__}")
        self.registry = registry
        # Shared stores (a database table) make keys hold across dispatchers; entries are keyed
        # by (caller, key), so sharing a store never lets one caller replay another's outcome.
        self.idempotency_store = {} if idempotency_store is None else idempotency_store
        self.max_error_chars = check_max_error_chars(max_error_chars)

    def _error(self, call: ToolCall, kind: str, message: str) -> ToolResult:
        content = bounded_text(f"error ({kind}): {message}", self.max_error_chars)
        return ToolResult(call.id, call.name, False, content, kind)

    def _arguments(self, call: ToolCall) -> tuple[dict[str, Any] | None, str | None]:
        """(arguments, None) if they parse and fit the schema, else (None, what is wrong)."""
        arguments = call.arguments
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except (json.JSONDecodeError, RecursionError) as error:
                return None, f"{call.name}'s arguments are not valid JSON ({error}); send one JSON object"
        if not isinstance(arguments, dict):
            return None, f"{call.name}'s arguments must be a JSON object, got {type(arguments).__name__}"
        schema = self.registry.get(call.name).parameters
        error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(arguments))
        if error is not None:
            return None, f"{call.name}'s arguments at {error.json_path}: {error.message}"
        return arguments, None

    def dispatch(self, call: ToolCall, *, permissions: Collection[str] = frozenset(),
                 idempotency_key: str | None = None, caller: str | None = None) -> ToolResult:
        """Check ``call`` and run it if every check passes; always returns a ToolResult.

        ``caller`` names who sent the call (a user or session id; None for a single-user
        dispatcher): idempotency keys are looked up and stored per caller, never globally."""
        if not isinstance(call, ToolCall):
            raise TypeError(f"dispatch takes a ToolCall, got {type(call).__name__}; "
                            "parse the model's text with parse_tinychat_tool_call first")
        held = check_permissions(permissions)
        if idempotency_key is not None and (not isinstance(idempotency_key, str) or not idempotency_key):
            raise TypeError(f"idempotency_key must be a non-empty str or None, got {idempotency_key!r}")
        if caller is not None and (not isinstance(caller, str) or not caller):
            raise TypeError(f"caller must be a non-empty str or None, got {caller!r}")

        if call.name not in self.registry:
            known = ", ".join(self.registry.names) or "(none)"
            return self._error(call, "unknown_tool", f"there is no tool {call.name!r}; the tools are: {known}")
        tool = self.registry.get(call.name)
        arguments, problem = self._arguments(call)
        if problem is not None:
            return self._error(call, "invalid_arguments", problem)
        if tool.permission is not None and tool.permission not in held:
            return self._error(call, "permission_denied",
                               f"{tool.name} needs the permission {tool.permission!r}, which this caller does not hold")
        request = call_fingerprint(tool.name, arguments)
        if tool.side_effects:
            if idempotency_key is None:
                return self._error(call, "missing_idempotency_key",
                                   f"{tool.name} changes state, so every call needs an idempotency key "
                                   "(pass idempotency_key=...; reuse it when retrying the same request)")
            scoped = (caller, idempotency_key)  # a key answers only the caller that first sent it
            stored = self.idempotency_store.get(scoped)
            if stored is not None:
                if stored.request != request:
                    return self._error(call, "idempotency_conflict",
                                       f"idempotency key {idempotency_key!r} was first used for {stored.request}; "
                                       "a different request needs a new key")
                return replace(stored.result, call_id=call.id, replayed=True)

        result = self._run(call, tool.fn, arguments)
        if tool.side_effects:
            # Stored whether it succeeded or failed: once fn has started we cannot know how much
            # of its side effect happened, so a retry must not run it again (payment APIs agree).
            self.idempotency_store[scoped] = IdempotencyEntry(request, result)
        return result

    def _run(self, call: ToolCall, fn, arguments: dict[str, Any]) -> ToolResult:
        try:
            value = fn(**arguments)
        except Exception as error:  # noqa: BLE001 -- any failure becomes a message the model can read
            return self._error(call, "tool_error", f"{call.name} failed: {type(error).__name__}: {error}")
        try:
            content = json.dumps(value, allow_nan=False)  # NaN is not JSON; the model could not read it back
        except (TypeError, ValueError) as error:
            return self._error(call, "tool_error", f"{call.name} returned a value JSON cannot encode ({error}); "
                                                   "the tool must return plain data (dict, list, str, number)")
        return ToolResult(call.id, call.name, True, content, None)
