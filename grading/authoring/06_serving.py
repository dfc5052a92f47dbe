# %% [markdown]
# # 06 · Serving: where latency and cost come from
#
# Until now one request had the model to itself. A real server has hundreds in flight, a
# fixed amount of accelerator memory, and a bill that grows with the hours the accelerator
# runs. This notebook takes the request apart in time (what the user waits for, and why) and
# then looks at the machinery a serving engine uses to keep many requests moving at once:
# batching, paged memory, shared prefixes, guessing ahead, and smaller weights. Every idea is
# measured on the course's own engine, running `tinychat` on this machine.
#
# **By the end of this notebook you can**
# - split a request's latency into time to first token (set by prefill) and the time per
#   output token (set by decode), and compute TTFT, TPOT and ITL from a stream of timestamps;
# - work the roofline: why one decode step is bounded by memory bandwidth, for the course
#   model on this CPU and for an 8B model on a datacenter GPU;
# - say what continuous batching gains over static batching and what it costs, and write one
#   step of a continuous-batching scheduler with chunked prefill and preemption;
# - measure the memory paging saves, and build a block allocator with reference counts and
#   prefix caching, with the hash check that makes sharing safe;
# - implement the speculative accept/resample rule and show that it keeps the target's
#   distribution; measure when speculation pays;
# - quantize weights to int8 per output channel and measure what it saves and what it costs;
# - load-test an OpenAI-compatible server and read its throughput/latency curve.
#
# **Prerequisites:** notebook 03 (the KV cache, its size, why decode reads memory) and
# notebook 04 (sampling, seeded generators, inverse-CDF draws); notebook 00's request stages.
# You should be comfortable with Python dicts, lists and classes, and PyTorch tensors.
#
# **Time:** about 205 minutes (a first careful pass with all six exercises).
#
# **Grading:** the course's own implementations that the setup cell imports are there for the
# demos. While your notebook is graded they are switched off, and so are the visible checks
# and the libraries the tests compare against: each answer must be your own code.

# %% [setup]
import asyncio
import concurrent.futures
import hashlib
import random
import statistics
import time
from array import array
from collections import deque

import matplotlib.pyplot as plt
import torch

from course_lib.api.child_server import child_server
from course_lib.api.loadgen import held_out_prompts, run_benchmark, summarize
from course_lib.data.corpus import heldout_split
from course_lib.data.scoring import SCORERS
from course_lib.kv_memory import ACCELERATORS, compare_paging, get_geometry, kv_bytes_per_token, plan_capacity
from course_lib.model import load_model, load_tokenizer, use_reference_threads
from course_lib.sampling import SamplingParams, sample_from_probs
from course_lib.serving import Engine, expected_tokens_per_round, quantize_int8, weight_bytes
from course_lib.serving import quantize as course_quantize
from course_lib.tokenization.chat_template import encode_chat

use_reference_threads()  # two CPU threads, as on the course's reference machine (the grader sets one)


def chain_hash(parent, block_tokens):
    """64-bit hash of one block of token ids, chained to the hash of the block before it
    (None for a sequence's first block): equal hashes mean equal blocks *and* equal prefixes,
    unless two inputs collide."""
    h = hashlib.blake2b(digest_size=8)
    if parent is not None:
        h.update(parent.to_bytes(8, "little"))
    h.update(array("q", block_tokens).tobytes())
    return int.from_bytes(h.digest(), "little")

# %% [checks]
# The visible checks and their hints (grading runs without them: the answers must be your own).
from course_lib.checks import serving as check
from course_lib.checks.hints import Hints
hint = Hints(check.HINTS)  # hint("exercise_name") shows the next hint for that exercise

# %% [markdown]
# ## One request, two phases
#
# A chat request is served in two very different phases.
#
# - **Prefill.** The whole prompt goes through the model in one forward pass. All its tokens
#   are known, so they are processed side by side, and the pass ends with the logits of the
#   first reply token. Its duration (plus any wait in the queue before it) sets the **time
#   to first token** (TTFT).
# - **Decode.** Then one token per forward pass, each reading the cache that prefill (and the
#   earlier decode steps) wrote. Its pace sets the **time per output token** (TPOT) and the
#   gaps the user sees between streamed chunks, the **inter-token latency** (ITL).
#
# The course engine runs one forward pass per `step()`, so timing steps of a single request
# shows the two phases directly. We make prompts of several lengths with a long system
# message and ask for a fixed number of reply tokens (`eos_ids=()` turns off the end token so
# every run decodes the same count).

# %%
model = load_model("tinychat", device="cpu")
tokenizer = load_tokenizer("tinychat")
Engine(model, tokenizer).generate([[{"role": "user", "content": "Hello!"}]], SamplingParams(temperature=0))  # warm-up


def system_prompt(n_tokens):
    """A system message of about n_tokens tokens once templated: numbered house rules."""
    rules = []
    while len(encode_chat(tokenizer, [{"role": "system", "content": " ".join(rules)}])) < n_tokens:
        rules.append(f"Rule {len(rules)}: answer briefly and politely.")
    return {"role": "system", "content": " ".join(rules)}


def step_times(messages, new_tokens=6):
    """Seconds of each engine step for one request alone, step by step."""
    engine = Engine(model, tokenizer)
    engine.add_request(messages, SamplingParams(temperature=0, max_new_tokens=new_tokens), eos_ids=())
    seconds = []
    while engine.has_unfinished():
        start = time.perf_counter()
        engine.step()
        seconds.append(time.perf_counter() - start)
    return seconds


def best_step_times(prompts, repeats=3):
    """The fastest of `repeats` runs for each step of each prompt. The runs are interleaved
    (every prompt once, then again), so a burst of load on this shared machine slows one run
    of each prompt instead of every run of one prompt."""
    best = [None] * len(prompts)
    for _ in range(repeats):
        for i, messages in enumerate(prompts):
            seconds = step_times(messages)
            best[i] = seconds if best[i] is None else [min(a, b) for a, b in zip(best[i], seconds)]
    return best

# %%
question = {"role": "user", "content": "What is 12 + 30?"}
prompts = [[system_prompt(target), question] for target in (64, 160, 320, 448)]
rows = [(len(encode_chat(tokenizer, messages)), seconds[0], statistics.median(seconds[1:]))
        for messages, seconds in zip(prompts, best_step_times(prompts))]
print(f"{'prompt tokens':>13} {'prefill ms':>11} {'ms per prompt token':>20} {'decode ms per token':>20} "
      f"{'prefill = decode steps':>23}")
for n_prompt, prefill_s, decode_s in rows:
    print(f"{n_prompt:>13} {prefill_s * 1e3:>11.2f} {prefill_s * 1e3 / n_prompt:>20.4f} {decode_s * 1e3:>20.2f} "
          f"{prefill_s / decode_s:>23.1f}")

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2))
left.plot([r[0] for r in rows], [r[1] * 1e3 for r in rows], "o-", label="prefill (the whole prompt)")
left.plot([r[0] for r in rows], [r[2] * 1e3 for r in rows], "s-", label="one decode step")
left.set_xlabel("prompt tokens")
left.set_ylabel("ms")
left.set_title("one forward pass")
left.legend()
n_prompt, prefill_s, decode_s = rows[-1]
seconds = step_times([system_prompt(448), question], new_tokens=24)
right.step([0] + list(1e3 * torch.tensor(seconds).cumsum(0)), range(len(seconds) + 1), where="post")
right.axvline(seconds[0] * 1e3, ls=":", c="k")
right.text(seconds[0] * 1e3, 2, " first token (TTFT)", fontsize=9)
right.set_xlabel("ms since the request started")
right.set_ylabel("reply tokens so far")
right.set_title(f"a {n_prompt}-token prompt, 24 reply tokens")
plt.tight_layout()
plt.show()

# %% [markdown]
# Read the table by columns. Prefill's work grows with the prompt, but the pass handles all
# the prompt's tokens side by side, so the fixed costs of a forward pass (and every weight
# read) are shared by all of them. That is what the last column measures: a prefill's time
# counted in decode steps, which on an idle machine stays far below the prompt's length in
# tokens. A decode step pays those fixed costs for a single token, and its work grows only a
# little with the prompt (attention reads a longer cache, a small part of the step at this
# size). On the right, the staircase's first step is the prefill (the dotted line marks the
# first token), then it climbs a token at a time. Every figure in the table is the fastest
# of three interleaved runs, yet a burst of other work on this shared 2-core machine can
# still distort a row; if one breaks the pattern, run the cell again.
#
# On hosted models the same split shows at a larger scale. Representative figures (they vary
# by provider, model and load): a TTFT of roughly 200 to 500 ms for a 1,000-token prompt, and
# 20 to 50 ms per output token. The arithmetic that follows matters for product design:

# %%
for ms_per_token in (20, 50):  # representative hosted decode speeds
    print(f"{ms_per_token} ms per token: a 500-token answer adds {500 * ms_per_token / 1000:.0f} s after the first token")

# %% [markdown]
# So the levers for latency are different for the two phases. **Less input** (retrieve the
# three relevant paragraphs instead of pasting the whole manual) and **prefix caching** (do
# not prefill the same system prompt twice) cut TTFT. **Output caps** and asking for shorter
# answers cut the decode time, which usually dominates. **Streaming** does not make anything
# faster; it shows the first tokens after TTFT instead of the whole answer after the full
# duration, which is what users perceive.
#
# ### Exercise 1 — TTFT, TPOT and ITL from a stream
#
# A benchmark client writes down when it sent a request and when each streamed chunk
# arrived. Write `stream_metrics(start, chunk_times, output_tokens, end)`:
#
# - `start` is when the request was sent, `chunk_times` the arrival time of each chunk that
#   carried text (in order), `end` when the stream finished, all seconds on one clock;
#   `output_tokens` is how many tokens the reply had (the server's usage count: a chunk can
#   carry more than one token, so it need not equal the number of chunks).
# - Return a dict with four keys:
#   - `"ttft"`: the first chunk's time minus `start`; when there is no chunk at all, the reply
#     was complete (and empty) at `end`, so `end - start`;
#   - `"latency"`: `end - start` (end-to-end latency);
#   - `"tpot"`: `(latency - ttft) / (output_tokens - 1)`, the time per output token after the
#     first; `None` when `output_tokens` is 0 or 1 (there is no second token to time);
#   - `"itl"`: the list of gaps between consecutive chunks, `chunk_times[i + 1] - chunk_times[i]`
#     (one fewer than the chunks; the wait for the first chunk is TTFT, not an ITL).
# - Raise `ValueError` when the times go backwards: a chunk before `start`, a chunk earlier
#   than the one before it, or `end` before the last chunk.
#
# These are the definitions `course bench-serve` (and vLLM's benchmark) use; the visible
# checks compare you with the course's load generator. Stuck? `hint("stream_metrics")`.

# %% [solution] stream_metrics
def stream_metrics(start, chunk_times, output_tokens, end):
    ### BEGIN SOLUTION
    times = [start, *chunk_times, end]
    if any(later < earlier for earlier, later in zip(times, times[1:])):
        raise ValueError("times go backwards: need start <= each chunk (in order) <= end")
    ttft = (chunk_times[0] if chunk_times else end) - start
    latency = end - start
    tpot = (latency - ttft) / (output_tokens - 1) if output_tokens > 1 else None
    itl = [later - earlier for earlier, later in zip(chunk_times, chunk_times[1:])]
    return {"ttft": ttft, "latency": latency, "tpot": tpot, "itl": itl}
    ### END SOLUTION

# %% [tests] stream_metrics points=2
check.stream_metrics(stream_metrics)

# %% [markdown]
# Your function on a real stream: the engine's `stream()` yields one output per step, and we
# note the clock each time text arrives.

# %%
engine = Engine(model, tokenizer)
messages = [system_prompt(300), {"role": "user", "content": "Extract the booking as JSON: table for 4 under Kim, Friday 20:00."}]
start, chunk_times, n_tokens = time.perf_counter(), [], 0
for output in engine.stream(messages, SamplingParams(temperature=0, max_new_tokens=60)):
    if output.text:
        chunk_times.append(time.perf_counter())
    n_tokens += len(output.token_ids)
end = time.perf_counter()
measured = stream_metrics(start, chunk_times, n_tokens, end)
print(f"{n_tokens} tokens in {len(chunk_times)} chunks: TTFT {measured['ttft'] * 1e3:.1f} ms, "
      f"TPOT {measured['tpot'] * 1e3:.2f} ms, latency {measured['latency'] * 1e3:.1f} ms")
print(f"ITL median {statistics.median(measured['itl']) * 1e3:.2f} ms, max {max(measured['itl']) * 1e3:.2f} ms")

# %% [markdown]
# ## Why decode waits on memory
#
# One decode step multiplies every weight matrix by a single vector per sequence: about
# $2 \times \text{parameters}$ floating-point operations per token (a multiply and an add per
# weight, notebook 03). To do that the chip must bring *every weight* from memory into its
# arithmetic units once per step, plus each sequence's KV cache. So a step costs at least
#
# $$t_\text{memory} = \frac{\text{bytes read}}{\text{bandwidth}}, \qquad
#   t_\text{compute} = \frac{\text{FLOPs}}{\text{peak FLOP/s}},$$
#
# and it takes about the larger of the two. FLOPs divided by bytes read is the step's
# **arithmetic intensity**; the chip's **ridge point** is peak FLOP/s divided by bandwidth. Below
# the ridge the arithmetic units wait for memory (memory-bound); above it they are the limit
# (compute-bound). At batch 1 decode does about 2 FLOPs per parameter and reads 2 bytes per
# parameter in bf16: an intensity near 1, far below any modern accelerator's ridge. Batching
# helps because one read of the weights serves every sequence in the batch; each sequence's
# own cache still has to be read separately.
#
# First, this machine. We measure how fast it reads a large array and how fast it multiplies
# matrices, then compare what tinychat's decode step reads with what it computes.

# %%
big = torch.ones(64 * 2**20)  # 256 MiB of float32, far larger than any CPU cache
best_read = float("inf")
for _ in range(5):
    t0 = time.perf_counter()
    big.sum()
    best_read = min(best_read, time.perf_counter() - t0)
cpu_bandwidth = big.numel() * big.element_size() / best_read  # bytes per second
a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
best_matmul = float("inf")
for _ in range(5):
    t0 = time.perf_counter()
    a @ b
    best_matmul = min(best_matmul, time.perf_counter() - t0)
cpu_flops = 2 * 1024**3 / best_matmul  # FLOP per second
del big
tiny_params, tiny_weight_bytes = model.num_parameters(), weight_bytes(model)
cfg = model.config
tiny_kv_per_token = kv_bytes_per_token(cfg.n_layers, cfg.n_kv_heads, cfg.d_model // cfg.n_heads, bytes_per_element=4)
print(f"this CPU (measured): reads about {cpu_bandwidth / 1e9:.1f} GB/s, multiplies at about {cpu_flops / 1e9:.0f} GFLOP/s "
      f"-> ridge {cpu_flops / cpu_bandwidth:.0f} FLOPs per byte")
print(f"tinychat: {tiny_params:,} parameters, {tiny_weight_bytes / 1e6:.2f} MB of float32 weights and tables, "
      f"{tiny_kv_per_token:,} bytes of KV per token")

# %% [markdown]
# ### Exercise 2 — roofline arithmetic
#
# Write `decode_roofline(n_params, bytes_per_param, kv_bytes_per_seq, batch, bandwidth_gb_s,
# peak_tflops)` for one decode step of `batch` sequences:
#
# - Units: `bandwidth_gb_s` is decimal gigabytes per second (1 GB = $10^9$ bytes, as vendors
#   quote it; not $2^{30}$, and bytes, not bits); `peak_tflops` is $10^{12}$ FLOP per second.
#   `kv_bytes_per_seq` is the KV cache each sequence reads in the step (its whole cache).
# - `"bytes_per_step"`: the weights once for the whole batch plus every sequence's cache,
#   `n_params * bytes_per_param + batch * kv_bytes_per_seq`.
# - `"flops_per_step"`: `2 * n_params * batch` (ignore attention's own arithmetic).
# - `"intensity"`: FLOPs per byte, `flops_per_step / bytes_per_step`; `"ridge"`: peak FLOP/s
#   divided by bandwidth in bytes/s.
# - `"step_s"`: the larger of the memory time (bytes / bandwidth) and the compute time
#   (FLOPs / peak); `"tokens_per_s"`: `batch / step_s`, every sequence gains one token per step.
# - `"bound"`: `"memory"` when the memory time is at least the compute time, else `"compute"`.
# - Raise `ValueError` when `batch < 1`, when `kv_bytes_per_seq < 0`, or when `n_params`,
#   `bytes_per_param`, the bandwidth or the peak is not positive.
#
# Return a dict with exactly those seven keys. Stuck? `hint("decode_roofline")`.

# %% [solution] decode_roofline
def decode_roofline(n_params, bytes_per_param, kv_bytes_per_seq, batch, bandwidth_gb_s, peak_tflops):
    ### BEGIN SOLUTION
    if batch < 1 or kv_bytes_per_seq < 0 or min(n_params, bytes_per_param, bandwidth_gb_s, peak_tflops) <= 0:
        raise ValueError("need batch >= 1, kv_bytes_per_seq >= 0 and positive sizes, bandwidth and peak")
    bandwidth = bandwidth_gb_s * 1e9  # bytes per second
    peak = peak_tflops * 1e12  # FLOP per second
    bytes_per_step = n_params * bytes_per_param + batch * kv_bytes_per_seq
    flops_per_step = 2 * n_params * batch
    memory_s, compute_s = bytes_per_step / bandwidth, flops_per_step / peak
    step_s = max(memory_s, compute_s)
    return {"bytes_per_step": bytes_per_step, "flops_per_step": flops_per_step,
            "intensity": flops_per_step / bytes_per_step, "ridge": peak / bandwidth, "step_s": step_s,
            "tokens_per_s": batch / step_s, "bound": "memory" if memory_s >= compute_s else "compute"}
    ### END SOLUTION

# %% [tests] decode_roofline points=2
check.decode_roofline(decode_roofline)

# %% [markdown]
# Now both machines. For the datacenter case we take Llama 3.1 8B in bf16 (its geometry is
# Llama 3 8B's) on an NVIDIA H100 SXM: **representative (vendor datasheet)** figures of
# 3.35 TB/s of memory bandwidth and about 989 dense bf16 TFLOP/s, with a 4,096-token
# context per sequence.

# %%
llama = get_geometry("llama-3-8b")  # Llama 3.1 8B has the same layers and heads
h100 = ACCELERATORS["H100-80GB"]  # representative (vendor datasheet): 3,350 GB/s
H100_DENSE_BF16_TFLOPS = 989  # representative (vendor datasheet), dense, no sparsity
capacity = plan_capacity(llama, 4096, accelerator=h100)  # notebook 03's plan: bf16 weights and cache, 10% reserve
kv_4k = capacity.kv_bytes_per_sequence  # one sequence's cache at 4,096 tokens
decode_s = rows[-1][2]  # tinychat's measured decode step at the longest prompt above
roofline_batches = sorted({1, 8, 64, capacity.max_sequences, 256, 1024})  # the largest batch that fits among them

tiny = decode_roofline(tiny_params, 4, tiny_kv_per_token * rows[-1][0], 1, cpu_bandwidth / 1e9, cpu_flops / 1e12)
print(f"tinychat, batch 1, this CPU: the bandwidth bound allows {tiny['tokens_per_s']:,.0f} tokens/s "
      f"({tiny['bound']}-bound, intensity {tiny['intensity']:.2f}); measured: {1 / decode_s:,.0f} tokens/s")
print(f"  measured / bound = {tiny['step_s'] / decode_s:.3f}: the bytes explain "
      f"{100 * tiny['step_s'] / decode_s:.0f}% of the measured step")
print(f"\nLlama 3.1 8B bf16 on {h100.name} (representative), 4,096-token contexts:")
print(f"memory: {capacity.memory_bytes / 1e9:.0f} GB = {capacity.weight_bytes / 1e9:.2f} GB of weights + "
      f"{capacity.reserve_bytes / 1e9:.0f} GB reserve + {kv_4k / 1e9:.3f} GB of KV per sequence "
      f"-> at most {capacity.max_sequences} sequences fit")
print(f"{'batch':>6} {'weights + KV GB':>16} {'FLOPs/byte':>11} {'ms/step':>8} {'tokens/s':>9} {'per sequence':>13}  bound")
for batch in roofline_batches:
    r = decode_roofline(llama.n_params, 2, kv_4k, batch, h100.bandwidth_gb_s, H100_DENSE_BF16_TFLOPS)
    fits = "" if batch <= capacity.max_sequences else "  DOES NOT FIT: arithmetic only"
    print(f"{batch:>6} {r['bytes_per_step'] / 1e9:>16.1f} {r['intensity']:>11.1f} {r['step_s'] * 1e3:>8.2f} "
          f"{r['tokens_per_s']:>9,.0f} {r['tokens_per_s'] / batch:>13,.1f}  {r['bound']} (ridge {r['ridge']:.0f}){fits}")
full = decode_roofline(llama.n_params, 2, kv_4k, capacity.max_sequences, h100.bandwidth_gb_s, H100_DENSE_BF16_TFLOPS)
print(f"memory binds first: the fullest batch that fits ({capacity.max_sequences}) reaches {full['intensity']:.1f} "
      f"FLOPs/byte, {full['intensity'] / full['ridge']:.0%} of the ridge; no batch can pass "
      f"2 x params / KV per sequence = {2 * llama.n_params / kv_4k:.1f}")

# %% [markdown]
# Three lessons hide in those lines.
#
# - **The 8B model at batch 1** can produce at most a couple of hundred tokens per second,
#   however fast the arithmetic: every token needs all the weights (the gigabytes printed
#   above) to stream through the chip. That is where the "20 to 50 ms per token" of hosted
#   models comes from, once larger models, shared load and overheads are added.
# - **Memory binds before intensity.** Each sequence's cache at 4,096 tokens takes about half
#   a gigabyte, so notebook 03's capacity plan lets only the printed number of sequences sit
#   beside the weights and the reserve. The rows marked "does not fit" are arithmetic that no
#   80 GB chip can run. Batching raises the total while the weights dominate the bytes, but
#   every added sequence brings its own cache to read, and at the fullest batch that fits
#   the intensity is still a small fraction of the ridge. Smaller caches (grouped-query
#   attention, notebook 02; int8 caches) let more sequences fit and move that wall.
# - **tinychat on this CPU** is a different animal: its weights are a few megabytes, small
#   enough to fit in a typical CPU's last-level cache, so main-memory bandwidth explains only
#   the share of the measured step printed above. What is left is the fixed cost of a step (Python, the
#   scheduler, launching dozens of small operations). Tiny models are overhead-bound, and
#   that is why the engine works hard to do more per step.
#
# The classic roofline picture puts these on one chart: attainable FLOP/s against intensity,
# a slanted memory roof and a flat compute roof meeting at the ridge. Filled points are the
# batches that fit in the chip's memory, hollow red ones those that do not; the dashed line
# marks the fullest batch that fits, left of the ridge.

# %%
intensities = torch.logspace(-1, 4, 200)
roof = torch.minimum(intensities * h100.bandwidth_gb_s * 1e9, torch.tensor(H100_DENSE_BF16_TFLOPS * 1e12))
fig, ax = plt.subplots(figsize=(6.5, 3.6))
ax.loglog(intensities, roof / 1e12, "k-", label="H100 SXM roof (representative)")
def llama_point(batch):
    """(intensity, attainable TFLOP/s) of one decode step, worked here by hand so the plot does
    not depend on your decode_roofline."""
    intensity = 2 * llama.n_params * batch / (2 * llama.n_params + batch * kv_4k)
    return intensity, min(intensity * h100.bandwidth_gb_s * 1e9, H100_DENSE_BF16_TFLOPS * 1e12) / 1e12


nearby = iter([(-52, 2), (6, -12), (-12, 8), (6, 18)])  # the four large batches crowd together: spread their labels
for batch in roofline_batches:
    fits = batch <= capacity.max_sequences
    ax.plot(*llama_point(batch), "o", mfc=None if fits else "none", c="tab:blue" if fits else "tab:red")
    ax.annotate(f"batch {batch}" + ("" if fits else " (does not fit)"), llama_point(batch), textcoords="offset points",
                xytext=(5, -12) if batch < 64 else next(nearby), fontsize=8)
full_intensity = llama_point(capacity.max_sequences)[0]
ax.axvline(full_intensity, ls="--", c="tab:red", lw=1)
ax.text(full_intensity, 0.5, f"memory full at batch {capacity.max_sequences} ", fontsize=8, ha="right")
ridge = H100_DENSE_BF16_TFLOPS * 1e12 / (h100.bandwidth_gb_s * 1e9)
ax.axvline(ridge, ls=":", c="grey")
ax.text(ridge, 2, f" ridge ~{ridge:.0f} FLOPs/byte", fontsize=8)
ax.set_xlabel("arithmetic intensity (FLOPs per byte read)")
ax.set_ylabel("attainable TFLOP/s")
ax.set_title(f"Llama 3.1 8B decode, 4k contexts: 80 GB holds at most {capacity.max_sequences} sequences")
ax.legend(loc="upper left")
plt.show()

# %% [markdown]
# ## Batching: static or continuous
#
# Since a decode step costs about the same for one sequence as for several, a server runs
# many requests in each step. The question is *when* requests may join.
#
# - **Static batching** takes a group of requests, runs them until the longest reply is done,
#   then takes the next group. A request that finished early leaves its seat empty, and a
#   request that arrives meanwhile waits for the whole group.
# - **Continuous batching** (iteration-level scheduling) decides again at every step: a
#   finished request leaves at once and a waiting one takes its seat in the next step, its
#   prefill sharing that step with everyone else's decode.
#
# Below, both run on the same engine with seats for 4 requests: 12 held-out requests whose
# replies we fix at mixed lengths (between 4 and 40 tokens), the way real replies vary. We
# record, for each step, how many requests got a token and how long the step took.

# %%
workload = [c.prompt_messages for c in heldout_split(3)][:12]
lengths_rng = random.Random(6)
reply_lengths = [lengths_rng.randint(4, 40) for _ in workload]
SEATS = 4


def run_traced(engine, prompts, lengths):
    """Add the requests, step until idle; one record per step."""
    for messages, n in zip(prompts, lengths):
        engine.add_request(messages, SamplingParams(temperature=0, max_new_tokens=n), eos_ids=())
    trace, started = [], set()
    while engine.has_unfinished():
        t0 = time.perf_counter()
        outputs = engine.step()
        seconds = time.perf_counter() - t0
        first = {o.request_id for o in outputs} - started
        started |= first
        running = engine.scheduler.running
        trace.append({"seconds": seconds, "tokens": sum(len(o.token_ids) for o in outputs), "served": len(outputs),
                      "prefilled": bool(first), "held_tokens": sum(s.num_tokens for s in running),
                      "used_slots": engine.stats().num_used_blocks * engine.block_manager.block_size,
                      "running": len(running)})
    return trace


static_trace = []
static_engine = Engine(model, tokenizer, max_num_seqs=SEATS)
for i in range(0, len(workload), SEATS):  # one group at a time, each run to its end
    static_trace += run_traced(static_engine, workload[i:i + SEATS], reply_lengths[i:i + SEATS])
continuous_trace = run_traced(Engine(model, tokenizer, max_num_seqs=SEATS), workload, reply_lengths)

for name, trace in (("static", static_trace), ("continuous", continuous_trace)):
    tokens, seconds = sum(r["tokens"] for r in trace), sum(r["seconds"] for r in trace)
    print(f"{name:<11} {len(trace):>4} steps, {tokens} tokens, {seconds * 1e3:6.1f} ms -> {tokens / seconds:6.0f} tokens/s, "
          f"on average {statistics.mean(r['served'] for r in trace):.2f} of {SEATS} seats served per step")

# %%
fig, ax = plt.subplots(figsize=(9, 2.8))
for name, trace in (("static", static_trace), ("continuous", continuous_trace)):
    ax.step(range(len(trace)), [r["served"] for r in trace], where="post", label=name)
ax.set_xlabel("engine step")
ax.set_ylabel("requests served")
ax.set_yticks(range(SEATS + 1))
ax.set_title(f"{len(workload)} requests, {SEATS} seats")
ax.legend()
plt.show()
with_prefill = [r["seconds"] * 1e3 for r in continuous_trace if r["prefilled"]]
decode_only = [r["seconds"] * 1e3 for r in continuous_trace if not r["prefilled"]]
print(f"continuous: steps that also prefilled a newcomer took {statistics.median(with_prefill):.2f} ms (median), "
      f"decode-only steps {statistics.median(decode_only):.2f} ms")

# %% [markdown]
# The static line sags at the end of each group as short replies finish and their seats stay
# empty; the continuous line stays near the top until the queue runs dry, so the same tokens
# need fewer steps. (The step count is exact; tokens per second on a shared machine is
# noisy, but on a real accelerator fewer, fuller steps are what raise throughput.)
#
# The price is in the last line, which compares steps that also prefilled a newcomer with
# steps that only decoded. A newcomer's prompt is extra work in a step that every running
# request waits for, so the gaps between one request's tokens depend on who else arrives.
# Continuous batching trades a steady per-request pace for throughput, and the scheduler
# decides how much: decodes go first in each step, and long prompts are cut into chunks so
# that no single step grows too long.
#
# ### Exercise 3 — one step of a continuous-batching scheduler
#
# A toy version of the course scheduler (`course_lib/serving/scheduler.py`), on plain data. A
# sequence is a dict `{"id": str, "tokens": int, "computed": int, "outputs": int, "blocks": int}`:
# `tokens` it has (prompt and reply so far), `computed` of them whose KV is in the pool,
# `outputs` reply tokens sampled so far, `blocks` KV blocks it holds. A running sequence is
# **decoding** when `outputs >= 1` and `tokens - computed == 1` (only its newest sample needs
# computing); otherwise it is **prefilling** and needs `tokens - computed` more. A waiting
# sequence has `computed == 0` and `blocks == 0`.
#
# Write `schedule_step(running, waiting, free_blocks, block_size, max_num_seqs,
# max_batched_tokens)`. `running` and `waiting` are lists in queue order (running oldest
# first). The step has a token budget of `max_batched_tokens` and applies, in this order:
#
# 1. **Decodes first**, walking `running` oldest first. A decoding sequence needs
#    `ceil(tokens / block_size)` blocks; if it holds fewer, it takes one free block. While no
#    block is free, **preempt the newest running sequence** (the last of `running`): it gives
#    back all its blocks, gets `computed = 0` and `blocks = 0`, keeps `tokens` and `outputs`,
#    leaves `running` and goes to the **front** of `waiting`; note its id in `preempted`. If
#    the sequence preempted is the one that needed the block, stop the decodes there. Each
#    decode adds `[id, 1]` to the batch and uses 1 of the budget.
# 2. **Running prefills**, oldest first, while budget is left: each adds `[id, n]` with
#    `n = min(tokens - computed, budget left)` (chunked prefill).
# 3. **Admission**: while `waiting` is not empty, budget is left and `len(running) <
#    max_num_seqs`, look at the head of `waiting`. It needs `ceil(tokens / block_size)` blocks;
#    if fewer are free, stop (nobody may overtake it). Otherwise it takes them (its `blocks`
#    becomes that number), moves to the end of `running`, and adds `[id, min(tokens, budget
#    left)]`. (In a step that preempted, this admits nobody: the last victim heads the queue,
#    and fewer blocks are free than it needs.)
#
# Return `{"batch": [[id, n], ...], "preempted": [id, ...], "running": [...], "waiting": [...],
# "free_blocks": int}` with the sequences' dicts as they are after the step (the forward pass
# has not run yet: `computed` changes only for a preempted sequence), each still with exactly
# its five keys. You may change the dicts and lists you are given. The inputs always satisfy `max_batched_tokens >=
# max_num_seqs`, so every decode fits the budget. Stuck? `hint("schedule_step")`.

# %% [solution] schedule_step
def schedule_step(running, waiting, free_blocks, block_size, max_num_seqs, max_batched_tokens):
    ### BEGIN SOLUTION
    budget, batch, preempted = max_batched_tokens, [], []

    def is_decoding(seq):
        return seq["outputs"] >= 1 and seq["tokens"] - seq["computed"] == 1

    i = 0
    while i < len(running):
        seq = running[i]
        i += 1
        if not is_decoding(seq):
            continue
        if seq["blocks"] < -(-seq["tokens"] // block_size):
            gave_up = False
            while free_blocks == 0 and not gave_up:
                victim = running.pop()  # the newest
                free_blocks += victim["blocks"]
                victim["blocks"], victim["computed"] = 0, 0
                waiting.insert(0, victim)
                preempted.append(victim["id"])
                gave_up = victim is seq
            if gave_up:
                break
            free_blocks -= 1
            seq["blocks"] += 1
        batch.append([seq["id"], 1])
        budget -= 1

    for seq in running:
        if budget == 0:
            break
        if not is_decoding(seq):
            n = min(seq["tokens"] - seq["computed"], budget)
            batch.append([seq["id"], n])
            budget -= n

    while waiting and budget > 0 and len(running) < max_num_seqs:
        head = waiting[0]
        needed = -(-head["tokens"] // block_size)
        if needed > free_blocks:
            break
        waiting.pop(0)
        free_blocks -= needed
        head["blocks"] = needed
        running.append(head)
        n = min(head["tokens"], budget)
        batch.append([head["id"], n])
        budget -= n
    return {"batch": batch, "preempted": preempted, "running": running, "waiting": waiting,
            "free_blocks": free_blocks}
    ### END SOLUTION

# %% [tests] schedule_step points=3
check.schedule_step(schedule_step)

# %% [markdown]
# Your scheduler driving a toy engine: five requests, a pool of only 8 blocks of 4 tokens,
# 3 seats and 10 tokens per step. After each step the "forward pass" advances `computed`; a
# chunk that reaches the end of a sequence samples one more token.

# %%
def simulate(requests, free_blocks=8, block_size=4, max_num_seqs=3, max_batched_tokens=10, max_steps=80):
    """requests: (id, prompt tokens, reply tokens). Returns one (step, id, kind) per event."""
    want = {rid: n for rid, _, n in requests}
    waiting = [{"id": rid, "tokens": p, "computed": 0, "outputs": 0, "blocks": 0} for rid, p, _ in requests]
    running, events = [], []
    for step in range(max_steps):
        if not running and not waiting:
            break
        plan = schedule_step(running, waiting, free_blocks, block_size, max_num_seqs, max_batched_tokens)
        running, waiting, free_blocks = plan["running"], plan["waiting"], plan["free_blocks"]
        events += [(step, rid, "preempted") for rid in plan["preempted"]]
        by_id = {seq["id"]: seq for seq in running}
        for rid, n in plan["batch"]:
            seq = by_id[rid]
            events.append((step, rid, "decode" if seq["outputs"] and n == 1 and seq["tokens"] - seq["computed"] == 1
                           else "prefill"))
            seq["computed"] += n
            if seq["computed"] == seq["tokens"]:  # the chunk reached the end: one token is sampled
                seq["outputs"] += 1
                seq["tokens"] += 1
                if seq["outputs"] == want[rid]:
                    running.remove(seq)
                    free_blocks += seq["blocks"]
    return events


toy = [("A", 9, 6), ("B", 14, 5), ("C", 5, 9), ("D", 12, 3), ("E", 3, 6)]
events = simulate(toy)
fig, ax = plt.subplots(figsize=(9, 2.6))
style = {"prefill": ("s", "tab:orange"), "decode": ("o", "tab:blue"), "preempted": ("x", "tab:red")}
for kind, (marker, colour) in style.items():
    points = [(s, "ABCDE".index(rid)) for s, rid, k in events if k == kind]
    if points:
        ax.scatter(*zip(*points), marker=marker, c=colour, label=kind)
ax.set_yticks(range(5), list("ABCDE"))
ax.invert_yaxis()
ax.set_xlabel("step")
ax.legend(loc="upper right", fontsize=8)
ax.set_title("your scheduler: who is in each step's batch")
plt.show()
print(f"{sum(k == 'preempted' for _, _, k in events)} preemption(s); all done after {max(s for s, _, _ in events) + 1} steps")

# %% [markdown]
# Red crosses mark preemptions: the pool ran dry, the newest request gave its blocks back and
# went to the head of the queue, and a later orange square shows it being prefilled again
# (its prompt and its reply so far) before it decodes on. Nothing is lost but compute, and
# because the oldest request is never the victim, every request finishes.

# %% [markdown]
# ## Paged KV blocks
#
# Each running request needs room for its KV cache, and nobody knows in advance how long a
# reply will be. The simple answer is to reserve a contiguous region for the longest allowed
# sequence; most of it stays empty. Paging (vLLM's PagedAttention) hands out fixed-size
# blocks as the sequence grows and keeps a **block table** per sequence, so a sequence
# wastes at most the unused tail of its last block. The cost is bookkeeping: an allocator,
# block tables rebuilt every step, and an attention kernel that gathers keys and values
# through the table.
#
# The continuous-batching run above recorded, at every step, the tokens its running requests
# held and the KV slots the engine's blocks provided. Compare with what contiguous
# reservation at tinychat's full window would have set aside:

# %%
window, block_size = model.config.max_seq_len, 16
fig, ax = plt.subplots(figsize=(9, 3))
steps = range(len(continuous_trace))
ax.plot(steps, [r["running"] * window for r in continuous_trace], label=f"contiguous: {window} slots per request")
ax.plot(steps, [r["used_slots"] for r in continuous_trace], label=f"paged: blocks of {block_size} in use")
ax.plot(steps, [r["held_tokens"] for r in continuous_trace], "k--", label="tokens actually held")
ax.set_xlabel("engine step")
ax.set_ylabel("KV slots")
ax.legend(fontsize=8)
plt.show()
final_lengths = [len(encode_chat(tokenizer, m)) + n for m, n in zip(workload, reply_lengths)]
paging = compare_paging(final_lengths, block_size=block_size, max_seq_len=window,
                        bytes_per_token=tiny_kv_per_token)
print(f"at their final lengths, the {len(final_lengths)} requests hold {paging.used_tokens:,} tokens")
print(f"  contiguous reserves {paging.contiguous_reserved_tokens:,} slots: {paging.contiguous_waste_fraction:.0%} wasted "
      f"({paging.contiguous_waste_bytes / 1e6:.2f} MB of float32 KV)")
print(f"  paged reserves {paging.paged_reserved_tokens:,} slots: {paging.paged_waste_fraction:.0%} wasted "
      f"({paging.paged_waste_bytes / 1e6:.3f} MB)")
print(f"  paged waste: {paging.paged_waste_tokens} slots, within the bound of one partly filled block per request "
      f"({len(final_lengths)} x {block_size - 1} = {len(final_lengths) * (block_size - 1)} slots); contiguous waste: "
      f"{paging.contiguous_waste_tokens:,} slots")

# %% [markdown]
# Paging does not make the waste vanish: with replies this short, the unused tail of each
# request's last block is a visible share of what it reserves. But that share is bounded by
# one block per request, however long the requests grow, while contiguous reservation
# wastes the rest of a whole window for each. Memory that is not wasted is memory for more
# concurrent requests, which is what raises throughput on a real accelerator. Blocks make a second saving possible: two requests that
# start with the same tokens can point at the *same* blocks.
#
# ### Exercise 4 — a block allocator with prefix caching
#
# Write a class `BlockPool(num_blocks, block_size, hash_fn=chain_hash)` with these methods:
#
# - `allocate(seq_id, token_ids)` reserves blocks for a prompt and returns
#   `(block_table, num_cached_tokens)`: the list of block ids for positions
#   `0 .. len(token_ids) - 1` in order (position p lives in block `block_table[p //
#   block_size]`), and how many leading tokens were found in the cache.
# - `free(seq_id)` releases the sequence's blocks; `ref_count(block_id)` returns how many
#   live sequences use the block; `num_free()` returns the length of the free list.
#
# The rules:
#
# 1. **Free list.** Blocks are numbered `0 .. num_blocks - 1`; the free list starts as
#    `0, 1, 2, ...`. A block is taken from the front. `free` walks the sequence's table from
#    its **last block to its first**, decrements each block's reference count, and appends a
#    block whose count reaches 0 to the **back** of the free list (so the front is always
#    the least recently freed block).
# 2. **Chained hashes.** Block i of a prompt (tokens `i * block_size .. (i + 1) * block_size -
#    1`, full blocks only) has the key `hash_fn(key of block i - 1, block_tokens)` with `None`
#    as the parent of block 0 and `block_tokens` a tuple of ints. The cache maps key -> block id.
# 3. **Lookup.** Walk the prompt's full blocks from the first, but only the first
#    `(len(token_ids) - 1) // block_size` of them (the block holding the last prompt token is
#    always computed: its logits give the first reply token). A block is a **hit** only if
#    its key is in the cache *and* the cached block holds the same tokens from position 0 to
#    its end (compare the whole prefix, so a hash collision is a miss). Stop at the first miss.
#    `num_cached_tokens = hits * block_size`.
# 4. **Reserve.** First every hit block gets one more reference (if its count was 0, it leaves
#    the free list). Then every other block of the table is taken from the front of the free
#    list, with count 1. Taking a block that is in the cache **evicts** it: its key leaves the
#    cache.
# 5. **Register.** After reserving, every full block of the prompt (`len(token_ids) //
#    block_size` of them) whose key is not in the cache yet is added under its key, remembering
#    the tokens from position 0 to its end. A key already in the cache keeps its first block.
# 6. **Errors.** If the blocks needed (new blocks plus hits that are on the free list) exceed
#    the free list, raise `RuntimeError` and change nothing. Raise `ValueError` for an empty
#    prompt, for `allocate` with a `seq_id` that holds blocks, and for `free` of an unknown one.
#
# `chain_hash` (in the setup cell) is the default `hash_fn`; the checks also pass weaker ones
# to make collisions happen. Stuck? `hint("block_pool")`.

# %% [solution] block_pool
class BlockPool:
    def __init__(self, num_blocks, block_size, hash_fn=chain_hash):
        ### BEGIN SOLUTION
        self.block_size, self.hash_fn = block_size, hash_fn
        self.free_list = deque(range(num_blocks))
        self.refs = [0] * num_blocks
        self.cache = {}                       # key -> block id
        self.key_of = [None] * num_blocks     # a cached block's key
        self.prefix_of = [None] * num_blocks  # a cached block's tokens from position 0 to its end
        self.tables = {}
        ### END SOLUTION

    def allocate(self, seq_id, token_ids):
        ### BEGIN SOLUTION
        tokens = [int(t) for t in token_ids]
        if not tokens:
            raise ValueError("the prompt is empty")
        if seq_id in self.tables:
            raise ValueError(f"{seq_id!r} already holds blocks; free it first")
        size = self.block_size
        keys, parent = [], None
        for i in range(len(tokens) // size):  # chained keys of the full blocks
            parent = self.hash_fn(parent, tuple(tokens[i * size:(i + 1) * size]))
            keys.append(parent)
        hits = []
        for i in range((len(tokens) - 1) // size):
            block = self.cache.get(keys[i])
            if block is None or self.prefix_of[block] != tuple(tokens[:(i + 1) * size]):
                break
            hits.append(block)
        n_new = -(-len(tokens) // size) - len(hits)
        if n_new + sum(self.refs[b] == 0 for b in hits) > len(self.free_list):
            raise RuntimeError(f"not enough free blocks for {seq_id!r}")
        for block in hits:
            if self.refs[block] == 0:
                self.free_list.remove(block)
            self.refs[block] += 1
        table = list(hits)
        for _ in range(n_new):
            block = self.free_list.popleft()
            if self.key_of[block] is not None:  # evict its old contents
                del self.cache[self.key_of[block]]
                self.key_of[block] = self.prefix_of[block] = None
            self.refs[block] = 1
            table.append(block)
        for i, key in enumerate(keys):
            if key not in self.cache:
                self.cache[key] = table[i]
                self.key_of[table[i]], self.prefix_of[table[i]] = key, tuple(tokens[:(i + 1) * size])
        self.tables[seq_id] = table
        return list(table), len(hits) * size
        ### END SOLUTION

    def free(self, seq_id):
        ### BEGIN SOLUTION
        if seq_id not in self.tables:
            raise ValueError(f"unknown sequence {seq_id!r}")
        for block in reversed(self.tables.pop(seq_id)):
            self.refs[block] -= 1
            if self.refs[block] == 0:
                self.free_list.append(block)
        ### END SOLUTION

    def ref_count(self, block_id):
        ### BEGIN SOLUTION
        return self.refs[block_id]
        ### END SOLUTION

    def num_free(self):
        ### BEGIN SOLUTION
        return len(self.free_list)
        ### END SOLUTION

# %% [tests] block_pool points=3
check.block_pool(BlockPool)

# %% [markdown]
# Your pool serving three chats that open with the same 12-token system prompt, then a
# fourth after the first three have gone:

# %%
pool = BlockPool(num_blocks=16, block_size=4)
system = list(range(100, 112))  # three full blocks every chat starts with
chats = {"chat-1": system + [1, 2, 3], "chat-2": system + [7, 8], "chat-3": system + [9, 9, 9, 9, 9]}
for seq_id, prompt in chats.items():
    table, cached = pool.allocate(seq_id, prompt)
    print(f"{seq_id}: {len(prompt)} tokens, table {table}, {cached} cached -> prefill {len(prompt) - cached}")
print("references of blocks 0-2:", [pool.ref_count(b) for b in range(3)], "| free blocks:", pool.num_free())
for seq_id in chats:
    pool.free(seq_id)
table, cached = pool.allocate("chat-4", system + [5])
print(f"chat-4 after all three left: table {table}, {cached} cached (freed blocks keep their contents until reused)")

# %% [markdown]
# ## Prefix caching, measured
#
# The course engine does the same with its real blocks (16 tokens each). Four requests share
# a long system prompt and ask different questions; we time each one's TTFT alone, with the
# prefix cache off and on. The first request fills the cache, so the comparison uses the
# other three.

# %%
shared = system_prompt(420)
questions = [f"What is {a} + {a + 3}?" for a in (3, 10, 21, 40)]


def ttft_alone(engine, messages):
    """Seconds until the request's first token, with the engine to itself; then run it out."""
    rid = engine.add_request(messages, SamplingParams(temperature=0, max_new_tokens=4))
    start, first = time.perf_counter(), None
    while engine.has_unfinished():
        outputs = engine.step()
        if first is None and any(o.request_id == rid and o.token_ids for o in outputs):
            first = time.perf_counter() - start
    return first


print(f"system prompt: {len(encode_chat(tokenizer, [shared], add_generation_prompt=False))} tokens")
ttfts, hit_rates = {False: [], True: []}, {}
for _ in range(2):  # two rounds, off and on interleaved: each request keeps its faster TTFT
    for caching in (False, True):
        engine = Engine(model, tokenizer, prefix_caching=caching)
        ttfts[caching].append([ttft_alone(engine, [shared, {"role": "user", "content": q}]) for q in questions])
        hit_rates[caching] = engine.stats().hit_rate
for caching in (False, True):
    ttfts[caching] = [min(runs) for runs in zip(*ttfts[caching])]
    print(f"prefix caching {'on ' if caching else 'off'}: TTFT {[round(t * 1e3, 2) for t in ttfts[caching]]} ms, "
          f"cache hit rate {hit_rates[caching]:.0%}")
off, on = statistics.median(ttfts[False][1:]), statistics.median(ttfts[True][1:])
print(f"requests 2-4, median: {off * 1e3:.2f} ms without the cache, {on * 1e3:.2f} ms with it ({off / on:.1f}x)")

# %% [markdown]
# With the cache on, later requests prefill only the few tokens after the shared blocks, so
# their TTFT falls toward one short forward pass. Hosted APIs sell the same thing as "prompt
# caching", with a discount on cached input tokens: keep the stable part of a prompt (system
# prompt, tool definitions, documents) at the front and byte-for-byte identical.
#
# ## Speculative decoding
#
# A decode step of a large model is expensive and mostly spent reading weights; verifying
# several tokens in one pass costs about the same as producing one. Speculative decoding
# exploits that. A cheap **draft** proposes $k$ tokens $x_0 .. x_{k-1}$, sampling each from
# its own distributions $q_0 .. q_{k-1}$. The **target** then runs once over all of them and
# returns its distributions $p_0 .. p_k$ at each position (one more than drafted). Now keep or
# reject the guesses left to right:
#
# - keep $x_i$ with probability $\min(1, p_i(x_i) / q_i(x_i))$;
# - at the first rejection, draw a replacement from the **residual** $\max(0, p_i - q_i)$,
#   normalized, and stop;
# - if all $k$ survive, draw a **bonus** token from $p_k$.
#
# One target pass then yields between 1 and $k + 1$ tokens, and (the point of the rule) every
# token is distributed exactly as if the target had sampled it alone: where the draft
# over-proposes a token ($q > p$) the rejection trims it, and the residual puts back exactly
# the mass the draft under-proposed.
#
# ### Exercise 5 — the accept/resample rule
#
# Write `accept_or_resample(draft_tokens, draft_probs, target_probs, generator)`:
#
# - `draft_tokens` is a list of $k \geq 1$ token ids; `draft_probs` $q$ is a float tensor
#   `(k, V)` (row i is the distribution $x_i$ was drawn from); `target_probs` $p$ is `(k + 1,
#   V)`. Rows are probabilities that sum to 1.
# - Random numbers, in this order, from `generator` only: first **one** call
#   `u = torch.rand(k, generator=generator, dtype=torch.float64)` (all $k$, even if an early
#   guess is rejected); then exactly one more uniform for the final token.
# - Keep $x_i$ while `u[i] < p[i, x_i] / q[i, x_i]` (divide in float64). Since `u[i] < 1`, this
#   keeps $x_i$ with probability $\min(1, p/q)$.
# - At the first $i$ that fails, the final distribution is `(p[i] - q[i]).clamp_min(0)` in
#   float64; if none fails it is `p[k]`. Draw the final token from it by inverse CDF: the
#   first index whose cumulative sum exceeds `v * total`, with `v` the next uniform of the
#   generator and `total` the distribution's sum (notebook 04's `sample_from_probs(dist,
#   generator)` does exactly this, normalization included).
# - Return the kept tokens followed by the final token, as a list of Python ints.
# - Raise `ValueError` if some $q_i(x_i)$ is 0: the draft could not have drawn that token.
#
# Stuck? `hint("accept_or_resample")`.

# %% [solution] accept_or_resample
def accept_or_resample(draft_tokens, draft_probs, target_probs, generator):
    ### BEGIN SOLUTION
    k = len(draft_tokens)
    rows = torch.arange(k)
    index = torch.tensor([int(t) for t in draft_tokens])
    q_x = draft_probs[rows, index].double()  # (k,)
    p_x = target_probs[rows, index].double()  # (k,)
    if (q_x <= 0).any():
        raise ValueError("a drafted token has probability 0 under its draft distribution")
    u = torch.rand(k, generator=generator, dtype=torch.float64)  # (k,)
    kept = 0
    while kept < k and u[kept] < p_x[kept] / q_x[kept]:
        kept += 1
    if kept == k:
        final = target_probs[k].double()  # (V,)
    else:
        final = (target_probs[kept].double() - draft_probs[kept].double()).clamp_min(0)  # (V,)
    return [int(t) for t in draft_tokens[:kept]] + [int(sample_from_probs(final, generator))]
    ### END SOLUTION

# %% [tests] accept_or_resample points=3
check.accept_or_resample(accept_or_resample)

# %% [markdown]
# The rule's promise, seen on a vocabulary of five tokens: a draft that badly disagrees with
# the target proposes $k = 2$ tokens, 4,000 times; we count which token comes out first.

# %%
p_demo = torch.tensor([[0.05, 0.10, 0.50, 0.25, 0.10]] * 3)  # the target, at every position
q_demo = torch.tensor([[0.40, 0.30, 0.10, 0.10, 0.10]] * 2)  # a poor draft
draws, rng = [], torch.Generator().manual_seed(0)
for _ in range(4000):
    guesses = [int(sample_from_probs(q_demo[i], rng)) for i in range(2)]
    draws.append(accept_or_resample(guesses, q_demo, p_demo, rng))
first = torch.bincount(torch.tensor([d[0] for d in draws]), minlength=5) / len(draws)
fig, ax = plt.subplots(figsize=(6, 2.6))
width = 0.27
ax.bar(torch.arange(5) - width, q_demo[0], width, label="draft q")
ax.bar(torch.arange(5), first, width, label="first token out")
ax.bar(torch.arange(5) + width, p_demo[0], width, label="target p")
ax.set_xlabel("token")
ax.legend(fontsize=8)
plt.show()
alpha = float(torch.minimum(p_demo[0], q_demo[0]).sum())
print(f"mean tokens per target pass: {statistics.mean(len(d) for d in draws):.3f}; "
      f"theory with acceptance {alpha:.2f}: {expected_tokens_per_round(alpha, 2):.3f}")

# %% [markdown]
# The middle bars follow the target, not the draft. The draft's quality changes only the
# speed: the chance of keeping a guess is $\alpha = \sum_x \min(p(x), q(x))$, and with $k$
# guesses a pass yields $(1 - \alpha^{k+1}) / (1 - \alpha)$ tokens on average.
#
# Now on the engine, one request at a time (the latency case), $k = 4$, greedy (temperature
# 0) and sampled (temperature 1): prompt lookup
# (`"ngram"`, guesses copied from earlier in the context, no model) and `tinychat-draft` (a
# model with half the layers and half the width, trained on the same data).

# %%
draft_model = load_model("tinychat-draft", device="cpu")
spec_prompts = [c.prompt_messages for c in heldout_split(2)][:4]
methods = {"plain": None, "ngram": {"method": "ngram", "k": 4},
           "draft": {"method": "draft", "model": draft_model, "k": 4}}


def run_method(spec, params, prompts):
    """The prompts one at a time (the latency case): replies, target passes, guesses, seconds."""
    replies, passes, drafted, accepted = [], 0, 0, 0
    t0 = time.perf_counter()
    for prompt in prompts:
        engine = Engine(model, tokenizer, max_num_seqs=1, speculative=spec)
        replies += engine.generate([prompt], params)
        passes += engine.num_steps
        drafted += engine.speculative_stats.num_drafted
        accepted += engine.speculative_stats.num_accepted
    return {"replies": replies, "passes": passes, "drafted": drafted, "accepted": accepted,
            "seconds": time.perf_counter() - t0}


greedy_spec = SamplingParams(temperature=0, max_new_tokens=24, seed=1)
for spec in methods.values():  # warm-up: a method's first run pays one-time costs
    run_method(spec, greedy_spec, spec_prompts[:1])
spec_runs, spec_seconds = {}, {name: [] for name in methods}
for _ in range(3):  # interleaved, plain, ngram, draft, plain, ...: a burst of load hits every method
    for name, spec in methods.items():
        spec_runs[(name, 0.0)] = run = run_method(spec, greedy_spec, spec_prompts)  # the counts never change
        spec_seconds[name].append(run["seconds"])
print(f"temperature 0 timed: 3 interleaved runs of each method after a warm-up, {len(spec_prompts)} requests each")

# %%
for name, spec in methods.items():  # the same requests sampled at temperature 1: counts only
    spec_runs[(name, 1.0)] = run_method(spec, SamplingParams(temperature=1.0, max_new_tokens=24, seed=1), spec_prompts)
median_ms = {name: 1e3 * statistics.median(runs) for name, runs in spec_seconds.items()}
print(f"{'':<7}{'temp':>5}{'accepted':>10}{'tokens/pass':>12}  same replies{'median ms':>11}{'vs plain':>9}")
for (name, temperature), run in spec_runs.items():
    baseline = spec_runs[("plain", temperature)]["replies"]
    tokens = sum(len(r.token_ids) for r in run["replies"])
    same = sum(a.token_ids == b.token_ids for a, b in zip(run["replies"], baseline))
    rate = f"{run['accepted'] / run['drafted']:.0%}" if run["drafted"] else "-"
    timing = (f"{median_ms[name]:>11.0f}{median_ms['plain'] / median_ms[name]:>8.2f}x" if temperature == 0
              else f"{'-':>11}{'-':>9}")
    print(f"{name:<7}{temperature:>5.1f}{rate:>10}{tokens / run['passes']:>12.2f}  {same}/{len(baseline):<10}{timing}")

# %% [markdown]
# Read the columns separately. *Accepted* and *tokens per pass* are counts, the same on every
# run: tokens per pass is what speculation promises, fewer target passes for the same reply.
# *Same replies* at temperature 0 confirms the greedy output is unchanged, whatever the
# draft. (At temperature 1 the replies are samples; the rule keeps their distribution, not
# the exact tokens, so they may differ. On these short replies they usually match anyway:
# each reply's first token comes from the prefill pass, before any guessing, drawn with the
# same seed by every method, and once it is chosen tinychat is nearly certain of the rest.)
# The last two columns are wall-clock time, the median of the three timed runs at
# temperature 0. A speed-up can at best approach the tokens per pass, and only if drafting
# were free (a printed ratio above it is noise). Prompt lookup costs almost nothing to
# draft, but most of its guesses are rejected here. `tinychat-draft` has most of its guesses
# accepted and so needs far fewer target passes, but every round also runs $k$ passes of
# the draft, and at this size a pass of either model is largely fixed overhead: the time
# saved on the target is spent again on drafting, and its ratio stays near 1 or below. On a
# shared 2-core machine a ratio within a few tens of percent of 1 is no evidence either way.
# On a 70B target with a 1B draft on a GPU, where the target's step is memory-bound and the
# batch is small, published results commonly report 2-3x (representative, not measured
# here). It stops paying when the batch is already large (the step is no longer
# memory-bound, so extra verified tokens cost real compute), when acceptance is low
# (creative sampling, a poorly matched draft), or when the draft itself is slow.
#
# ## int8 weights
#
# Fewer bytes per weight means fewer bytes per decode step and more room for KV cache. The
# simplest useful scheme is **symmetric int8 with one scale per output channel**: each row $r$
# of a weight matrix $W$ (shape `(out, in)`) gets $s_r = \max_j |W_{rj}| / 127$, and is stored
# as integers $q_{rj} = \text{round}(W_{rj} / s_r)$ in $-127 .. 127$. At run time $W \approx q
# \cdot s$. One scale per row (rather than one per tensor) keeps a single large row from
# crushing the precision of all the others.
#
# ### Exercise 6 — int8 quantize and dequantize
#
# Write `quantize_per_channel(weight)` and `dequantize(q, scale)`:
#
# - `weight` is a float tensor `(out, in)`. Compute in float64: `amax_r = max |weight[r]|`;
#   `scale_r = amax_r / 127`, then store `scale` as a float32 tensor `(out,)`. A row that is all
#   zeros gets scale `1.0` (any scale reproduces it; 1 avoids dividing by 0).
# - `q = round(weight / scale)`, dividing the float64 weight by the **stored** float32 scale
#   (converted to float64), rounding **half to even** (`torch.round`; 2.5 -> 2, 3.5 -> 4, never
#   truncating), as an `int8` tensor `(out, in)`. The largest magnitude of a row lands on
#   ±127, so every value fits in `-127 .. 127`.
# - Return `(q, scale)`.
# - `dequantize(q, scale)` returns the float32 tensor `q * scale` with `scale_r` applied to row r.
# - Raise `ValueError` when `weight` is not 2-D or holds an infinity or NaN.
#
# Stuck? `hint("quantize_per_channel")`.

# %% [solution] quantize_per_channel
def quantize_per_channel(weight):
    ### BEGIN SOLUTION
    if weight.dim() != 2 or not torch.isfinite(weight).all():
        raise ValueError("weight must be a finite 2-D (out, in) float tensor")
    w = weight.detach().double()  # (out, in)
    amax = w.abs().amax(dim=1)  # (out,)
    scale = torch.where(amax > 0, amax / 127, torch.ones_like(amax)).float()  # (out,)
    q = torch.round(w / scale.double()[:, None]).clamp(-127, 127).to(torch.int8)  # (out, in)
    return q, scale
    ### END SOLUTION


def dequantize(q, scale):
    ### BEGIN SOLUTION
    return q.float() * scale.float()[:, None]  # (out, in)
    ### END SOLUTION

# %% [tests] quantize_per_channel points=2
check.quantize_per_channel(quantize_per_channel, dequantize)

# %% [markdown]
# Your quantizer on one of tinychat's real matrices, beside the course's `Int8Linear`; then
# the whole model quantized by the course (`quantize_int8`: every linear layer, the
# embedding table stays float32) and served through the same engine on held-out requests.

# %%
w = model.layers[0].mlp.up_proj.weight.detach()
q, scale = quantize_per_channel(w)
error = (dequantize(q, scale) - w).abs()
print(f"up_proj {tuple(w.shape)}: worst error {error.max():.2e}, worst error / (scale / 2) per row "
      f"{(error.amax(dim=1) / (scale / 2)).max():.3f}; equal to the course's int8: "
      f"{torch.equal(q, course_quantize.quantize_per_channel(w)[0])}")

# %%
int8_model = quantize_int8(model)
linear_bytes = lambda m: sum(weight_bytes(x) for x in m.modules() if type(x).__name__ in ("Linear", "Int8Linear"))  # noqa: E731
print(f"linear layers: {linear_bytes(int8_model):,} bytes int8 vs {linear_bytes(model):,} float32 "
      f"({linear_bytes(int8_model) / linear_bytes(model):.3f}x); whole model {weight_bytes(int8_model) / weight_bytes(model):.3f}x")
heldout = heldout_split(2)
greedy = SamplingParams(temperature=0, max_new_tokens=64)
replies = {name: Engine(m, tokenizer).generate([c.prompt_messages for c in heldout], greedy)
           for name, m in (("float32", model), ("int8", int8_model))}
for name, out in replies.items():
    solved = sum(SCORERS[c.task](o.text, c.expected) for c, o in zip(heldout, out))
    print(f"{name:>7}: solved {solved}/{len(heldout)} held-out requests")
same = sum(a.token_ids == b.token_ids for a, b in zip(replies["float32"], replies["int8"]))
print(f"identical greedy replies: {same}/{len(heldout)}")

# %% [markdown]
# The linear layers shrink to about a quarter (the scales add a little); the whole model less,
# because the embedding table stays float32. Compare the two solved counts for the accuracy
# cost on these requests, and the identical-reply count for how many replies the rounding
# changed at all (one changed greedy choice can change the rest of that reply).
# Measure this on your own task before trusting it: int8 weights are usually safe on large
# models, while 4-bit schemes need care (grouped scales, calibration). And note what int8
# saved here: memory, not time. The course computes with the dequantized values; the speedup
# on a GPU comes from kernels that read int8 directly, halving the bytes of a memory-bound step.
#
# ## Under load: a server and its latency curve
#
# Everything so far ran in this notebook's process. Now the real shape: `course serve` (an
# OpenAI-compatible HTTP server on the same engine) in a separate process on a free local
# port, and the course's load generator (`course bench-serve`'s code) sending streamed chat
# requests at several levels of concurrency. The server is always stopped at the end, even if
# a cell fails.

# %%
def bench(base_url, prompts, concurrency):
    """run_benchmark is async; run it on a private event loop in a worker thread."""
    job = run_benchmark(prompts, base_url=base_url, model="tinychat", max_tokens=32, timeout=60,
                        max_concurrency=concurrency, progress=False)
    with concurrent.futures.ThreadPoolExecutor(1) as worker:
        records, duration = worker.submit(asyncio.run, job).result()
    return summarize(records, duration)


levels, results = (1, 2, 4, 8, 16), {}
with child_server("--max-num-seqs", "8") as base_url:  # `course serve` in a child process, stopped at the end
    prompts = held_out_prompts(40, seed=0)
    bench(base_url, prompts[:2], 1)  # warm-up
    for concurrency in levels:
        results[concurrency] = bench(base_url, prompts[:max(4, 2 * concurrency)], concurrency)
    from openai import OpenAI

    client = OpenAI(base_url=base_url + "/v1", api_key="not-needed")
    t0, pieces, first = time.perf_counter(), [], None
    stream = client.chat.completions.create(model="tinychat", messages=[{"role": "user", "content": "What is 7 + 5?"}],
                                            temperature=0, max_tokens=20, stream=True)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            first = first or time.perf_counter() - t0
            pieces.append(chunk.choices[0].delta.content)
print(f"the openai client, streaming: {pieces} (first text after {first * 1e3:.1f} ms)")

# %%
print(f"{'concurrency':>11} {'requests':>8} {'tokens/s':>9} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9}  (ms)")
for concurrency, r in results.items():
    print(f"{concurrency:>11} {r.completed:>8} {r.output_throughput:>9.0f} {r.ttft.median:>9.1f} {r.ttft.p99:>9.1f} "
          f"{r.tpot.median or float('nan'):>9.2f}")
low, high = results[levels[0]], results[levels[-1]]
print(f"p99 TTFT at {levels[-1]} at once is {high.ttft.p99 / low.ttft.p99:.1f}x the p99 TTFT at {levels[0]}; "
      f"throughput {high.output_throughput / low.output_throughput:.1f}x")
fig, ax = plt.subplots(figsize=(6, 3.4))
ax.plot([r.ttft.p99 for r in results.values()], [r.output_throughput for r in results.values()], "o-")
for concurrency, r in results.items():
    ax.annotate(f"{concurrency} at once", (r.ttft.p99, r.output_throughput), textcoords="offset points",
                xytext=(6, -4), fontsize=8)
ax.set_xlabel("p99 time to first token (ms)")
ax.set_ylabel("output tokens per second")
ax.set_title("course serve on this CPU: throughput against tail latency")
plt.show()

# %% [markdown]
# Each point is one load level. With more requests at once, more of them share each step:
# each newcomer's prefill waits for, and shares, steps full of other requests' work, and past
# the server's 8 seats (`--max-num-seqs 8`) newcomers also queue for a seat, so the tail of
# TTFT at the highest load is far above the tail at one request (the last line above). More
# requests per step is also what should raise throughput until the curve flattens and extra
# load buys only latency; but each level runs for a few seconds on 2 shared CPU cores, so a
# single level can land off the trend. Run the cell again and compare the shape rather than
# the digits. A capacity plan picks the point on such a curve that meets the latency target
# (say "p99 TTFT under 500 ms") and sizes the fleet from the throughput there; a single
# average hides the tail that users complain about.
#
# ## Levers and what they cost
#
# | technique | what it buys | what it costs |
# | --- | --- | --- |
# | continuous batching | seats refilled every step: throughput | newcomers' prefills slow everyone's step: more variance in ITL |
# | chunked prefill | long prompts cannot stall running decodes | a long prompt's TTFT stretches over several steps |
# | paged KV blocks | waste bounded by one partly filled block per request, not a whole window: more concurrent requests | an allocator, block tables, gather-based attention |
# | prefix caching | TTFT and compute of shared prefixes | memory held by cached blocks; only exact, block-aligned prefixes match |
# | grouped-query attention (notebook 02) | a smaller cache per token | fewer KV heads: a little quality, decided at training |
# | tiled attention, online softmax (notebook 02) | the same exact result with less memory traffic | a more complex kernel |
# | int8 weights | a quarter of float32 memory; faster memory-bound steps with int8 kernels | a small, measurable accuracy cost |
# | speculative decoding | fewer target passes at small batch | draft compute; little gain at large batch or low acceptance |

# %% [markdown]
# ## Your own model (optional)
#
# The engine above is not tied to tinychat. With a Llama-, Mistral-, SmolLM2- or Qwen-family
# checkpoint on disk (a Hugging Face folder; nothing is downloaded), set `MY_MODEL` and run the
# cell: the same engine serves it, and the cell times the first token of a chat that opens with
# a long system prompt, with prefix caching off and on, and the decode rate. `course serve
# --model FOLDER` serves it over HTTP, chat page and X-ray included. With `MY_MODEL` empty the
# cell only says so.

# %%
MY_MODEL = ""  # a checkpoint folder, e.g. "~/models/Qwen2.5-0.5B-Instruct"
if MY_MODEL:
    from course_lib.your_model import serving_report

    serving_report(MY_MODEL)
else:
    print("MY_MODEL is empty: set it to a local checkpoint folder to measure your own model")

# %% [markdown]
# ## Interview probes
#
# Answer each question aloud before you read its points, then count the points you made. The
# cards come from the course's probe bank (`course_lib/drills/probes.toml`), the same cards the
# interview drills ask.

# %%
from course_lib.drills.cards import show_probes

show_probes("06_serving")

# %% [markdown]
# Practise them here: the panel asks this notebook's numeric problems and probe cards and
# schedules them in the same history as `course drill` in a terminal. Nothing is saved until
# you press Start.

# %%
from course_lib.drills.widget import notebook_panel

notebook_panel("06_serving")

# %% [markdown]
# ## Recap
# - Prefill handles the whole prompt in one pass and sets TTFT; decode makes one token per
#   pass and sets TPOT and ITL, which usually dominate a long answer. TTFT, TPOT = (latency -
#   TTFT) / (tokens - 1), and ITL come from the client's timestamps.
# - A decode step reads all the weights and every running sequence's cache for a handful of
#   FLOPs per byte: it is bound by memory bandwidth (on tiny models, by per-step overhead).
#   Batching shares the weight reads.
# - Continuous batching refills seats every step (throughput) at the price of steadiness;
#   the scheduler runs decodes first, chunks prefills, admits in arrival order and preempts
#   the newest request when blocks run out.
# - Paged blocks waste at most part of a block per sequence; reference counts and chained,
#   verified hashes let requests share the KV of a common prefix, which cuts TTFT.
# - Speculative decoding verifies a draft's guesses in one target pass; accept with
#   min(1, p/q), resample from max(0, p - q), bonus from the last p: the target's
#   distribution is kept exactly. It pays only when target passes are the expensive part.
# - int8 per-channel weights cut the linear layers' memory to about a quarter; measure the
#   accuracy cost on your own task. A load curve, not an average, is how a server's capacity
#   is read.
#
# **Self-check:**
# 1. A stream starts at 0 ms; chunks arrive at 300, 340 and 400 ms, the stream ends at 400 ms
#    and the server reports 4 output tokens. What are TTFT, TPOT and the ITLs?
# 2. An 8B model in bf16 on a 3.35 TB/s accelerator: what is the most tokens per second one
#    sequence can get, and what changes when 64 sequences share each step?
# 3. Why does the scheduler preempt the *newest* running request rather than the oldest, and
#    why does it admit nobody in a step where it preempted?
# 4. Why must a prefix-cache hit compare the cached block's tokens (and what comes before
#    them), even with a 64-bit hash? What would go wrong without the chain?
# 5. In the accept/resample rule, why is the replacement drawn from max(0, p - q) rather
#    than from p?
# 6. int8 per-tensor versus per-channel: which row of a matrix suffers under a per-tensor
#    scale, and why?
