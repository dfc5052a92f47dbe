"""Notebooks 03 and 06 measured on a checkpoint of the learner's own (optional last cells).

    kv_report("~/models/SmolLM2-135M-Instruct")       # 03: KV bytes from its config, prefill vs decode
    serving_report("~/models/SmolLM2-135M-Instruct")  # 06: the engine on it, prefix caching on and off

Both take a local Hugging Face folder (``load_model`` reads Llama, Mistral, SmolLM2, Qwen2
and Qwen3) or a course model name, and print what they measure; times are medians of a few
repeats after a warm-up, so one slow moment does not decide them.

>>> kv_report("tinychat", repeats=1)                              # doctest: +ELLIPSIS
tinychat: 4 layers x 2 KV heads x 16 dims -> 1.02 kB (1.00 KiB) per token in float32, ...
"""
from __future__ import annotations

import torch

from course_lib.kv_memory.formula import format_bytes, kv_bytes_per_token
from course_lib.model import load_model, load_tokenizer
from course_lib.model.steps import decode_step, prefill
from course_lib.sampling.params import SamplingParams
from course_lib.serving.engine import Engine
from course_lib.timing import median_seconds

__all__ = ["kv_report", "serving_report"]

PROMPT_TOKENS = 256
DECODE_STEPS = 16


@torch.no_grad()
def kv_report(path: str, *, repeats: int = 3) -> None:
    """Geometry and KV bytes from the checkpoint's own config; one prefill and decode steps timed."""
    model = load_model(path, device="cpu")
    c = model.config
    per_token = kv_bytes_per_token(c.n_layers, c.n_kv_heads, c.head_dim, bytes_per_element=4)
    print(f"{c.name}: {c.n_layers} layers x {c.n_kv_heads} KV heads x {c.head_dim} dims -> "
          f"{format_bytes(per_token)} per token in float32, {format_bytes(per_token * c.max_seq_len)} for a "
          f"{c.max_seq_len}-token sequence; weights {format_bytes(4 * model.num_parameters())}")
    n = min(PROMPT_TOKENS, c.max_seq_len - DECODE_STEPS - 1)
    ids = torch.randint(0, c.vocab_size, (1, n), generator=torch.Generator().manual_seed(0))

    def prefill_once():
        prefill(model, ids, model.new_cache(1, n + DECODE_STEPS + 1))

    def decode_once():
        cache = model.new_cache(1, n + DECODE_STEPS + 1)
        prefill(model, ids, cache)
        token = ids[:, -1:]
        for _ in range(DECODE_STEPS):
            decode_step(model, token, cache)

    pre = median_seconds(prefill_once, repeats)
    both = median_seconds(decode_once, repeats)
    step = max(both - pre, 1e-9) / DECODE_STEPS
    print(f"prefill of {n} tokens {1e3 * pre:.1f} ms ({n / pre:.0f} tokens/s); one decode step {1e3 * step:.2f} ms "
          f"({1 / step:.0f} tokens/s): a prefill token costs {pre / n / step:.3f}x a decode step's time")


def serving_report(path: str, *, repeats: int = 3) -> None:
    """The course engine on the checkpoint: time to first token with a shared system prompt,
    prefix caching on and off, and decode throughput."""
    model, tokenizer = load_model(path, device="cpu"), load_tokenizer(path)
    system = {"role": "system", "content": "You are a careful assistant who answers briefly. " * 12}
    chat = [system, {"role": "user", "content": "What is 2 + 2?"}]
    params = SamplingParams(temperature=0, max_new_tokens=DECODE_STEPS)
    print(f"{model.config.name} on the course engine, CPU:")
    for caching in (False, True):
        engine = Engine.for_job(model, tokenizer, rows=1, prefix_caching=caching)
        engine.generate([chat], params, eos_ids=())  # fills the cache (when on) and warms up

        def first_token():
            for output in engine.stream(chat, SamplingParams(temperature=0, max_new_tokens=1)):
                pass

        ttft = median_seconds(first_token, repeats)
        seconds = median_seconds(lambda: engine.generate([chat], params, eos_ids=()), repeats)  # all 16 tokens
        print(f"  prefix caching {'on ' if caching else 'off'}: time to first token {1e3 * ttft:.1f} ms, "
              f"{DECODE_STEPS} tokens in {1e3 * seconds:.0f} ms ({DECODE_STEPS / seconds:.0f} tokens/s), "
              f"cache hit rate {engine.stats().hit_rate:.0%}")
