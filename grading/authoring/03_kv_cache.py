# %% [markdown]
# # 03 · The KV cache and its memory
#
# **Prerequisites:** notebook 02 (queries, keys and values; the causal mask; heads and
# grouped-query attention; RoPE), and Python with a little PyTorch (tensor shapes, slicing).
#
# **Time:** about 110 minutes (a first careful pass, with the three exercises)
#
# **Grading:** the course's own implementations that the setup cell imports are there for the
# demos. While your notebook is graded they are switched off, and so are the visible checks
# and the libraries the tests compare against: each answer must be your own code.
#
# Notebook 02 built attention: every position makes a query, a key and a value, and each
# query reads all the keys before it. This notebook is about what happens when the model
# writes an answer one token at a time, and why the memory that makes that fast is the
# resource a serving system runs out of first.
#
# **By the end of this notebook you can**
# - say exactly what a cache saves (recomputing keys and values) and what it does not
#   (reading every cached key at every step);
# - compute the cache's size for any model from its configuration, and reproduce the
#   19.3 GB figure for a GPT-3-class geometry from memory;
# - plan how many sequences fit on a real accelerator, and what grouped-query attention,
#   latent and sliding-window attention, quantized caches and paging change;
# - build a preallocated cache with `append`, prove that decoding with a cache gives the
#   same logits as recomputing everything, and measure what it buys on the course model;
# - explain why decoding is limited by memory bandwidth, not arithmetic.

# %% [setup]
import math
import time

import matplotlib.pyplot as plt
import torch

from course_lib.kv_memory import (
    ACCELERATORS,
    MODEL_GEOMETRIES,
    compare_paging,
    format_bytes,
    get_geometry,
    kv_cache_bytes,  # the reference formula, for the demos (switched off while grading)
    plan_capacity,
)
from course_lib.model import Transformer, WeightsNotFoundError, decode_step, get_config, load_model, prefill


# %% [checks]
# The visible checks and their hints (grading runs without them: the answers must be your own).
from course_lib.checks import kv_cache as check
from course_lib.checks.hints import Hints
hint = Hints(check.HINTS)  # hint("exercise_name") shows the next hint for that exercise

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
# over the stored prefix. Count two kinds of work for a 100-token prompt and a 400-token
# answer: key/value vectors computed (one per position pushed through the layers), and
# query-key dot products inside attention (per head and layer):

# %%
prompt_len, answer_len = 100, 400
steps = [prompt_len + t for t in range(answer_len)]  # how many positions exist at each step
kv_without = sum(steps)                   # every step recomputes K and V for the whole prefix
kv_with = prompt_len + answer_len - 1     # each position's K and V once (the last token is never fed)
dots_without = sum(n * (n + 1) // 2 for n in steps)  # every step redoes the causal attention of every position
dots_with = prompt_len * (prompt_len + 1) // 2 + sum(steps[1:])  # prefill, then the new query against all cached keys
print(f"K/V vectors computed   without a cache: {kv_without:>12,}   with: {kv_with:>8,}   "
      f"ratio {kv_without / kv_with:.0f}x")
print(f"query-key dot products without a cache: {dots_without:>12,}   with: {dots_with:>8,}   "
      f"ratio {dots_without / dots_with:.0f}x")
n_total = prompt_len + answer_len
print(f"with a cache, the dot products are {dots_with / (n_total ** 2 / 2):.2f} x n^2/2 for n = {n_total}: still quadratic")

# %% [markdown]
# Read the two lines separately. The cache removes the *recomputation*: the key/value work
# drops from quadratic in the answer length to linear (each position projected once). It
# does **not** make attention cheap. At step $t$ the new query still reads all $t$ cached
# keys and values, so one step costs $O(t)$ in attention and a whole answer of $n$ tokens
# still costs $O(n^2)$ dot products in total, the same order as one prefill of that length.
# A common summary, "the cache turns each step from $O(T)$ into $O(1)$", is wrong for
# attention: only the projections and the MLP of a step become independent of $T$; the
# attention read grows with every token. What the cache costs is memory: every layer keeps
# a key and a value vector per KV head for every token of every sequence it is serving.
#
# ## The formula
#
# $$\text{KV bytes} = 2 \times n_\text{layers} \times n_\text{kv heads} \times d_\text{head}
# \times \text{seq len} \times \text{bytes per element} \times \text{batch}$$
#
# The 2 is one K and one V. Note that it is the number of *KV* heads, not query heads: with
# grouped-query attention several query heads share one cached key/value head.
#
# The layout, drawn for tinychat's geometry (4 layers, 2 KV heads of size 16) with a few
# positions filled; each layer owns one K block and one V block, and every new token adds
# one column to each:

# %%
from course_lib.diagrams import kv_cache_layout

kv_cache_layout(layers=4, kv_heads=2, seq=8, head_dim=16, dtype_bytes=4);  # tinychat keeps its cache in float32

# %% [markdown]
# The worked figure: a GPT-3-class geometry has 96 layers, 96 heads of size 128, and one KV
# head per query head. Take one sequence of 4,096 tokens in fp16 (2 bytes). That length is
# hypothetical for GPT-3 itself, whose published context window is shorter (printed below);
# it is the standard length for comparing geometries:

# %%
gpt3 = get_geometry("gpt-3-175b")
print(f"GPT-3's own context window: {gpt3.context_length:,} tokens")
gpt3_bytes = 2 * 96 * 96 * 128 * 4096 * 2
gqa_bytes = 2 * 96 * 8 * 128 * 4096 * 2
print(f"GPT-3-class, 96 KV heads, 4,096 tokens: {gpt3_bytes:,} bytes = {format_bytes(gpt3_bytes)}")
print(f"the same with 8 KV heads:               {gqa_bytes:,} bytes = {format_bytes(gqa_bytes)}")
print(f"GPT-3's real window, 96 KV heads:       {format_bytes(2 * 96 * 96 * 128 * gpt3.context_length * 2)}")

# %% [markdown]
# Over 19 GB for *one* conversation of 4k tokens, before a single weight is loaded. Sharing
# each KV head among 12 query heads (8 KV heads instead of 96) divides it by 12, to 1.6 GB.
# That is why most recent open models use grouped-query attention, but it is not the only
# lever on the cache:
#
# - **Multi-head latent attention (MLA)**, in DeepSeek-V2 and V3, caches one compressed
#   latent vector per token and layer (plus a small separate part that carries RoPE) and
#   expands it into per-head keys and values when attending. DeepSeek-V3 does not use GQA.
# - **Sliding-window attention** lets each token attend only to the last $W$ positions, so a
#   layer's cache never holds more than $W$ tokens (Mistral 7B v0.1 used $W$ = 4,096 in every
#   layer; several later models alternate windowed and full layers).
#
# Both, per token or per sequence, computed from the published configurations:

# %%
# DeepSeek-V3 config.json: 61 layers, 128 heads, kv_lora_rank 512, qk_rope_head_dim 64,
# qk_nope_head_dim 128, v_head_dim 128. MLA caches the latent and the RoPE part, in bf16.
mla_per_token = 61 * (512 + 64) * 2
mha_equivalent = 61 * 128 * ((128 + 64) + 128) * 2  # per-head keys (192 wide) and values (128 wide)
print(f"DeepSeek-V3, MLA latent cache:        {mla_per_token / 1024:8.1f} KiB per token")
print(f"the same heads cached as full K and V: {mha_equivalent / 1024:8.1f} KiB per token "
      f"({mha_equivalent / mla_per_token:.0f}x more)")
mistral = get_geometry("mistral-7b")
window, conversation = 4096, 32768
full = mistral.kv_cache_bytes(conversation, "bf16")
windowed = mistral.kv_cache_bytes(min(window, conversation), "bf16")
print(f"Mistral-7B geometry, {conversation:,}-token conversation: full cache {format_bytes(full)}, "
      f"{window:,}-token window {format_bytes(windowed)}")

# %% [markdown]
# The window saves memory by forgetting: a fact more than $W$ tokens back is reachable only
# indirectly, through what later positions absorbed from it layer by layer.

# %% [markdown]
# ## Real models
#
# `course_lib.kv_memory.MODEL_GEOMETRIES` holds the geometry of several published models,
# copied from their papers and configuration files. `kv_cache_bytes(n_layers, n_kv_heads,
# head_dim, seq_len, bytes_per_element=2, batch=1)`, imported in the setup cell, is the formula
# above; it gives their per-token cost directly (Exercise 1 asks you to write the formula
# yourself, inside a capacity plan):

# %%
header = (f"{'model':<16}{'layers':>7}{'heads':>6}{'KV':>4}{'dim':>5}  {'attn':<5}{'params':>8}{'KiB/token':>11}"
          f"{'GB @ 4k':>9}{'GB @ ctx':>10}{'/weights':>10}")
print(header)
print("-" * len(header))
for g in MODEL_GEOMETRIES.values():
    per_token = kv_cache_bytes(g.n_layers, g.n_kv_heads, g.head_dim, 1)
    at_4k = kv_cache_bytes(g.n_layers, g.n_kv_heads, g.head_dim, 4096)
    at_ctx = kv_cache_bytes(g.n_layers, g.n_kv_heads, g.head_dim, g.context_length)
    print(f"{g.name:<16}{g.n_layers:>7}{g.n_heads:>6}{g.n_kv_heads:>4}{g.head_dim:>5}  {g.attention_kind:<5}"
          f"{g.n_params / 1e9:>7.1f}B{per_token / 1024:>11.0f}{at_4k / 1e9:>9.2f}{at_ctx / 1e9:>10.1f}"
          f"{at_ctx / g.weight_bytes('fp16'):>10.2f}")  # one full-window sequence's cache / fp16 weights

# %% [markdown]
# Read the table across: Llama-2-7B (no GQA) pays 512 KiB per token in fp16, while
# Llama-3-8B and Mistral-7B pay 128 KiB with 8 KV heads. Llama-3-70B pays only 320 KiB per
# token although it has many times the 8B's parameters (the ratio is printed below),
# because its extra width went into query heads and MLP, not KV heads.

# %%
llama8, llama70 = get_geometry("llama-3-8b"), get_geometry("llama-3-70b")
per_token_8 = kv_cache_bytes(llama8.n_layers, llama8.n_kv_heads, llama8.head_dim, 1)
per_token_70 = kv_cache_bytes(llama70.n_layers, llama70.n_kv_heads, llama70.head_dim, 1)
print(f"parameters: 70B / 8B = {llama70.n_params / llama8.n_params:.1f}x; "
      f"KV per token: {per_token_70 // 1024} / {per_token_8 // 1024} KiB = {per_token_70 / per_token_8:.1f}x")

# %% [markdown]
# The table's last column divides one full-window sequence's cache by the model's fp16
# weights: for every model in it the ratio is below 1. Long context changes that. Llama-3.1-8B keeps the 8B's geometry
# (32 layers, 8 KV heads, head size 128) and extends the window to 128k tokens; in bf16:

# %%
long_context = 128 * 1024
weights_8b = llama8.weight_bytes("bf16")
one_conversation = kv_cache_bytes(llama8.n_layers, llama8.n_kv_heads, llama8.head_dim, long_context)
print(f"weights (bf16):                          {format_bytes(weights_8b)}")
print(f"KV cache of one {long_context:,}-token conversation: {format_bytes(one_conversation)}")
print(f"cache / weights: {one_conversation / weights_8b:.2f}")

# %% [markdown]
# One full-length conversation needs more memory than the whole model: the cache, not the
# weights, is what long context costs.

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
# ### Paging: reserving less
#
# A server does not know how long an answer will be. The simple policy reserves
# `max_seq_len` positions for every sequence up front, contiguous in memory, and most of that
# reservation is never used. Paging (the idea behind vLLM's PagedAttention) cuts the cache
# into fixed-size blocks, say 16 positions, hands a sequence a new block only when its last
# one is full, and keeps a small block table mapping each sequence's logical positions to
# physical blocks. A sequence then wastes at most the unused tail of its last block.
#
# ### Exercise 1 — a capacity plan
#
# Put the formula, the capacity rule and paging into one plan. Write
# `plan_kv_capacity(geometry, *, accelerator_bytes, weights_bytes, reserve_fraction, seq_len,
# seq_lens, block_size, dtype_bytes=2)`. `geometry` is a dict with at least the keys
# `"n_layers"`, `"n_kv_heads"` and `"head_dim"` (other keys, such as `"n_heads"`, are
# ignored). Return a dict of seven ints:
#
# - `"kv_bytes_per_token"`: 2 × n_layers × n_kv_heads × head_dim × dtype_bytes (one K and one
#   V per KV head; wrap it in `int(...)` so that int4's 0.5 bytes still gives an int);
# - `"reserve_bytes"`: `int(accelerator_bytes × reserve_fraction)`, a share of the *whole*
#   memory;
# - `"cache_bytes"`: accelerator_bytes − weights_bytes − reserve_bytes, the room left for
#   caches, or 0 when the weights and reserve leave none (never negative);
# - `"max_sequences"`: how many whole sequences of `seq_len` tokens fit in `cache_bytes`
#   (round down);
# - `"paged_blocks"`: the blocks that the sequences whose lengths are in `seq_lens` take
#   under paging, $\lceil n / \text{block size} \rceil$ for a sequence of length $n$, summed;
# - `"paged_waste_tokens"`: token slots in those blocks that hold no token (the blocks'
#   slots minus the sum of the lengths);
# - `"contiguous_waste_tokens"`: the same under contiguous reservation, which gives every
#   sequence `seq_len` slots.
#
# Raise `ValueError` when n_layers, n_kv_heads, head_dim, seq_len or block_size is below 1,
# when reserve_fraction is outside 0 ≤ fraction < 1, or when a length in `seq_lens` is below
# 1 or above `seq_len` (exactly `seq_len` is allowed; an empty list takes no blocks). Write
# the formula yourself: the reference `kv_cache_bytes` the demos use is switched off while
# grading. `hint("plan_kv_capacity")` shows a hint, a little more each time you run it.

# %% [solution] plan_kv_capacity
def plan_kv_capacity(geometry, *, accelerator_bytes, weights_bytes, reserve_fraction, seq_len,
                     seq_lens, block_size, dtype_bytes=2):
    ### BEGIN SOLUTION
    sizes = {name: geometry[name] for name in ("n_layers", "n_kv_heads", "head_dim")}
    sizes.update(seq_len=seq_len, block_size=block_size)
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if not 0 <= reserve_fraction < 1:
        raise ValueError(f"reserve_fraction must be in [0, 1), got {reserve_fraction}")
    lengths = list(seq_lens)
    for n in lengths:
        if not 1 <= n <= seq_len:
            raise ValueError(f"a sequence of {n} tokens is outside 1..seq_len={seq_len}")
    per_token = int(2 * sizes["n_layers"] * sizes["n_kv_heads"] * sizes["head_dim"] * dtype_bytes)
    reserve = int(accelerator_bytes * reserve_fraction)
    cache = max(0, accelerator_bytes - weights_bytes - reserve)  # never negative
    blocks = sum(-(-n // block_size) for n in lengths)  # ceil(n / block_size) per sequence
    return {
        "kv_bytes_per_token": per_token,
        "reserve_bytes": reserve,
        "cache_bytes": cache,
        "max_sequences": cache // (per_token * seq_len),
        "paged_blocks": blocks,
        "paged_waste_tokens": blocks * block_size - sum(lengths),
        "contiguous_waste_tokens": len(lengths) * seq_len - sum(lengths),
    }
    ### END SOLUTION

# %% [tests] plan_kv_capacity points=6
check.plan_kv_capacity(plan_kv_capacity)

# %% [markdown]
# Now a real plan. Llama-3-8B with bf16 weights (about 16 GB) serving 8,192-token
# conversations, with 10% of memory held back for activations and the runtime. The
# accelerator memory figures are **representative** vendor numbers (read as decimal GB), not
# measurements. The course's `plan_capacity` prints the same plan as a summary:

# %%
def shape_of(g):
    """The geometry dict plan_kv_capacity reads, from one of MODEL_GEOMETRIES."""
    return {"n_layers": g.n_layers, "n_heads": g.n_heads, "n_kv_heads": g.n_kv_heads, "head_dim": g.head_dim}

geometry = get_geometry("llama-3-8b")
accelerator = ACCELERATORS["H100-80GB"]
plan = plan_kv_capacity(shape_of(geometry), accelerator_bytes=accelerator.memory_bytes,
                        weights_bytes=geometry.weight_bytes("bf16"), reserve_fraction=0.10,
                        seq_len=8192, seq_lens=[], block_size=16)
print(f"{accelerator.name}: {plan['max_sequences']} sequences of 8,192 tokens "
      f"({format_bytes(plan['cache_bytes'])} for caches, {plan['kv_bytes_per_token'] // 1024} KiB per token)")
print()
print(plan_capacity("llama-3-8b", 8192, accelerator="H100-80GB").summary())

# %% [markdown]
# Paging changes the other side of the division: how much of the cache memory holds real
# tokens. A batch of 64 chat requests on the same model, with lengths drawn from a skewed
# distribution (most answers short, a few long), a 4,096-token maximum and 16-token blocks:

# %%
gen = torch.Generator().manual_seed(3)
lengths = torch.exp(torch.randn(64, generator=gen) * 0.9 + 6.0).clamp(1, 4096).long().tolist()
batch_plan = plan_kv_capacity(shape_of(geometry), accelerator_bytes=accelerator.memory_bytes,
                              weights_bytes=geometry.weight_bytes("bf16"), reserve_fraction=0.10,
                              seq_len=4096, seq_lens=lengths, block_size=16)
contiguous, paged = batch_plan["contiguous_waste_tokens"], batch_plan["paged_waste_tokens"]
per_token = batch_plan["kv_bytes_per_token"]
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
# Blocks also make sharing cheap: two sequences that start with the same tokens can point
# their block tables at the same physical blocks (prefix caching, in the probes below).
#
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
# ### Exercise 2 — a KV cache with append
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
#
# `hint("simple_kv_cache")` gives a nudge when you need one.

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
# ## The cache is exact
#
# A cache is only worth having if it changes nothing the model computes. The subtle part is
# *position*. RoPE rotates each query and key by an angle set by its absolute position in the
# sequence. A token fed after 37 cached positions sits at position 37, not 0, and the model
# must rotate it by position 37's angle. The course model reads that offset from the cache:
# `model(ids, cache=cache)` places the new tokens at positions `cache.seq_len ..
# cache.seq_len + T - 1` and then advances `cache.seq_len` by `T`. So a prompt can be read in
# pieces (chunked prefill, which servers use to keep one long prompt from stalling everyone
# else), as long as every piece goes into the *same* cache.
#
# ### Exercise 3 — decoding with a cache equals recomputing everything
#
# Write `cached_greedy_logits(model, prompt_ids, steps, chunk_size=None)` for the course
# model, using `prefill` and `decode_step` (imported in the setup cell):
#
# - make one cache with `model.new_cache(1)` and use it for the whole call;
# - read `prompt_ids` (a list of ints) with `prefill`, in pieces of `chunk_size` tokens (the
#   last piece may be shorter); `None` means the whole prompt in one piece. Every piece goes
#   into the same cache, so it continues at the positions already filled;
# - then decode greedily: the next token is the argmax of the latest logits, fed back with
#   `decode_step` (ids of shape `(1, 1)`);
# - return a float tensor of shape `(steps, vocab_size)`: row `i` holds the logits from which
#   the `i`-th new token is chosen, so row 0 is the logits at the last prompt position. The
#   last chosen token is never fed back (nothing reads its logits);
# - raise `ValueError` for an empty prompt, `steps < 1`, `chunk_size < 1`, or when
#   `len(prompt_ids) + steps` exceeds `model.config.max_seq_len`.
#
# The check compares each row with a full recomputation, `model(all tokens so far)[0, -1]`,
# with no cache at all, to within 1e-4. `hint("cached_greedy_logits")` helps if you are stuck.

# %% [solution] cached_greedy_logits
def cached_greedy_logits(model, prompt_ids, steps, chunk_size=None):
    ### BEGIN SOLUTION
    prompt = list(prompt_ids)
    if not prompt:
        raise ValueError("the prompt is empty")
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    piece = len(prompt) if chunk_size is None else chunk_size
    if piece < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
    if len(prompt) + steps > model.config.max_seq_len:
        raise ValueError(f"{len(prompt)} prompt tokens + {steps} steps exceed the window {model.config.max_seq_len}")
    ids = torch.tensor([prompt], dtype=torch.long, device=model.device)  # (1, T)
    one_cache = model.new_cache(1)  # prefill and decode_step run without gradients already
    for start in range(0, len(prompt), piece):
        logits = prefill(model, ids[:, start:start + piece], one_cache)  # (1, V), continues at one_cache.seq_len
    rows = [logits[0]]
    for _ in range(steps - 1):
        next_id = logits.argmax(dim=-1, keepdim=True)  # (1, 1)
        logits = decode_step(model, next_id, one_cache)  # (1, V)
        rows.append(logits[0])
    return torch.stack(rows).float()  # (steps, V)
    ### END SOLUTION

# %% [tests] cached_greedy_logits points=4
check.cached_greedy_logits(cached_greedy_logits)

# %% [markdown]
# Why the offset matters: feed the second half of a prompt into a *fresh* cache, as if it
# started the sequence, and compare its last logits with the ones recomputed over the whole
# prompt. The tokens are the same; only their positions and the missing prefix differ.

# %%
demo_prompt = torch.randint(0, cfg.vocab_size, (1, 40), generator=torch.Generator().manual_seed(1))  # (1, 40)
with torch.no_grad():
    reference = model(demo_prompt)[0, -1]                       # (V,): full recomputation
    shared = model.new_cache(1)
    prefill(model, demo_prompt[:, :24], shared)
    continued = prefill(model, demo_prompt[:, 24:], shared)[0]  # positions 24..39, after the prefix
    restarted = prefill(model, demo_prompt[:, 24:], model.new_cache(1))[0]  # positions 0..15, no prefix
print(f"same cache, continued at position 24: largest logit error {(continued - reference).abs().max():.2e}")
print(f"fresh cache, restarted at position 0: largest logit error {(restarted - reference).abs().max():.2e}")

# %% [markdown]
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
# large share of each step, as the next section shows.
#
# ## Arithmetic per token, and why decode waits on memory
#
# Each weight of a dense model takes part in one multiply and one add per token, so a forward
# pass costs about $2 \times \text{parameters}$ floating-point operations per token, plus
# attention's reads of the cache (about $4 \times \text{layers} \times t \times
# n_\text{heads} d_\text{head}$ at position $t$: scores and the weighted sum of values).
# PyTorch can count the operations of one real decode step on tinychat:

# %%
from torch.utils.flop_counter import FlopCounterMode

with torch.no_grad():
    cache = model.new_cache(1)
    prefill(model, tokens[:, :100], cache)  # 100 positions already cached
    with FlopCounterMode(display=False) as counter:
        decode_step(model, tokens[:, 100:101], cache)
measured = counter.get_total_flops()
rule = 2 * model.num_parameters()
attention_part = 4 * cfg.n_layers * 101 * cfg.n_heads * cfg.head_dim
print(f"measured FLOPs for one decode step at position 100: {measured:,}")
print(f"2 x parameters ({model.num_parameters():,}):           {rule:,}")
print(f"+ attention over 101 keys:                          {attention_part:,}")
print(f"rule + attention = {(rule + attention_part) / measured:.3f} x measured")

# %% [markdown]
# (The embedding lookup costs no arithmetic, but tinychat's output head reuses the same
# matrix as a real matrix multiply, so counting the shared matrix once is right.) For an 8B
# model the rule gives about 16 GFLOP per token. Now compare that with what one decode step
# must *read*: every weight once, and the sequence's whole cache. The accelerator figures
# below are **representative** vendor numbers: memory bandwidth from
# `course_lib.kv_memory.ACCELERATORS`, and peak dense bf16 arithmetic for the same part from
# its datasheet.

# %%
h100 = ACCELERATORS["H100-80GB"]
H100_DENSE_BF16_FLOPS = 989e12  # representative: NVIDIA's H100 SXM datasheet, dense (no sparsity)
bandwidth = h100.bandwidth_gb_s * 1e9  # bytes per second
ridge = H100_DENSE_BF16_FLOPS / bandwidth  # FLOPs per byte needed to keep the arithmetic units busy

flops_per_token = 2 * llama8.n_params
print(f"Llama-3-8B: 2 x parameters = {flops_per_token / 1e9:.1f} GFLOP per token")
context = 4096
kv_read = kv_cache_bytes(llama8.n_layers, llama8.n_kv_heads, llama8.head_dim, context)
print(f"{h100.name}: {H100_DENSE_BF16_FLOPS / 1e12:.0f} TFLOP/s, {h100.bandwidth_gb_s:,} GB/s "
      f"-> busy only above {ridge:.0f} FLOPs per byte read")
print(f"{'batch':>6}{'FLOPs/byte':>12}{'ms/step (bytes)':>17}{'ms/step (FLOPs)':>17}{'tokens/s':>10}")
for batch in (1, 8, 64, 256):
    bytes_read = weights_8b + batch * kv_read  # the weights once for the batch, each sequence's cache
    flops = batch * flops_per_token
    ms_memory, ms_compute = bytes_read / bandwidth * 1e3, flops / H100_DENSE_BF16_FLOPS * 1e3
    print(f"{batch:>6}{flops / bytes_read:>12.1f}{ms_memory:>17.2f}{ms_compute:>17.3f}"
          f"{batch / max(ms_memory, ms_compute) * 1e3:>10.0f}")

# %% [markdown]
# At batch 1 a decode step does about one FLOP per byte it reads, hundreds of times below the
# point where the arithmetic units would be the limit: the step takes as long as reading the
# weights and the cache, and the arithmetic units mostly wait. Batching shares one read of the
# weights among many sequences, which is why servers batch decode steps. It does not share
# the caches: each sequence reads its own, so at long contexts and large batches the cache
# reads dominate and the intensity levels off, still far below the ridge (Llama-3-8B with
# 4,096-token contexts, in the table). Prefill is the opposite case: hundreds of prompt tokens go through each weight
# read, so it is limited by arithmetic. Smaller caches (GQA, MLA, int8 KV) shorten decode
# steps directly.

# %% [markdown]
# ## Your own model (optional)
#
# Everything above used tinychat and published geometries. If you have a Llama-, Mistral-,
# SmolLM2- or Qwen-family checkpoint on disk (a Hugging Face folder with `config.json`,
# safetensors weights and `tokenizer.json`; the course never downloads one), put its folder
# in `MY_MODEL` and run the cell. It reads the geometry from the checkpoint's own config,
# prices its KV cache with this notebook's formula, and times one prefill against decode
# steps on the CPU. With `MY_MODEL` empty it only says so.

# %%
MY_MODEL = ""  # a checkpoint folder, e.g. "~/models/SmolLM2-135M-Instruct"
if MY_MODEL:
    from course_lib.your_model import kv_report

    kv_report(MY_MODEL)
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

show_probes("03_kv_cache")

# %% [markdown]
# Practise them here: the panel asks this notebook's numeric problems and probe cards and
# schedules them in the same history as `course drill` in a terminal. Nothing is saved until
# you press Start.

# %%
from course_lib.drills.widget import notebook_panel

notebook_panel("03_kv_cache")

# %% [markdown]
# The numbers behind the prefix-caching card: what one shared system prompt saves on
# Llama-3-8B.

# %%
system_prompt, sharers = 2000, 32
per_token = kv_cache_bytes(llama8.n_layers, llama8.n_kv_heads, llama8.head_dim, 1)
saved_memory = (sharers - 1) * system_prompt * per_token
saved_flops = (sharers - 1) * system_prompt * 2 * llama8.n_params
print(f"Llama-3-8B, a {system_prompt:,}-token system prompt shared by {sharers} sequences:")
print(f"  KV memory saved: {format_bytes(saved_memory)}")
print(f"  prefill work saved: {saved_flops / 1e12:.0f} TFLOP "
      f"({saved_flops / H100_DENSE_BF16_FLOPS * 1e3:.0f} ms of an H100 at peak)")

# %% [markdown]
# ## Recap
# - The cache stores every position's keys and values, which never change under the causal
#   mask, so each decode step computes q, k and v for one new token only. Attention still
#   reads all cached keys: $O(t)$ per step, $O(n^2)$ per answer.
# - KV bytes = 2 × layers × KV heads × head_dim × tokens × bytes per element × batch;
#   19.3 GB for one 4k-token GPT-3-class sequence, 1.6 GB with 8 KV heads. At 128k tokens one
#   conversation can outweigh an 8B model's weights.
# - Sequences that fit = (memory − weights − reserve) / KV bytes per sequence; GQA, MLA,
#   sliding windows, int8/int4 caches and paging each raise it.
# - A real cache is preallocated and written in place; its bytes are exactly the formula, and
#   with the right position offsets it gives the same logits as recomputing everything.
# - A token costs about 2 × parameters FLOPs, but decode is bound by reading the weights and
#   the cache; prefix caching shares the cache of common leading tokens.
#
# **Self-check:**
# 1. What exactly does the cache stop recomputing, and why is a whole answer's attention
#    still quadratic in its length?
# 2. Without looking: the KV bytes of one 4,096-token sequence for 32 layers, 8 KV heads,
#    head size 128, in bf16. How does that change in int8, and with a batch of 16?
# 3. A chunk of a prompt is fed into a fresh cache instead of the one holding the earlier
#    chunks. Which two things go wrong in its logits?
# 4. Why does batching raise decode throughput, and why does it stop helping at long
#    contexts?
# 5. What does paging waste per sequence at most, and what does contiguous reservation waste?
