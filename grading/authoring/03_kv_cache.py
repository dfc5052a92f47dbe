# %% [markdown]
# # 03 · The KV cache and its memory
#
# Notebook 02 built attention: every position makes a query, a key and a value, and each
# query reads all the keys before it. This notebook is about what happens when the model
# writes an answer one token at a time, and why the memory that makes that fast is the
# resource a serving system runs out of first.
#
# **By the end of this notebook you can**
# - explain what decoding recomputes without a cache, and what the cache stores instead;
# - compute the cache's size for any model from its configuration, and reproduce the
#   19.3 GB figure for a GPT-3-class model from memory;
# - plan how many sequences fit on a real accelerator, and what grouped-query attention,
#   quantized caches and paging change;
# - build a preallocated cache with `append`, and measure what it buys on the course model.

# %% [setup]
import math
import time

import matplotlib.pyplot as plt
import torch

from course_lib.checks import kv_cache as check
from course_lib.kv_memory import (
    ACCELERATORS,
    MODEL_GEOMETRIES,
    compare_paging,
    format_bytes,
    get_geometry,
    plan_capacity,
)
from course_lib.model import Transformer, WeightsNotFoundError, decode_step, get_config, load_model, prefill

# %% [markdown]
# ## Why decoding needs a cache
#
# To pick token number $t+1$, the model needs attention at the last position over keys and
# values for positions $1..t$. Those keys and values depend only on the tokens before them,
# and the causal mask guarantees that later tokens never change them. So once computed, they
# are final.
#
# A decode loop without a cache ignores that: every step runs the whole sequence through
# every layer again, recomputing keys and values it already had. With a cache, each step
# computes q, k and v for the one new token, appends k and v to the stored ones, and attends
# over the stored prefix. Count the key/value computations for a 100-token prompt and a
# 400-token answer:

# %%
prompt_len, answer_len = 100, 400
without_cache = sum(prompt_len + t for t in range(answer_len))  # the whole prefix, every step
with_cache = prompt_len + answer_len                            # each position once
print(f"positions pushed through the layers without a cache: {without_cache:,}")
print(f"with a cache:                                        {with_cache:,}")
print(f"ratio: {without_cache / with_cache:.0f}x")

# %% [markdown]
# The work without a cache grows with the square of the output length; with a cache it grows
# linearly. The price is memory: every layer keeps a key and a value vector per KV head for
# every token of every sequence it is serving.
#
# ## The formula
#
# $$\text{KV bytes} = 2 \times n_\text{layers} \times n_\text{kv heads} \times d_\text{head}
# \times \text{seq len} \times \text{bytes per element} \times \text{batch}$$
#
# The 2 is one K and one V. Note that it is the number of *KV* heads, not query heads: with
# grouped-query attention several query heads share one cached key/value head.
#
# The worked figure: a GPT-3-class model has 96 layers, 96 heads of size 128, and one KV
# head per query head. In fp16 (2 bytes), one 4,096-token sequence needs:

# %%
gpt3_bytes = 2 * 96 * 96 * 128 * 4096 * 2
gqa_bytes = 2 * 96 * 8 * 128 * 4096 * 2
print(f"GPT-3-class, 96 KV heads: {gpt3_bytes:,} bytes = {format_bytes(gpt3_bytes)}")
print(f"the same with 8 KV heads: {gqa_bytes:,} bytes = {format_bytes(gqa_bytes)}")

# %% [markdown]
# Over 19 GB for *one* conversation of 4k tokens, before a single weight is loaded. Sharing
# each KV head among 12 query heads (8 KV heads instead of 96) divides it by 12, to 1.6 GB.
# This is why every recent large open model uses grouped-query attention.
#
# ### Exercise 1 — the memory formula
#
# Write `kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, bytes_per_element=2, batch=1)`
# returning the cache size in bytes as an `int` (use `int(...)` so that 0.5-byte int4
# elements still give an int). `n_layers`, `n_kv_heads`, `head_dim`, `seq_len` and `batch`
# must be positive; zero or a negative value raises `ValueError`.

# %% [solution] kv_cache_bytes
def kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, bytes_per_element=2, batch=1):
    ### BEGIN SOLUTION
    for name, value in (("n_layers", n_layers), ("n_kv_heads", n_kv_heads), ("head_dim", head_dim),
                        ("seq_len", seq_len), ("batch", batch)):
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    return int(2 * n_layers * n_kv_heads * head_dim * seq_len * bytes_per_element * batch)
    ### END SOLUTION

# %% [tests] kv_cache_bytes points=2
check.kv_cache_bytes(kv_cache_bytes)

# %% [markdown]
# ## Real models
#
# `course_lib.kv_memory.MODEL_GEOMETRIES` holds the geometry of several published models,
# copied from their papers and configuration files. Your function gives their per-token
# cost directly:

# %%
header = f"{'model':<16}{'layers':>7}{'heads':>6}{'KV':>4}{'dim':>5}  {'attn':<5}{'params':>8}{'KiB/token':>11}{'GB @ 4k':>9}{'GB @ ctx':>10}"
print(header)
print("-" * len(header))
for g in MODEL_GEOMETRIES.values():
    per_token = kv_cache_bytes(g.n_layers, g.n_kv_heads, g.head_dim, 1)
    at_4k = kv_cache_bytes(g.n_layers, g.n_kv_heads, g.head_dim, 4096)
    at_ctx = kv_cache_bytes(g.n_layers, g.n_kv_heads, g.head_dim, g.context_length)
    print(f"{g.name:<16}{g.n_layers:>7}{g.n_heads:>6}{g.n_kv_heads:>4}{g.head_dim:>5}  {g.attention_kind:<5}"
          f"{g.n_params / 1e9:>7.1f}B{per_token / 1024:>11.0f}{at_4k / 1e9:>9.2f}{at_ctx / 1e9:>10.1f}")

# %% [markdown]
# Read the table across: Llama-2-7B (no GQA) pays 512 KiB per token in fp16, Llama-3-8B and
# Mistral-7B pay 128 KiB with 8 KV heads, and Llama-3-70B, ten times larger than the 8B,
# pays only 320 KiB because its extra width went into query heads, not KV heads. The last
# column is one sequence filling the model's whole context window: long-context models can
# need more memory for one full conversation than for their own weights.

# %%
names = list(MODEL_GEOMETRIES)
kib = [kv_cache_bytes(g.n_layers, g.n_kv_heads, g.head_dim, 1) / 1024 for g in MODEL_GEOMETRIES.values()]
colors = ["tab:red" if g.attention_kind == "MHA" else "tab:blue" for g in MODEL_GEOMETRIES.values()]
fig, ax = plt.subplots(figsize=(8, 3.2))
ax.bar(names, kib, color=colors)
ax.set_ylabel("KiB per token (fp16)")
ax.set_yscale("log")
ax.set_title("KV cache per token: red = one KV head per query head, blue = grouped-query")
ax.tick_params(axis="x", rotation=45)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## How many sequences fit
#
# An accelerator's memory holds the weights, some working space for activations and the
# runtime, and the KV caches of every sequence in flight:
#
# $$\text{max sequences} = \left\lfloor \frac{\text{memory} - \text{weights} - \text{reserve}}
# {\text{KV bytes per sequence}} \right\rfloor$$
#
# ### Exercise 2 — max concurrent sequences
#
# Write `max_concurrent_sequences(memory_bytes, weight_bytes, kv_bytes_per_sequence,
# reserve_bytes=0)` returning how many whole sequences fit, as an `int`. When the weights and
# reserve leave no room it returns 0 (never a negative number). `kv_bytes_per_sequence` must
# be positive: zero or less raises `ValueError`.

# %% [solution] max_concurrent_sequences
def max_concurrent_sequences(memory_bytes, weight_bytes, kv_bytes_per_sequence, reserve_bytes=0):
    ### BEGIN SOLUTION
    if kv_bytes_per_sequence <= 0:
        raise ValueError(f"kv_bytes_per_sequence must be positive, got {kv_bytes_per_sequence}")
    free = memory_bytes - weight_bytes - reserve_bytes
    return max(0, int(free // kv_bytes_per_sequence))
    ### END SOLUTION

# %% [tests] max_concurrent_sequences points=2
check.max_concurrent_sequences(max_concurrent_sequences)

# %% [markdown]
# Now a real plan. Llama-3-8B with bf16 weights (about 16 GB) serving 8,192-token
# conversations, with 10% of memory held back for activations and the runtime. The
# accelerator memory figures are **representative** vendor numbers (read as decimal GB), not
# measurements.

# %%
geometry = get_geometry("llama-3-8b")
accelerator = ACCELERATORS["H100-80GB"]
weights = geometry.n_params * 2
per_seq = kv_cache_bytes(geometry.n_layers, geometry.n_kv_heads, geometry.head_dim, 8192)
reserve = int(0.10 * accelerator.memory_bytes)
print(f"{accelerator.name}: {max_concurrent_sequences(accelerator.memory_bytes, weights, per_seq, reserve)} "
      "sequences of 8,192 tokens")
print()
print(plan_capacity("llama-3-8b", 8192, accelerator="H100-80GB").summary())

# %% [markdown]
# ### Quantized caches
#
# Storing keys and values in int8 halves the cache compared with fp16, and 4-bit storage
# quarters it (small per-group scales add a little on top, ignored here). The weights stay
# the same size, so the gain goes entirely to concurrency. Here is the same model on every
# accelerator in the table, with bf16, int8 and int4 caches:

# %%
print(f"{'accelerator (representative)':<30}{'bf16 KV':>9}{'int8 KV':>9}{'int4 KV':>9}")
for name in ACCELERATORS:
    counts = [plan_capacity("llama-3-8b", 8192, accelerator=name, kv_dtype=d).max_sequences
              for d in ("bf16", "int8", "int4")]
    print(f"{name:<30}{counts[0]:>9}{counts[1]:>9}{counts[2]:>9}")
print()
print(plan_capacity("llama-3-70b", 8192, accelerator="H100-80GB").summary())

# %% [markdown]
# The last plan is the other half of the story: a 70B model's bf16 weights (about 141 GB)
# do not fit on one 80 GB card at all, so it is split across several (`n_devices=...` in
# `plan_capacity`), or its weights are quantized too.
#
# ## Building the cache
#
# A serving cache is allocated once, at its full length, and filled in place. Appending by
# concatenation (`torch.cat([old, new])`) would copy the whole cache at every step, turning
# linear work back into quadratic, and would make memory use impossible to plan.
#
# ### Exercise 3 — a KV cache with append
#
# Write a class `SimpleKVCache(batch_size, n_kv_heads, max_seq_len, head_dim,
# dtype=torch.float32)` for one layer:
#
# - `__init__` allocates two zero tensors (keys and values) of shape
#   `(batch_size, n_kv_heads, max_seq_len, head_dim)` with the given dtype, once;
#   `length` starts at 0;
# - `append(k, v)` takes tensors of shape `(batch_size, n_kv_heads, T_new, head_dim)`, writes
#   them at positions `length .. length + T_new - 1`, advances `length`, and returns
#   `(keys, values)`: views of the filled part, shape `(batch_size, n_kv_heads, length,
#   head_dim)`. Views of the preallocated tensors, so their `data_ptr()` never changes;
# - an append that would go past `max_seq_len` raises `ValueError`;
# - `nbytes()` returns the bytes of both preallocated tensors (their full length).

# %% [solution] simple_kv_cache
class SimpleKVCache:
    def __init__(self, batch_size, n_kv_heads, max_seq_len, head_dim, dtype=torch.float32):
        ### BEGIN SOLUTION
        shape = (batch_size, n_kv_heads, max_seq_len, head_dim)  # (B, H_kv, S, D)
        self.k_store = torch.zeros(shape, dtype=dtype)
        self.v_store = torch.zeros(shape, dtype=dtype)
        self.max_seq_len = max_seq_len
        self.length = 0
        ### END SOLUTION

    def append(self, k, v):
        ### BEGIN SOLUTION
        n_new = k.shape[2]
        if self.length + n_new > self.max_seq_len:
            raise ValueError(f"cache full: {self.length} + {n_new} > {self.max_seq_len}")
        self.k_store[:, :, self.length:self.length + n_new] = k
        self.v_store[:, :, self.length:self.length + n_new] = v
        self.length += n_new
        return self.k_store[:, :, :self.length], self.v_store[:, :, :self.length]  # (B, H_kv, length, D)
        ### END SOLUTION

    def nbytes(self):
        ### BEGIN SOLUTION
        return self.k_store.nbytes + self.v_store.nbytes
        ### END SOLUTION

# %% [tests] simple_kv_cache points=3
check.simple_kv_cache(SimpleKVCache)

# %% [markdown]
# ### The course model's own cache
#
# The course model (`load_model("tinychat")`) keeps a cache just like yours, one pair of
# tensors per layer, preallocated by `model.new_cache(batch_size)`. Its tensors' real size
# should be exactly what the formula predicts from the model's configuration. Sizes and
# timings depend only on the architecture, so if the trained weights are not installed the
# next cell builds the same architecture with random weights and says so.

# %%
try:
    model = load_model("tinychat", device="cpu")
    print("using the trained tinychat weights")
except WeightsNotFoundError:
    model = Transformer(get_config("tinychat"), generator=torch.Generator().manual_seed(0)).eval()
    print("using RANDOM weights in the tinychat architecture (run `course train` for the trained ones)")
cfg = model.config
cache = model.new_cache(batch_size=4)
held = sum(t.numel() * t.element_size() for t in (*cache.keys, *cache.values))
predicted = kv_cache_bytes(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, cfg.max_seq_len,
                           bytes_per_element=cache.keys[0].element_size(), batch=4)
print(f"tinychat: {cfg.n_layers} layers, {cfg.n_heads} query heads, {cfg.n_kv_heads} KV heads, "
      f"head_dim {cfg.head_dim}, window {cfg.max_seq_len}, {cache.dtype}")
print(f"bytes held by the cache tensors: {held:,}")
print(f"bytes from the formula:          {predicted:,}")
assert held == predicted
print(f"for comparison, the weights: {model.num_parameters() * cache.keys[0].element_size():,} bytes")

# %% [markdown]
# ## Paging: reserving less
#
# A server does not know how long an answer will be. The simple policy reserves
# `max_seq_len` positions for every sequence up front, contiguous in memory, and most of that
# reservation is never used. Paging (the idea behind vLLM's PagedAttention) cuts the cache
# into fixed-size blocks, say 16 positions, hands a sequence a new block only when its last
# one is full, and keeps a small block table mapping each sequence's logical positions to
# physical blocks. A sequence then wastes at most the unused tail of its last block.
#
# ### Exercise 4 — contiguous versus paged waste
#
# Write `paging_waste(seq_lens, block_size, max_seq_len)` returning a tuple
# `(contiguous_waste, paged_waste)`, both in token positions, for a list of sequence lengths:
#
# - contiguous reserves `max_seq_len` positions per sequence;
# - paged reserves whole blocks: $\lceil n / \text{block size} \rceil$ blocks for a sequence of
#   length $n$;
# - waste is reserved minus used, summed over the sequences;
# - a length above `max_seq_len`, or a `block_size` below 1, raises `ValueError`.

# %% [solution] paging_waste
def paging_waste(seq_lens, block_size, max_seq_len):
    ### BEGIN SOLUTION
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    contiguous = paged = 0
    for n in seq_lens:
        if n > max_seq_len:
            raise ValueError(f"sequence of {n} tokens exceeds max_seq_len={max_seq_len}")
        blocks = -(-n // block_size)
        contiguous += max_seq_len - n
        paged += blocks * block_size - n
    return contiguous, paged
    ### END SOLUTION

# %% [tests] paging_waste points=2
check.paging_waste(paging_waste)

# %% [markdown]
# A batch of 64 chat requests on Llama-3-8B, with lengths drawn from a skewed distribution
# (most answers short, a few long), a 4,096-token maximum and 16-token blocks:

# %%
gen = torch.Generator().manual_seed(3)
lengths = torch.exp(torch.randn(64, generator=gen) * 0.9 + 6.0).clamp(1, 4096).long().tolist()
contiguous, paged = paging_waste(lengths, 16, 4096)
per_token = get_geometry("llama-3-8b").kv_bytes_per_token("bf16")
used = sum(lengths)
print(f"tokens actually stored: {used:,} (mean length {used / len(lengths):.0f})")
print(f"contiguous: wastes {contiguous:,} positions = {format_bytes(contiguous * per_token)} "
      f"({contiguous / (contiguous + used):.0%} of what it reserves)")
print(f"paged:      wastes {paged:,} positions = {format_bytes(paged * per_token)} "
      f"({paged / (paged + used):.1%} of what it reserves)")
report = compare_paging(lengths, block_size=16, max_seq_len=4096, bytes_per_token=per_token)
assert (report.contiguous_waste_tokens, report.paged_waste_tokens) == (contiguous, paged)

fig, ax = plt.subplots(figsize=(6, 2.6))
ax.barh(["paged (16)", "contiguous"], [used, used], color="tab:green", label="used")
ax.barh(["paged (16)", "contiguous"], [paged, contiguous], left=[used, used], color="tab:gray", label="wasted")
ax.set_xlabel("token positions reserved")
ax.legend(loc="lower right")
ax.set_title("Same 64 requests, two reservation policies")
fig.tight_layout()
plt.show()

# %% [markdown]
# Paging's waste is below one block per sequence, so memory that contiguous reservation
# strands becomes room for more sequences. The cost is bookkeeping: a block table per
# sequence, an allocator, and an attention kernel that gathers keys from scattered blocks.
# Notebook 06 builds that allocator.
#
# ## Measured: per-token latency with and without the cache
#
# On the course model: with a cache, one decode step processes one token against the stored
# prefix. Without a cache, producing the token at position $t$ means a full forward pass over
# all $t$ tokens. Both are timed here at several positions (the token IDs are fixed and
# random: the cost depends only on the shapes).

# %%
vocab, window = cfg.vocab_size, cfg.max_seq_len
tokens = torch.randint(0, vocab, (1, window), generator=torch.Generator().manual_seed(0))  # (1, S)
positions = [16, 64, 128, 192, 256, 320, 384, 448, window - 8]
threads = torch.get_num_threads()
torch.set_num_threads(1)  # one thread: steadier timings on a shared machine

with torch.no_grad():
    cached_ms = {}
    cache = model.new_cache(1)
    prefill(model, tokens[:, :8], cache)
    for t in range(8, window):
        start = time.perf_counter()
        decode_step(model, tokens[:, t:t + 1], cache)  # position t, attending over t cached keys
        cached_ms[t] = (time.perf_counter() - start) * 1e3

    uncached_ms = {}
    for t in positions:
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            model(tokens[:, :t + 1])  # recompute every position up to t
            runs.append((time.perf_counter() - start) * 1e3)
        uncached_ms[t] = sorted(runs)[1]  # the median of three
torch.set_num_threads(threads)

def smoothed(t, width=8):
    window_values = sorted(cached_ms[p] for p in range(max(8, t - width), min(window, t + width)))
    return window_values[len(window_values) // 2]

print(f"{'position':>9}{'with cache (ms)':>17}{'without (ms)':>14}{'ratio':>8}")
for t in positions:
    print(f"{t:>9}{smoothed(t):>17.2f}{uncached_ms[t]:>14.2f}{uncached_ms[t] / smoothed(t):>7.0f}x")

# %%
fig, ax = plt.subplots(figsize=(6.5, 3.2))
ax.plot(list(cached_ms), list(cached_ms.values()), ".", ms=2, alpha=0.4, color="tab:blue")
ax.plot(positions, [smoothed(t) for t in positions], "o-", color="tab:blue", label="with KV cache")
ax.plot(positions, [uncached_ms[t] for t in positions], "s-", color="tab:red", label="without (recompute prefix)")
ax.set_xlabel("position of the generated token")
ax.set_ylabel("ms per token")
ax.set_yscale("log")
ax.set_title("tinychat on this machine (one CPU thread)")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# Without the cache the time per token climbs with position, because each step redoes the
# whole prefix, so a full answer costs quadratic time. With the cache it stays nearly flat on
# a model this small: the new token's projections and MLP dominate, and reading a few hundred
# cached keys is cheap. On large models at long contexts, reading the cache itself becomes a
# large share of each step, which is where notebook 06 picks up (decode is bound by memory
# bandwidth, and the cache is part of what must be read).
#
# ## Interview probes
#
# **"Why is long context expensive?"**
# - *Strong:* two separate costs. Prefill's attention scores grow with the square of the
#   prompt length (every token against every earlier one). Then every token in the context
#   sits in the KV cache for the whole conversation, linear in length per sequence, and that
#   memory caps how many sequences run at once: a GPT-3-class model at 4k tokens in fp16 needs
#   2 × 96 × 96 × 128 × 4096 × 2 ≈ 19.3 GB per sequence; 8 KV heads bring it to 1.6 GB.
#   Names the levers: GQA/MQA, quantized caches, paging, shorter prompts, prefix caching.
# - *Weak:* "attention is quadratic", with nothing about the cache, memory, or concurrency.
#
# **"Your 80 GB GPU holds the model easily, so why can you only serve a handful of users?"**
# - *Strong:* computes weights + reserve + n × per-sequence cache; shows how context length
#   and KV heads set the per-sequence cost; proposes int8 KV, paging, or capping max tokens.
# - *Weak:* "add more GPUs", with no arithmetic.
#
# ## Recap
# - The cache trades memory for compute: each decode step processes one new token instead of
#   the whole prefix.
# - KV bytes = 2 × layers × KV heads × head_dim × tokens × bytes per element × batch;
#   19.3 GB for one 4k-token GPT-3-class sequence, 1.6 GB with 8 KV heads.
# - Sequences that fit = (memory − weights − reserve) / KV bytes per sequence; GQA, int8/int4
#   caches and paging each raise it.
# - A real cache is preallocated and written in place; its bytes are exactly the formula.
