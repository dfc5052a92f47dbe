"""What the decoding rule costs next to the model, measured side by side in one run (CPU).

1. For several vocabulary and batch sizes it times, per decode step (each the median of
   --repeats runs):
     argmax            logits.argmax(-1), the cheapest possible rule
     full pipeline     repetition + frequency/presence penalties, temperature, top-k, top-p,
                       min-p and one seeded inverse-CDF draw (course_lib.sampling.sample_next_token)
   and prints the ratio, with one tinychat decode step (KV cache) at tinychat's vocabulary.
   Then, at tinychat's vocabulary and batch 1, one sampling step (sample_batch, what a serving
   engine calls) against one tinychat decode step, the two taking turns in blocks of 20 calls;
   also the share when every sampling step runs right after a decode step (colder caches).
   Goal: the sampling step at most 15% of a decode step (sampling must not dominate decoding).
2. Eight rows at vocabulary 128,256, each with its own SamplingParams and generator:
   sample_batch against the pipeline as it was before course_lib.sampling.batch (kept below as
   the baseline: the processors chained one by one, one row at a time, as the serving engine
   called it), interleaved call by call. Same tokens and generator states over five steps
   (asserted). Goal: sample_batch >= 5x faster.

    python benchmarks/bench_sampling.py [--repeats 30] [--threads 2]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from course_lib.model import Transformer, WeightsNotFoundError, decode_step, get_config, load_model, prefill
from course_lib.sampling import (
    SamplingParams,
    apply_frequency_presence_penalties,
    apply_min_p,
    apply_repetition_penalty,
    apply_temperature,
    apply_token_mask,
    apply_top_k,
    apply_top_p,
    check_logits,
    sample_batch,
    sample_from_probs,
    sample_next_token,
)

FULL = SamplingParams(temperature=0.8, top_k=50, top_p=0.9, min_p=0.02, frequency_penalty=0.3,
                      presence_penalty=0.2, repetition_penalty=1.1)
TYPICAL = SamplingParams(temperature=0.8, top_k=50, top_p=0.95)
# Part 2's batch: FULL's processors with each row's own values, as requests would send them.
ROWS = [SamplingParams(temperature=0.6 + 0.1 * i, top_k=20 + 10 * i, top_p=0.8 + 0.02 * i, min_p=0.01 * (i % 3),
                       frequency_penalty=0.3, presence_penalty=0.2, repetition_penalty=1.1) for i in range(8)]


def baseline_sample(logits, params, generator, *, output_counts=None, seen_counts=None, allowed=None):
    """sample_next_token before course_lib.sampling.batch: process_logits chained the
    processors one by one (each checking its input), then one draw over the whole vocabulary."""
    check_logits(logits)
    out = logits
    if params.repetition_penalty != 1.0:
        out = apply_repetition_penalty(out, seen_counts, params.repetition_penalty)
    if params.frequency_penalty != 0.0 or params.presence_penalty != 0.0:
        out = apply_frequency_presence_penalties(out, output_counts, params.frequency_penalty,
                                                 params.presence_penalty)
    if allowed is not None:
        out = apply_token_mask(out, allowed)
    out = apply_temperature(out, params.temperature)
    out = apply_top_k(out, params.top_k)
    out = apply_top_p(out, params.top_p)
    out = apply_min_p(out, params.min_p)
    if torch.isneginf(out).all(dim=-1).any():
        raise ValueError("a row was filtered out entirely")
    if params.greedy:
        return out.argmax(dim=-1)
    return sample_from_probs(torch.softmax(out.double(), dim=-1), generator)


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def interleaved_ms(contenders: dict, repeats: int, *, block: int = 1) -> dict:
    """Median ms per call of each contender. They take turns, ``block`` calls each, so load from
    elsewhere hits all alike; block 1 runs each call right after the other contender's."""
    times = {name: [] for name in contenders}
    for _ in range(max(1, repeats // block)):
        for name, fn in contenders.items():
            for _ in range(block):
                start = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def tinychat() -> tuple[Transformer, str]:
    try:
        return load_model("tinychat", device="cpu"), "shipped tinychat weights"
    except WeightsNotFoundError:
        model = Transformer(get_config("tinychat"), generator=torch.Generator().manual_seed(0)).eval()
        return model, "random-init tinychat config (no trained weights yet)"


def decode_stepper(model: Transformer, batch: int, g: torch.Generator):
    """A function doing one decode step with a KV cache (16 tokens in), the same position each time."""
    ids = torch.randint(0, model.config.vocab_size, (batch, 16), generator=g)
    cache = model.new_cache(batch)
    with torch.no_grad():
        prefill(model, ids, cache)

    def one_step():
        with torch.no_grad():
            decode_step(model, ids[:, :1], cache)
        cache.seq_len -= 1
    return one_step


def own_streams(seed: int, n: int) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(seed + i) for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, source = tinychat()
    print(f"model: {source}; {args.threads} thread(s); median of {args.repeats}")

    # --- 1. the pipeline against argmax and against the model ----------------------------------
    print(f"\n[1] {'vocab':>7}{'batch':>6}{'argmax ms':>11}{'pipeline ms':>13}{'ratio':>8}{'tinychat step ms':>18}")
    g = torch.Generator().manual_seed(0)
    for vocab in (model.config.vocab_size, 32_000, 128_256):
        for batch in (1, 8):
            logits = torch.randn(batch, vocab, generator=g)  # (B, V)
            counts = torch.randint(0, 3, (batch, vocab), generator=g)  # (B, V) token counts
            argmax = median_ms(lambda: logits.argmax(-1), args.repeats)
            full = median_ms(lambda: sample_next_token(logits, FULL, g, output_counts=counts,
                                                       seen_counts=counts), args.repeats)
            step = ""
            if vocab == model.config.vocab_size:
                step = f"{median_ms(decode_stepper(model, batch, g), args.repeats):>18.3f}"
            print(f"    {vocab:>7}{batch:>6}{argmax:>11.3f}{full:>13.3f}{full / argmax:>7.0f}x{step}")

    vocab = model.config.vocab_size
    logits = torch.randn(1, vocab, generator=g)  # (1, V)
    counts = torch.randint(0, 3, (1, vocab), generator=g)  # (1, V)
    step = decode_stepper(model, 1, g)
    repeats = max(args.repeats, 300)  # sub-millisecond timings: more runs for a steady median
    stream = own_streams(0, 1)
    contenders = {name: (lambda p=p: sample_batch(logits, [p], stream, output_counts=counts, seen_counts=counts))
                  for name, p in (("typical", TYPICAL), ("full", FULL))}
    warm = interleaved_ms({**contenders, "step": step}, repeats, block=20)
    cold = {name: interleaved_ms({name: fn, "step": step}, repeats) for name, fn in contenders.items()}
    print(f"    sampling step (sample_batch) / one tinychat decode step at vocab {vocab:,}, batch 1 "
          f"({warm['step']:.3f} ms):")
    for name, label in (("typical", "T 0.8, top-k 50, top-p 0.95"), ("full", "FULL: + min-p, the penalties")):
        print(f"      {label:<30}: {warm[name]:.3f} ms = {100 * warm[name] / warm['step']:4.1f}%   (goal <= 15%)"
              f";  right after each decode step: {100 * cold[name][name] / cold[name]['step']:4.1f}%")

    # --- 2. a batch with per-row params: sample_batch against the per-row baseline ---------------
    vocab, batch = 128_256, len(ROWS)
    logits = torch.randn(batch, vocab, generator=g)  # (B, V)
    counts = torch.randint(0, 3, (batch, vocab), generator=g)  # (B, V)
    batched, per_row = own_streams(100, batch), own_streams(100, batch)  # same seeds, separate streams

    def run_batched():
        return sample_batch(logits, ROWS, batched, output_counts=counts, seen_counts=counts)

    def run_per_row():
        return torch.stack([baseline_sample(logits[i:i + 1], ROWS[i], per_row[i], output_counts=counts[i:i + 1],
                                            seen_counts=counts[i:i + 1])[0] for i in range(batch)])

    steps = [(run_batched(), run_per_row()) for _ in range(5)]  # five draws from every stream
    same_tokens = all(torch.equal(new, old) for new, old in steps)
    same_streams = all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(batched, per_row))
    assert same_tokens, f"sample_batch and the baseline disagree: {steps}"
    assert same_streams, "sample_batch and the baseline took different amounts from the generators"
    times = interleaved_ms({"batched": run_batched, "per_row": run_per_row}, args.repeats)
    print(f"\n[2] vocab {vocab:,}, batch {batch}, each row its own params (FULL's processors) and generator: "
          f"identical tokens and generator states = {same_tokens and same_streams}")
    print(f"    sample_batch                     : {times['batched']:8.3f} ms")
    print(f"    baseline (per row, chained)      : {times['per_row']:8.3f} ms")
    print(f"    ratio baseline / sample_batch    : {times['per_row'] / times['batched']:8.2f}x   (goal >= 5)")


if __name__ == "__main__":
    main()
