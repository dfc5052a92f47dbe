"""The dispatcher: allow-list, schema, permission, idempotency -- in that order -- then the call."""
from __future__ import annotations

import json

import jsonschema
import pytest

from course_lib.tools import ERROR_KINDS, Dispatcher, IdempotencyEntry, ToolCall, ToolRegistry, ToolResult

from .conftest import ECHO_SCHEMA, echo_tool


class Counter:
    """A side-effecting function that records every time it really runs."""

    def __init__(self):
        self.runs: list[str] = []

    def __call__(self, text):
        self.runs.append(text)
        return {"echo": text, "run": len(self.runs)}


def _call(arguments, name="echo", call_id="call_1"):
    return ToolCall(call_id, name, arguments)


def test_a_valid_call_runs_and_returns_json():
    result = Dispatcher(ToolRegistry([echo_tool()])).dispatch(_call({"text": "hi"}))
    assert result == ToolResult("call_1", "echo", True, '{"echo": "hi"}', None)
    assert json.loads(result.content) == {"echo": "hi"}


def test_arguments_may_arrive_as_the_openai_json_string():
    result = Dispatcher(ToolRegistry([echo_tool()])).dispatch(_call('{"text": "hi"}'))
    assert result.ok and result.content == '{"echo": "hi"}'


def test_result_messages_for_both_wire_formats():
    result = ToolResult("call_9", "echo", True, '{"echo": "hi"}', None)
    assert result.as_message() == {"role": "tool", "content": '{"echo": "hi"}'}
    assert result.as_openai_message() == {"role": "tool", "tool_call_id": "call_9", "content": '{"echo": "hi"}'}


# ---------------------------------------------------------------- each check, and its message
def test_unknown_tool_is_refused_and_the_known_tools_are_named():
    result = Dispatcher(ToolRegistry([echo_tool()])).dispatch(_call({}, name="delete_account"))
    assert (result.ok, result.error_kind) == (False, "unknown_tool")
    assert result.content == "error (unknown_tool): there is no tool 'delete_account'; the tools are: echo"


@pytest.mark.parametrize("arguments, message", [
    ('{"text": ',
     "echo's arguments are not valid JSON (Expecting value: line 1 column 10 (char 9)); send one JSON object"),
    ('["hi"]', "echo's arguments must be a JSON object, got list"),
    ({}, "echo's arguments at $: 'text' is a required property"),
    ({"text": 5}, "echo's arguments at $.text: 5 is not of type 'string'"),
    ({"text": "x" * 21}, "echo's arguments at $.text: 'xxxxxxxxxxxxxxxxxxxxx' is too long"),
    ({"text": "hi", "admin": True},
     "echo's arguments at $: Additional properties are not allowed ('admin' was unexpected)"),
])
def test_invalid_arguments_report_the_path_and_the_schema_message(arguments, message):
    fn = Counter()
    result = Dispatcher(ToolRegistry([echo_tool(fn=fn)])).dispatch(_call(arguments))
    assert (result.ok, result.error_kind) == (False, "invalid_arguments")
    assert result.content == f"error (invalid_arguments): {message}"
    assert fn.runs == []  # never ran


def test_schema_verdicts_agree_with_jsonschema():
    dispatcher = Dispatcher(ToolRegistry([echo_tool()]))
    for arguments in ({"text": "a"}, {"text": ""}, {"text": None}, {"text": "a", "b": 1}, {}, {"text": "x" * 20}):
        expected = jsonschema.Draft202012Validator(ECHO_SCHEMA).is_valid(arguments)
        assert dispatcher.dispatch(_call(arguments)).ok is expected, arguments


def test_permission_is_required_when_the_tool_names_one():
    fn = Counter()
    dispatcher = Dispatcher(ToolRegistry([echo_tool(fn=fn, permission="echo:write")]))
    denied = dispatcher.dispatch(_call({"text": "hi"}), permissions={"echo:read"})
    assert (denied.ok, denied.error_kind) == (False, "permission_denied")
    assert denied.content == ("error (permission_denied): echo needs the permission 'echo:write', "
                              "which this caller does not hold")
    assert fn.runs == []
    assert dispatcher.dispatch(_call({"text": "hi"}), permissions=frozenset({"echo:write"})).ok


def test_checks_run_in_order_allow_list_then_schema_then_permission_then_key():
    dispatcher = Dispatcher(ToolRegistry([echo_tool(permission="p", side_effects=True)]))
    assert dispatcher.dispatch(_call({"text": 5}, name="nope")).error_kind == "unknown_tool"
    assert dispatcher.dispatch(_call({"text": 5})).error_kind == "invalid_arguments"  # before permission
    assert dispatcher.dispatch(_call({"text": "hi"})).error_kind == "permission_denied"  # before the key
    assert dispatcher.dispatch(_call({"text": "hi"}), permissions={"p"}).error_kind == "missing_idempotency_key"


def test_permissions_must_be_a_collection_of_strings():
    dispatcher = Dispatcher(ToolRegistry([echo_tool()]))
    for bad in ("echo:write", None, {1}):
        with pytest.raises(TypeError, match=r"permissions must be a collection of str such as frozenset"):
            dispatcher.dispatch(_call({"text": "hi"}), permissions=bad)


# ---------------------------------------------------------------- idempotency
def test_a_side_effecting_tool_needs_an_idempotency_key():
    fn = Counter()
    result = Dispatcher(ToolRegistry([echo_tool(fn=fn, side_effects=True)])).dispatch(_call({"text": "hi"}))
    assert (result.ok, result.error_kind) == (False, "missing_idempotency_key")
    assert "echo changes state, so every call needs an idempotency key" in result.content
    assert fn.runs == []


def test_a_repeated_key_returns_the_first_result_without_running_again():
    fn = Counter()
    dispatcher = Dispatcher(ToolRegistry([echo_tool(fn=fn, side_effects=True)]))
    first = dispatcher.dispatch(_call({"text": "hi"}), idempotency_key="k1")
    again = dispatcher.dispatch(_call({"text": "hi"}, call_id="call_2"), idempotency_key="k1")
    assert fn.runs == ["hi"]
    assert again.content == first.content == '{"echo": "hi", "run": 1}'
    assert again.replayed and not first.replayed
    assert again.call_id == "call_2"  # it answers the call that asked
    other = dispatcher.dispatch(_call({"text": "hi"}), idempotency_key="k2")  # a new key is a new request
    assert json.loads(other.content)["run"] == 2


def test_key_order_in_the_arguments_does_not_make_a_different_request():
    registry = ToolRegistry([echo_tool(side_effects=True)])
    dispatcher = Dispatcher(registry)
    dispatcher.dispatch(_call({"text": "hi"}), idempotency_key="k")
    assert dispatcher.dispatch(_call('{"text":"hi"}'), idempotency_key="k").replayed


def test_a_reused_key_with_different_arguments_is_a_conflict():
    fn = Counter()
    dispatcher = Dispatcher(ToolRegistry([echo_tool(fn=fn, side_effects=True)]))
    dispatcher.dispatch(_call({"text": "hi"}), idempotency_key="k1")
    conflict = dispatcher.dispatch(_call({"text": "bye"}), idempotency_key="k1")
    assert (conflict.ok, conflict.error_kind) == (False, "idempotency_conflict")
    assert conflict.content.startswith("error (idempotency_conflict): idempotency key 'k1' was first used for ")
    assert conflict.content.endswith("a different request needs a new key")
    assert fn.runs == ["hi"]


def test_a_failed_run_is_also_the_keys_outcome():
    runs = []

    def flaky(text):
        runs.append(text)
        raise TimeoutError("no answer in 2 s")

    dispatcher = Dispatcher(ToolRegistry([echo_tool(fn=flaky, side_effects=True)]))
    first = dispatcher.dispatch(_call({"text": "hi"}), idempotency_key="k")
    again = dispatcher.dispatch(_call({"text": "hi"}), idempotency_key="k")
    assert first.error_kind == again.error_kind == "tool_error" and again.replayed
    assert runs == ["hi"]  # we cannot know how much of a failed side effect happened: never twice


def test_refused_calls_do_not_use_up_the_key():
    dispatcher = Dispatcher(ToolRegistry([echo_tool(side_effects=True, permission="p")]))
    assert dispatcher.dispatch(_call({"text": "hi"}), idempotency_key="k").error_kind == "permission_denied"
    assert dispatcher.dispatch(_call({"text": "hi"}), permissions={"p"}, idempotency_key="k").ok
    assert list(dispatcher.idempotency_store) == [(None, "k")]


def test_a_shared_store_holds_keys_across_dispatchers():
    fn, store = Counter(), {}
    registry = ToolRegistry([echo_tool(fn=fn, side_effects=True)])
    Dispatcher(registry, idempotency_store=store).dispatch(_call({"text": "hi"}), idempotency_key="k")
    assert Dispatcher(registry, idempotency_store=store).dispatch(_call({"text": "hi"}), idempotency_key="k").replayed
    assert fn.runs == ["hi"] and isinstance(store[(None, "k")], IdempotencyEntry)


def test_keys_are_scoped_per_caller():
    fn, store = Counter(), {}
    registry = ToolRegistry([echo_tool(fn=fn, side_effects=True)])
    alice = Dispatcher(registry, idempotency_store=store).dispatch(_call({"text": "hi"}), idempotency_key="k",
                                                                   caller="alice")
    # Bob sends Alice's key (guessed, leaked or a collision): he starts his own request, never reads hers.
    bob = Dispatcher(registry, idempotency_store=store).dispatch(_call({"text": "hi"}), idempotency_key="k",
                                                                 caller="bob")
    assert not bob.replayed and json.loads(bob.content)["run"] == 2 and json.loads(alice.content)["run"] == 1
    assert Dispatcher(registry, idempotency_store=store).dispatch(_call({"text": "hi"}), idempotency_key="k",
                                                                  caller="alice").replayed
    assert sorted(store) == [("alice", "k"), ("bob", "k")] and fn.runs == ["hi", "hi"]
    # Other arguments under Bob's own key are Bob's conflict; Alice's entry is not consulted.
    assert Dispatcher(registry, idempotency_store=store).dispatch(
        _call({"text": "bye"}), idempotency_key="k", caller="bob").error_kind == "idempotency_conflict"


@pytest.mark.parametrize("caller", ["", 7])
def test_caller_must_be_a_non_empty_string(caller):
    with pytest.raises(TypeError, match="caller must be a non-empty str or None"):
        Dispatcher(ToolRegistry([echo_tool()])).dispatch(_call({"text": "hi"}), caller=caller)


def test_tools_without_side_effects_ignore_the_key():
    fn = Counter()
    dispatcher = Dispatcher(ToolRegistry([echo_tool(fn=fn)]))
    dispatcher.dispatch(_call({"text": "hi"}), idempotency_key="k")
    dispatcher.dispatch(_call({"text": "hi"}), idempotency_key="k")
    assert fn.runs == ["hi", "hi"] and dispatcher.idempotency_store == {}


@pytest.mark.parametrize("key", ["", 5])
def test_idempotency_key_must_be_a_non_empty_string(key):
    with pytest.raises(TypeError, match="idempotency_key must be a non-empty str or None"):
        Dispatcher(ToolRegistry([echo_tool()])).dispatch(_call({"text": "hi"}), idempotency_key=key)


# ---------------------------------------------------------------- the tool's own failures
def test_an_exception_in_the_tool_becomes_an_error_result():
    def broken(text):
        raise ZeroDivisionError("division by zero")

    result = Dispatcher(ToolRegistry([echo_tool(fn=broken)])).dispatch(_call({"text": "hi"}))
    assert (result.ok, result.error_kind) == (False, "tool_error")
    assert result.content == "error (tool_error): echo failed: ZeroDivisionError: division by zero"


def test_a_result_json_cannot_encode_is_a_tool_error():
    for value in ({1, 2}, float("nan")):
        result = Dispatcher(ToolRegistry([echo_tool(fn=lambda text, v=value: v)])).dispatch(_call({"text": "hi"}))
        assert result.error_kind == "tool_error"
        assert "returned a value JSON cannot encode" in result.content


def test_long_errors_are_bounded_with_a_marker():
    def chatty(text):
        raise ValueError("x" * 5000)

    result = Dispatcher(ToolRegistry([echo_tool(fn=chatty)]), max_error_chars=100).dispatch(_call({"text": "hi"}))
    assert len(result.content) == 100 and result.content.endswith(" ...[truncated]")
    assert len(Dispatcher(ToolRegistry([echo_tool(fn=chatty)])).dispatch(_call({"text": "hi"})).content) == 300


def test_every_error_kind_is_one_of_the_documented_six():
    assert ERROR_KINDS == ("unknown_tool", "invalid_arguments", "permission_denied", "missing_idempotency_key",
                           "idempotency_conflict", "tool_error")


# ---------------------------------------------------------------- the caller's own mistakes raise
def test_constructor_arguments_are_checked():
    with pytest.raises(TypeError, match="registry must be a ToolRegistry, got list"):
        Dispatcher([echo_tool()])
    with pytest.raises(ValueError, match=r"max_error_chars must be an int >= 32 \(room for the truncation marker\)"):
        Dispatcher(ToolRegistry(), max_error_chars=10)


def test_dispatch_takes_a_parsed_call():
    with pytest.raises(TypeError, match="dispatch takes a ToolCall, got str; parse the model's text"):
        Dispatcher(ToolRegistry()).dispatch('{"name": "echo"}')
