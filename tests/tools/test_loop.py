"""The loop's rules, with a scripted ``propose`` in place of the model (the real model: test_loop_model.py)."""
from __future__ import annotations

import json

import pytest

from course_lib.tokenization.chat_template import TOOL_CALL
from course_lib.tools import (STOP_REASONS, Dispatcher, ToolRegistry, ToolTranscript, tinychat_registry,
                              tool_loop)

from .conftest import echo_tool

WEATHER_CALL = TOOL_CALL + '{"name": "get_weather", "arguments": {"city": "Paris"}}'
USER = [{"role": "user", "content": "What's the weather in Paris?"}]


class Script:
    """propose(messages) -> the next scripted reply; remembers what it was shown."""

    def __init__(self, *replies: str):
        self.replies = list(replies)
        self.seen: list[list[dict[str, str]]] = []

    def __call__(self, messages):
        self.seen.append(messages)
        if not self.replies:
            raise AssertionError("the loop asked the model more often than the script allows")
        return self.replies.pop(0)


def _call(name, **arguments):
    return TOOL_CALL + json.dumps({"name": name, "arguments": arguments})


def test_a_call_then_an_answer():
    script = Script(WEATHER_CALL, "It is sunny.")
    transcript = tool_loop(script, USER, tinychat_registry())
    assert isinstance(transcript, ToolTranscript)
    assert (transcript.stop_reason, transcript.answer) == ("answer", "It is sunny.")
    first, last = transcript.steps
    assert first.call.name == "get_weather" and first.result.ok and first.parse_error is None
    assert last.call is None and last.result is None and last.proposal == "It is sunny."
    assert [m["role"] for m in transcript.messages] == ["user", "assistant", "tool", "assistant"]
    # The second proposal saw the call and its result, as tinychat turns.
    assert script.seen[1][1:] == [{"role": "assistant", "content": WEATHER_CALL},
                                  {"role": "tool", "content": first.result.content}]


def test_a_plain_reply_ends_the_loop_at_once():
    transcript = tool_loop(Script("2 + 2 = 4."), [{"role": "user", "content": "What is 2 + 2?"}], tinychat_registry())
    assert (transcript.stop_reason, transcript.answer, len(transcript.steps)) == ("answer", "2 + 2 = 4.", 1)


def test_the_callers_messages_are_not_modified():
    messages = [dict(m) for m in USER]
    tool_loop(Script(WEATHER_CALL, "ok"), messages, tinychat_registry())
    assert messages == USER


def test_an_error_goes_back_as_a_tool_message_and_the_model_may_recover():
    script = Script(_call("get_wether", city="Paris"), WEATHER_CALL, "It is sunny.")
    transcript = tool_loop(script, USER, tinychat_registry())
    assert transcript.stop_reason == "answer"
    assert transcript.steps[0].result.error_kind == "unknown_tool"
    assert script.seen[1][-1] == {"role": "tool", "content": transcript.steps[0].result.content}
    assert "there is no tool 'get_wether'" in script.seen[1][-1]["content"]


def test_an_unparsable_call_is_fed_back_with_its_error():
    script = Script(TOOL_CALL + '{"name": "get_weather", "arguments": {"city": "Paris"', WEATHER_CALL, "ok")
    transcript = tool_loop(script, USER, tinychat_registry())
    step = transcript.steps[0]
    assert step.call is None and step.result is None and step.failed
    assert "the tool call is not valid JSON" in step.parse_error
    assert script.seen[1][-1]["content"].startswith("error (unparsable_call): the tool call is not valid JSON")
    assert transcript.stop_reason == "answer"


def test_failed_calls_are_capped_at_max_retries():
    failing = [_call("get_weather", city=c) for c in ("Atlantis", "Lemuria", "Mu", "Thule")]
    transcript = tool_loop(Script(*failing), USER, tinychat_registry(), max_steps=10)
    assert transcript.stop_reason == "retries_exhausted"
    assert len(transcript.steps) == 3  # the first try and 2 retries
    assert transcript.answer is None
    assert transcript.messages[-1]["role"] == "tool"  # the last error is kept in the record


@pytest.mark.parametrize("max_retries", [0, 1, 3])
def test_max_retries_counts_retries_after_the_first_failure(max_retries):
    failing = [_call("get_weather", city=f"Nowhere{i}") for i in range(10)]
    transcript = tool_loop(Script(*failing), USER, tinychat_registry(), max_steps=10, max_retries=max_retries)
    assert (transcript.stop_reason, len(transcript.steps)) == ("retries_exhausted", max_retries + 1)


def test_successful_calls_do_not_count_as_failures():
    script = Script(_call("get_weather", city="Atlantis"), WEATHER_CALL, _call("get_time", city="Oslo"),
                    _call("get_weather", city="Mu"), "done")
    transcript = tool_loop(script, USER, tinychat_registry(), max_steps=10, max_retries=1)
    assert transcript.stop_reason == "retries_exhausted" and len(transcript.steps) == 4


def test_the_same_failing_call_twice_is_a_loop():
    atlantis = _call("get_weather", city="Atlantis")
    transcript = tool_loop(Script(atlantis, atlantis, "never reached"), USER, tinychat_registry(), max_retries=5)
    assert transcript.stop_reason == "loop_detected" and len(transcript.steps) == 2


def test_identical_means_same_name_and_arguments_whatever_the_key_order():
    registry = ToolRegistry([echo_tool(fn=lambda text: 1 / 0)])  # every call fails with a tool_error
    a = TOOL_CALL + '{"name": "echo", "arguments": {"text": "x"}}'
    b = TOOL_CALL + '{"arguments": {"text": "x"}, "name": "echo"}'
    transcript = tool_loop(Script(a, b, "never reached"), USER, registry, max_retries=5)
    assert transcript.stop_reason == "loop_detected"


def test_the_same_unparsable_text_twice_is_a_loop():
    broken = TOOL_CALL + "{oops"
    assert tool_loop(Script(broken, broken), USER, tinychat_registry()).stop_reason == "loop_detected"


def test_max_steps_caps_model_calls():
    calls = [_call("get_time", city=c) for c in ("Oslo", "Lima", "Rome", "Cairo", "Paris")]
    script = Script(*calls)
    transcript = tool_loop(script, USER, tinychat_registry(), max_steps=3)
    assert (transcript.stop_reason, len(script.seen), transcript.answer) == ("max_steps", 3, None)
    assert all(step.result.ok for step in transcript.steps)


def test_permissions_and_idempotency_keys_reach_the_dispatcher():
    runs = []
    registry = ToolRegistry([echo_tool(fn=lambda text: runs.append(text) or len(runs),
                                       permission="echo:write", side_effects=True)])
    call = TOOL_CALL + '{"name": "echo", "arguments": {"text": "hi"}}'
    denied = tool_loop(Script(call, "sorry"), USER, registry)
    assert denied.steps[0].result.error_kind == "permission_denied"
    keyless = tool_loop(Script(call, "sorry"), USER, registry, permissions={"echo:write"})
    assert keyless.steps[0].result.error_kind == "missing_idempotency_key"
    dispatcher = Dispatcher(registry)
    for _ in range(2):  # the same request retried: one key, so it runs once
        done = tool_loop(Script(call, "done"), USER, registry, permissions={"echo:write"}, dispatcher=dispatcher,
                         idempotency_key_for=lambda c: f"req-42:{c.name}")
        assert done.steps[0].result.ok
    assert runs == ["hi"] and done.steps[0].result.replayed


def test_transcript_renders_and_converts_to_openai():
    transcript = tool_loop(Script(WEATHER_CALL, "It is sunny."), USER, tinychat_registry())
    text = transcript.render()
    assert text.startswith("step 1: " + WEATHER_CALL + "\n        -> ok {")
    assert text.endswith("step 2: It is sunny.\nstopped: answer")
    roles = [m["role"] for m in transcript.openai_messages()]
    assert roles == ["user", "assistant", "tool", "assistant"]


def test_stop_reasons_are_the_documented_four():
    assert STOP_REASONS == ("answer", "max_steps", "retries_exhausted", "loop_detected")


# ---------------------------------------------------------------- argument checks
def test_argument_errors():
    registry = tinychat_registry()
    with pytest.raises(TypeError, match="propose must be a callable propose"):
        tool_loop("model", USER, registry)
    with pytest.raises(TypeError, match="registry must be a ToolRegistry, got list"):
        tool_loop(Script(), USER, [])
    with pytest.raises(ValueError, match="max_steps must be a positive int, got int 0"):
        tool_loop(Script(), USER, registry, max_steps=0)
    with pytest.raises(ValueError, match="max_retries must be an int, zero or more, got int -1"):
        tool_loop(Script(), USER, registry, max_retries=-1)
    with pytest.raises(ValueError, match="max_retries must be an int, zero or more, got bool True"):
        tool_loop(Script(), USER, registry, max_retries=True)
    with pytest.raises(ValueError, match="messages is empty"):
        tool_loop(Script(), [], registry)
    with pytest.raises(TypeError, match="permissions must be a collection of str"):
        tool_loop(Script(), USER, registry, permissions="refunds:write")
    with pytest.raises(TypeError, match="dispatcher must be a Dispatcher, got dict"):
        tool_loop(Script(), USER, registry, dispatcher={})
    with pytest.raises(ValueError, match="the dispatcher was built on another registry"):
        tool_loop(Script(), USER, registry, dispatcher=Dispatcher(tinychat_registry()))
    with pytest.raises(TypeError, match="idempotency_key_for must be a callable"):
        tool_loop(Script(), USER, registry, idempotency_key_for="k")


def test_propose_must_return_text():
    with pytest.raises(TypeError, match="propose must return the reply as a str, got NoneType"):
        tool_loop(lambda messages: None, USER, tinychat_registry())
