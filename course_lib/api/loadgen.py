"""course bench-serve: load-test any OpenAI-compatible chat server, as vLLM's benchmark_serving does.

    $ course bench-serve --base-url http://127.0.0.1:8000 --model tinychat --num-prompts 200 --max-concurrency 16

Each request streams ``POST {base_url}/v1/chat/completions``; the client notes when it sent the
request and when each content chunk arrived. A worked example, in ms:

    sent at 0, chunks at 100, 120, 150, stream done at 150, usage says 3 output tokens
    TTFT 100 (first chunk)   ITL [20, 30] (gaps between chunks)   E2EL 150 (the whole request)
    TPOT (150 - 100) / (3 - 1) = 25   (time per token after the first; needs 2+ tokens)

``summarize`` turns the records into means, medians, p90 and p99, throughputs, and goodput: the
requests per second that met every SLO of ``--goodput ttft:500,tpot:50`` (ms). It is pure, so
its numbers are tested exactly; ``run_benchmark`` is the HTTP side. Only standard fields are
sent and read, so the same command measures ``course serve``, vLLM or llama.cpp's server.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["BenchResult", "Distribution", "RequestRecord", "held_out_prompts", "main", "parse_goodput",
           "poisson_gaps", "random_prompts", "run_benchmark", "summarize"]

SLO_METRICS = ("ttft", "tpot", "e2el")  # what --goodput may bound, as vLLM names them
# A fixed word list: random prompts need no download and no tokenizer.
WORDS = ("time year people way day man thing woman life child world school state family student group "
         "country problem hand part place case week company system program question work number night "
         "point home water room mother area money story fact month lot right study book eye job word "
         "river city garden music light paper table window stone cloud train").split()


# ----- one request, as the client saw it --------------------------------------------------

@dataclass
class RequestRecord:
    """Times are seconds on one monotonic clock (``time.perf_counter``)."""

    index: int                      # which prompt
    start: float                    # request sent
    chunk_times: list[float] = field(default_factory=list)  # arrival of each content chunk
    end: float = 0.0                # stream finished ([DONE]) or failed
    output_tokens: int = 0          # usage.completion_tokens, else the number of content chunks
    prompt_tokens: int | None = None  # usage.prompt_tokens, when the server reports it
    error: str | None = None        # None: success

    @property
    def ttft(self) -> float:
        """Until the first content chunk; a reply with no content was complete at ``end``."""
        return (self.chunk_times[0] if self.chunk_times else self.end) - self.start

    @property
    def latency(self) -> float:
        return self.end - self.start

    @property
    def tpot(self) -> float | None:
        """(latency - TTFT) / (tokens - 1): undefined for a one-token reply."""
        return (self.latency - self.ttft) / (self.output_tokens - 1) if self.output_tokens > 1 else None

    @property
    def itls(self) -> list[float]:
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:])]

    def to_dict(self, origin: float) -> dict:
        ok = self.error is None
        ms = lambda s: None if s is None or not ok else round(s * 1000, 3)  # noqa: E731
        return {"index": self.index, "success": ok, "error": self.error,
                "start_s": round(self.start - origin, 6), "end_s": round(self.end - origin, 6),
                "chunk_times_s": [round(t - origin, 6) for t in self.chunk_times],
                "output_tokens": self.output_tokens, "prompt_tokens": self.prompt_tokens,
                "ttft_ms": ms(self.ttft), "tpot_ms": ms(self.tpot), "e2el_ms": ms(self.latency),
                "itl_ms": [ms(g) for g in self.itls] if ok else []}


# ----- the figures (pure) -----------------------------------------------------------------

@dataclass(frozen=True)
class Distribution:
    """Mean, median, p90 and p99 of one metric in ms (None when nothing was measured).

    Percentiles interpolate linearly (numpy's default, as vLLM): p90 of [50, 100, 200] is 180.
    """

    count: int
    mean: float | None
    median: float | None
    p90: float | None
    p99: float | None

    @classmethod
    def of(cls, seconds: list[float]) -> Distribution:
        if not seconds:
            return cls(0, None, None, None, None)
        ms = np.asarray(seconds, dtype=np.float64) * 1000.0
        median, p90, p99 = (float(v) for v in np.percentile(ms, [50, 90, 99]))
        return cls(len(ms), float(ms.mean()), median, p90, p99)


@dataclass(frozen=True)
class BenchResult:
    completed: int
    failed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float   # completed requests / s
    output_throughput: float    # output tokens of completed requests / s
    goodput: float | None       # requests / s meeting every SLO; None without --goodput
    slos_ms: dict[str, float]
    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    e2el: Distribution
    errors: dict[str, int]      # each distinct error and how many requests it ended

    def to_dict(self) -> dict:
        return asdict(self)


def _meets(record: RequestRecord, slos_ms: dict[str, float]) -> bool:
    # A one-token reply has no TPOT, so no TPOT SLO can fail it (vLLM counts its TPOT as 0).
    values = {"ttft": record.ttft, "tpot": record.tpot or 0.0, "e2el": record.latency}
    return all(values[name] * 1000.0 <= limit for name, limit in slos_ms.items())


def summarize(records: list[RequestRecord], duration: float, goodput: dict[str, float] | None = None) -> BenchResult:
    """Records of one run (``duration`` seconds, first send to last reply) -> every figure.

    Failed requests count only as failures: no latency, token or goodput figure includes them.
    """
    if not duration > 0:
        raise ValueError(f"duration must be positive seconds, got {duration!r}")
    ok = [r for r in records if r.error is None]
    errors: dict[str, int] = {}
    for r in records:
        if r.error is not None:
            errors[r.error] = errors.get(r.error, 0) + 1
    slos = dict(goodput or {})
    output_tokens = sum(r.output_tokens for r in ok)
    return BenchResult(
        completed=len(ok), failed=len(records) - len(ok), duration_s=duration,
        total_input_tokens=sum(r.prompt_tokens or 0 for r in ok), total_output_tokens=output_tokens,
        request_throughput=len(ok) / duration, output_throughput=output_tokens / duration,
        goodput=sum(_meets(r, slos) for r in ok) / duration if slos else None, slos_ms=slos,
        ttft=Distribution.of([r.ttft for r in ok]),
        tpot=Distribution.of([r.tpot for r in ok if r.tpot is not None]),
        itl=Distribution.of([gap for r in ok for gap in r.itls]),
        e2el=Distribution.of([r.latency for r in ok]),
        errors=errors,
    )


def parse_goodput(text: str) -> dict[str, float]:
    """``"ttft:500,tpot:50"`` -> ``{"ttft": 500.0, "tpot": 50.0}`` (milliseconds)."""
    slos: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.strip().partition(":")
        try:
            limit = float(value)
        except ValueError:
            limit = float("nan")
        if not sep or name not in SLO_METRICS or not limit > 0 or limit == float("inf") or name in slos:
            raise ValueError(f"bad --goodput entry {part.strip()!r}: write METRIC:MS pairs separated by commas, "
                             f"each metric once, from {', '.join(SLO_METRICS)} (e.g. ttft:500,tpot:50)")
        slos[name] = limit
    return slos


def poisson_gaps(n: int, rate: float, seed: int) -> list[float]:
    """Seconds to wait before each of ``n`` requests: a Poisson process at ``rate`` req/s
    (exponential gaps, mean 1/rate); the first request goes at once."""
    rng = random.Random(seed)
    return [0.0] + [rng.expovariate(rate) for _ in range(n - 1)]


# ----- prompts ----------------------------------------------------------------------------

def held_out_prompts(n: int, seed: int) -> list[list[dict[str, str]]]:
    """``n`` chat prompts from the course's held-out split (every task), in a seeded order."""
    from course_lib.data.corpus import TASKS, heldout_split

    conversations = heldout_split(-(-n // len(TASKS)))
    random.Random(seed).shuffle(conversations)
    return [c.prompt_messages for c in conversations[:n]]


def random_prompts(n: int, seed: int, words: tuple[int, int] = (8, 32)) -> list[list[dict[str, str]]]:
    """``n`` one-message prompts of ``words[0]``..``words[1]`` random words each (seeded)."""
    rng = random.Random(seed)
    return [[{"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(*words)))}]
            for _ in range(n)]


# ----- the HTTP side ----------------------------------------------------------------------

class StreamError(Exception):
    """The server answered, but not with a complete OpenAI chat stream."""


async def _read_stream(response, record: RequestRecord) -> None:
    """Parse ``data: {...}`` lines up to ``data: [DONE]``, timing each content chunk."""
    usage = None
    async for line in response.aiter_lines():
        now = time.perf_counter()
        if not line.startswith("data:"):
            continue  # blank separators, ": ping" comments, "event:" lines
        data = line[5:].strip()
        if data == "[DONE]":
            record.output_tokens = (usage or {}).get("completion_tokens") or len(record.chunk_times)
            record.prompt_tokens = (usage or {}).get("prompt_tokens")
            return
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            chunk = None
        if not isinstance(chunk, dict):
            raise StreamError(f"a stream line is not a JSON object: {data[:120]!r}")
        if "error" in chunk:
            raise StreamError(f"the server reported an error mid-stream: {json.dumps(chunk['error'])[:300]}")
        if any(isinstance(choice, dict) and (choice.get("delta") or {}).get("content")
               for choice in chunk.get("choices") or ()):
            record.chunk_times.append(now)
        usage = chunk.get("usage") or usage
    raise StreamError("the stream ended before data: [DONE]")


async def _post_and_read(client, url: str, payload: dict, record: RequestRecord) -> None:
    if not payload.get("stream"):  # one JSON reply: its first token arrives with its last
        response = await client.post(url, json=payload)
        if response.status_code != 200:
            raise StreamError(f"HTTP {response.status_code}: {response.text[:300]}")
        try:
            usage = response.json().get("usage") or {}
        except ValueError:
            raise StreamError(f"the reply is not JSON: {response.text[:120]!r}") from None
        record.output_tokens, record.prompt_tokens = usage.get("completion_tokens") or 0, usage.get("prompt_tokens")
        return
    async with client.stream("POST", url, json=payload) as response:
        if response.status_code != 200:
            body = (await response.aread()).decode("utf-8", "replace")
            raise StreamError(f"HTTP {response.status_code}: {body[:300]}")
        await _read_stream(response, record)


async def send_request(client, url: str, payload: dict, index: int, timeout: float) -> RequestRecord:
    """One streamed chat completion; never raises: a failure is recorded in ``error``."""
    import httpx

    record = RequestRecord(index=index, start=time.perf_counter())
    try:
        await asyncio.wait_for(_post_and_read(client, url, payload, record), timeout)
    except asyncio.TimeoutError:  # TimeoutError itself from 3.11 on; a distinct class in 3.10
        record.error = f"no complete reply within --timeout {timeout:g} s"
    except httpx.HTTPError as exc:
        record.error = f"{type(exc).__name__}: {exc or 'no detail'}"
    except StreamError as exc:
        record.error = str(exc)
    record.end = time.perf_counter()
    return record


async def run_benchmark(prompts: list, *, base_url: str, model: str, max_tokens: int, timeout: float,
                        request_rate: float | None = None, max_concurrency: int | None = None, seed: int = 0,
                        api_key: str | None = None, progress: bool = True,
                        stream: bool = True) -> tuple[list[RequestRecord], float]:
    """Send every prompt (paced by ``request_rate`` or bounded by ``max_concurrency``; neither:
    all at once); return the records and the run's duration in seconds. ``stream=False`` asks
    for whole replies: TTFT is then the whole request's latency, and there is no ITL."""
    import httpx
    from tqdm.auto import tqdm

    url = base_url.rstrip("/") + "/v1/chat/completions"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    gaps = poisson_gaps(len(prompts), request_rate, seed) if request_rate else [0.0] * len(prompts)
    gate = asyncio.Semaphore(max_concurrency) if max_concurrency else contextlib.nullcontext()
    # trust_env=False: proxy variables must not send the load anywhere but base_url.
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(timeout), trust_env=False,
                                 limits=httpx.Limits(max_connections=max_concurrency)) as client:
        with tqdm(total=len(prompts), unit="req", disable=not progress, desc="bench-serve") as bar:
            async def one(index: int, messages: list) -> RequestRecord:
                # greedy, as vLLM's benchmark: reply lengths then depend on the server, not on chance
                payload = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0,
                           "stream": stream}
                if stream:
                    payload["stream_options"] = {"include_usage": True}
                async with gate:
                    record = await send_request(client, url, payload, index, timeout)
                bar.update(1)
                return record

            tasks, started = [], time.perf_counter()
            for index, (messages, gap) in enumerate(zip(prompts, gaps)):
                if gap:
                    await asyncio.sleep(gap)
                tasks.append(asyncio.create_task(one(index, messages)))
            records = list(await asyncio.gather(*tasks))
    return records, max(r.end for r in records) - started if records else 0.0


# ----- the command ------------------------------------------------------------------------

def format_report(result: BenchResult, max_concurrency: int | None = None, request_rate: float | None = None) -> str:
    """The result as vLLM prints it: one figure per line, a section per latency metric."""
    def line(label: str, value, digits: int = 2) -> str:
        text = "-" if value is None else (f"{value:.{digits}f}" if isinstance(value, float) else str(value))
        return f"{label:<40} {text:>10}"

    lines = ["{:=^51}".format(" Serving Benchmark Result "),
             line("Successful requests:", result.completed), line("Failed requests:", result.failed),
             line("Request rate (req/s):", "inf" if request_rate is None else float(request_rate)),
             line("Maximum request concurrency:", max_concurrency),
             line("Benchmark duration (s):", result.duration_s),
             line("Total input tokens:", result.total_input_tokens),
             line("Total generated tokens:", result.total_output_tokens),
             line("Request throughput (req/s):", result.request_throughput),
             line("Output token throughput (tok/s):", result.output_throughput)]
    if result.goodput is not None:
        lines.append(line("Goodput SLOs (ms):", ",".join(f"{k}:{v:g}" for k, v in result.slos_ms.items())))
        lines.append(line("Request goodput (req/s):", result.goodput))
    for key, title in (("ttft", "Time to First Token"), ("tpot", "Time per Output Token (excl. 1st token)"),
                       ("itl", "Inter-token Latency"), ("e2el", "End-to-end Latency")):
        dist: Distribution = getattr(result, key)
        lines.append("{:-^51}".format(title))
        for stat in ("mean", "median", "p90", "p99"):
            name = stat.capitalize() if stat in ("mean", "median") else stat.upper()
            lines.append(line(f"{name} {key.upper()} (ms):", getattr(dist, stat)))
    lines.append("=" * 51)
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="course bench-serve", description=__doc__.split("\n")[0])
    p.add_argument("--base-url", required=True, help="the server, e.g. http://127.0.0.1:8000 (no /v1)")
    p.add_argument("--model", required=True, help="the model name the server expects in requests")
    p.add_argument("--num-prompts", type=int, required=True, help="how many requests to send")
    pace = p.add_mutually_exclusive_group()
    pace.add_argument("--request-rate", type=float, help="requests per second, Poisson arrivals (default: all at once)")
    pace.add_argument("--max-concurrency", type=int, help="send as fast as possible, at most this many in flight")
    p.add_argument("--dataset", choices=("held-out", "random"), default="held-out",
                   help="held-out: the course's held-out chats; random: random words (default: held-out)")
    p.add_argument("--random-words", default="8:32", help="MIN:MAX words per random prompt (default: 8:32)")
    p.add_argument("--max-tokens", type=int, default=64, help="max_tokens of each request (default: 64)")
    p.add_argument("--seed", type=int, default=0, help="seeds prompt order and arrivals (default: 0)")
    p.add_argument("--goodput", help="SLOs in ms, e.g. ttft:500,tpot:50 (metrics: ttft, tpot, e2el)")
    p.add_argument("--result-json", type=Path, help="write every figure and per-request record here")
    p.add_argument("--api-key", help="sent as 'Authorization: Bearer KEY'")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds allowed per request (default: 60)")
    p.add_argument("--no-stream", action="store_true", help="ask for whole replies (stream false): TTFT is then "
                   "the whole request's latency")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _check_args(parser: argparse.ArgumentParser, args) -> tuple[dict[str, float], tuple[int, int]]:
    if not args.base_url.startswith(("http://", "https://")):
        parser.error(f"--base-url must start with http:// or https://, got {args.base_url!r}")
    for name in ("num_prompts", "max_tokens", "max_concurrency"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    for name in ("request_rate", "timeout"):
        value = getattr(args, name)
        if value is not None and not 0 < value < float("inf"):
            parser.error(f"--{name.replace('_', '-')} must be a positive number, got {value}")
    try:
        slos = parse_goodput(args.goodput) if args.goodput else {}
        low, high = (int(v) for v in args.random_words.split(":"))
        if not 1 <= low <= high:
            raise ValueError
    except ValueError as exc:
        parser.error(str(exc) or f"--random-words must be MIN:MAX with 1 <= MIN <= MAX, got {args.random_words!r}")
    return slos, (low, high)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    slos, words = _check_args(parser, args)
    prompts = (held_out_prompts(args.num_prompts, args.seed) if args.dataset == "held-out"
               else random_prompts(args.num_prompts, args.seed, words))
    records, duration = asyncio.run(run_benchmark(
        prompts, base_url=args.base_url, model=args.model, max_tokens=args.max_tokens, timeout=args.timeout,
        request_rate=args.request_rate, max_concurrency=args.max_concurrency, seed=args.seed,
        api_key=args.api_key, progress=not args.no_progress, stream=not args.no_stream))
    result = summarize(records, max(duration, 1e-9), slos)
    print(format_report(result, args.max_concurrency, args.request_rate))
    if args.result_json:
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "api_key"}
        origin = min(r.start for r in records)
        document = {"settings": settings, "results": result.to_dict(),
                    "requests": [r.to_dict(origin) for r in records]}
        args.result_json.write_text(json.dumps(document, indent=1) + "\n")
    if result.failed:
        first = next(iter(result.errors))
        hint = (f"; is an OpenAI-compatible server running at {args.base_url}?"
                if "ConnectError" in first or "ConnectTimeout" in first else "")
        print(f"course bench-serve: {result.failed} of {len(records)} requests failed; first error: {first}{hint}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
