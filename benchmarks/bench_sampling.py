"""What the decoding rule costs next to the model, measured side by side in one run (CPU).

For several vocabulary sizes and batch sizes it times, per decode step:
  argmax            logits.argmax(-1), the cheapest possible rule
  full pipeline     repetition + frequency/presence penalties, temperature, top-k, top-p,
                    min-p and one seeded inverse-CDF draw (course_lib.sampling.sample_next_token)
and prints the ratio. It also times one tinychat decode step at the same batch size, so the
sampling overhead can be read against the model. Goal: the full pipeline under one tinychat
decode step at tinychat's vocabulary (sampling must not dominate decoding).
Each timing is the median of --repeats runs, contenders interleaved.

    python benchmarks/bench_sampling.py [--repeats 30] [--threads 1]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from course_lib.model import Transformer, WeightsNotFoundError, decode_step, get_config, load_model, prefill
from course_lib.sampling import SamplingParams, sample_next_token

FULL = SamplingParams(temperature=0.8, top_k=50, top_p=0.9, min_p=0.02, frequency_penalty=0.3,
                      presence_penalty=0.2, repetition_penalty=1.1)


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    try:
        model, source = load_model("tinychat", device="cpu"), "shipped tinychat weights"
    except WeightsNotFoundError:
        model = Transformer(get_config("tinychat"), generator=torch.Generator().manual_seed(0)).eval()
        source = "random-init tinychat config (no trained weights yet)"
    print(f"model: {source}; {args.threads} thread(s); median of {args.repeats}")
    print(f"{'vocab':>7}{'batch':>6}{'argmax ms':>11}{'pipeline ms':>13}{'ratio':>8}{'tinychat step ms':>18}")
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
                ids = torch.randint(0, vocab, (batch, 16), generator=g)
                cache = model.new_cache(batch)
                with torch.no_grad():
                    prefill(model, ids, cache)

                    def one_step():
                        decode_step(model, ids[:, :1], cache)
                        cache.seq_len -= 1  # stay at the same position every repeat
                    step = f"{median_ms(one_step, args.repeats):>18.3f}"
            print(f"{vocab:>7}{batch:>6}{argmax:>11.3f}{full:>13.3f}{full / argmax:>7.0f}x{step}")


if __name__ == "__main__":
    main()
