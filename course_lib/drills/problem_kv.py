"""KV-cache drills (notebook 03): cache bytes for real and invented geometries, and what fits.

>>> from random import Random
>>> d = draw_kv_cache_bytes_real(Random(1))
>>> d.solution.splitlines()[0]
'KV bytes = 2 (K and V) x layers x KV heads x head dim x bytes per element x tokens x batch'

Real geometries come from ``course_lib.kv_memory.MODEL_GEOMETRIES`` (published configs) and
accelerators from ``ACCELERATORS`` (representative vendor figures, decimal GB); the answers
come from ``kv_cache_bytes`` and ``plan_capacity``.
"""
from __future__ import annotations

import random

from course_lib.drills.problem_model import Draft, Generator, answer_line, count, floor_is_clear, num, sig
from course_lib.kv_memory import (ACCELERATORS, GB, GIB, MIB, MODEL_GEOMETRIES, bytes_per_element, kv_cache_bytes,
                                  plan_capacity)

DISPLAY_NAMES = {"gpt-3-175b": "GPT-3 175B", "llama-2-7b": "Llama-2-7B", "llama-2-13b": "Llama-2-13B",
                 "llama-2-70b": "Llama-2-70B", "llama-3-8b": "Llama-3-8B", "llama-3-70b": "Llama-3-70B",
                 "mistral-7b": "Mistral-7B", "mixtral-8x7b": "Mixtral-8x7B", "qwen2.5-7b": "Qwen2.5-7B"}
SEQ_LENS = (1024, 2048, 4096, 8192, 16384, 32768)
BYTE_UNITS = {"GiB": (GIB, "1 GiB = 2^30 bytes"), "GB": (GB, "1 GB = 10^9 bytes"),
              "MiB": (MIB, "1 MiB = 2^20 bytes"), "MB": (10**6, "1 MB = 10^6 bytes")}
ATTENTION_WORDS = {"MHA": "multi-head attention: every query head has its own K and V head",
                   "MQA": "multi-query attention: all query heads share a single K and V head"}


def _byte_unit(rng: random.Random, n_bytes: int) -> str:
    """GiB or GB from a gibibyte up, MiB or MB below: the candidate must mind which."""
    return rng.choice(("GiB", "GB")) if n_bytes >= GIB else rng.choice(("MiB", "MB"))


def _sequences(batch: int, seq_len: int) -> str:
    return f"{count(batch, 'sequence')} of {num(seq_len)} tokens{' each' if batch > 1 else ''}"


def _geometry_text(name: str) -> str:
    g = MODEL_GEOMETRIES[name]
    return (f"{DISPLAY_NAMES[name]} (representative published geometry: {num(g.n_layers)} layers, "
            f"{num(g.n_heads)} query heads, {num(g.n_kv_heads)} KV heads ({g.attention_kind}), "
            f"head dim {num(g.head_dim)})")


def _kv_steps(layers: int, kv_heads: int, head_dim: int, element: float, seq_len: int, batch: int,
              unit: str) -> tuple[list[str], float]:
    """The worked KV-bytes arithmetic, each product from ``kv_cache_bytes``, and the answer in ``unit``."""
    per_token = kv_cache_bytes(layers, kv_heads, head_dim, 1, bytes_per_element=element)
    per_sequence = kv_cache_bytes(layers, kv_heads, head_dim, seq_len, bytes_per_element=element)
    total = kv_cache_bytes(layers, kv_heads, head_dim, seq_len, bytes_per_element=element, batch=batch)
    size, definition = BYTE_UNITS[unit]
    answer = total / size
    steps = [
        "KV bytes = 2 (K and V) x layers x KV heads x head dim x bytes per element x tokens x batch",
        f"per token: 2 x {num(layers)} x {num(kv_heads)} x {num(head_dim)} x {num(element)} = {num(per_token)} bytes "
        f"({sig(per_token / 1024)} KiB)",
        f"per sequence: {num(per_token)} x {num(seq_len)} tokens = {num(per_sequence)} bytes",
        f"batch of {num(batch)}: {num(per_sequence)} x {num(batch)} = {num(total)} bytes",
        f"in {unit} ({definition}): {num(total)} / {num(size)} = {sig(answer)} {unit}",
        answer_line(answer, unit),
    ]
    return steps, answer


def draw_kv_cache_bytes_real(rng: random.Random) -> Draft:
    name = rng.choice(tuple(DISPLAY_NAMES))
    g = MODEL_GEOMETRIES[name]
    dtype = rng.choice(("fp16", "bf16", "fp8", "int8"))
    element = bytes_per_element(dtype)
    seq_len = rng.choice([n for n in SEQ_LENS if n <= g.context_length])
    batch = rng.choice((1, 2, 4, 8, 16, 32))
    unit = _byte_unit(rng, g.kv_cache_bytes(seq_len, dtype, batch=batch))
    steps, answer = _kv_steps(g.n_layers, g.n_kv_heads, g.head_dim, element, seq_len, batch, unit)
    question = (f"Model: {_geometry_text(name)}.\n"
                f"The KV cache is stored in {dtype} ({count(element, 'byte')} per element) and keeps every position "
                f"(ignore any sliding window).\n"
                f"How much memory does the KV cache take for a batch of {_sequences(batch, seq_len)}?\n"
                f"Answer in {unit} ({BYTE_UNITS[unit][1]}).")
    params = {"model": name, "n_layers": g.n_layers, "n_heads": g.n_heads, "n_kv_heads": g.n_kv_heads,
              "head_dim": g.head_dim, "bytes_per_element": element, "seq_len": seq_len, "batch": batch, "unit": unit}
    return Draft(question, answer, unit, "\n".join(steps), params)


def draw_kv_cache_bytes_invented(rng: random.Random) -> Draft:
    for _ in range(1000):
        layers = rng.choice((12, 16, 24, 28, 32, 40, 48, 60, 80, 96))
        n_heads = rng.choice((8, 12, 16, 24, 32, 40, 48, 64, 96, 128))
        head_dim = rng.choice((64, 80, 96, 128, 256))
        attention = rng.choice(("MHA", "GQA", "MQA"))
        group = rng.choice([g for g in (2, 4, 8, 16) if n_heads % g == 0 and g < n_heads]) if attention == "GQA" else None
        kv_heads = n_heads if attention == "MHA" else 1 if attention == "MQA" else n_heads // group
        dtype, element = rng.choice((("fp32", 4), ("fp16", 2), ("bf16", 2), ("int8", 1), ("int4", 0.5)))
        seq_len = rng.choice((512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072))
        batch = rng.choice((1, 2, 4, 8, 16, 32, 64, 128))
        total = kv_cache_bytes(layers, kv_heads, head_dim, seq_len, bytes_per_element=element, batch=batch)
        if 16 * MIB <= total <= 640 * GB:  # from a small cache up to a full 8 x 80 GB node
            break
    else:
        raise RuntimeError("no sensible invented geometry in 1,000 draws")
    unit = _byte_unit(rng, total)
    if attention == "GQA":
        sharing = f"grouped-query attention: each K and V head serves a group of {num(group)} query heads"
        heads_step = f"KV heads: GQA with groups of {num(group)} -> {num(n_heads)} / {num(group)} = {num(kv_heads)}"
    else:
        sharing = ATTENTION_WORDS[attention]
        heads_step = f"KV heads: {attention} -> {num(kv_heads)}"
    steps, answer = _kv_steps(layers, kv_heads, head_dim, element, seq_len, batch, unit)
    question = (f"An invented model has {num(layers)} layers, {num(n_heads)} query heads of head dim {num(head_dim)}, "
                f"and uses {sharing}.\n"
                f"The KV cache is stored in {dtype} ({count(element, 'byte')} per element) and keeps every position.\n"
                f"How much memory does the KV cache take for {_sequences(batch, seq_len)}?\n"
                f"Answer in {unit} ({BYTE_UNITS[unit][1]}).")
    params = {"n_layers": layers, "n_heads": n_heads, "attention": attention, "head_dim": head_dim,
              "bytes_per_element": element, "seq_len": seq_len, "batch": batch, "unit": unit}
    if group is not None:
        params["group_size"] = group
    return Draft(question, answer, unit, "\n".join([heads_step, *steps]), params)


def _serving_setup(rng: random.Random) -> dict:
    """A model, an accelerator (possibly several), dtypes and a reserve, all drawn."""
    name = rng.choice(tuple(DISPLAY_NAMES))
    accelerator = rng.choice(tuple(ACCELERATORS.values()))
    weight_dtype, weight_bytes = rng.choice((("bf16", 2), ("fp8", 1), ("int8", 1), ("int4", 0.5)))
    kv_dtype, kv_bytes = rng.choice((("bf16", 2), ("fp8", 1)))
    return {"model": name, "accelerator": accelerator.name, "memory_gb": accelerator.memory_gb,
            "n_devices": rng.choice((1, 1, 2, 4, 8)), "weight_dtype": weight_dtype, "weight_bytes_per_param": weight_bytes,
            "kv_dtype": kv_dtype, "kv_bytes_per_element": kv_bytes, "reserve_gb": rng.choice((2, 4, 5, 8, 10, 16))}


def _setup_text(s: dict) -> str:
    g = MODEL_GEOMETRIES[s["model"]]
    devices = (f"one {s['accelerator']} with {num(s['memory_gb'])} GB of memory" if s["n_devices"] == 1
               else f"{num(s['n_devices'])} x {s['accelerator']} (weights and cache split evenly across them), "
                    f"{num(s['memory_gb'])} GB of memory each")
    return (f"Serve {DISPLAY_NAMES[s['model']]} ({num(g.n_params)} parameters; representative published geometry: "
            f"{num(g.n_layers)} layers, {num(g.n_kv_heads)} KV heads, head dim {num(g.head_dim)}) on {devices} "
            f"(representative vendor figure; 1 GB = 10^9 bytes).\n"
            f"Weights in {s['weight_dtype']} ({count(s['weight_bytes_per_param'], 'byte')} per parameter); KV cache in "
            f"{s['kv_dtype']} ({count(s['kv_bytes_per_element'], 'byte')} per element), every position kept.\n"
            f"Keep {num(s['reserve_gb'])} GB in total in reserve for activations and the runtime.")


def _plan(s: dict, seq_len: int):
    return plan_capacity(s["model"], seq_len, accelerator=s["accelerator"], n_devices=s["n_devices"],
                         weight_dtype=s["weight_bytes_per_param"], kv_dtype=s["kv_bytes_per_element"],
                         reserve_bytes=s["reserve_gb"] * GB)


def _budget_steps(s: dict, plan) -> list[str]:
    g = MODEL_GEOMETRIES[s["model"]]
    return [
        f"memory = {num(s['n_devices'])} x {num(s['memory_gb'])} GB = {num(plan.memory_bytes)} bytes",
        f"weights = {num(g.n_params)} x {num(s['weight_bytes_per_param'])} = {num(plan.weight_bytes)} bytes",
        f"reserve = {num(s['reserve_gb'])} GB = {num(plan.reserve_bytes)} bytes",
        f"KV budget = {num(plan.memory_bytes)} - {num(plan.weight_bytes)} - {num(plan.reserve_bytes)} "
        f"= {num(plan.kv_budget_bytes)} bytes",
    ]


def draw_max_batch_fits(rng: random.Random) -> Draft:
    for _ in range(1000):
        s = _serving_setup(rng)
        g = MODEL_GEOMETRIES[s["model"]]
        seq_len = rng.choice([n for n in SEQ_LENS if n <= g.context_length])
        plan = _plan(s, seq_len)
        if plan.fits_weights and 1 <= plan.max_sequences <= 1024 and floor_is_clear(
                plan.kv_budget_bytes / plan.kv_bytes_per_sequence):
            break
    else:
        raise RuntimeError("no serving setup with a clear whole number of sequences in 1,000 draws")
    question = (f"{_setup_text(s)}\nEvery sequence holds {num(seq_len)} tokens. How many sequences fit in memory at "
                f"once?\nAnswer in sequences (a whole number).")
    element = s["kv_bytes_per_element"]
    steps = [*_budget_steps(s, plan),
             f"KV per sequence = 2 x {num(g.n_layers)} x {num(g.n_kv_heads)} x {num(g.head_dim)} x {num(element)} "
             f"x {num(seq_len)} = {num(plan.kv_bytes_per_sequence)} bytes",
             f"sequences = floor({num(plan.kv_budget_bytes)} / {num(plan.kv_bytes_per_sequence)}) = "
             f"floor({plan.kv_budget_bytes / plan.kv_bytes_per_sequence:.2f}) = {num(plan.max_sequences)}",
             answer_line(plan.max_sequences, "sequences")]
    params = {**s, "n_params": g.n_params, "n_layers": g.n_layers, "n_kv_heads": g.n_kv_heads,
              "head_dim": g.head_dim, "seq_len": seq_len}
    return Draft(question, plan.max_sequences, "sequences", "\n".join(steps), params, tolerance=0.0)


def draw_max_context_fits(rng: random.Random) -> Draft:
    for _ in range(1000):
        s = _serving_setup(rng)
        g = MODEL_GEOMETRIES[s["model"]]
        batch = rng.choice((1, 2, 4, 8, 16, 32, 64, 128))
        plan = _plan(s, 1)  # seq_len 1: kv_bytes_per_sequence is the bytes of one token
        answer = plan.max_tokens_in_cache // batch
        if plan.fits_weights and 512 <= answer <= 500_000:
            break
    else:
        raise RuntimeError("no serving setup with a sensible context length in 1,000 draws")
    per_token = plan.kv_bytes_per_sequence
    question = (f"{_setup_text(s)}\nThe server runs {count(batch, 'sequence')} at once, all of the same length. "
                f"What is the longest "
                f"that length can be, in tokens? Memory alone decides: ignore the model's trained context limit.\n"
                f"Answer in tokens per sequence.")
    steps = [*_budget_steps(s, plan),
             f"KV per token = 2 x {num(g.n_layers)} x {num(g.n_kv_heads)} x {num(g.head_dim)} x "
             f"{num(s['kv_bytes_per_element'])} = {num(per_token)} bytes",
             f"tokens in the cache = floor({num(plan.kv_budget_bytes)} / {num(per_token)}) = "
             f"{num(plan.max_tokens_in_cache)}",
             f"per sequence = floor({num(plan.max_tokens_in_cache)} / {num(batch)}) = {num(answer)} tokens",
             answer_line(answer, "tokens")]
    params = {**s, "n_params": g.n_params, "n_layers": g.n_layers, "n_kv_heads": g.n_kv_heads,
              "head_dim": g.head_dim, "batch": batch}
    return Draft(question, answer, "tokens", "\n".join(steps), params)


GENERATORS = (
    Generator("kv_cache_bytes_real", "kv_cache", "KV-cache bytes of a real model's published geometry",
              draw_kv_cache_bytes_real),
    Generator("kv_cache_bytes_invented", "kv_cache", "KV-cache bytes of an invented geometry (MHA, GQA or MQA)",
              draw_kv_cache_bytes_invented),
    Generator("max_batch_fits", "kv_cache", "How many sequences fit beside the weights", draw_max_batch_fits),
    Generator("max_context_fits", "kv_cache", "The longest context a batch can hold beside the weights",
              draw_max_context_fits),
)
