"""The wire formats: tinychat's one-call turns <-> OpenAI Chat Completions messages."""
from __future__ import annotations

import json

import pytest

from course_lib.data.corpus import generate_corpus
from course_lib.tokenization.chat_template import TOOL_CALL
from course_lib.tools import (ToolCall, call_fingerprint, from_openai_messages, openai_tool_call,
                              parse_tinychat_tool_call, tinychat_registry, tinychat_tool_call, to_openai_messages)

WEATHER = TOOL_CALL + '{"name": "get_weather", "arguments": {"city": "Paris"}}'
TIME = TOOL_CALL + '{"name": "get_time", "arguments": {"city": "Oslo"}}'
TRANSCRIPT = [
    {"role": "system", "content": "You are TinyChat."},
    {"role": "user", "content": "What's the weather in Paris?"},
    {"role": "assistant", "content": WEATHER},
    {"role": "tool", "content": '{"city": "Paris", "temperature_c": 18, "condition": "sunny"}'},
    {"role": "assistant", "content": "It is 18 degrees and sunny in Paris."},
]


def _openai_call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# ---------------------------------------------------------------- parsing the model's call
def test_parse_reads_name_and_arguments_with_or_without_the_marker():
    with_marker, bare = parse_tinychat_tool_call(WEATHER), parse_tinychat_tool_call(WEATHER[len(TOOL_CALL):])
    assert (with_marker.name, with_marker.arguments) == ("get_weather", {"city": "Paris"})
    assert with_marker == bare


def test_parse_gives_a_deterministic_openai_style_id():
    call = parse_tinychat_tool_call(WEATHER)
    assert call.id == parse_tinychat_tool_call(WEATHER).id
    assert call.id.startswith("call_") and len(call.id) == 5 + 24
    # Position keeps two identical calls in one conversation apart.
    assert parse_tinychat_tool_call(WEATHER, index=2).id != parse_tinychat_tool_call(WEATHER, index=4).id


def test_parse_every_call_in_the_training_corpus():
    for convo in generate_corpus(40, seed=3, tasks=("tool",)):
        call = parse_tinychat_tool_call(convo.reply)
        assert {"name": call.name, "arguments": call.arguments} == convo.expected
        assert tinychat_tool_call(call) == convo.reply  # and writes it back byte for byte


@pytest.mark.parametrize("text, message", [
    (TOOL_CALL + '{"name": "get_weather", "arguments": {"city": "Paris"}', "the tool call is not valid JSON"),
    (TOOL_CALL, "the tool call is not valid JSON"),
    (TOOL_CALL + '["get_weather"]', r'a tool call must be a JSON object \{"name": \.\.\., "arguments"'),
    (TOOL_CALL + '{"arguments": {}}', r'the tool call needs a "name" \(a non-empty string\), got None'),
    (TOOL_CALL + '{"name": 7, "arguments": {}}', r'needs a "name" \(a non-empty string\), got 7'),
    (TOOL_CALL + '{"name": "get_time"}', r'the tool call needs "arguments" \(a JSON object; \{\} when'),
    (TOOL_CALL + '{"name": "get_time", "arguments": "{\\"city\\": \\"Oslo\\"}"}',
     r'"arguments" must be a JSON object such as \{"city": "Paris"\}, got str'),
    (TOOL_CALL + '{"name": "get_time", "arguments": {}, "user": "admin"}', r"unexpected key\(s\): user"),
    (TOOL_CALL + "[" * 100_000, "nests too deeply|not valid JSON"),
])
def test_parse_errors_say_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        parse_tinychat_tool_call(text)


def test_parse_takes_text_only():
    with pytest.raises(TypeError, match="a tool call is text, got bytes"):
        parse_tinychat_tool_call(WEATHER.encode())


def test_tool_call_record_checks_its_field_types():
    with pytest.raises(TypeError, match="ToolCall arguments must be a dict or a JSON string, got list"):
        ToolCall("call_1", "f", [1])
    with pytest.raises(TypeError, match="ToolCall id and name must be str"):
        ToolCall(1, "f", {})


def test_call_fingerprint_ignores_key_order_only():
    assert call_fingerprint("f", {"a": 1, "b": 2}) == call_fingerprint("f", {"b": 2, "a": 1})
    assert call_fingerprint("f", {"a": 1}) != call_fingerprint("g", {"a": 1})
    assert call_fingerprint("f", {"a": 1}) != call_fingerprint("f", {"a": 2})


# ---------------------------------------------------------------- one call on the OpenAI wire
def test_openai_tool_call_sends_arguments_as_a_json_string():
    entry = openai_tool_call(ToolCall("call_1", "get_time", {"city": "Oslo"}))
    assert entry == _openai_call("call_1", "get_time", '{"city": "Oslo"}')
    assert isinstance(entry["function"]["arguments"], str)


def test_openai_tool_call_accepts_a_call_whose_arguments_are_already_a_string():
    entry = openai_tool_call(ToolCall("call_1", "get_time", '{"city":"Oslo"}'))
    assert json.loads(entry["function"]["arguments"]) == {"city": "Oslo"}


def test_openai_tool_call_rejects_string_arguments_that_are_not_an_object():
    with pytest.raises(ValueError, match="the call's arguments must be a JSON object, got list"):
        openai_tool_call(ToolCall("call_1", "f", "[1]"))


# ---------------------------------------------------------------- whole transcripts
def test_to_openai_pairs_each_tool_message_with_the_call_before_it():
    converted = to_openai_messages(TRANSCRIPT)
    assert [m["role"] for m in converted] == ["system", "user", "assistant", "tool", "assistant"]
    call_message, tool_message = converted[2], converted[3]
    assert call_message["content"] is None
    (entry,) = call_message["tool_calls"]
    assert entry["type"] == "function" and entry["function"]["name"] == "get_weather"
    assert json.loads(entry["function"]["arguments"]) == {"city": "Paris"}
    assert tool_message == {"role": "tool", "tool_call_id": entry["id"], "content": TRANSCRIPT[3]["content"]}
    assert converted[4] == {"role": "assistant", "content": "It is 18 degrees and sunny in Paris."}


def test_round_trip_tinychat_openai_tinychat_is_exact():
    assert from_openai_messages(to_openai_messages(TRANSCRIPT)) == TRANSCRIPT
    for convo in generate_corpus(20, seed=11, tasks=("tool",)):
        assert from_openai_messages(to_openai_messages(convo.messages)) == list(convo.messages)


def test_conversion_is_deterministic():
    assert to_openai_messages(TRANSCRIPT) == to_openai_messages([dict(m) for m in TRANSCRIPT])


def test_a_call_left_unanswered_is_allowed_as_the_last_message():
    converted = to_openai_messages(TRANSCRIPT[:3])
    assert converted[-1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert from_openai_messages(converted) == TRANSCRIPT[:3]


def test_to_openai_rejects_a_call_with_no_result_mid_conversation():
    broken = TRANSCRIPT[:3] + [{"role": "user", "content": "and?"}]
    with pytest.raises(ValueError, match="the tool call in message 2 has no result: message 3 is 'user'"):
        to_openai_messages(broken)


def test_to_openai_rejects_a_tool_message_without_a_call():
    with pytest.raises(ValueError, match="message 1 is a tool result, but the message before it is not a tool call"):
        to_openai_messages([{"role": "user", "content": "hi"}, {"role": "tool", "content": "{}"}])


def test_to_openai_rejects_unknown_roles_and_bad_messages():
    with pytest.raises(ValueError, match="message 0 has unknown role 'robot'; tinychat's roles are"):
        to_openai_messages([{"role": "robot", "content": "beep"}])
    with pytest.raises(ValueError, match="message 0 must be a mapping with a 'role'"):
        to_openai_messages([{"content": "no role"}])
    with pytest.raises(TypeError, match=r"message 0 \(user\): content must be a str, got list"):
        to_openai_messages([{"role": "user", "content": ["parts"]}])


def test_to_openai_rejects_a_malformed_call_turn():
    with pytest.raises(ValueError, match="not valid JSON"):
        to_openai_messages([{"role": "assistant", "content": TOOL_CALL + "{oops"}])


def test_from_openai_splits_parallel_calls_into_one_turn_each_with_its_result():
    openai_messages = [
        {"role": "user", "content": "Weather in Paris and time in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            _openai_call("call_a", "get_weather", '{"city": "Paris"}'),
            _openai_call("call_b", "get_time", '{"city": "Oslo"}')]},
        # Results may arrive in any order; each is matched by id.
        {"role": "tool", "tool_call_id": "call_b", "content": '{"time": "09:30"}'},
        {"role": "tool", "tool_call_id": "call_a", "content": '{"temperature_c": 18}'},
        {"role": "assistant", "content": "18 degrees; 09:30."},
    ]
    assert from_openai_messages(openai_messages) == [
        {"role": "user", "content": "Weather in Paris and time in Oslo?"},
        {"role": "assistant", "content": WEATHER},
        {"role": "tool", "content": '{"temperature_c": 18}'},
        {"role": "assistant", "content": TIME},
        {"role": "tool", "content": '{"time": "09:30"}'},
        {"role": "assistant", "content": "18 degrees; 09:30."},
    ]


def test_from_openai_maps_developer_to_system():
    assert from_openai_messages([{"role": "developer", "content": "Be brief."}]) == [
        {"role": "system", "content": "Be brief."}]


def test_from_openai_rejects_arguments_given_as_a_dict():
    message = {"role": "assistant", "content": None,
               "tool_calls": [_openai_call("call_a", "get_time", {"city": "Oslo"})]}
    with pytest.raises(TypeError, match=r"arguments must be a JSON string \(json.dumps the dict\), got dict"):
        from_openai_messages([message])


@pytest.mark.parametrize("arguments, message", [
    ('["Oslo"]', "tool call arguments must encode a JSON object, got list"),
    ('{"city": ', "message 0's tool call arguments is not valid JSON"),
])
def test_from_openai_rejects_arguments_that_are_not_an_object(arguments, message):
    call = {"role": "assistant", "content": None, "tool_calls": [_openai_call("call_a", "get_time", arguments)]}
    with pytest.raises(ValueError, match=message):
        from_openai_messages([call])


def test_from_openai_rejects_a_tool_message_whose_id_matches_no_call():
    messages = [{"role": "assistant", "content": None,
                 "tool_calls": [_openai_call("call_a", "get_time", '{"city": "Oslo"}')]},
                {"role": "tool", "tool_call_id": "call_zzz", "content": "{}"}]
    with pytest.raises(ValueError, match=r"message 1: tool_call_id 'call_zzz' matches no call in message 0 "
                                         r"\(its calls: call_a\)"):
        from_openai_messages(messages)


def test_from_openai_rejects_a_tool_message_with_no_call_before_it():
    with pytest.raises(ValueError, match="message 1: tool_call_id 'call_a' matches no call"):
        from_openai_messages([{"role": "user", "content": "hi"},
                              {"role": "tool", "tool_call_id": "call_a", "content": "{}"}])


def test_from_openai_rejects_unanswered_calls_before_the_conversation_goes_on():
    messages = [{"role": "assistant", "content": None,
                 "tool_calls": [_openai_call("call_a", "get_time", '{"city": "Oslo"}')]},
                {"role": "user", "content": "well?"}]
    with pytest.raises(ValueError, match=r"message 0: tool call\(s\) call_a have no tool message"):
        from_openai_messages(messages)


def test_from_openai_rejects_several_unanswered_calls_at_the_end():
    messages = [{"role": "assistant", "content": None, "tool_calls": [
        _openai_call("call_a", "get_time", '{"city": "Oslo"}'),
        _openai_call("call_b", "get_time", '{"city": "Lima"}')]}]
    with pytest.raises(ValueError, match=r"call_a, call_b have no tool message"):
        from_openai_messages(messages)


def test_from_openai_rejects_duplicate_ids_and_duplicate_answers():
    twice = [_openai_call("call_a", "get_time", '{"city": "Oslo"}')] * 2
    with pytest.raises(ValueError, match="two tool calls share an id"):
        from_openai_messages([{"role": "assistant", "content": None, "tool_calls": twice}])
    messages = [{"role": "assistant", "content": None, "tool_calls": twice[:1]},
                {"role": "tool", "tool_call_id": "call_a", "content": "1"},
                {"role": "tool", "tool_call_id": "call_a", "content": "2"}]
    with pytest.raises(ValueError, match="call 'call_a' already has a result"):
        from_openai_messages(messages)


def test_from_openai_rejects_text_and_calls_in_one_message():
    message = {"role": "assistant", "content": "Let me check.",
               "tool_calls": [_openai_call("call_a", "get_time", '{"city": "Oslo"}')]}
    with pytest.raises(ValueError, match="message 0 has both content and tool_calls"):
        from_openai_messages([message])


def test_from_openai_rejects_malformed_tool_call_entries_and_unknown_roles():
    with pytest.raises(ValueError, match='each tool_calls entry must be {"id": ..., "type": "function"'):
        from_openai_messages([{"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {}}]}])
    with pytest.raises(ValueError, match="needs a str id and a str function name"):
        from_openai_messages([{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]}])
    with pytest.raises(ValueError, match="message 0 has unknown role 'function'"):
        from_openai_messages([{"role": "function", "content": "{}"}])


def test_openai_client_types_accept_the_messages_and_tools():
    """Oracle: the official client's own types (skipped where the openai package is absent)."""
    pytest.importorskip("openai")
    from openai.types.chat import ChatCompletionMessage, ChatCompletionToolParam
    from pydantic import TypeAdapter

    TypeAdapter(list[ChatCompletionToolParam]).validate_python(tinychat_registry().openai_tools())
    converted = to_openai_messages(TRANSCRIPT)
    message = ChatCompletionMessage.model_validate(converted[2])
    assert message.tool_calls[0].function.arguments == '{"city": "Paris"}'
    with pytest.raises(ValueError):  # the mistake from_openai_messages names: a dict, not a string
        ChatCompletionMessage.model_validate({"role": "assistant", "content": None, "tool_calls": [
            _openai_call("c", "get_time", {"city": "Oslo"})]})
