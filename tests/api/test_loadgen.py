"""course bench-serve: the metric arithmetic on hand-made records, then whole runs against a stub.

The stub is a small OpenAI-compatible streaming server written here (FastAPI, run by uvicorn on
127.0.0.1 and a free port through conftest's ``serve``): it waits FIRST_DELAY, then streams
CHUNKS content chunks GAP apart, a usage chunk and [DONE]. Measured TTFT and ITL must be at
least those sleeps and not wildly more; no test asserts tight wall-clock numbers. The last test
runs the same command against the real ``course serve`` app.
"""
from __future__ import annotations

import asyncio
import json
import socket

import pytest
from fastapi import FastAPI, Request  # module level: FastAPI resolves the handler's annotations here
from fastapi.responses import JSONResponse, StreamingResponse

from course_lib.api.loadgen import (
    RequestRecord,
    held_out_prompts,
    main,
    parse_goodput,
    poisson_gaps,
    random_prompts,
    summarize,
)

FIRST_DELAY, GAP, CHUNKS = 0.15, 0.05, 5

# ----- the figures, on records with known answers -------------------------------------------
# r0: sent 0.0, chunks 0.10 0.12 0.15, 3 tokens -> TTFT 100, ITL 20 30, TPOT (150-100)/2 = 25, E2EL 150
# r1: sent 1.0, chunks 1.2 1.3, 2 tokens        -> TTFT 200, ITL 100, TPOT 100, E2EL 300
# r2: sent 2.0, one chunk 2.05, 1 token         -> TTFT 50, no ITL, no TPOT, E2EL 50
# r3: failed (its times must not count anywhere)


def _records() -> list[RequestRecord]:
    return [RequestRecord(0, 0.0, [0.10, 0.12, 0.15], 0.15, 3, prompt_tokens=10),
            RequestRecord(1, 1.0, [1.2, 1.3], 1.3, 2, prompt_tokens=20),
            RequestRecord(2, 2.0, [2.05], 2.05, 1),
            RequestRecord(3, 3.0, [3.01], 3.9, 7, prompt_tokens=99, error="HTTP 500: boom")]


def test_per_request_definitions():
    r0, r1, r2, _ = _records()
    assert r0.ttft == pytest.approx(0.10) and r0.latency == pytest.approx(0.15)
    assert r0.itls == pytest.approx([0.02, 0.03])
    assert r0.tpot == pytest.approx((0.15 - 0.10) / (3 - 1))
    assert r1.tpot == pytest.approx(0.1) and r2.tpot is None and r2.itls == []
    assert RequestRecord(4, 0.0, [], 0.3, 0).ttft == pytest.approx(0.3)  # no content: complete at the end


def test_summary_figures():
    result = summarize(_records(), duration=4.0)
    assert (result.completed, result.failed) == (3, 1)
    assert result.errors == {"HTTP 500: boom": 1}
    assert result.total_output_tokens == 6 and result.total_input_tokens == 30  # failures excluded
    assert result.request_throughput == pytest.approx(0.75) and result.output_throughput == pytest.approx(1.5)
    # linear-interpolation percentiles: sorted TTFTs [50, 100, 200], p90 at index 1.8 -> 100 + 0.8 * 100
    assert (result.ttft.count, result.ttft.mean, result.ttft.median, result.ttft.p90, result.ttft.p99) == \
        pytest.approx((3, 350 / 3, 100, 180, 198))
    assert (result.tpot.count, result.tpot.mean, result.tpot.p90) == pytest.approx((2, 62.5, 92.5))
    assert (result.itl.count, result.itl.mean, result.itl.median, result.itl.p90) == pytest.approx((3, 50, 30, 86))
    assert (result.e2el.mean, result.e2el.median, result.e2el.p99) == pytest.approx((500 / 3, 150, 297))
    assert result.goodput is None


@pytest.mark.parametrize("slos, good", [
    ({"ttft": 150}, 2),                 # r0 (100) and r2 (50)
    ({"ttft": 150, "tpot": 20}, 1),     # r0's TPOT is 25; r2 has no TPOT, so no TPOT limit fails it
    ({"e2el": 100}, 1),                 # only r2
    ({"ttft": 1000, "tpot": 1000, "e2el": 1000}, 3),  # the failed request never counts
])
def test_goodput_counts_requests_meeting_every_slo(slos, good):
    assert summarize(_records(), duration=4.0, goodput=slos).goodput == pytest.approx(good / 4.0)


def test_no_successes_gives_empty_figures():
    result = summarize([RequestRecord(0, 0.0, end=1.0, error="ConnectError: refused")], duration=1.0)
    assert result.completed == 0 and result.ttft.mean is None and result.itl.count == 0
    with pytest.raises(ValueError, match="duration"):
        summarize([], duration=0)


def test_parse_goodput():
    assert parse_goodput("ttft:500,tpot:50") == {"ttft": 500.0, "tpot": 50.0}
    assert parse_goodput(" e2el:1500.5 ") == {"e2el": 1500.5}


@pytest.mark.parametrize("text", ["ttft=500", "ttft:", "latency:5", "ttft:-1", "ttft:500,ttft:600", "ttft:inf", ""])
def test_parse_goodput_refuses(text):
    with pytest.raises(ValueError, match="METRIC:MS"):
        parse_goodput(text)


def test_poisson_arrivals_are_seeded_with_mean_one_over_rate():
    gaps = poisson_gaps(20_000, rate=4.0, seed=3)
    assert gaps[0] == 0.0 and gaps == poisson_gaps(20_000, rate=4.0, seed=3) != poisson_gaps(20_000, 4.0, seed=4)
    assert sum(gaps) / (len(gaps) - 1) == pytest.approx(0.25, rel=0.03)


def test_prompt_sets_are_seeded():
    held_out = held_out_prompts(7, seed=0)
    assert len(held_out) == 7 and held_out == held_out_prompts(7, seed=0) != held_out_prompts(7, seed=1)
    assert all(messages[-1]["role"] in ("user", "tool") for messages in held_out)
    randoms = random_prompts(50, seed=0, words=(3, 5))
    assert randoms == random_prompts(50, seed=0, words=(3, 5))
    assert {len(m[0]["content"].split()) for m in randoms} == {3, 4, 5}


# ----- whole runs against a stub server ---------------------------------------------------------

def _stub_app():
    app = FastAPI()
    app.state.requests, app.state.in_flight, app.state.peak = [], 0, 0

    def event(payload) -> str:
        return f"data: {json.dumps(payload)}\n\n"

    @app.get("/health")
    async def health():
        return {}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        app.state.requests.append(body)
        if body["model"] == "broken":
            return JSONResponse({"error": {"message": "boom"}}, status_code=500)

        if not body.get("stream"):  # a whole reply, after as long as the stream would take
            await asyncio.sleep(FIRST_DELAY + GAP * (CHUNKS - 1))
            return JSONResponse({"id": "c", "object": "chat.completion", "model": body["model"], "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "w " * CHUNKS}, "finish_reason": "length"}],
                "usage": {"prompt_tokens": 11, "completion_tokens": CHUNKS, "total_tokens": 11 + CHUNKS}})

        def chunk(delta, finish=None):
            return event({"id": "c", "object": "chat.completion.chunk", "model": body["model"],
                          "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

        async def stream():
            app.state.in_flight += 1
            app.state.peak = max(app.state.peak, app.state.in_flight)
            try:
                yield ": ping\n\n"  # an SSE comment, as sse-starlette sends
                yield chunk({"role": "assistant", "content": ""})  # no content: not a token
                await asyncio.sleep(FIRST_DELAY)
                for i in range(CHUNKS):
                    if i:
                        await asyncio.sleep(GAP)
                    yield chunk({"content": f"w{i} "})
                    if body["model"] == "cut":
                        return  # the connection closes mid-reply
                yield chunk({}, finish="length")
                if body.get("stream_options", {}).get("include_usage") and body["model"] != "no-usage":
                    yield event({"id": "c", "object": "chat.completion.chunk", "choices": [],
                                 "usage": {"prompt_tokens": 11, "completion_tokens": CHUNKS, "total_tokens": 16}})
                yield "data: [DONE]\n\n"
            finally:
                app.state.in_flight -= 1

        return StreamingResponse(stream(), media_type="text/event-stream")

    return app


@pytest.fixture(scope="module")
def stub(serve):
    app = _stub_app()
    with serve(app) as url:  # tests/serving/conftest.py: uvicorn on 127.0.0.1, a free port, a thread
        yield url, app.state


def _bench(url: str, *extra: str) -> list[str]:
    return ["--base-url", url, "--model", "stub", "--no-progress", *extra]


def test_measures_the_stub_timings_and_writes_every_field(stub, tmp_path, capsys):
    url, state = stub
    state.requests.clear()
    state.peak = 0
    out = tmp_path / "result.json"
    code = main(_bench(url, "--num-prompts", "6", "--max-concurrency", "2", "--max-tokens", "5",
                       "--goodput", "ttft:10000,tpot:10000", "--result-json", str(out)))
    report = capsys.readouterr().out
    print(report)  # shown with -s: the table as a user sees it
    assert code == 0 and "Serving Benchmark Result" in report and "Median ITL (ms):" in report
    doc = json.loads(out.read_text())
    results = doc["results"]
    assert (results["completed"], results["failed"], results["total_output_tokens"]) == (6, 0, 6 * CHUNKS)
    assert results["total_input_tokens"] == 6 * 11
    # at least the stub's sleeps; the upper bounds only catch a broken clock
    assert FIRST_DELAY * 900 <= results["ttft"]["median"] <= FIRST_DELAY * 1000 + 2000
    assert GAP * 900 <= results["itl"]["median"] <= GAP * 1000 + 1000
    assert GAP * 900 <= results["tpot"]["median"] <= GAP * 1000 + 1000
    assert results["itl"]["count"] == 6 * (CHUNKS - 1)
    assert results["goodput"] == pytest.approx(6 / results["duration_s"])
    for name in ("duration_s", "request_throughput", "output_throughput", "errors", "slos_ms"):
        assert name in results
    for metric in ("ttft", "tpot", "itl", "e2el"):
        assert set(results[metric]) == {"count", "mean", "median", "p90", "p99"}
    assert doc["settings"]["max_concurrency"] == 2 and len(doc["requests"]) == 6
    for record in doc["requests"]:
        assert record["success"] and len(record["chunk_times_s"]) == CHUNKS and len(record["itl_ms"]) == CHUNKS - 1
        assert set(record) >= {"start_s", "end_s", "ttft_ms", "tpot_ms", "e2el_ms", "output_tokens", "error"}
    # what went over the wire: standard fields only, streamed with usage, two in flight at most
    sent = state.requests[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["max_tokens"] == 5 and sent["model"] == "stub" and sent["messages"][-1]["role"] in ("user", "tool")
    assert state.peak <= 2


def test_token_count_falls_back_to_content_chunks(stub, tmp_path):
    out = tmp_path / "r.json"
    args = ["--base-url", stub[0], "--model", "no-usage", "--no-progress", "--num-prompts", "2",
            "--dataset", "random", "--result-json", str(out)]
    assert main(args) == 0
    records = json.loads(out.read_text())["requests"]
    assert [r["output_tokens"] for r in records] == [CHUNKS, CHUNKS] and records[0]["prompt_tokens"] is None


def test_request_rate_spreads_the_arrivals(stub, tmp_path):
    out = tmp_path / "r.json"
    assert main(_bench(stub[0], "--num-prompts", "4", "--request-rate", "10", "--seed", "5",
                       "--result-json", str(out))) == 0
    starts = [r["start_s"] for r in json.loads(out.read_text())["requests"]]
    assert starts[-1] - starts[0] >= 0.9 * sum(poisson_gaps(4, 10.0, seed=5))


def test_server_errors_and_timeouts_are_failures(stub, tmp_path, capsys):
    out = tmp_path / "r.json"
    args = ["--base-url", stub[0], "--model", "broken", "--no-progress", "--num-prompts", "2",
            "--result-json", str(out)]
    assert main(args) == 1
    assert "2 of 2 requests failed; first error: HTTP 500" in capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert doc["results"]["failed"] == 2 and not any(r["success"] for r in doc["requests"])
    assert main(_bench(stub[0], "--num-prompts", "1", "--timeout", "0.05")) == 1
    assert "no complete reply within --timeout 0.05 s" in capsys.readouterr().err
    assert main(["--base-url", stub[0], "--model", "cut", "--no-progress", "--num-prompts", "1"]) == 1
    assert "the stream ended before data: [DONE]" in capsys.readouterr().err


def test_whole_replies_are_measured_without_streaming(stub, tmp_path):
    url, state = stub
    out = tmp_path / "whole.json"
    assert main(_bench(url, "--num-prompts", "3", "--max-concurrency", "3", "--no-stream", "--result-json", str(out))) == 0
    results = json.loads(out.read_text())["results"]
    assert state.requests[-1]["stream"] is False and "stream_options" not in state.requests[-1]
    assert results["completed"] == 3 and results["total_output_tokens"] == 3 * CHUNKS
    assert results["ttft"]["median"] == pytest.approx(results["e2el"]["median"])  # the reply comes at once
    assert results["ttft"]["median"] >= 1000 * (FIRST_DELAY + GAP * (CHUNKS - 1)) * 0.9 and results["itl"]["count"] == 0


def test_unreachable_server_is_reported(capsys):
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(_bench(f"http://127.0.0.1:{port}", "--num-prompts", "3")) == 1
    captured = capsys.readouterr()
    assert "Failed requests:" in captured.out
    assert "3 of 3 requests failed" in captured.err and "is an OpenAI-compatible server running" in captured.err


@pytest.mark.parametrize("extra, message", [
    (["--request-rate", "5", "--max-concurrency", "4"], "not allowed with"),
    (["--goodput", "ttft=500"], "bad --goodput entry"),
    (["--goodput", "itl:5"], "bad --goodput entry"),
    (["--num-prompts", "0"], "--num-prompts must be at least 1"),
    (["--request-rate", "0"], "--request-rate must be a positive number"),
    (["--random-words", "9:3"], "--random-words must be MIN:MAX"),
])
def test_bad_arguments_exit_2_with_a_clear_message(extra, message, capsys):
    args = ["--base-url", "http://127.0.0.1:9", "--model", "m", "--num-prompts", "1", *extra]
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_base_url_needs_a_scheme(capsys):
    with pytest.raises(SystemExit):
        main(["--base-url", "127.0.0.1:8000", "--model", "m", "--num-prompts", "1"])
    assert "must start with http://" in capsys.readouterr().err


def test_against_course_serve(serve, tmp_path):
    """The real server: every request completes, and usage gives the token counts."""
    from course_lib.model import load_model, load_tokenizer
    from course_lib.api.server import create_app

    app = create_app(load_model("tinychat", device="cpu"), load_tokenizer("tinychat"), model_name="tinychat")
    out = tmp_path / "r.json"
    with serve(app) as url:
        code = main(["--base-url", url, "--model", "tinychat", "--no-progress", "--num-prompts", "8",
                     "--max-concurrency", "4", "--max-tokens", "24", "--result-json", str(out)])
    assert code == 0
    doc = json.loads(out.read_text())
    results, records = doc["results"], doc["requests"]
    assert results["completed"] == 8 and results["failed"] == 0 and results["ttft"]["median"] > 0
    assert results["total_input_tokens"] > 0
    assert all(0 < r["output_tokens"] <= 24 and r["chunk_times_s"] for r in records)
