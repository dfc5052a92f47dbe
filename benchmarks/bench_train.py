"""Training step time of tinychat, measured side by side in one run (CPU, real corpus batches).

1. The loss with logits at every position (cross_entropy of model(inputs), padding and prompt
   ignored) against `masked_loss`, which projects only the positions training learns from.
   Both must give the same loss; the ratio is the time saved per step.
2. Attention in torch's fused kernel (`masked_loss(fused=True)`) against the course's own
   `scaled_dot_product_attention` with the key/value heads repeated (the shipped recipe).
3. Subnormal floats flushed to zero (what `run_training` sets) against torch's default.
   The mode is per thread and worker threads copy it when they start, so each setting runs
   in a fresh child process; the children alternate so that load from other processes hits
   both alike.

Starts from the shipped tinychat weights when they exist (a trained model is where subnormals
pile up), else from a seeded random init. AdamW at a small learning rate, so the weights stay
near where they started across the timed steps.

    python benchmarks/bench_train.py [--steps 12] [--repeats 2] [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

LOSSES = ("every position", "masked_loss", "masked_loss, fused attention")


def child(flush: bool, steps: int, threads: int) -> dict:
    """Median seconds per step for each loss, in this process, with the given flush mode."""
    torch.set_flush_denormal(flush)  # before the first parallel op: worker threads copy it
    torch.set_num_threads(threads)
    from course_lib.data.batching import IGNORE_INDEX, LengthBatches, encode_conversation
    from course_lib.data.corpus import generate_corpus
    from course_lib.model import Transformer, WeightsNotFoundError, get_config, load_model, load_tokenizer
    from course_lib.tokenization.chat_template import END_OF_TEXT
    from course_lib.train import TrainSettings, masked_loss

    settings = TrainSettings()
    tokenizer = load_tokenizer("tinychat")
    try:
        model, source = load_model("tinychat", device="cpu"), "shipped tinychat weights"
    except WeightsNotFoundError:
        model = Transformer(get_config("tinychat", vocab_size=tokenizer.n_vocab),
                            generator=torch.Generator().manual_seed(0))
        source = "random-init tinychat config (no trained weights yet)"
    encoded = [encode_conversation(tokenizer, c.messages) for c in generate_corpus(2000, settings.corpus_seed)]
    stream = LengthBatches(encoded, batch_size=settings.batch_size, pad_id=tokenizer.special_tokens[END_OF_TEXT],
                           max_len=model.config.max_seq_len).stream(torch.Generator().manual_seed(0))
    batches = [next(stream) for _ in range(steps)]

    def every_position(inputs, targets):
        logits = model(inputs)  # (B, T, V)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX)

    losses = {LOSSES[0]: every_position, LOSSES[1]: lambda x, y: masked_loss(model, x, y),
              LOSSES[2]: lambda x, y: masked_loss(model, x, y, fused=True)}
    with torch.no_grad():
        values = [fn(*batches[0]) for fn in losses.values()]
        if not all(torch.allclose(values[0], v, rtol=1e-4) for v in values[1:]):
            raise SystemExit(f"the losses differ: {', '.join(f'{v.item():.6f}' for v in values)}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model.train()
    times: dict[str, list[float]] = {name: [] for name in losses}
    for inputs, targets in batches:
        for name, fn in losses.items():  # interleaved, on the same batch
            start = time.perf_counter()
            loss = fn(inputs, targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            times[name].append(time.perf_counter() - start)
    tokens = sum(x.numel() for x, _ in batches) / len(batches)
    return {"source": source, "tokens": tokens, **{name: statistics.median(t[2:]) for name, t in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12, help="batches per child (the first two are warm-up)")
    parser.add_argument("--repeats", type=int, default=2, help="children per flush setting")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads, as `make train` uses")
    parser.add_argument("--child", choices=["flush", "default"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps < 3:
        parser.error("--steps must be at least 3")
    if args.child:
        print(json.dumps(child(args.child == "flush", args.steps, args.threads)))
        return

    runs: dict[str, list[dict]] = {"flush": [], "default": []}
    for _ in range(args.repeats):
        for mode in runs:
            out = subprocess.run([sys.executable, __file__, "--child", mode, "--steps", str(args.steps),
                                  "--threads", str(args.threads)], capture_output=True, text=True, check=True)
            runs[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    first = runs["flush"][0]
    print(f"model: {first['source']}; batch 64, {first['tokens']:.0f} tokens per batch on average; "
          f"{args.threads} thread(s); median of {args.steps - 2} steps per child, {args.repeats} children per mode")
    table = {mode: {name: statistics.median(r[name] for r in rs) for name in LOSSES} for mode, rs in runs.items()}
    for mode, row in table.items():
        print(f"subnormals {'flushed' if mode == 'flush' else 'kept (torch default)'}: "
              + " | ".join(f"{name} {row[name] * 1000:.0f} ms/step" for name in LOSSES)
              + f" | masked_loss {row[LOSSES[0]] / row[LOSSES[1]]:.2f}x, fused attention "
                f"{row[LOSSES[1]] / row[LOSSES[2]]:.2f}x")
    old, new = table["default"][LOSSES[0]], table["flush"][LOSSES[1]]
    print(f"training step, before (every position, default) -> now (masked_loss, flushed): "
          f"{old * 1000:.0f} -> {new * 1000:.0f} ms, {old / new:.2f}x")


if __name__ == "__main__":
    main()
