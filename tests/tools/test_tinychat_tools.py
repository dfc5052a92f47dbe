"""The model's four tools: the corpus's names, arguments and formulas, as deterministic fakes."""
from __future__ import annotations

import json

import pytest

from course_lib.data import facts
from course_lib.data.corpus import generate_corpus
from course_lib.tools import Dispatcher, parse_tinychat_tool_call, tinychat_registry
from course_lib.tools.tinychat_tools import convert_currency, get_time, get_weather, lookup_order, stable_hash


def test_the_registry_holds_the_four_trained_tools():
    assert tinychat_registry().names == ("get_weather", "get_time", "lookup_order", "convert_currency")


def test_every_call_and_result_in_the_training_corpus_fits_the_tools():
    """Oracle: the corpus. Its calls validate and run; for currency, the result is the corpus's own."""
    dispatcher = Dispatcher(tinychat_registry())
    for convo in generate_corpus(80, seed=5, tasks=("tool",)):
        result = dispatcher.dispatch(parse_tinychat_tool_call(convo.reply))
        assert result.ok, (convo.reply, result.content)
        trained_result = json.loads(convo.messages[convo.reply_index + 1]["content"])
        ours = json.loads(result.content)
        assert ours.keys() == trained_result.keys()  # same fields the model learned to read
        if convo.expected["name"] == "convert_currency":
            assert ours == trained_result


def test_fakes_are_deterministic_and_in_the_corpus_ranges():
    for city in facts.CITIES:
        weather = get_weather(city)
        assert weather == get_weather(city)
        assert -5 <= weather["temperature_c"] <= 35 and weather["condition"] in facts.CONDITIONS
        hours, minutes = map(int, get_time(city)["time"].split(":"))
        assert 0 <= hours < 24 and 0 <= minutes < 60
    assert lookup_order("K4821")["status"] in facts.ORDER_STATUSES
    assert stable_hash("a", "b") == stable_hash("a", "b") != stable_hash("ab")


def test_convert_currency_uses_the_facts_rates():
    assert convert_currency(100, "EUR", "USD") == {"amount": 108.0, "currency": "USD"}
    assert convert_currency(250, "GBP", "JPY") == {"amount": round(250 * 1.27 / 0.0067, 2), "currency": "JPY"}


def test_unknown_city_is_a_tool_error_the_model_can_read():
    result = Dispatcher(tinychat_registry()).dispatch(parse_tinychat_tool_call(
        '{"name": "get_weather", "arguments": {"city": "Atlantis"}}'))
    assert result.error_kind == "tool_error"
    assert result.content.startswith("error (tool_error): get_weather failed: LookupError: no data for city 'Atlantis'")


@pytest.mark.parametrize("call, where", [
    ('{"name": "lookup_order", "arguments": {"order_id": "k4821"}}', "$.order_id"),
    ('{"name": "convert_currency", "arguments": {"amount": -3, "from_currency": "EUR", "to_currency": "USD"}}',
     "$.amount"),
    ('{"name": "convert_currency", "arguments": {"amount": 3, "from_currency": "BTC", "to_currency": "USD"}}',
     "$.from_currency"),
    ('{"name": "get_time", "arguments": {"city": "Oslo", "timezone": "UTC"}}', "$"),
    ('{"name": "get_weather", "arguments": {}}', "$"),
])
def test_fabricated_or_out_of_range_arguments_are_rejected_by_the_schema(call, where):
    result = Dispatcher(tinychat_registry()).dispatch(parse_tinychat_tool_call(call))
    assert result.error_kind == "invalid_arguments"
    assert f"arguments at {where}:" in result.content
