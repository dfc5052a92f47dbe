"""ToolRegistry: the allow-list. A call naming anything else is never run.

    >>> from course_lib.tools.tool import Tool
    >>> clock = Tool("get_time", "Local time in a city.", {"type": "object"}, lambda **_: "12:00")
    >>> registry = ToolRegistry([clock])
    >>> registry.names, "get_time" in registry, "delete_account" in registry
    (('get_time',), True, False)
    >>> registry.get("delete_account")
    Traceback (most recent call last):
    ...
    course_lib.tools.registry.UnknownToolError: unknown tool 'delete_account'; the registered tools are: get_time
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from course_lib.tools.tool import Tool


class UnknownToolError(KeyError):
    """A name that is not in the registry. A KeyError whose message is printed as written."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown tool"


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()):
        self._tools: dict[str, Tool] = {}  # insertion order = the order the model is shown the tools
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> Tool:
        """Add ``tool``; a second tool with the same name is an error, never a silent replacement."""
        if not isinstance(tool, Tool):
            raise TypeError(f"register takes a Tool, got {type(tool).__name__}; wrap the function in "
                            "Tool(name, description, parameters, fn)")
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered; "
                             "give the new one another name or build a new registry")
        self._tools[tool.name] = tool
        return tool

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except (KeyError, TypeError):  # TypeError: an unhashable "name" from a confused caller
            known = ", ".join(self._tools) or "(none)"
            raise UnknownToolError(f"unknown tool {name!r}; the registered tools are: {known}") from None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def openai_tools(self) -> list[dict[str, Any]]:
        """The ``tools=[...]`` list of a Chat Completions request, one entry per tool."""
        return [tool.openai_spec() for tool in self._tools.values()]
