"""`course serve` against a second OpenAI-compatible server (vLLM, say) on the same model, side by side.

It starts `course serve` on a free port, then runs the same load against it and the other
server in turn, A B A B (``--repeats``), at each concurrency, streaming and not: the held-out
chats of `course bench-serve`, greedy, ``--max-tokens`` each. It prints output tokens per
second and TTFT p50 / p99 for both, and the ratios course / other (the goals of issue 28:
>= 1.0x throughput, TTFT p99 <= the other's). Medians over the repeats. First it asks both
servers for the same ``--agree`` greedy replies and prints how many are word for word the same:
the proof that the two serve the same model.

    python benchmarks/bench_vs_server.py --other http://127.0.0.1:8001 --other-model tinychat

Without ``--other`` there is nothing to compare, and it says so and exits (vLLM is not
installed with the course; the README shows how to serve the export with it).
"""
from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import time

import httpx

from course_lib.api.loadgen import held_out_prompts, run_benchmark, summarize


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_course_serve(port: int, model: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-m", "course_lib.cli", "serve", "--model", model, "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        if process.poll() is not None:
            raise RuntimeError(f"course serve exited: {process.stderr.read()[-2000:]}")
        time.sleep(0.2)
    process.terminate()
    raise RuntimeError("course serve did not answer /health within 120 s")


def one_run(url: str, model: str, prompts, concurrency: int, stream: bool, max_tokens: int):
    records, duration = asyncio.run(run_benchmark(prompts, base_url=url, model=model, max_tokens=max_tokens,
                                                  timeout=300, max_concurrency=concurrency, progress=False,
                                                  stream=stream))
    result = summarize(records, max(duration, 1e-9))
    return result.output_throughput, result.ttft.median, result.ttft.p99, result.failed


def greedy_replies(url: str, model: str, prompts, max_tokens: int) -> list[str]:
    """Each prompt's greedy reply, one request at a time, through the official client."""
    from openai import OpenAI

    client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    return [client.chat.completions.create(model=model, messages=p, temperature=0, max_tokens=max_tokens)
            .choices[0].message.content for p in prompts]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", help="the second server's base URL, e.g. http://127.0.0.1:8001 (no /v1)")
    parser.add_argument("--other-model", default="tinychat", help="the model name the other server expects")
    parser.add_argument("--model", default="tinychat", help="what course serve serves (a name or a checkpoint folder)")
    parser.add_argument("--num-prompts", type=int, default=200)
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2, help="A B rounds per setting (default: 2)")
    parser.add_argument("--agree", type=int, default=20, help="greedy replies compared word for word (default: 20)")
    args = parser.parse_args()
    if not args.other:
        print("bench_vs_server: no second server given (--other URL); nothing to compare. Serve the same model "
              "with vLLM (README, 'Serving') and pass its URL.")
        return 0
    port = free_port()
    course = start_course_serve(port, args.model)
    try:
        servers = {"course": (f"http://127.0.0.1:{port}", "tinychat" if args.model == "tinychat" else args.model),
                   "other": (args.other.rstrip("/"), args.other_model)}
        prompts = held_out_prompts(args.num_prompts, 0)
        for name, (url, model) in servers.items():  # warm both up
            one_run(url, model, prompts[:8], 4, True, 8)
        replies = [greedy_replies(url, model, prompts[:args.agree], args.max_tokens) for url, model in servers.values()]
        same = sum(a == b for a, b in zip(*replies))
        print(f"greedy replies word for word the same on both servers: {same}/{len(replies[0])}")
        print(f"{args.num_prompts} held-out chats, greedy, max_tokens {args.max_tokens}; medians of {args.repeats} "
              "alternated rounds")
        print(f"{'mode':<8}{'conc':>5}{'course tok/s':>14}{'other tok/s':>13}{'ratio':>7}"
              f"{'TTFT p50 c/o ms':>18}{'TTFT p99 c/o ms':>18}  failures c/o")
        for stream in (True, False):
            for concurrency in (int(c) for c in args.concurrency.split(",")):
                runs = {name: [] for name in servers}
                for _ in range(args.repeats):
                    for name, (url, model) in servers.items():
                        runs[name].append(one_run(url, model, prompts, concurrency, stream, args.max_tokens))
                med = {name: [statistics.median(r[i] for r in rs) for i in range(3)] + [sum(r[3] for r in rs)]
                       for name, rs in runs.items()}
                c, o = med["course"], med["other"]
                print(f"{'stream' if stream else 'whole':<8}{concurrency:>5}{c[0]:>14.0f}{o[0]:>13.0f}"
                      f"{c[0] / o[0]:>6.2f}x{c[1]:>9.1f}/{o[1]:<8.1f}{c[2]:>9.1f}/{o[2]:<8.1f}  {c[3]}/{o[3]}")
    finally:
        course.terminate()
        course.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
