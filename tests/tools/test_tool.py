"""Tool and ToolRegistry: the record the model is shown, and the allow-list."""
from __future__ import annotations

import jsonschema
import pytest

from course_lib.tools import Tool, ToolRegistry, UnknownToolError

from .conftest import ECHO_SCHEMA, echo_tool


def test_openai_spec_is_the_chat_completions_tools_entry():
    spec = echo_tool().openai_spec()
    assert spec == {"type": "function",
                    "function": {"name": "echo", "description": "Repeat the text.", "parameters": ECHO_SCHEMA}}


def test_openai_spec_and_the_tool_are_copies_not_views():
    schema = {"type": "object", "properties": {"x": {"type": "number"}}}
    tool = Tool("t", "d", schema, lambda x: x)
    schema["properties"]["x"]["type"] = "string"          # the caller edits its dict afterwards
    tool.openai_spec()["function"]["parameters"]["type"] = "array"
    assert tool.parameters == {"type": "object", "properties": {"x": {"type": "number"}}}


def test_tool_is_frozen_and_defaults_to_anyone_without_side_effects():
    tool = echo_tool()
    assert tool.permission is None and tool.side_effects is False
    with pytest.raises(AttributeError):
        tool.name = "other"


@pytest.mark.parametrize("name", ["get_weather", "a", "x" * 64, "A-b_9"])
def test_names_allowed_by_openai(name):
    assert echo_tool(name=name).name == name


@pytest.mark.parametrize("name", ["", "x" * 65, "get weather", "get.weather", "météo", "a/b"])
def test_names_outside_openais_rule_are_rejected(name):
    with pytest.raises(ValueError, match=r"must match \^\[a-zA-Z0-9_-\]\{1,64\}\$"):
        echo_tool(name=name)


def test_name_must_be_a_string():
    with pytest.raises(ValueError, match="must match"):
        echo_tool(name=5)


def test_parameters_must_be_a_valid_json_schema():
    with pytest.raises(ValueError, match=r"tool 't': parameters is not a valid JSON Schema: .*'integr'"):
        Tool("t", "d", {"type": "object", "properties": {"x": {"type": "integr"}}}, print)


def test_parameters_must_be_an_object_schema():
    with pytest.raises(ValueError, match=r'must be a schema with "type": "object" .* got type \'array\''):
        Tool("t", "d", {"type": "array"}, print)
    with pytest.raises(ValueError, match="got type None"):
        Tool("t", "d", {}, print)


def test_parameters_must_be_a_dict():
    with pytest.raises(TypeError, match="parameters must be a JSON Schema dict, got str"):
        Tool("t", "d", '{"type": "object"}', print)


def test_the_schema_is_checked_by_jsonschema_itself():
    # The oracle: whatever Tool accepts, jsonschema's own meta-schema check accepts too.
    jsonschema.Draft202012Validator.check_schema(echo_tool().parameters)


def test_fn_must_be_callable():
    with pytest.raises(TypeError, match=r"fn must be callable \(it runs as fn\(\*\*arguments\)\), got str"):
        Tool("t", "d", {"type": "object"}, "print")


def test_description_must_be_text():
    with pytest.raises(TypeError, match="description must be a str, got NoneType"):
        Tool("t", None, {"type": "object"}, print)


@pytest.mark.parametrize("permission", ["", 3])
def test_permission_must_be_a_non_empty_string_or_none(permission):
    with pytest.raises(ValueError, match="permission must be a non-empty str such as 'refunds:write'"):
        echo_tool(permission=permission)


def test_side_effects_must_be_a_bool():
    with pytest.raises(TypeError, match="side_effects must be True or False, got 'yes'"):
        echo_tool(side_effects="yes")


def test_permission_and_side_effects_are_keyword_only():
    with pytest.raises(TypeError):
        Tool("t", "d", {"type": "object"}, print, "refunds:write")


# ---------------------------------------------------------------- registry
def test_registry_lists_names_in_registration_order_and_answers_membership():
    registry = ToolRegistry([echo_tool(name="b"), echo_tool(name="a")])
    assert registry.names == ("b", "a")
    assert "a" in registry and "c" not in registry and 5 not in registry
    assert len(registry) == 2 and [t.name for t in registry] == ["b", "a"]


def test_registry_get_returns_the_tool():
    tool = echo_tool()
    assert ToolRegistry([tool]).get("echo") is tool


def test_registry_get_unknown_names_the_known_tools():
    registry = ToolRegistry([echo_tool(name="b"), echo_tool(name="a")])
    with pytest.raises(UnknownToolError) as caught:
        registry.get("delete_account")
    assert str(caught.value) == "unknown tool 'delete_account'; the registered tools are: b, a"
    assert isinstance(caught.value, KeyError)


def test_registry_get_unknown_on_an_empty_registry():
    with pytest.raises(KeyError, match=r"registered tools are: \(none\)"):
        ToolRegistry().get("x")


def test_registry_rejects_a_duplicate_name():
    registry = ToolRegistry([echo_tool()])
    with pytest.raises(ValueError, match="a tool named 'echo' is already registered"):
        registry.register(echo_tool())
    assert len(registry) == 1


def test_registry_register_takes_only_tools():
    with pytest.raises(TypeError, match="register takes a Tool, got function"):
        ToolRegistry().register(lambda: None)


def test_openai_tools_is_the_tools_list_of_a_request():
    registry = ToolRegistry([echo_tool(name="b"), echo_tool(name="a")])
    tools = registry.openai_tools()
    assert [t["function"]["name"] for t in tools] == ["b", "a"]
    assert all(t["type"] == "function" and set(t["function"]) == {"name", "description", "parameters"}
               for t in tools)
