"""Shared helpers for the tool tests: a small registry (the shipped model, ``tinychat``, is tests/conftest.py's)."""
from __future__ import annotations

import pytest

from course_lib.tools import Tool, ToolRegistry

ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string", "maxLength": 20}},
               "required": ["text"], "additionalProperties": False}


def echo_tool(**overrides) -> Tool:
    settings = {"permission": None, "side_effects": False, **overrides}
    fn = settings.pop("fn", lambda text: {"echo": text})
    name = settings.pop("name", "echo")
    return Tool(name, "Repeat the text.", ECHO_SCHEMA, fn, **settings)


@pytest.fixture
def echo_registry():
    return ToolRegistry([echo_tool()])
