"""Serving drills (notebooks 03 and 06): latency from prefill and decode rates, decode's memory
floor, FLOPs per token, and speculative decoding's tokens per target pass.

>>> from random import Random
>>> print(draw_speculative_tokens_per_pass(Random(0)).solution.splitlines()[0])
E = (1 - alpha^(k+1)) / (1 - alpha): the expected tokens one target pass emits

The expected tokens come from ``serving.speculative.expected_tokens_per_round``; the rest from
``problem_formulas`` (the course states these rules in notebooks 00, 03 and 06 but exports no
function for them).
"""
from __future__ import annotations

import random

from course_lib.drills.problem_formulas import (decode_step_floor_s, forward_flops, request_latency_s,
                                                time_to_first_token_s)
from course_lib.drills.problem_kv import DISPLAY_NAMES, SEQ_LENS
from course_lib.drills.problem_model import Draft, Generator, answer_line, count, num, sig
from course_lib.kv_memory import ACCELERATORS, KIB, MODEL_GEOMETRIES
from course_lib.serving.speculative import expected_tokens_per_round

DENSE_MODELS = tuple(name for name in DISPLAY_NAMES if name != "mixtral-8x7b")  # every weight read per token
# Representative dense bf16 peaks from the vendors' datasheets (no sparsity), TFLOP/s.
PEAK_TFLOPS = {"A100-80GB": 312, "H100-80GB": 989, "H200-141GB": 989, "L4-24GB": 121, "MI300X-192GB": 1307}


def _params_billion(name: str) -> float:
    """The parameter count as one says it, in billions to one decimal (8,030,261,248 -> 8.0)."""
    return round(MODEL_GEOMETRIES[name].n_params / 1e9, 1)


def draw_request_latency(rng: random.Random) -> Draft:
    prompt = 100 * rng.randint(2, 320)
    prefill_rate = rng.choice((2_000, 4_000, 5_000, 8_000, 10_000, 16_000, 20_000))
    queue_ms = rng.choice((0, 0, 50, 100, 250))
    output = 25 * rng.randint(2, 80)
    asked = rng.choice(("ttft", "total"))
    params = {"prompt_tokens": prompt, "prefill_tokens_per_s": prefill_rate, "output_tokens": output, "asked": asked}
    if rng.random() < 0.5:
        decode_ms = rng.choice((10, 15, 20, 25, 30, 40, 50))
        decode_text, params["decode_ms_per_token"] = f"one decode step of {num(decode_ms)} ms", decode_ms
    else:
        rate = rng.choice((20, 25, 40, 50, 80, 100))
        decode_ms = 1000 / rate
        decode_text, params["decode_tokens_per_s"] = f"one decode step, at {num(rate)} tokens/s", rate
    queue_text = ""
    if queue_ms:
        params["queue_ms"] = queue_ms
        queue_text = f"waits {num(queue_ms)} ms in the queue, then "
    ttft = time_to_first_token_s(prompt, prefill_rate, queue_s=queue_ms / 1000)
    total = request_latency_s(prompt, output, prefill_rate, decode_ms / 1000, queue_s=queue_ms / 1000)
    wanted = ("What is the time to first token (TTFT)?\nAnswer in ms." if asked == "ttft" else
              "How long from sending the request to the last output token?\nAnswer in seconds.")
    question = (f"A request {queue_text}prefills a {num(prompt)}-token prompt at {num(prefill_rate)} tokens/s; "
                f"prefill produces the first output token.\nEach later output token takes {decode_text}. "
                f"The reply is {num(output)} tokens long.\n{wanted}")
    queue_step = f"{num(queue_ms)} ms + " if queue_ms else ""
    steps = ["TTFT = queue + prompt tokens / prefill rate" if queue_ms else "TTFT = prompt tokens / prefill rate",
             f"TTFT = {queue_step}{num(prompt)} / {num(prefill_rate)} s = {sig(ttft * 1000)} ms"]
    if asked == "ttft":
        answer, unit = ttft * 1000, "ms"
    else:
        answer, unit = total, "s"
        steps += ["total = TTFT + (output tokens - 1) x time per decode step",
                  f"time per decode step = {sig(decode_ms)} ms",
                  f"total = {sig(ttft)} s + ({num(output)} - 1) x {sig(decode_ms)} ms = {sig(ttft)} s + "
                  f"{sig((output - 1) * decode_ms / 1000)} s = {sig(total)} s"]
    return Draft(question, answer, unit, "\n".join([*steps, answer_line(answer, unit)]), params)


def draw_decode_bandwidth_floor(rng: random.Random) -> Draft:
    for _ in range(1000):
        name = rng.choice(DENSE_MODELS)
        g = MODEL_GEOMETRIES[name]
        accelerator = rng.choice(tuple(ACCELERATORS.values()))
        weight_dtype, weight_bytes = rng.choice((("bf16", 2), ("int8", 1), ("int4", 0.5)))
        context = rng.choice([n for n in SEQ_LENS if n <= g.context_length])
        kv_kib = g.kv_bytes_per_token("fp16") // KIB
        weights = round(_params_billion(name) * 10) * 10**8 * weight_bytes  # exact: 8.0e9 x 2
        kv = context * kv_kib * KIB
        if weights + kv <= accelerator.memory_bytes:  # it has to fit on the one device
            break
    else:
        raise RuntimeError("no model that fits its accelerator in 1,000 draws")
    step_s = decode_step_floor_s(weights + kv, accelerator.bandwidth_gb_s)
    asked = rng.choice(("ms_per_token", "tokens_per_s"))
    if asked == "ms_per_token":
        answer, unit = step_s * 1000, "ms per token"
        wanted = "Ignoring compute, what is the shortest possible time per output token?\nAnswer in ms per token."
    else:
        answer, unit = 1 / step_s, "tokens/s"
        wanted = "Ignoring compute, what is the most tokens per second this one sequence can get?\nAnswer in tokens/s."
    question = (f"Decode {DISPLAY_NAMES[name]} ({num(_params_billion(name))} billion parameters, weights in "
                f"{weight_dtype} = {count(weight_bytes, 'byte')} each) at batch 1 on one {accelerator.name} with "
                f"{num(accelerator.bandwidth_gb_s)} GB/s of memory bandwidth (representative vendor figure; "
                f"1 GB = 10^9 bytes).\nThe sequence has {num(context)} tokens in its KV cache, at {num(kv_kib)} KiB per "
                f"token (1 KiB = 1,024 bytes). Each decode step reads every weight once and the whole cache.\n{wanted}")
    steps = [
        "bytes read per step = weights + KV cache; time per step >= bytes / bandwidth",
        f"weights = {num(_params_billion(name))}e9 x {num(weight_bytes)} = {num(weights)} bytes",
        f"KV cache = {num(context)} x {num(kv_kib)} x 1,024 = {num(kv)} bytes",
        f"bytes per step = {num(weights)} + {num(kv)} = {num(weights + kv)} bytes",
        f"time per step = {num(weights + kv)} / ({num(accelerator.bandwidth_gb_s)} x 10^9) s = {sig(step_s * 1000)} ms",
    ]
    if asked == "tokens_per_s":
        steps.append(f"tokens/s <= 1 / {sig(step_s)} s = {sig(answer)}")
    params = {"model": name, "params_billion": _params_billion(name), "weight_bytes_per_param": weight_bytes,
              "bandwidth_gb_s": accelerator.bandwidth_gb_s, "context_tokens": context, "kv_kib_per_token": kv_kib,
              "asked": asked}
    return Draft(question, answer, unit, "\n".join([*steps, answer_line(answer, unit)]), params)


def draw_flops_per_token(rng: random.Random) -> Draft:
    name = rng.choice(DENSE_MODELS)
    billions = _params_billion(name)
    asked = rng.choice(("per_token", "prefill", "prefill_ms"))
    params = {"model": name, "params_billion": billions, "asked": asked}
    model = f"{DISPLAY_NAMES[name]} (a dense model of {num(billions)} billion parameters)"
    steps = ["FLOPs per token ~ 2 x parameters (a multiply and an add per weight; attention's own work left out)"]
    if asked == "per_token":
        answer, unit = forward_flops(billions * 1e9) / 1e9, "GFLOP"
        question = f"About how many FLOPs does {model} spend to generate one token?\nAnswer in GFLOP (10^9 FLOPs)."
        steps.append(f"2 x {num(billions)}e9 = {sig(answer)}e9 FLOPs = {sig(answer)} GFLOP")
    else:
        # A prompt the model accepts, and (for a time) a part that prefills it in under 10 s at peak.
        prompt = 100 * rng.randint(5, min(320, MODEL_GEOMETRIES[name].context_length // 100))
        accelerators = [a for a in PEAK_TFLOPS if 2 * billions * 1e9 * prompt / (PEAK_TFLOPS[a] * 1e12) < 10]
        params["prompt_tokens"] = prompt
        flops = forward_flops(billions * 1e9, prompt)
        steps.append(f"prefill = 2 x {num(billions)}e9 x {num(prompt)} tokens = {sig(flops / 1e12)} TFLOP")
        if asked == "prefill":
            answer, unit = flops / 1e12, "TFLOP"
            question = (f"About how many FLOPs does {model} spend to prefill a {num(prompt)}-token prompt?\n"
                        f"Answer in TFLOP (10^12 FLOPs).")
        else:
            accelerator = rng.choice(accelerators)
            peak = PEAK_TFLOPS[accelerator]
            params["peak_tflops"] = peak
            answer, unit = flops / (peak * 1e12) * 1000, "ms"
            question = (f"{model} prefills a {num(prompt)}-token prompt on one {accelerator} that peaks at "
                        f"{num(peak)} TFLOP/s in dense bf16 (representative datasheet figure).\n"
                        f"Prefill is compute-bound: at full peak, how long does it take at the least?\nAnswer in ms.")
            steps.append(f"time = {sig(flops / 1e12)} TFLOP / {num(peak)} TFLOP/s = {sig(answer)} ms")
    return Draft(question, answer, unit, "\n".join([*steps, answer_line(answer, unit)]), params)


def draw_speculative_tokens_per_pass(rng: random.Random) -> Draft:
    alpha = round(rng.uniform(0.5, 0.95), 2)
    k = rng.randint(2, 8)
    answer = expected_tokens_per_round(alpha, k)
    question = (f"Speculative decoding: a draft model proposes k = {k} tokens, and the target model checks them in one "
                f"pass. Each drafted token is accepted with probability alpha = {num(alpha)}, independently; the pass "
                f"also yields one token of the target's own (a correction, or a bonus when all are accepted).\n"
                f"How many tokens does one target pass emit on average?\nAnswer in tokens per pass.")
    power = alpha ** (k + 1)
    steps = [
        "E = (1 - alpha^(k+1)) / (1 - alpha): the expected tokens one target pass emits",
        f"alpha^(k+1) = {num(alpha)}^{k + 1} = {sig(power)}",
        f"E = (1 - {sig(power)}) / (1 - {num(alpha)}) = {sig(1 - power)} / {sig(1 - alpha)} = {sig(answer)}",
        f"(between 1, when every draft is rejected, and k + 1 = {k + 1}, when all are accepted)",
        answer_line(answer, "tokens per pass"),
    ]
    params = {"alpha": alpha, "k": k}
    return Draft(question, answer, "tokens per pass", "\n".join(steps), params)


GENERATORS = (
    Generator("request_latency", "serving", "TTFT or total time from prefill and decode rates", draw_request_latency),
    Generator("decode_bandwidth_floor", "serving", "Decode's memory-bandwidth floor: ms per token or tokens/s",
              draw_decode_bandwidth_floor),
    Generator("flops_per_token", "serving", "FLOPs per token (about 2 x parameters), prefill FLOPs and time",
              draw_flops_per_token),
    Generator("speculative_tokens_per_pass", "serving", "Speculative decoding's expected tokens per target pass",
              draw_speculative_tokens_per_pass),
)
