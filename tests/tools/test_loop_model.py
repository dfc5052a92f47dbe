"""The tool loop with the shipped model: what tinychat really does, greedy, on CPU."""
from __future__ import annotations

import json

import pytest

from course_lib.data.corpus import generate_corpus
from course_lib.tools import Tool, ToolRegistry, model_proposer, run_tool_loop, tinychat_registry
from course_lib.tools.tinychat_tools import convert_currency, get_time, get_weather, lookup_order


def _ask(tinychat, question, registry, **options):
    model, tokenizer = tinychat
    return run_tool_loop(model, tokenizer, [{"role": "user", "content": question}], registry, **options)


def test_weather_in_paris_calls_the_tool_and_answers_from_its_result(tinychat):
    transcript = _ask(tinychat, "What's the weather in Paris?", tinychat_registry())
    assert transcript.stop_reason == "answer" and len(transcript.steps) == 2
    call, answer = transcript.steps
    assert (call.call.name, call.call.arguments) == ("get_weather", {"city": "Paris"})
    weather = get_weather("Paris")
    assert call.result.ok and json.loads(call.result.content) == weather
    # The answer restates the tool's numbers, which the model could not have known otherwise.
    assert transcript.answer == f"It is {weather['temperature_c']} degrees and {weather['condition']} in Paris."
    assert answer.proposal == transcript.answer


@pytest.mark.parametrize("question, name, arguments, fn, expected_answer", [
    ("What time is it in Oslo?", "get_time", {"city": "Oslo"}, get_time, "It is {time} in Oslo."),
    ("Convert 250 GBP to JPY.", "convert_currency", {"amount": 250, "from_currency": "GBP", "to_currency": "JPY"},
     convert_currency, "250 GBP is {amount:.2f} JPY."),
    ("Where is my order K4821?", "lookup_order", {"order_id": "K4821"}, lookup_order, "Order K4821 is {status}."),
])
def test_the_other_trained_tools_end_to_end(tinychat, question, name, arguments, fn, expected_answer):
    transcript = _ask(tinychat, question, tinychat_registry())
    step = transcript.steps[0]
    assert (step.call.name, step.call.arguments) == (name, arguments)
    result = fn(**arguments)
    assert json.loads(step.result.content) == result
    assert (transcript.stop_reason, transcript.answer) == ("answer", expected_answer.format(**result))


def test_a_question_without_a_tool_is_answered_directly(tinychat):
    transcript = _ask(tinychat, "What is the capital of France?", tinychat_registry())
    assert transcript.stop_reason == "answer" and len(transcript.steps) == 1 and transcript.steps[0].call is None
    assert "Paris" in transcript.answer


def test_a_refused_call_goes_back_and_no_tool_data_reaches_the_answer(tinychat):
    # The model cannot see permissions; it proposes the call, code refuses it, and the refusal goes
    # back to the model. Whatever it then says, it has no weather data: no call ran.
    weather = tinychat_registry().get("get_weather")
    registry = ToolRegistry([Tool("get_weather", weather.description, weather.parameters, weather.fn,
                                  permission="weather:read")])
    transcript = _ask(tinychat, "What's the weather in Paris?", registry)
    assert transcript.steps[0].result.error_kind == "permission_denied"
    assert transcript.messages[2]["content"].startswith("error (permission_denied)")
    assert transcript.stop_reason == "answer" and transcript.answer
    assert all(step.result is None or step.result.error_kind == "permission_denied" for step in transcript.steps)


def test_the_proposer_writes_the_same_calls_the_model_was_evaluated_on(tinychat):
    model, tokenizer = tinychat
    propose = model_proposer(model, tokenizer)
    for convo in generate_corpus(3, seed=99, tasks=("tool",)):
        assert propose(convo.prompt_messages) == convo.reply


def test_model_proposer_checks_its_params(tinychat):
    model, tokenizer = tinychat
    with pytest.raises(TypeError, match="params must be a SamplingParams, got dict"):
        model_proposer(model, tokenizer, {"temperature": 0})
