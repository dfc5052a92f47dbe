"""Tool: what the model is told a function does, and the function that code runs for it.

    >>> weather = Tool("get_weather", "Current weather in a city.",
    ...                {"type": "object", "properties": {"city": {"type": "string"}},
    ...                 "required": ["city"], "additionalProperties": False},
    ...                lambda city: {"city": city, "temperature_c": 18})
    >>> weather.openai_spec()["function"]["name"]
    'get_weather'
    >>> Tool("get weather", "spaces are not allowed", {"type": "object"}, print)
    Traceback (most recent call last):
    ...
    ValueError: tool name 'get weather' must match ^[a-zA-Z0-9_-]{1,64}$ (letters, digits, _ and -), as OpenAI requires

The model sees only ``openai_spec()`` (name, description, JSON Schema). ``fn``, the permission
and ``side_effects`` stay on the server side: the dispatcher reads them to decide whether a
proposed call runs at all.
"""
from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema

# OpenAI's rule for function names (Chat Completions `tools[].function.name`).
NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def check_parameters_schema(name: str, parameters: object) -> dict[str, Any]:
    """A deep copy of ``parameters`` if it is a valid Draft 2020-12 schema of type object."""
    if not isinstance(parameters, Mapping):
        raise TypeError(f"tool {name!r}: parameters must be a JSON Schema dict, got {type(parameters).__name__}")
    try:
        jsonschema.Draft202012Validator.check_schema(parameters)
    except jsonschema.SchemaError as error:
        raise ValueError(f"tool {name!r}: parameters is not a valid JSON Schema: {error.message} "
                         f"at {error.json_path}") from None
    if parameters.get("type") != "object":
        # Arguments arrive as keyword arguments, so the top level must be an object.
        raise ValueError(f"tool {name!r}: parameters must be a schema with \"type\": \"object\" "
                         f"(the arguments are a JSON object), got type {parameters.get('type')!r}")
    return copy.deepcopy(dict(parameters))  # the caller's later edits must not change the tool


@dataclass(frozen=True)
class Tool:
    name: str                        # what the model writes in a call; OpenAI's name rule
    description: str                 # what the model reads to decide when to call it
    parameters: dict[str, Any] = field(hash=False)  # JSON Schema (type object) of the arguments
    fn: Callable[..., Any] = field(repr=False)     # called as fn(**arguments); returns JSON-able data
    permission: str | None = field(default=None, kw_only=True)  # the caller must hold it; None = anyone
    side_effects: bool = field(default=False, kw_only=True)     # True: every call needs an idempotency key

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_PATTERN.match(self.name):
            raise ValueError(f"tool name {self.name!r} must match {NAME_PATTERN.pattern} "
                             "(letters, digits, _ and -), as OpenAI requires")
        if not isinstance(self.description, str):
            raise TypeError(f"tool {self.name!r}: description must be a str, got {type(self.description).__name__}")
        object.__setattr__(self, "parameters", check_parameters_schema(self.name, self.parameters))
        if not callable(self.fn):
            raise TypeError(f"tool {self.name!r}: fn must be callable (it runs as fn(**arguments)), "
                            f"got {type(self.fn).__name__}")
        if self.permission is not None and (not isinstance(self.permission, str) or not self.permission):
            raise ValueError(f"tool {self.name!r}: permission must be a non-empty str such as 'refunds:write', "
                             f"or None for a tool anyone may call; got {self.permission!r}")
        if not isinstance(self.side_effects, bool):
            raise TypeError(f"tool {self.name!r}: side_effects must be True or False, got {self.side_effects!r}")

    def openai_spec(self) -> dict[str, Any]:
        """The entry for this tool in a Chat Completions request's ``tools=[...]``."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description,
                             "parameters": copy.deepcopy(self.parameters)}}
