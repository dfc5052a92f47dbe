"""Decode speed of the course model, measured side by side in one run (batch 1, CPU, greedy).

1. The course model's greedy_generate against Hugging Face `generate` on the same weights
   (converted with to_hf_llama): tokens must be identical; tokens/s for both and the ratio.
   Goal: the course model at least as fast (ratio >= 1).
2. 512 new tokens with the KV cache against recomputing the whole prefix every step.
   Goal: the cache at least 10x faster.

Uses the shipped tinychat weights when they exist, else a seeded random-init tinychat config.
Each timing is the median of --repeats runs, the two contenders interleaved so that load from
other processes hits both alike.

    python benchmarks/bench_decode.py [--new-tokens 128] [--cache-tokens 512] [--threads 1]
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

from course_lib.model import Transformer, WeightsNotFoundError, get_config, load_model, to_hf_llama
from course_lib.generation import greedy_generate


def course_model(prompt_len: int, new_tokens: int) -> tuple[Transformer, str]:
    """tinychat (trained if shipped, else random), with a context window long enough for the run."""
    try:
        model, source = load_model("tinychat", device="cpu"), "shipped tinychat weights"
    except WeightsNotFoundError:
        model = Transformer(get_config("tinychat"), generator=torch.Generator().manual_seed(0))
        source = "random-init tinychat config (no trained weights yet)"
    needed = prompt_len + new_tokens
    if needed > model.config.max_seq_len:
        # RoPE tables are derived from the config, not stored: a longer window changes no weight.
        longer = Transformer(dataclasses.replace(model.config, max_seq_len=needed))
        longer.load_state_dict(model.state_dict())
        source += f"; context window raised {model.config.max_seq_len} -> {needed} for the cache run (no weight changes)"
        model = longer
    return model.eval(), source


def timed(fn, repeats: int) -> tuple[float, object]:
    """Median wall time of fn() over `repeats` runs, and the last result."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=128, help="tokens per run for the HF comparison")
    parser.add_argument("--cache-tokens", type=int, default=512, help="tokens for the cache vs no-cache run")
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads for both contenders")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()

    model, source = course_model(args.prompt_tokens, args.cache_tokens)
    cfg = model.config
    prompt = torch.randint(0, cfg.vocab_size, (args.prompt_tokens,), generator=torch.Generator().manual_seed(1)).tolist()
    print(f"model: {source}")
    print(f"geometry: {cfg.n_layers} layers, d_model {cfg.d_model}, {cfg.n_heads} heads / {cfg.n_kv_heads} KV heads, "
          f"vocab {cfg.vocab_size}, {model.num_parameters():,} parameters; CPU, batch 1, {args.threads} thread(s), "
          f"prompt {args.prompt_tokens} tokens, median of {args.repeats}")

    # --- 1. course model vs Hugging Face generate on the same weights -----------------------------
    hf = to_hf_llama(model)  # sdpa attention, HF's default
    hf_prompt = torch.tensor([prompt])
    mask = torch.ones_like(hf_prompt)
    n = args.new_tokens

    def run_hf():
        with torch.no_grad():
            out = hf.generate(hf_prompt, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        return out[0, len(prompt):].tolist()

    def run_course():
        return greedy_generate(model, prompt, n)

    run_hf(), run_course()  # warm-up: first-call allocations and lazy imports
    course_times, hf_times = [], []
    for _ in range(args.repeats):
        t, ours = timed(run_course, 1)
        course_times.append(t)
        t, theirs = timed(run_hf, 1)
        hf_times.append(t)
    identical = ours == theirs
    print(f"\n[1] greedy, {n} new tokens: identical tokens = {identical}")
    assert identical, f"token mismatch: course {ours[:12]}... vs HF {theirs[:12]}..."
    course_tps, hf_tps = n / statistics.median(course_times), n / statistics.median(hf_times)
    print(f"    course greedy_generate : {course_tps:8.1f} tokens/s")
    print(f"    transformers generate  : {hf_tps:8.1f} tokens/s")
    print(f"    ratio course / HF      : {course_tps / hf_tps:8.2f}x   (goal >= 1.0)")

    # --- 2. KV cache vs recomputing the prefix -----------------------------------------------------
    m = args.cache_tokens
    with_cache, cached_tokens = timed(lambda: greedy_generate(model, prompt, m), args.repeats)
    without_cache, uncached_tokens = timed(lambda: greedy_generate(model, prompt, m, use_cache=False), 1)
    assert cached_tokens == uncached_tokens, "cached and uncached generation disagree"
    print(f"\n[2] {m} new tokens, identical tokens = {cached_tokens == uncached_tokens}")
    print(f"    with KV cache          : {m / with_cache:8.1f} tokens/s  ({with_cache:.2f} s)")
    print(f"    recompute prefix       : {m / without_cache:8.1f} tokens/s  ({without_cache:.2f} s, one run)")
    print(f"    ratio cache / no cache : {without_cache / with_cache:8.2f}x   (goal >= 10)")


if __name__ == "__main__":
    main()
