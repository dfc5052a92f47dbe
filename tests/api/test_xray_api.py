"""The X-ray endpoint of `course serve` (GET /course/xray/{id}) against independent records.

Oracles: the OpenAI-compatible response itself (its tokens and their logprobs, computed by
a different code path from the raw logits), a torch.Generator seeded by hand (the draw's
uniform), block arithmetic (ceil(tokens / block size)), and jsonschema. The page and the
notebook panel draw exactly this document (tests/browser/test_chat_page.py).
"""
from __future__ import annotations

import math

import httpx
import jsonschema
import pytest
import torch
from fastapi.testclient import TestClient

from course_lib.api.server import create_app

CHAT = "/v1/chat/completions"
XRAY = {"X-Course-Xray": "1"}
HI = [{"role": "user", "content": "What is 2 + 2?"}]
BOOL = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


@pytest.fixture(scope="module")
def client(model, tok):
    with TestClient(create_app(model, tok, max_num_seqs=4)) as c:
        yield c


def chat(client, headers=XRAY, **body):
    response = client.post(CHAT, headers=headers, json={"model": "tinychat", "messages": HI, **body})
    assert response.status_code == 200, response.text
    return response.json()


def xray_of(client, completion) -> dict:
    response = client.get(f"/course/xray/{completion['id']}")
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]


def test_the_xray_holds_the_reply_token_for_token_with_the_models_own_probabilities(client):
    completion = chat(client, temperature=0.8, top_k=5, seed=11, logprobs=True, top_logprobs=3)
    doc = xray_of(client, completion)
    served = completion["choices"][0]["logprobs"]["content"]
    assert doc["text"] == completion["choices"][0]["message"]["content"]
    assert [t["text"] for t in doc["tokens"][:len(served)]] == [
        entry["token"].replace(" ", "·").replace("\n", "↵") for entry in served]
    for token, entry in zip(doc["tokens"], served):
        raw = {a["id"]: a["p"] for a in token["raw"]}
        assert raw[token["id"]] == pytest.approx(math.exp(entry["logprob"]), rel=1e-4)  # logprobs: raw logits
        final = [a["p"] for a in token["final"]]
        assert len(final) <= 5 and sum(final) == pytest.approx(1, abs=1e-6)  # top-k 5, renormalised
        assert token["p"] == pytest.approx(dict((a["id"], a["p"]) for a in token["final"])[token["id"]])


def test_temperature_raises_probability_ratios_to_the_power_one_over_t(client):
    doc = xray_of(client, chat(client, temperature=0.5, seed=2, max_tokens=6))
    for token in doc["tokens"]:
        raw = {a["id"]: a["p"] for a in token["raw"]}
        tempered = {a["id"]: a["p"] for a in token["tempered"]}
        pairs = [(a, b) for a in raw for b in raw if a != b and a in tempered and b in tempered
                 and min(raw[a], raw[b], tempered[a], tempered[b]) > 1e-6]
        for a, b in pairs[:3]:
            assert tempered[a] / tempered[b] == pytest.approx((raw[a] / raw[b]) ** 2, rel=1e-3)


def test_the_first_draw_is_the_first_uniform_of_a_generator_seeded_with_the_requests_seed(client):
    doc = xray_of(client, chat(client, temperature=1.0, seed=1234, max_tokens=4))
    expected = torch.rand(1, 1, generator=torch.Generator().manual_seed(1234), dtype=torch.float64).item()
    assert doc["tokens"][0]["uniform"] == expected
    assert doc["params"]["seed"] == 1234


def test_greedy_tokens_are_argmaxes_with_no_draw(client):
    doc = xray_of(client, chat(client, temperature=0))
    for token in doc["tokens"]:
        assert token["uniform"] is None and token["p"] == 1.0
        assert token["id"] == token["raw"][0]["id"]


def test_blocks_follow_the_tokens_written_and_all_come_back(client):
    doc = xray_of(client, chat(client, temperature=0, max_tokens=40, ignore_eos=True))
    block_size = client.get("/course/pool").json()["block_size"]
    assert doc["steps"][0]["kind"] == "prefill" and doc["steps"][0]["start"] == 0
    for step in doc["steps"]:
        # Blocks for every token that has a slot: the ones this pass wrote plus, from the
        # first decode on, the slot reserved for the token it feeds in.
        assert step["blocks_held"] == math.ceil(step["stop"] / block_size), step
        assert step["pool_used"] >= step["blocks_held"] and step["batch_requests"] >= 1
    assert len(doc["tokens"]) == 40 and doc["finish"]["cause"] == "max_tokens"
    assert doc["finish"]["blocks_held"] == 0
    assert client.get("/course/pool").json()["num_used_blocks"] == 0


def test_a_schema_reply_is_validated_and_its_masked_tokens_were_really_forbidden(client):
    completion = chat(client, temperature=0, max_tokens=40,
                      response_format={"type": "json_schema", "json_schema": {"name": "b", "schema": BOOL}})
    doc = xray_of(client, completion)
    jsonschema.validate(__import__("json").loads(doc["text"]), BOOL)
    assert doc["validation"] == {"ok": True, "message": "parses and fits the schema"}
    assert doc["finish"]["cause"] == "grammar"
    first = doc["tokens"][0]
    assert first["text"].startswith("{") and first["masked"], first
    assert all(m["id"] not in {a["id"] for a in first["final"]} for m in first["masked"])


def test_a_stop_string_and_the_context_window_are_named_as_what_ended_the_reply(client):
    doc = xray_of(client, chat(client, temperature=0, stop=["ou"]))  # greedy says "four"
    assert (doc["finish"]["reason"], doc["finish"]["cause"], doc["finish"]["detail"]) == ("stop", "stop string", "'ou'")
    long_prompt = [{"role": "user", "content": "hello " * 240}]
    completion = client.post(CHAT, headers=XRAY, json={"model": "tinychat", "messages": long_prompt,
                                                       "temperature": 0, "ignore_eos": True}).json()
    doc = xray_of(client, completion)
    assert doc["finish"]["cause"] == "context window"
    assert doc["prompt"]["count"] + len(doc["tokens"]) == 512


def test_the_prefix_cache_shows_as_cached_prompt_tokens_on_a_repeat(client):
    system = [{"role": "system", "content": "You are a careful assistant. " * 6}, *HI]
    chat(client, temperature=0, messages=system)
    doc = xray_of(client, chat(client, temperature=0, messages=system))
    block_size = client.get("/course/pool").json()["block_size"]
    assert doc["prompt"]["cached"] > 0 and doc["prompt"]["cached"] % block_size == 0
    assert doc["prompt"]["cached"] <= doc["prompt"]["count"] - 1


def test_standard_clients_get_the_same_bytes_and_leave_no_xray(client):
    plain = client.post(CHAT, json={"model": "tinychat", "messages": HI, "temperature": 0})
    xrayed = client.post(CHAT, headers=XRAY, json={"model": "tinychat", "messages": HI, "temperature": 0})
    strip = lambda body: {k: v for k, v in body.items() if k not in ("id", "created")}  # noqa: E731
    assert strip(plain.json()) == strip(xrayed.json()) and set(plain.headers) == set(xrayed.headers)
    missing = client.get(f"/course/xray/{plain.json()['id']}")
    assert missing.status_code == 404 and "X-Course-Xray: 1" in missing.json()["error"]["message"]


def test_a_streamed_reply_has_its_xray_too(client):
    with client.stream("POST", CHAT, headers=XRAY, json={"model": "tinychat", "messages": HI, "temperature": 0,
                                                         "stream": True}) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: {")]
    completion_id = __import__("json").loads(lines[0][6:])["id"]
    doc = client.get(f"/course/xray/{completion_id}").json()["choices"][0]
    assert doc["finish"]["reason"] == "stop" and doc["text"]


def test_the_course_endpoints_need_the_key_like_the_rest(model, tok):
    with TestClient(create_app(model, tok, api_key="k")) as keyed:
        assert keyed.get("/course/pool").status_code == 401
        assert keyed.get("/course/xray/x").status_code == 401
        assert keyed.get("/course/pool", headers={"Authorization": "Bearer k"}).status_code == 200
        assert keyed.get("/").status_code == 200  # the page itself holds no data


def test_only_the_pages_own_files_are_served(client):
    assert client.get("/").headers["content-type"].startswith("text/html")
    assert client.get("/static/xray.js").status_code == 200
    for path in ("/static/../server.py", "/static/%2e%2e/server.py", "/static/__init__.py", "/static/"):
        assert client.get(path).status_code == 404, path


def test_a_reader_polling_a_stream_asks_only_for_what_is_new(client):
    completion = chat(client, temperature=0, max_tokens=12, ignore_eos=True)
    whole = xray_of(client, completion)
    tail = client.get(f"/course/xray/{completion['id']}", params={"tokens_from": 5, "steps_from": 3}).json()["choices"][0]
    assert tail["tokens"] == whole["tokens"][5:] and tail["steps"] == whole["steps"][3:]
    assert (tail["num_tokens"], tail["timing"], tail["text"]) == (12, whole["timing"], whole["text"])
    bad = client.get(f"/course/xray/{completion['id']}", params={"tokens_from": -1})
    assert bad.status_code == 400 and "non-negative" in bad.json()["error"]["message"]


def test_xray_lists_are_plain_json(client):
    doc = xray_of(client, chat(client, temperature=0.9, seed=5, max_tokens=3))
    assert httpx.Response(200, json=doc).json() == doc  # round-trips: no tensors, no NaN


def test_a_tokens_attention_is_a_second_pass_over_exactly_the_sequence_it_was_drawn_from(client, model):
    completion = chat(client, temperature=0, max_tokens=8, ignore_eos=True)  # 8 tokens, whatever the reply
    doc = xray_of(client, completion)
    index = 3
    maps = client.get(f"/course/xray/{completion['id']}/attention", params={"token": index}).json()
    sequence = [t["id"] for t in doc["prompt"]["tokens"]] + [t["id"] for t in doc["tokens"][:index]]
    assert maps["position"] == len(sequence) - 1 and len(maps["keys"]) == len(sequence)
    assert len(maps["layers"]) == model.config.n_layers
    assert all(len(head) == len(sequence) and sum(head) == pytest.approx(1, abs=1e-3)
               for layer in maps["layers"] for head in layer)
    # The sequence is the one the engine sampled from: the model's own logits at its last position
    # give the X-ray's raw probability of the token drawn there.
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([sequence]))[0, -1].float(), dim=-1)
    drawn = doc["tokens"][index]
    assert probs[drawn["id"]].item() == pytest.approx(drawn["raw"][0]["p"], rel=1e-3)
    bad = client.get(f"/course/xray/{completion['id']}/attention", params={"token": 99})
    assert bad.status_code == 400 and "outside the reply" in bad.json()["error"]["message"]
    assert client.get("/course/xray/nope/attention", params={"token": 0}).status_code == 404


def test_an_xrayed_request_leaves_a_redacted_chained_trace_line_shown_in_its_xray(model, tok, tmp_path):
    from course_lib.context.trace_log import verify

    path = tmp_path / "trace.jsonl"
    with TestClient(create_app(model, tok, trace_log=path)) as traced:
        messages = [{"role": "user", "content": "My email is ann@example.com. What is 2 + 2?"}]
        first = chat(traced, temperature=0, messages=messages)
        second = chat(traced, temperature=0, messages=messages)
        doc = xray_of(traced, second)
        assert chat(traced, headers={}, temperature=0)  # not X-rayed: no trace line
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and verify(path).ok
    assert "ann@example.com" not in path.read_text() and "[EMAIL]" in doc["trace"]["record"]["metadata"]["user_message"]
    assert doc["trace"] == __import__("json").loads(lines[1])
    assert doc["trace"]["prev"] == __import__("json").loads(lines[0])["hash"]
    assert doc["trace"]["record"]["request_id"] == second["id"] != first["id"]
    assert doc["trace"]["record"]["tokens"] == {"prompt": doc["prompt"]["count"], "completion": len(doc["tokens"])}


def test_an_xrayed_requests_metadata_tags_are_kept_in_its_trace_line(model, tok, tmp_path):
    path = tmp_path / "trace.jsonl"
    with TestClient(create_app(model, tok, trace_log=path)) as traced:
        tagged = chat(traced, temperature=0, max_tokens=4, metadata={"task": "extraction"})
        untagged = chat(traced, temperature=0, max_tokens=4)
    entries = [__import__("json").loads(line) for line in path.read_text().splitlines()]
    assert [e["record"]["request_id"] for e in entries] == [tagged["id"], untagged["id"]]
    assert entries[0]["record"]["metadata"]["request_metadata"] == {"task": "extraction"}
    assert entries[1]["record"]["metadata"]["request_metadata"] == {}
