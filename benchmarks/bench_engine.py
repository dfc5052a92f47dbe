"""The serving engine against simpler ways to run the same requests, side by side in one run.

On the shipped tinychat, greedy, the same held-out requests (mixed prompt and reply lengths):
  sequential   one request at a time (batch 1), a plain prefill/decode_step loop over a
               contiguous KV cache
  static       prompts of equal length batched together (no padding needed), each batch decoded
               until its longest reply ends; no request joins a batch once it started
  hf           Hugging Face generate on the same weights (to_hf_llama), one left-padded batch
  engine       course_lib.serving.Engine: continuous batching over paged KV blocks
It prints output tokens per second for each and the engine's ratio to each (goals: >= 4x
sequential, >= 1.5x static, >= 2x HF). Then time to first token for requests that share a
long system prompt, prefix caching on vs off (goal >= 5x).
Then int8 weight-only quantization served by the same engine: weight bytes (goal <= 0.3x of the
linear layers), tokens/s, and held-out greedy accuracy against fp32. Then speculative decoding,
one request at a time (the latency case): acceptance rate, tokens per target forward pass and
wall-clock speedup for prompt lookup and the tinychat-draft model. Then determinism: how often
batching changes a greedy reply, and what ``batch_invariant=True`` (which makes it never) costs.
And what the request X-ray (course_lib.serving.xray) costs when every request asks for one.

    python benchmarks/bench_engine.py [--requests 64] [--threads 2]
"""
from __future__ import annotations

import argparse
import time

import torch

from course_lib.data.corpus import heldout_split
from course_lib.model.steps import decode_step, prefill
from course_lib.model import load_model, load_tokenizer
from course_lib.model.hf import to_hf_llama
from course_lib.sampling import SamplingParams
from course_lib.generation.generate import default_eos_ids
from course_lib.serving import Engine, RequestXray
from course_lib.tokenization.chat_template import encode_chat

MAX_NEW = 64


def timed(fn, repeats: int = 1):
    """(result, seconds): the best of ``repeats`` runs, so a first run's warm-up or a busy
    neighbour does not decide a ratio."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return result, best


@torch.no_grad()
def static_batches(model, tokenizer, prompts: list[list[int]], max_new: int) -> list[list[int]]:
    """Static batching: equal-length prompts prefilled together, decoded until all have ended."""
    eos = torch.tensor(default_eos_ids(tokenizer))
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(prompts):
        by_length.setdefault(len(ids), []).append(i)
    replies: list[list[int]] = [[] for _ in prompts]
    for length, rows in sorted(by_length.items()):
        steps = min(max_new, model.config.max_seq_len - length)
        cache = model.new_cache(len(rows), length + steps)
        logits = prefill(model, torch.tensor([prompts[i] for i in rows]), cache)       # (B, V)
        done = torch.zeros(len(rows), dtype=torch.bool)                                  # (B,)
        for step in range(steps):
            token = logits.argmax(-1)                                                   # (B,)
            for row, t in zip(rows, token.tolist()):
                if not done[rows.index(row)]:
                    replies[row].append(t)
            done |= torch.isin(token, eos)
            if bool(done.all()) or step == steps - 1:
                break
            logits = decode_step(model, token[:, None], cache)                           # (B, V)
    return replies


def throughput_section(model, tokenizer, n_requests: int) -> None:
    conversations = heldout_split(n_requests // 5 + 1)[:n_requests]
    prompts = [c.prompt_messages for c in conversations]
    params = SamplingParams(temperature=0, max_new_tokens=MAX_NEW)
    engine_out, engine_s = timed(lambda: Engine(model, tokenizer).generate(prompts, params), 2)
    tokens = sum(len(c.token_ids) for c in engine_out)
    ids = [encode_chat(tokenizer, p) for p in prompts]
    sequential, sequential_s = timed(lambda: [static_batches(model, tokenizer, [x], MAX_NEW)[0] for x in ids], 2)
    same = sum(list(c.token_ids) == r for c, r in zip(engine_out, sequential))
    static, static_s = timed(lambda: static_batches(model, tokenizer, ids, MAX_NEW), 2)
    same_static = sum(list(c.token_ids) == r for c, r in zip(engine_out, static))

    hf = to_hf_llama(model).eval()
    width = max(map(len, ids))
    pad = default_eos_ids(tokenizer)[0]
    batch = torch.tensor([[pad] * (width - len(x)) + x for x in ids])                   # (B, T) left-padded
    mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])         # (B, T)

    def hf_generate():
        with torch.no_grad():
            return hf.generate(input_ids=batch, attention_mask=mask, max_new_tokens=MAX_NEW, do_sample=False,
                               eos_token_id=list(default_eos_ids(tokenizer)), pad_token_id=pad)
    _, hf_s = timed(hf_generate, 2)
    print(f"\n{n_requests} held-out requests, greedy, {tokens} output tokens in all; the engine's replies "
          f"equal batch-1 decoding for {same}/{n_requests} and static batching for {same_static}/{n_requests}")
    print(f"{'':<12}{'seconds':>9}{'tokens/s':>10}{'engine is':>11}  goal")
    for name, seconds, goal in (("sequential", sequential_s, 4), ("static", static_s, 1.5), ("hf", hf_s, 2)):
        print(f"{name:<12}{seconds:>9.2f}{tokens / seconds:>10.0f}{seconds / engine_s:>10.2f}x  >= {goal}x")
    print(f"{'engine':<12}{engine_s:>9.2f}{tokens / engine_s:>10.0f}")


def prefix_section(model, tokenizer, n_requests: int = 8) -> None:
    rules, budget = [], model.config.max_seq_len - 64  # leave room for the question and the reply
    while len(encode_chat(tokenizer, [{"role": "system", "content": " ".join(rules + ["Rule."] * 2)}])) < budget:
        rules.append(f"Rule {len(rules)}: answer briefly and politely.")
    system = {"role": "system", "content": " ".join(rules)}
    questions = [f"What is {a} + {a + 3}?" for a in range(n_requests)]
    shared = len(encode_chat(tokenizer, [system], add_generation_prompt=False))
    params = SamplingParams(temperature=0, max_new_tokens=4)
    results = {}
    for caching in (False, True):
        engine = Engine(model, tokenizer, prefix_caching=caching)
        firsts = []
        for question in questions:  # one at a time: each request's own time to first token
            request = engine.add_request([system, {"role": "user", "content": question}], params)
            start, first = time.perf_counter(), None
            while engine.has_unfinished():
                outputs = engine.step()
                if first is None and any(o.request_id == request and o.token_ids for o in outputs):
                    first = time.perf_counter() - start
            firsts.append(first)
        results[caching] = sum(firsts[1:]) / len(firsts[1:])  # the first request fills the cache
        hit = engine.stats().hit_rate
    print(f"\ntime to first token, {n_requests} requests sharing a {shared}-token system prompt (window "
          f"{model.config.max_seq_len}):")
    print(f"  prefix caching off {results[False] * 1e3:.1f} ms, on {results[True] * 1e3:.1f} ms; "
          f"ratio {results[False] / results[True]:.1f}x (goal >= 5x); hit rate {hit:.0%}")


def int8_section(model, tokenizer, per_task: int = 20) -> None:
    from course_lib.data.scoring import SCORERS
    from course_lib.serving import quantize_int8, weight_bytes

    def linear(m) -> int:  # bytes of the layers int8 replaces (embeddings and norms stay fp32)
        return sum(weight_bytes(x) for x in m.modules() if type(x).__name__ in ("Linear", "Int8Linear"))

    quantized = quantize_int8(model)
    conversations = heldout_split(per_task)
    prompts = [c.prompt_messages for c in conversations]
    params = SamplingParams(temperature=0, max_new_tokens=MAX_NEW)
    print(f"\nint8 weights (per-output-channel scales), {len(prompts)} held-out requests through the engine")
    print(f"  linear-layer bytes: int8 {linear(quantized):,} vs fp32 {linear(model):,} = "
          f"{linear(quantized) / linear(model):.3f}x (goal <= 0.3x); whole model "
          f"{weight_bytes(quantized) / weight_bytes(model):.3f}x")
    for name, m in (("fp32", model), ("int8", quantized)):
        out, seconds = timed(lambda: Engine(m, tokenizer).generate(prompts, params))
        solved = sum(SCORERS[c.task](o.text, c.expected) for c, o in zip(conversations, out))
        tokens = sum(len(o.token_ids) for o in out)
        print(f"  {name}: {tokens / seconds:.0f} tokens/s, solved {solved}/{len(prompts)} "
              f"({100 * solved / len(prompts):.1f}%)")


def speculative_section(model, tokenizer, n_requests: int = 40, k: int = 4) -> None:
    conversations = heldout_split(n_requests // 5 + 1)[:n_requests]
    prompts = [c.prompt_messages for c in conversations]
    params = SamplingParams(temperature=0, max_new_tokens=MAX_NEW)
    methods = {"plain": None, "ngram": {"method": "ngram", "k": k}}
    try:
        methods["draft"] = {"method": "draft", "model": load_model("tinychat-draft", device="cpu"), "k": k}
    except (FileNotFoundError, ValueError) as error:
        print(f"\n(no draft model: {error}; run `course train --config tinychat-draft`)")
    print(f"\nspeculative decoding, k = {k}, {n_requests} held-out requests one at a time, greedy")
    print(f"{'':<8}{'accepted':>9}{'tokens/pass':>12}{'seconds':>9}{'speedup':>9}  same replies")
    plain = None
    for name, spec in methods.items():
        def run():
            out, engines = [], []
            for p in prompts:
                engine = Engine(model, tokenizer, max_num_seqs=1, speculative=spec)
                out += engine.generate([p], params)
                engines.append(engine)
            return out, engines
        (out, engines), seconds = timed(run, 2)
        tokens = sum(len(c.token_ids) for c in out)
        passes = sum(e.num_steps for e in engines)
        drafted = sum(e.speculative_stats.num_drafted for e in engines)
        accepted = sum(e.speculative_stats.num_accepted for e in engines)
        if plain is None:
            plain = (out, seconds)
        same = sum(a.token_ids == b.token_ids for a, b in zip(out, plain[0]))
        rate = f"{accepted / drafted:.1%}" if drafted else "-"
        print(f"{name:<8}{rate:>9}{tokens / passes:>12.2f}{seconds:>9.2f}{plain[1] / seconds:>8.2f}x  "
              f"{same}/{len(out)}")


def determinism_section(model, tokenizer, n_requests: int = 64) -> None:
    conversations = heldout_split(n_requests // 5 + 1)[:n_requests]
    prompts = [c.prompt_messages for c in conversations]
    params = SamplingParams(temperature=0, max_new_tokens=MAX_NEW)
    print(f"\ndeterminism: {n_requests} held-out requests, greedy, alone vs all together")
    seconds = {}
    for invariant in (False, True):
        alone = [Engine(model, tokenizer, batch_invariant=invariant, max_num_seqs=1).generate([p], params)[0]
                 for p in prompts]
        together, seconds[invariant] = timed(lambda: Engine(model, tokenizer, batch_invariant=invariant)
                                             .generate(prompts, params))
        changed = sum(a.token_ids != b.token_ids for a, b in zip(alone, together))
        print(f"  batch_invariant={invariant!s:<5}: batching changed {changed}/{n_requests} replies; "
              f"{sum(len(c.token_ids) for c in together) / seconds[invariant]:.0f} tokens/s batched")
    print(f"  batch_invariant=True costs {seconds[True] / seconds[False]:.2f}x the time of the default "
          "(goal: zero changed replies, cost measured)")


def xray_section(model, tokenizer, n_requests: int = 16) -> None:
    """Tokens/s with every request X-rayed vs none, batched and sampled, runs interleaved."""
    prompts = [c.prompt_messages for c in heldout_split(n_requests // 5 + 1)[:n_requests]]
    params = SamplingParams(temperature=0.8, top_p=0.9, seed=1, max_new_tokens=MAX_NEW)

    def run(xrayed: bool):
        engine = Engine(model, tokenizer)
        ids = [engine.add_request(p, params, xray=RequestXray() if xrayed else None) for p in prompts]
        tokens = 0
        while engine.has_unfinished():
            tokens += sum(len(o.token_ids) for o in engine.step())
        return tokens, len(ids)

    times = {False: [], True: []}
    for _ in range(3):  # interleaved, so a busy moment hits both
        for xrayed in (False, True):
            (tokens, _), seconds = timed(lambda: run(xrayed))
            times[xrayed].append((tokens, seconds))
    rate = {x: sorted(t / s for t, s in runs)[1] for x, runs in times.items()}  # the median of three
    print(f"\nrequest X-ray: {n_requests} held-out requests batched, sampled; median of 3 interleaved runs")
    print(f"  none X-rayed {rate[False]:.0f} tokens/s, all X-rayed {rate[True]:.0f} tokens/s: "
          f"the X-ray costs {rate[False] / rate[True]:.2f}x (three distributions and a draw copy per token)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_model("tinychat", device="cpu"), load_tokenizer("tinychat")
    print(f"tinychat on CPU, {args.threads} thread(s)")
    throughput_section(model, tokenizer, args.requests)
    prefix_section(model, tokenizer)
    int8_section(model, tokenizer)
    speculative_section(model, tokenizer)
    determinism_section(model, tokenizer)
    xray_section(model, tokenizer)


if __name__ == "__main__":
    main()
