"""Where one engine step's time goes, at the concurrencies a server sees (a profile, not a guess).

The shipped tinychat serves held-out chats, greedy, 64 new tokens each, in a closed loop: the
engine always holds ``concurrency`` requests, and a finished one is replaced at once by the
next, as `course bench-serve` does against `course serve`. Each phase of ``Engine.step`` is
timed by wrapping the engine's own methods in this process (nothing in the package changes):

  schedule     the scheduler picks this pass's tokens (and reserves their KV slots)
  batch        the chunks become the pass's index tensors (``build_batch``)
  forward      the model over the ragged batch, KV written to and read from the paged pool
  sample       one token per sampling row
  update       the scheduler records the tokens, finishes requests and frees their blocks
  emit         incremental detokenisation, stop strings, one RequestOutput per request
  sse          what the server then does per output: an OpenAI chunk, JSON, ``data: ...``

It prints each phase's share of the step, milliseconds per step, output tokens per second and
time to first token (engine steps from ``add_request`` to the first token, in milliseconds).
Each concurrency runs twice, side by side: attention in torch's fused kernel (the engine's
default) and in the course's reference function (``fused_attention=False``), and the ratio of
their throughputs. Then a torch profile of the forward at the highest concurrency: the
operators that take its time, grouped (matmuls, the attention kernel, the paged gather, the
mask, softmax, the KV write, elementwise).

Each setting runs ``--repeats`` times, alternated with the other; the run of median wall time
is the one shown.

    python benchmarks/bench_step.py [--concurrency 1 16 64] [--requests 192] [--repeats 3] [--threads 2]
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import torch

from course_lib.api.openai_protocol import ChatCompletionChunk, ChunkChoice, Delta, sse_data
from course_lib.data.corpus import heldout_split
from course_lib.model import load_model, load_tokenizer
from course_lib.sampling import SamplingParams
from course_lib.serving import Engine, model_runner

MAX_NEW = 64
PHASES = ("schedule", "batch", "forward", "sample", "update", "emit", "sse")
# torch operators grouped by what they do in the forward (the rest is "other")
OP_GROUPS = {
    "matmul (projections, MLP, head)": ("aten::mm", "aten::addmm", "aten::linear", "aten::matmul"),
    "attention matmuls": ("aten::bmm",),
    "fused attention kernel": ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::scaled_dot_product_attention",
                               "aten::_scaled_dot_product_attention_math", "aten::_scaled_dot_product_flash_attention"),
    "allocation and fill": ("aten::empty", "aten::fill_", "aten::zeros", "aten::zero_", "aten::empty_strided",
                            "aten::full"),
    "paged gather (index)": ("aten::index", "aten::index_select", "aten::clamp"),
    "mask build": ("aten::le", "aten::lt", "aten::bitwise_and", "aten::__and__", "aten::repeat_interleave",
                   "aten::arange", "aten::ge", "aten::where", "aten::masked_fill", "aten::masked_fill_"),
    "softmax": ("aten::_softmax", "aten::softmax"),
    "KV write (index_copy_)": ("aten::index_copy_",),
    "copies and layout": ("aten::copy_", "aten::clone", "aten::contiguous", "aten::cat", "aten::expand",
                          "aten::reshape", "aten::view", "aten::transpose", "aten::_unsafe_view"),
    "elementwise (norms, rotary, SiLU)": ("aten::mul", "aten::add", "aten::silu", "aten::rsqrt", "aten::mean",
                                          "aten::pow", "aten::neg", "aten::div", "aten::sub", "aten::embedding"),
}


class PhaseTimer:
    """Wraps callables so each call's wall time is added to its phase."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)

    def wrap(self, phase: str, fn):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - start
        return timed


def instrumented_engine(model, tokenizer, timer: PhaseTimer, max_num_seqs: int, fused: bool) -> Engine:
    engine = Engine(model, tokenizer, max_num_seqs=max_num_seqs, fused_attention=fused)
    engine.scheduler.schedule = timer.wrap("schedule", engine.scheduler.schedule)
    engine.scheduler.update = timer.wrap("update", engine.scheduler.update)
    engine.runner.forward = timer.wrap("forward", engine.runner.forward)
    engine._sample = timer.wrap("sample", engine._sample)
    engine._emit = timer.wrap("emit", engine._emit)
    return engine


def sse_chunk(output) -> str:
    """The server's per-output work for a streamed chat reply (see OpenAIService._chat_chunks)."""
    choice = ChunkChoice(index=0, delta=Delta(content=output.text), logprobs=None,
                         finish_reason=output.finish_reason)
    return sse_data(ChatCompletionChunk(id="chatcmpl-bench", created=0, model="tinychat", choices=[choice],
                                        usage=None), with_usage=False)


def closed_loop(model, tokenizer, prompts: list, concurrency: int, max_num_seqs: int, fused: bool = True) -> dict:
    """Serve every prompt keeping ``concurrency`` in flight; phase times and per-request TTFT."""
    timer = PhaseTimer()
    engine = instrumented_engine(model, tokenizer, timer, max_num_seqs, fused)
    real_build = model_runner.build_batch
    model_runner.build_batch = timer.wrap("batch", real_build)
    sse = timer.wrap("sse", sse_chunk)
    params = SamplingParams(temperature=0, max_new_tokens=MAX_NEW)
    pending, added, first, tokens, steps = list(prompts), {}, {}, 0, 0
    replies: dict = defaultdict(list)
    try:
        start = time.perf_counter()
        while pending or engine.has_unfinished():
            while pending and engine.scheduler.num_running + engine.scheduler.num_waiting < concurrency:
                rid = engine.add_request(pending.pop(0), params)
                added[rid] = time.perf_counter()
            outputs = engine.step()
            steps += 1
            now = time.perf_counter()
            for o in outputs:
                if o.token_ids and o.request_id not in first:
                    first[o.request_id] = now - added[o.request_id]
                tokens += len(o.token_ids)
                replies[o.request_id].extend(o.token_ids)
                sse(o)
        wall = time.perf_counter() - start
    finally:
        model_runner.build_batch = real_build
    ttft = sorted(first.values())
    return {"wall": wall, "steps": steps, "tokens": tokens, "phases": dict(timer.seconds),
            "replies": [replies[rid] for rid in added],
            "ttft_p50": statistics.median(ttft), "ttft_p99": ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))]}


def print_profile(result: dict, concurrency: int) -> None:
    wall, steps = result["wall"], result["steps"]
    phases = result["phases"]
    other = wall - sum(phases.values())
    print(f"\nconcurrency {concurrency}: {steps} steps, {result['tokens']} output tokens in {wall:.2f} s = "
          f"{result['tokens'] / wall:.0f} tokens/s, {1000 * wall / steps:.2f} ms per step; TTFT p50 "
          f"{1000 * result['ttft_p50']:.1f} ms, p99 {1000 * result['ttft_p99']:.1f} ms")
    for name in (*PHASES, "other"):
        seconds = other if name == "other" else phases.get(name, 0.0)
        print(f"  {name:<10}{100 * seconds / wall:6.1f}%  {1000 * seconds / steps:7.3f} ms/step")


def forward_ops(model, tokenizer, prompts: list, concurrency: int, max_num_seqs: int) -> None:
    """Operator time inside the forward, grouped, from torch's profiler over one closed loop."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        closed_loop(model, tokenizer, prompts, concurrency, max_num_seqs)
    totals: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        group = next((g for g, names in OP_GROUPS.items() if event.key in names), None)
        if group is not None:
            totals[group] += event.self_cpu_time_total
        elif event.key.startswith("aten::"):
            totals["other operators"] += event.self_cpu_time_total
    everything = sum(totals.values())
    print(f"\noperators (self CPU time, all steps) at concurrency {concurrency}; the profiler's own "
          "overhead inflates small ops, so read the shares, not the absolute times:")
    for group, micros in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"  {group:<36}{100 * micros / everything:6.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--requests", type=int, default=192, help="requests per concurrency")
    parser.add_argument("--max-num-seqs", type=int, default=None,
                        help="the engine's running limit (default: course serve's)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each setting; the median is shown")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from course_lib.api.server import DEFAULT_MAX_NUM_SEQS
    max_num_seqs = args.max_num_seqs or DEFAULT_MAX_NUM_SEQS
    model, tokenizer = load_model("tinychat", device="cpu"), load_tokenizer("tinychat")
    chats = [c.prompt_messages for c in heldout_split(args.requests // 6 + 1)][:args.requests]
    print(f"tinychat on CPU, {args.threads} thread(s); {len(chats)} held-out chats per run, greedy, up to "
          f"{MAX_NEW} new tokens; engine max_num_seqs={max_num_seqs}")
    for fused in (True, False):  # warm-up: first-call costs out of the way
        closed_loop(model, tokenizer, chats[:8], 4, max_num_seqs, fused)
    for concurrency in args.concurrency:
        runs = {True: [], False: []}
        for _ in range(args.repeats):  # alternated, so load from elsewhere hits both alike
            for fused in (True, False):
                runs[fused].append(closed_loop(model, tokenizer, chats, concurrency, max_num_seqs, fused))
        fused, reference = (sorted(runs[f], key=lambda r: r["wall"])[len(runs[f]) // 2] for f in (True, False))
        print_profile(fused, concurrency)
        same = sum(a == b for a, b in zip(fused["replies"], reference["replies"]))
        print(f"  the course's reference attention instead: {reference['tokens'] / reference['wall']:.0f} tokens/s, "
              f"TTFT p99 {1000 * reference['ttft_p99']:.1f} ms; fused / reference "
              f"{reference['wall'] / fused['wall']:.2f}x; identical greedy replies {same}/{len(chats)}")
    forward_ops(model, tokenizer, chats[:max(args.concurrency) * 2], max(args.concurrency), max_num_seqs)


if __name__ == "__main__":
    main()
