"""The course engine on real-size checkpoints (SmolLM2-135M's and Qwen2.5-0.5B's geometry) beside
Hugging Face generate on the same weights, side by side in one run.

No checkpoint downloads here, and speed does not depend on what the weights learned, so each
model is built by transformers from its published geometry with random weights, saved with
save_pretrained, and loaded by the course (``load_model(folder)``) as a learner's own
checkpoint would be. Greedy, batch 1, a 128-token prompt and 64 new tokens (no end token):
time to first token and tokens per second over the whole request for each, the ratio course / HF, and
whether the two agree token for token. Medians of 3 interleaved runs after a warm-up.

    python benchmarks/bench_checkpoint.py [--threads 2] [--models smollm2-135m,qwen2.5-0.5b]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import transformers

from course_lib.model import load_model
from course_lib.sampling import SamplingParams
from course_lib.serving import Engine

GEOMETRIES = {
    "smollm2-135m": ("llama", dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                   num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                                   rms_norm_eps=1e-5, tie_word_embeddings=True,
                                   rope_parameters={"rope_type": "default", "rope_theta": 100000.0})),
    "qwen2.5-0.5b": ("qwen2", dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                   num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                                   rms_norm_eps=1e-6, tie_word_embeddings=True,
                                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
}
PROMPT, NEW = 128, 64


def build(name: str, folder: str):
    kind, fields = GEOMETRIES[name]
    config = (transformers.LlamaConfig if kind == "llama" else transformers.Qwen2Config)(**fields)
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(config).eval()
    hf.save_pretrained(folder)
    return hf


def course_run(model, prompt):
    engine = Engine.for_job(model, rows=1, tokens=PROMPT + NEW)
    start = time.perf_counter()
    rid = engine.add_request(prompt, SamplingParams(temperature=0, max_new_tokens=NEW), eos_ids=())
    tokens, first = [], None
    while engine.has_unfinished():
        for out in engine.step():
            tokens += out.token_ids
            first = time.perf_counter() - start if first is None else first
    return tokens, first, time.perf_counter() - start, rid


@torch.no_grad()
def hf_run(hf, prompt):
    ids = torch.tensor([prompt])
    start = time.perf_counter()
    hf(ids)  # the prefill alone: generate does not report its first token's time
    first = time.perf_counter() - start
    start = time.perf_counter()
    out = hf.generate(ids, max_new_tokens=NEW, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist(), first, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default=",".join(GEOMETRIES))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"real-size geometries, random weights, float32 on the CPU, {args.threads} thread(s); "
          f"greedy, batch 1, {PROMPT}-token prompt, {NEW} new tokens; medians of 3 interleaved runs")
    print(f"{'model':<14}{'params':>8}{'TTFT course':>13}{'TTFT HF':>9}{'course tok/s':>14}{'HF tok/s':>10}"
          f"{'ratio':>7}  same tokens")
    for name in args.models.split(","):
        with tempfile.TemporaryDirectory() as folder:
            hf = build(name, folder)
            model = load_model(folder, device="cpu")
            prompt = torch.randint(0, GEOMETRIES[name][1]["vocab_size"], (PROMPT,),
                                   generator=torch.Generator().manual_seed(1)).tolist()
            course_run(model, prompt), hf_run(hf, prompt)  # warm-up
            runs = {"course": [], "hf": []}
            for _ in range(3):
                runs["course"].append(course_run(model, prompt))
                runs["hf"].append(hf_run(hf, prompt))
            ttft = {k: statistics.median(r[1] for r in v) for k, v in runs.items()}
            rate = {k: statistics.median(NEW / r[2] for r in v) for k, v in runs.items()}
            same = runs["course"][0][0] == runs["hf"][0][0]
            params = sum(p.numel() for p in model.parameters()) / 1e6
            print(f"{name:<14}{params:>7.0f}M{1e3 * ttft['course']:>11.0f}ms{1e3 * ttft['hf']:>7.0f}ms"
                  f"{rate['course']:>14.1f}{rate['hf']:>10.1f}{rate['course'] / rate['hf']:>6.2f}x  {same}")
            del hf, model


if __name__ == "__main__":
    main()
