"""`course serve` against real clients: the official `openai` package (sync and async) and raw httpx.

Oracle: the engine itself, driven directly (``Engine(model, tok).generate``) on the same prompts.
The server is the real thing: uvicorn on 127.0.0.1 and a free port, in a background thread,
stopped at the end of the module.
"""
from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import jsonschema
import openai
import pytest

from course_lib.cli import main as course_main
from course_lib.data.corpus import heldout_split
from course_lib.sampling import SamplingParams
from course_lib.serving.async_engine import AsyncEngine, Submission
from course_lib.serving.engine import Engine
from course_lib.api.server import DEFAULT_MAX_NUM_SEQS, create_app
from course_lib.tools import tinychat_registry

MAX_TOKENS = 48
KEY = "course-test-key"
CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "What is 2 + 2?"}]


# model, tok (the shipped tinychat, shared): tests/serving/conftest.py; serve: tests/api/conftest.py.
# One torch thread (the server's engine thread and the clients share 2 cores): tests/conftest.py.


@pytest.fixture(scope="module")
def base_url(serve, model, tok):
    with serve(create_app(model, tok)) as url:
        yield url


@pytest.fixture(scope="module")
def small_url(serve, model, tok):
    """One running slot, one waiting slot, and an API key: for 401 and 429."""
    with serve(create_app(model, tok, api_key=KEY, max_num_seqs=1, max_waiting=1)) as url:
        yield url


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def prompts():
    return [c.prompt_messages for c in heldout_split(8)][:32]  # every task, tool calls included


def metric(base_url: str, name: str) -> float:
    text = httpx.get(base_url + "/metrics").text
    (value,) = re.findall(rf"^{re.escape(name)} (\S+)$", text, flags=re.M)
    return float(value)


def sse_payloads(raw: str) -> list[str]:
    """The data of each event of an SSE body, checking OpenAI's framing on the way."""
    assert raw.endswith("\n\n"), "every event ends with a blank line"
    events = raw[:-2].split("\n\n")
    assert all(e.startswith("data: ") and "\n" not in e for e in events), events
    return [e[len("data: "):] for e in events]


# --- outputs equal the engine's -----------------------------------------------------------------------

def test_32_concurrent_streams_equal_the_engines_greedy_outputs(base_url, model, tok, prompts):
    expected = Engine(model, tok).generate(prompts, SamplingParams(temperature=0, max_new_tokens=MAX_TOKENS))

    async def one(client, messages):
        text, usage, finish = [], None, None
        stream = await client.chat.completions.create(model="tinychat", messages=messages, temperature=0,
                                                      max_tokens=MAX_TOKENS, stream=True,
                                                      stream_options={"include_usage": True})
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                text.append(choice.delta.content or "")
                finish = choice.finish_reason or finish
        return "".join(text), usage, finish

    async def all_of_them():
        async with openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0) as client:
            return await asyncio.gather(*(one(client, p) for p in prompts))

    results = asyncio.run(all_of_them())
    assert [text for text, _, _ in results] == [c.text for c in expected]
    assert [u.completion_tokens for _, u, _ in results] == [len(c.token_ids) for c in expected]
    assert [u.prompt_tokens for _, u, _ in results] == [len(c.prompt_ids) for c in expected]
    assert [f for _, _, f in results] == [c.finish_reason for c in expected]
    assert metric(base_url, "course_kv_blocks_used") == 0
    assert metric(base_url, "course_requests_running") == 0


def test_non_streaming_chat_and_completions_equal_the_engine(client, model, tok):
    params = SamplingParams(temperature=0, max_new_tokens=MAX_TOKENS, stop=("=",))
    (expected,) = Engine(model, tok).generate([HI], params)
    reply = client.chat.completions.create(model="tinychat", messages=HI, temperature=0, max_tokens=MAX_TOKENS,
                                           stop="=")
    assert reply.id.startswith("chatcmpl-") and reply.object == "chat.completion"
    assert reply.choices[0].message.content == expected.text and reply.choices[0].finish_reason == "stop"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (len(expected.prompt_ids),
                                                                          len(expected.token_ids))
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens

    raw = "<|user|>What is 3 + 5? Answer in a sentence.<|end|><|assistant|>"  # a reply longer than 4 tokens
    (expected,) = Engine(model, tok).generate([raw], SamplingParams(temperature=0, max_new_tokens=4))
    completion = client.completions.create(model="tinychat", prompt=raw, temperature=0, max_tokens=4)
    assert completion.object == "text_completion" and completion.choices[0].text == expected.text
    assert completion.choices[0].finish_reason == expected.finish_reason == "length"


def test_models_and_health(client, base_url):
    assert [m.id for m in client.models.list()] == ["tinychat"]
    assert client.models.retrieve("tinychat").owned_by == "course"
    assert httpx.get(base_url + "/health").json() == {"status": "ok"}


def test_seeded_sampling_is_reproducible_and_n_choices_are_returned(client):
    def ask(n):
        reply = client.chat.completions.create(model="tinychat", messages=HI, temperature=1.5, seed=7, n=n,
                                               max_tokens=12)
        return [c.message.content for c in reply.choices]

    two = ask(2)
    assert len(two) == 2 and ask(2) == two
    assert ask(1) == two[:1]  # choice i samples with seed + i


# --- the wire format ---------------------------------------------------------------------------------

def test_sse_framing_role_first_then_content_finish_usage_and_done(base_url):
    body = {"model": "tinychat", "messages": HI, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    response = httpx.post(base_url + CHAT, json=body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    payloads = sse_payloads(response.text)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    *content, final, usage = chunks
    assert all(c["choices"][0]["finish_reason"] is None and set(c["choices"][0]["delta"]) == {"content"}
               for c in content[1:])
    assert final["choices"][0]["finish_reason"] == "stop" and final["choices"][0]["delta"] == {}
    assert all(c["usage"] is None for c in chunks[:-1])
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] >= len(content) - 1

    no_usage = sse_payloads(httpx.post(base_url + CHAT, json={**body, "stream_options": None}).text)
    assert all("usage" not in json.loads(p) for p in no_usage[:-1])


def test_continuous_usage_stats_count_each_choices_tokens_so_far(base_url, model, tok):
    """vLLM's extension, as guidellm sends it: every chunk carries its choice's usage so far."""
    body = {"model": "tinychat", "messages": HI, "temperature": 0, "stream": True, "n": 2, "max_tokens": MAX_TOKENS,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    payloads = sse_payloads(httpx.post(base_url + CHAT, json=body).text)
    chunks = [json.loads(p) for p in payloads[:-1]]
    (expected,) = Engine(model, tok).generate([HI], SamplingParams(temperature=0, max_new_tokens=MAX_TOKENS))
    prompt = len(expected.prompt_ids)
    seen = {0: 0, 1: 0}
    for chunk in chunks[:-1]:
        (choice,) = chunk["choices"]
        usage = chunk["usage"]
        assert usage["prompt_tokens"] == prompt and usage["total_tokens"] == prompt + usage["completion_tokens"]
        assert usage["completion_tokens"] >= seen[choice["index"]]  # never goes back
        seen[choice["index"]] = usage["completion_tokens"]
        if choice["delta"].get("role"):
            assert usage["completion_tokens"] == 0
    assert seen == {0: len(expected.token_ids), 1: len(expected.token_ids)}  # greedy: both choices alike
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 2 * len(expected.token_ids)

    completion = {"model": "tinychat", "prompt": "<|user|>Hi<|end|><|assistant|>", "temperature": 0, "stream": True,
                  "max_tokens": 5, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    chunks = [json.loads(p) for p in sse_payloads(httpx.post(base_url + "/v1/completions", json=completion).text)[:-1]]
    counts = [c["usage"]["completion_tokens"] for c in chunks[:-1]]
    assert counts == sorted(counts) and counts[-1] == chunks[-1]["usage"]["completion_tokens"] <= 5

    alone = {**body, "n": 1, "stream_options": {"continuous_usage_stats": True}}  # as vLLM: needs include_usage
    assert all("usage" not in json.loads(p) for p in sse_payloads(httpx.post(base_url + CHAT, json=alone).text)[:-1])


def test_tokenize_and_detokenize_match_what_the_model_reads(base_url, tok):
    from course_lib.tokenization.chat_template import encode_chat

    chat = httpx.post(base_url + "/tokenize", json={"model": "tinychat", "messages": HI}).json()
    assert chat["tokens"] == encode_chat(tok, HI) and chat["count"] == len(chat["tokens"])
    assert chat["max_model_len"] == 512 and chat["token_strs"] is None
    open_turn = httpx.post(base_url + "/tokenize", json={"messages": HI, "add_generation_prompt": False}).json()
    assert open_turn["tokens"] == encode_chat(tok, HI, add_generation_prompt=False)
    text = httpx.post(base_url + "/tokenize", json={"prompt": "Hello there", "return_token_strs": True}).json()
    assert text["tokens"] == tok.encode("Hello there") and "".join(text["token_strs"]) == "Hello there"
    back = httpx.post(base_url + "/detokenize", json={"model": "tinychat", "tokens": text["tokens"]}).json()
    assert back == {"prompt": "Hello there"}
    for path, bad, param in (("/tokenize", {"prompt": "a", "messages": HI}, "prompt"), ("/tokenize", {}, "prompt"),
                             ("/tokenize", {"prompt": "a", "chat_template": "x"}, "chat_template"),
                             ("/tokenize", {"prompt": "a", "model": "gpt-4"}, "model"),
                             ("/detokenize", {"tokens": [10**6]}, "tokens")):
        response = httpx.post(base_url + path, json=bad)
        assert response.status_code in (400, 404) and response.json()["error"]["param"] == param, (bad, response.text)


def test_completions_stream(base_url):
    body = {"model": "tinychat", "prompt": "<|user|>What is 3 + 5?<|end|><|assistant|>", "temperature": 0,
            "max_tokens": 20, "stream": True, "logprobs": 1}
    payloads = sse_payloads(httpx.post(base_url + "/v1/completions", json=body).text)
    chunks = [json.loads(p) for p in payloads[:-1]]
    text = "".join(c["choices"][0]["text"] for c in chunks)
    whole = httpx.post(base_url + "/v1/completions", json={**body, "stream": False}).json()["choices"][0]
    assert text == whole["text"] and chunks[-1]["choices"][0]["finish_reason"] == whole["finish_reason"]
    assert [t for c in chunks for t in c["choices"][0]["logprobs"]["tokens"]] == whole["logprobs"]["tokens"]


def test_logprobs_follow_the_content(client):
    reply = client.chat.completions.create(model="tinychat", messages=HI, temperature=0, logprobs=True,
                                           top_logprobs=3)
    entries = reply.choices[0].logprobs.content
    assert "".join(e.token for e in entries) == reply.choices[0].message.content
    for e in entries:
        assert len(e.top_logprobs) == 3 and e.logprob <= 0
        assert e.top_logprobs[0].token == e.token  # greedy: the chosen token is the most likely
        assert bytes(e.bytes).decode() == e.token


# --- structured output and tools --------------------------------------------------------------------------

def test_json_schema_response_format_returns_valid_json(client):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    for temperature in (0, 1.0):
        reply = client.chat.completions.create(
            model="tinychat", temperature=temperature, seed=3,
            messages=[{"role": "user", "content": "Extract: Alice is 31 years old."}],
            response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema,
                                                                    "strict": True}})
        jsonschema.validate(json.loads(reply.choices[0].message.content), schema)


def test_tools_come_back_as_openai_tool_calls(client):
    tools = tinychat_registry().openai_tools()
    weather = [{"role": "user", "content": "What's the weather in Paris?"}]
    reply = client.chat.completions.create(model="tinychat", messages=weather, temperature=0, tools=tools)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}

    # a named tool_choice constrains the call to that tool's schema
    forced = client.chat.completions.create(model="tinychat", messages=weather, temperature=0, tools=tools,
                                            tool_choice={"type": "function", "function": {"name": "get_time"}})
    (call,) = forced.choices[0].message.tool_calls
    assert call.function.name == "get_time"
    jsonschema.validate(json.loads(call.function.arguments), tinychat_registry().get("get_time").parameters)

    # streaming: one tool_calls delta, then finish_reason tool_calls
    stream = client.chat.completions.create(model="tinychat", messages=weather, temperature=0, tools=tools,
                                            stream=True)
    deltas = [c.choices[0] for c in stream if c.choices]
    (with_call,) = [d for d in deltas if d.delta.tool_calls]
    assert with_call.delta.tool_calls[0].function.name == "get_weather"
    assert deltas[-1].finish_reason == "tool_calls"

    # the client runs the call and sends the result back by id; the model answers in text
    result = tinychat_registry().get("get_weather").fn(city="Paris")
    answer = client.chat.completions.create(model="tinychat", temperature=0, tools=tools, messages=[
        *weather, choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": choice.message.tool_calls[0].id, "content": json.dumps(result)}])
    assert answer.choices[0].finish_reason == "stop"
    assert f"{result['temperature_c']} degrees" in answer.choices[0].message.content

    # a call to a tool the request did not offer is not a tool call: it comes back as text
    only_time = [t for t in tools if t["function"]["name"] == "get_time"]
    for stream in (False, True):
        reply = client.chat.completions.create(model="tinychat", messages=weather, temperature=0, tools=only_time,
                                               stream=stream)
        chunks = [c.choices[0] for c in reply if c.choices] if stream else None
        content = "".join(c.delta.content or "" for c in chunks) if stream else reply.choices[0].message.content
        assert content.startswith('<|tool_call|>{"name": "get_weather"')
        assert (chunks[-1] if stream else reply.choices[0]).finish_reason == "stop"

    # a plain question stays text, tools or not
    plain = client.chat.completions.create(model="tinychat", messages=HI, temperature=0, tools=tools)
    assert plain.choices[0].finish_reason == "stop" and plain.choices[0].message.tool_calls is None


# --- errors -----------------------------------------------------------------------------------------------

LONG = [{"role": "user", "content": "What is 2 + 2? " * 120}]  # over 512 tokens


@pytest.mark.parametrize("path, body, status, param, code", [
    (CHAT, {"model": "gpt-4o", "messages": HI}, 404, "model", "model_not_found"),
    (CHAT, {"model": "tinychat", "messages": HI, "max_tokens": 600}, 400, "messages", "context_length_exceeded"),
    (CHAT, {"model": "tinychat", "messages": LONG}, 400, "messages", "context_length_exceeded"),
    ("/v1/completions", {"model": "tinychat", "prompt": "hi " * 600}, 400, "prompt", "context_length_exceeded"),
    (CHAT, {"model": "tinychat", "messages": HI, "temperature": 3}, 400, "temperature", "invalid_value"),
    (CHAT, {"model": "tinychat", "messages": HI, "temperature": "hot"}, 400, "temperature", "invalid_value"),
    (CHAT, {"model": "tinychat", "messages": HI, "n": 0}, 400, "n", "invalid_value"),
    (CHAT, {"model": "tinychat", "messages": []}, 400, "messages", "invalid_value"),
    (CHAT, {"model": "tinychat"}, 400, "messages", "invalid_value"),
    (CHAT, {"model": "tinychat", "messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages.0.role",
     "invalid_value"),
    (CHAT, {"model": "tinychat", "messages": HI, "logit_bias": {"5": 10}}, 400, "logit_bias",
     "unsupported_parameter"),
    (CHAT, {"model": "tinychat", "messages": HI, "functions": [{"name": "f"}]}, 400, "functions",
     "unsupported_parameter"),
    (CHAT, {"model": "tinychat", "messages": HI, "modalities": ["text", "audio"]}, 400, "modalities",
     "unsupported_parameter"),
    ("/v1/completions", {"model": "tinychat", "prompt": "hi", "echo": True}, 400, "echo", "unsupported_parameter"),
    (CHAT, {"model": "tinychat", "messages": HI, "frobnicate": 1}, 400, "frobnicate", "unknown_parameter"),
    (CHAT, {"model": "tinychat", "messages": HI, "top_logprobs": 2}, 400, "top_logprobs", "invalid_value"),
    (CHAT, {"model": "tinychat", "messages": HI, "response_format": {"type": "json_object"}}, 400,
     "response_format", "invalid_value"),
    (CHAT, {"model": "tinychat", "messages": HI, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "string", "format": "email"}}}}, 400, "response_format", None),
    (CHAT, {"model": "tinychat", "messages": HI, "stop": "}", "response_format": {"type": "json_schema",
     "json_schema": {"name": "x", "schema": {"type": "boolean"}}}}, 400, "stop", None),
    (CHAT, {"model": "tinychat", "messages": HI, "tool_choice": "required"}, 400, "tool_choice", "invalid_value"),
    (CHAT, {"model": "tinychat", "messages": HI, "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": {"type": "function", "function": {"name": "g"}}}, 400, "tool_choice", None),
    (CHAT, {"model": "tinychat", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
     "messages.0.content", "invalid_value"),
])
def test_errors_have_openais_shape_and_status(base_url, path, body, status, param, code):
    response = httpx.post(base_url + path, json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert (error["param"], error["code"]) == (param, code)


def test_malformed_json_and_unknown_routes(base_url):
    response = httpx.post(base_url + CHAT, content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]["message"]
    response = httpx.get(base_url + "/v1/nothing-here")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


def test_api_key_is_required_when_set(small_url):
    url = small_url + "/v1/models"
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        response = httpx.get(url, headers=headers)
        assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(url, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert httpx.post(small_url + "/tokenize", json={"prompt": "Hi"}).status_code == 401  # vLLM's routes too
    assert httpx.post(small_url + "/tokenize", json={"prompt": "Hi"},
                      headers={"Authorization": f"Bearer {KEY}"}).json()["count"] > 0
    assert httpx.get(small_url + "/health").status_code == 200  # health and metrics stay open
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=small_url + "/v1", api_key="wrong", max_retries=0).models.list()


def test_a_full_waiting_queue_answers_429(small_url):
    long = {"model": "tinychat", "prompt": "<|user|>Count<|end|><|assistant|>", "temperature": 0,
            "max_tokens": 400, "ignore_eos": True, "stream": True}

    async def scenario():
        async with httpx.AsyncClient(base_url=small_url, headers={"Authorization": f"Bearer {KEY}"},
                                     timeout=30) as client:
            async with client.stream("POST", "/v1/completions", json=long) as running:  # the running slot
                async with client.stream("POST", "/v1/completions", json=long) as waiting:  # the waiting slot
                    assert (running.status_code, waiting.status_code) == (200, 200)
                    return await client.post("/v1/completions", json={**long, "stream": False})

    refused = asyncio.run(scenario())
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "queue_full"
    # more choices than the server can ever hold is the request's fault, not a busy moment
    too_many = httpx.post(small_url + "/v1/completions", headers={"Authorization": f"Bearer {KEY}"},
                          json={**long, "stream": False, "n": 3})
    assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "n"


def wait_until_idle(base_url: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while metric(base_url, "course_kv_blocks_used") > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metric(base_url, "course_kv_blocks_used") == 0
    assert metric(base_url, "course_requests_running") == metric(base_url, "course_requests_waiting") == 0


def test_a_client_that_disconnects_frees_its_blocks(base_url):
    aborted = metric(base_url, 'course_requests_total{finish_reason="abort"}')
    body = {"model": "tinychat", "prompt": "<|user|>Count<|end|><|assistant|>", "temperature": 0,
            "max_tokens": 480, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", base_url + "/v1/completions", json=body) as response:
        lines = response.iter_lines()
        assert [next(lines) for _ in range(6)]  # three events in: generation is under way
        assert metric(base_url, "course_kv_blocks_used") > 0
    wait_until_idle(base_url)
    assert metric(base_url, 'course_requests_total{finish_reason="abort"}') == aborted + 1

    # without streaming too: the server notices the hang-up while it waits for the reply
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(base_url + "/v1/completions", json={**body, "stream": False}, timeout=0.3)
    wait_until_idle(base_url)
    assert metric(base_url, 'course_requests_total{finish_reason="abort"}') == aborted + 2


def test_metrics_are_prometheus_text(base_url):
    response = httpx.get(base_url + "/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    for name in ("course_requests_running", "course_requests_waiting", "course_kv_blocks_used",
                 "course_kv_blocks_free", "course_prefix_cache_hit_rate",
                 "course_time_to_first_token_seconds_bucket", "course_generation_tokens_total",
                 'course_requests_total{finish_reason="stop"}'):
        assert name in response.text, name
    assert metric(base_url, "course_time_to_first_token_seconds_count") > 0
    # the default pool: one context window (512 tokens, 32 blocks of 16) per request it may run
    assert metric(base_url, "course_kv_blocks_used") + metric(base_url, "course_kv_blocks_free") == \
        DEFAULT_MAX_NUM_SEQS * 32


# --- shutdown and the command line ---------------------------------------------------------------------

def test_stop_aborts_running_requests_and_frees_their_blocks(model, tok):
    engine = Engine(model, tok)

    async def scenario():
        async_engine = AsyncEngine(engine)
        async_engine.start()
        ids = tok.encode("<|user|>Count<|end|><|assistant|>", allowed_special="all")
        stream = await async_engine.submit([Submission(ids, SamplingParams(temperature=0, max_new_tokens=400),
                                                       eos_ids=())])
        await anext(stream)  # running
        async_engine.stop()
        return [output.finish_reason async for _, output in stream if output.finished]

    assert asyncio.run(scenario()) == ["abort"]
    assert engine.stats().num_used_blocks == 0 and not engine.has_unfinished()


def test_course_serve_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        course_main(["serve", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for option in ("--model", "--host", "--port", "--max-num-seqs", "--max-waiting", "--api-key",
                   "--speculative", "--device"):
        assert option in out
