# %% [markdown]
# # 02 · Attention and the transformer block
#
# Notebook 01 turned text into token IDs. This one follows those IDs into the network and
# opens up the operation that makes a transformer a transformer: attention. You will write
# it, mask it, split it into heads, give it a sense of position, and share its keys and
# values between heads the way modern models do, checking each piece against PyTorch. Then
# you put the pieces together into one block of the course's own model and check it against
# that model's trained layer.
#
# **Prerequisites:** notebook 00 (softmax with temperature, logits) and notebook 01 (token
# IDs); comfort with PyTorch tensors (`@`, `transpose`, `view`, broadcasting) and the idea of
# a matrix product as a linear layer.
#
# **Time:** about 125 minutes.
#
# **Grading:** the course's own implementations that the setup cell imports are there for the
# demos. While your notebook is graded they are switched off, and so are the visible checks
# and the libraries the tests compare against: each answer must be your own code.
#
# **By the end of this notebook you can**
# - compute scaled dot-product attention by hand and say why the scores are divided by
#   $\sqrt{d_k}$;
# - build the causal mask, including the shifted version a KV cache needs;
# - show that attention without positions ignores word order, and explain how rotary
#   embeddings (RoPE) put order back so that scores depend only on relative distance;
# - tell multi-head, grouped-query and multi-query attention apart by their cache size;
# - build one complete transformer block (RMSNorm, attention with RoPE and GQA, a gated MLP,
#   residuals, pre-norm) that reproduces the course model's trained layer;
# - measure the quadratic cost of the score matrix and say what sparse, sliding-window and
#   linear attention give up to avoid it;
# - read attention heat maps from the course's own model, and say what they do *not* show.

# %% [setup]
import math
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from course_lib.attention import MultiHeadAttention, attention_weights, rope_cos_sin, sinusoidal_positions
from course_lib.model import Transformer, WeightsNotFoundError, get_config, load_model, load_tokenizer

torch.set_num_threads(1)  # small tensors: one thread is faster and steadier on a shared CPU

# %% [checks]
# The visible checks and their hints (grading runs without them: the answers must be your own).
from course_lib.checks import attention as check
from course_lib.checks.hints import Hints
hint = Hints(check.HINTS)  # hint("exercise_name") shows the next hint for that exercise

# %% [markdown]
# ## The intuition
#
# Every position in the sequence asks a question and offers an answer. From its vector $x$
# it makes three projections:
#
# - a **query** $q$: what this position is looking for;
# - a **key** $k$: what this position can be found by;
# - a **value** $v$: what this position hands over when it is found.
#
# Each query is compared with every key by a dot product. The scores go through a softmax,
# becoming weights that are positive and sum to 1, and the output at that position is the
# weighted mix of the values:
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V$$
#
# The weights are routing: they decide which values flow where. A transformer block wraps
# this in a residual connection and a normalization, then does the same again with a small
# feed-forward network that works on each position separately.

# %% [markdown]
# ## A worked example, computed live
#
# Three tokens, $d_k = 2$. Each row is one position.

# %%
Q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
K = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
V = torch.tensor([[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]])

scores = Q @ K.T / math.sqrt(Q.shape[-1])  # (3 queries, 3 keys)
weights = torch.softmax(scores, dim=-1)  # each row sums to 1
print("scores:\n", scores.numpy().round(3))
print("weights:\n", weights.numpy().round(3))
print("output = weights @ V:\n", (weights @ V).numpy().round(3))

# %% [markdown]
# Query 0 points along the first axis, so it scores highest against keys 0 and 1 and its
# output leans towards their values. Query 2 matches key 1 best. Nothing here is learned
# yet: in a model, $Q$, $K$ and $V$ come from multiplying the token vectors by trained
# matrices.
#
# ### Why divide by $\sqrt{d_k}$?
#
# If the entries of $q$ and $k$ have variance 1, their dot product is a sum of $d_k$ such
# products, so its variance is $d_k$. Large scores push the softmax into saturation: one
# weight near 1, the rest near 0, and gradients that vanish. Dividing by $\sqrt{d_k}$ brings
# the variance back to 1 whatever the head width. The table shows both effects: unscaled,
# the largest of 8 weights creeps towards 1 as $d_k$ grows; scaled, it stays put.

# %%
gen = torch.Generator().manual_seed(0)
print("Largest softmax weight over 8 keys, averaged over 500 random queries:")
print(f"{'d_k':>5} {'std of q.k':>11} {'std of q.k/sqrt(d_k)':>21} {'top weight, raw':>16} {'top weight, scaled':>19}")
for d in (4, 16, 64, 256, 1024):
    q = torch.randn(500, 1, d, generator=gen)  # 500 queries
    k = torch.randn(500, 8, d, generator=gen)  # 8 keys each
    dots = (q * k).sum(-1)  # (500, 8) raw scores
    raw_top = torch.softmax(dots, dim=-1).max(-1).values.mean().item()
    scaled_top = torch.softmax(dots / math.sqrt(d), dim=-1).max(-1).values.mean().item()
    print(f"{d:>5} {dots.std().item():>11.2f} {(dots / math.sqrt(d)).std().item():>21.2f} "
          f"{raw_top:>16.3f} {scaled_top:>19.3f}")

# %% [markdown]
# ### Exercise 1 — scaled dot-product attention
#
# Write `scaled_dot_product_attention(q, k, v, mask=None)` for tensors whose last two axes
# are (positions, features): `q` has shape `(..., Tq, D)`, `k` has `(..., Tk, D)`, `v` has
# `(..., Tk, Dv)`; any leading axes (batch, heads) just come along. Return `(..., Tq, Dv)`.
#
# - Scale the scores by $1/\sqrt{D}$ and take the softmax over the keys (the last axis).
# - `mask`, when given, is a boolean tensor that broadcasts to `(..., Tq, Tk)`; `True` means
#   "may attend". Hidden positions must get exactly zero weight (set their score to $-\infty$
#   before the softmax). Every row of the masks used here keeps at least one key.
# - Scores can be large; `torch.softmax` is stable, a hand-written `exp` must subtract the
#   row maximum first.
# - Write it with tensor operations; do **not** call `torch.nn.functional.scaled_dot_product_attention`,
#   which is what the tests compare you with.
#
# Stuck? `hint("scaled_dot_product_attention")` shows a first hint; each further call shows
# the next one.

# %% [solution] scaled_dot_product_attention
def scaled_dot_product_attention(q, k, v, mask=None):
    ### BEGIN SOLUTION
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (..., Tq, Dv)
    ### END SOLUTION

# %% [tests] scaled_dot_product_attention points=3
check.scaled_dot_product_attention(scaled_dot_product_attention)

# %% [markdown]
# ## The causal mask
#
# A language model predicts each token from the ones before it. During training the whole
# sequence goes through in one pass, so something must stop position $i$ from reading
# positions after $i$: that is the **causal mask**, `True` on and below the diagonal. It is
# what lets one forward pass train every position at once (each row is its own
# "predict the next token" problem), and what makes decoding honest, since the future does
# not exist yet.
#
# With a KV cache (notebook 03) the model runs on only the newest token(s) while the keys of
# the earlier ones are stored. Then there are fewer queries than keys, and the queries are
# the **last** positions: query $i$ sits at absolute position $T_k - T_q + i$.
#
# ### Exercise 2 — the causal mask
#
# Write `causal_mask(n_queries, n_keys=None)` returning a boolean tensor of shape
# `(n_queries, n_keys)` (`n_keys` defaults to `n_queries`) that is `True` where a query may
# look at a key: key position $\le$ the query's absolute position $n_{keys} - n_{queries} + i$.
# More queries than keys makes no sense here: raise `ValueError`. The mask must be a
# `torch.bool` tensor. `hint("causal_mask")` is there if you need it.

# %% [solution] causal_mask
def causal_mask(n_queries, n_keys=None):
    ### BEGIN SOLUTION
    n_keys = n_queries if n_keys is None else n_keys
    if n_queries > n_keys:
        raise ValueError(f"{n_queries} queries cannot be the last positions of {n_keys} keys")
    query_pos = torch.arange(n_queries).unsqueeze(1) + (n_keys - n_queries)  # (Tq, 1)
    return torch.arange(n_keys).unsqueeze(0) <= query_pos  # (Tq, Tk)
    ### END SOLUTION

# %% [tests] causal_mask points=2
check.causal_mask(causal_mask)

# %% [markdown]
# The mask at work in a real attention layer: change the last three tokens of a sequence and
# the outputs at the earlier positions do not move at all.

# %%
torch.manual_seed(0)
layer = MultiHeadAttention(d_model=32, n_heads=4)
x = torch.randn(1, 8, 32)
x_changed = x.clone()
x_changed[:, 5:] = torch.randn(1, 3, 32)
with torch.no_grad():
    before, after = layer(x, is_causal=True), layer(x_changed, is_causal=True)
print("largest change at positions 0-4:", (before[:, :5] - after[:, :5]).abs().max().item())
print("largest change at positions 5-7:", (before[:, 5:] - after[:, 5:]).abs().max().item())

# %% [markdown]
# ## Attention has no sense of order
#
# Nothing in $\mathrm{softmax}(QK^\top)V$ knows which position is which. Shuffle the input
# rows and the output rows are shuffled the same way, otherwise unchanged: attention is
# **permutation-equivariant**. "Dog bites man" and "man bites dog" would look alike. Here
# it is, live, on a layer without positional information and without the causal mask:

# %%
perm = torch.randperm(8, generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    out = layer(x, is_causal=False)
    out_of_shuffled = layer(x[:, perm], is_causal=False)
print("permutation:", perm.tolist())
print("max |f(shuffled x) - shuffled f(x)| =", (out_of_shuffled - out[:, perm]).abs().max().item())

# %% [markdown]
# ## Heads
#
# One attention pattern per layer is limiting: a token may need to look at its subject and,
# separately, at the previous token. **Multi-head attention** cuts the $d_{model}$ features
# into $H$ slices of width $D = d_{model} / H$ and runs attention on each slice in parallel;
# the results are glued back together and mixed by an output projection. The cost is about
# the same as one wide head, because each head is narrower.

# %% [markdown]
# The shapes at each step, for the course model's head count and width (one sequence of six
# tokens):

# %%
from course_lib.diagrams import attention_shapes

attention_shapes(batch=1, heads=get_config("tinychat").n_heads, seq=6, head_dim=get_config("tinychat").head_dim);

# %% [markdown]
# ### Exercise 3 — splitting and merging heads
#
# Write `split_heads(x, n_heads)`: `(B, T, H*D)` → `(B, H, T, D)`, where head $h$ gets the
# features $hD \dots (h+1)D - 1$; raise `ValueError` when the feature size is not divisible
# by `n_heads`. And `merge_heads(x)`: `(B, H, T, D)` → `(B, T, H*D)`, the exact inverse, which
# must also work directly on what `split_heads` returns (a view whose memory is not in
# `(B, H, T, D)` order). `hint("split_merge_heads")` gives hints one at a time.

# %% [solution] split_merge_heads
def split_heads(x, n_heads):
    ### BEGIN SOLUTION
    batch, seq, width = x.shape
    if width % n_heads:
        raise ValueError(f"{width} features do not split into {n_heads} heads")
    return x.view(batch, seq, n_heads, width // n_heads).transpose(1, 2)  # (B, H, T, D)
    ### END SOLUTION

def merge_heads(x):
    ### BEGIN SOLUTION
    batch, n_heads, seq, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq, n_heads * head_dim)  # (B, T, H*D)
    ### END SOLUTION

# %% [tests] split_merge_heads points=2
check.split_merge_heads(split_heads, merge_heads)

# %% [markdown]
# ## Putting order back: positions
#
# Three common answers to "where is this token?":
#
# - **Learned absolute** embeddings: one trained vector per position, added to the token
#   vector (GPT-2). Simple, but nothing is known about positions beyond the trained length.
# - **Sinusoidal** embeddings: a fixed vector of sines and cosines at geometrically spaced
#   frequencies, also added to the input (the original transformer).
# - **Rotary** embeddings (RoPE): instead of adding anything, rotate each query and key by an
#   angle proportional to its position. Most current open models (Llama, Mistral, Qwen) use it.

# %%
table = sinusoidal_positions(64, 32)
plt.figure(figsize=(6, 2.5))
plt.imshow(table.T, aspect="auto", cmap="RdBu")
plt.xlabel("position")
plt.ylabel("feature")
plt.title("Sinusoidal positions: fast waves in low features, slow in high ones")
plt.colorbar()
plt.show()

# %% [markdown]
# ### Rotary embeddings
#
# Split the $D$ features of a query (or key) into $D/2$ pairs, feature $i$ with feature
# $i + D/2$. This "rotate-half" layout is the one in Hugging Face's Llama code, which the
# course model follows; Meta's original Llama code pairs *adjacent* features, $(x_0, x_1)$,
# $(x_2, x_3)$, and so on. Both are the same rotation up to a fixed reordering of the query
# and key features, which is why checkpoints converted between the two have the rows of
# their query and key projections permuted. Treat each pair as a point
# in a plane and rotate it by the angle $p\,\theta_i$, where $p$ is the position and
# $\theta_i = \text{theta}^{-2i/D}$ with theta = 10000 by default:
#
# $$\begin{pmatrix} x'_i \\ x'_{i+D/2} \end{pmatrix} =
# \begin{pmatrix} \cos p\theta_i & -\sin p\theta_i \\ \sin p\theta_i & \cos p\theta_i \end{pmatrix}
# \begin{pmatrix} x_i \\ x_{i+D/2} \end{pmatrix}$$
#
# Rotating $q$ by angle $a$ and $k$ by angle $b$ leaves $q \cdot k$ depending only on $a - b$,
# so the score between two tokens depends on how far apart they are, not on where they sit.
#
# ### Exercise 4 — rotary embedding
#
# Write `apply_rope(x, positions, theta=10000.0)`: `x` has shape `(..., T, D)` with $D$ even,
# `positions` is an integer tensor of shape `(T,)`. Rotate every pair as above and return a
# tensor of the same shape and dtype. Work out the angles in at least float32, whatever the
# dtype of `x`: float16 cannot hold the angle of a position in the thousands precisely
# enough. `hint("apply_rope")` shows hints one at a time.

# %% [solution] apply_rope
def apply_rope(x, positions, theta=10000.0):
    ### BEGIN SOLUTION
    d = x.shape[-1]
    speeds = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)  # (D/2,)
    angles = positions.to(torch.float64).unsqueeze(1) * speeds  # (T, D/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, D)
    half = d // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * angles.cos().to(x.dtype) + rotated * angles.sin().to(x.dtype)).to(x.dtype)
    ### END SOLUTION

# %% [tests] apply_rope points=3
check.apply_rope(apply_rope)

# %% [markdown]
# The relative-offset property, seen directly: one fixed query and key, placed at many
# absolute positions but always 3 apart, give the same score; placed further apart, the
# score changes. (This uses the course's reference tables, `rope_cos_sin`.)

# %%
def rope_reference(v, positions, scaling=1.0):
    cos, sin = rope_cos_sin(positions, v.shape[-1], scaling=scaling)
    half = v.shape[-1] // 2
    return v * cos + torch.cat([-v[..., half:], v[..., :half]], dim=-1) * sin

g = torch.Generator().manual_seed(5)
q_vec, k_vec = torch.randn(64, generator=g), torch.randn(64, generator=g)
for start in (0, 10, 200):
    pos_q, pos_k = torch.tensor([start + 3]), torch.tensor([start])
    print(f"query at {start + 3:>3}, key at {start:>3}: score = "
          f"{(rope_reference(q_vec, pos_q) * rope_reference(k_vec, pos_k)).sum().item():.5f}")
offsets = torch.arange(0, 200)
by_offset = [(rope_reference(q_vec, torch.tensor([int(o)])) * rope_reference(k_vec, torch.tensor([0]))).sum().item()
             for o in offsets]
plt.figure(figsize=(6, 2.5))
plt.plot(offsets, by_offset)
plt.xlabel("offset between query and key")
plt.ylabel("q . k")
plt.title("With RoPE the score is a function of the offset alone")
plt.show()

# %% [markdown]
# **RoPE scaling.** A model trained on 4k positions has never seen the angles that position
# 16k produces. The simplest way to stretch it is *linear position interpolation*: divide
# every position by a factor $s$ (here 4) so that 16k maps onto angles already seen during
# training, then fine-tune briefly. Position 400 at $s = 4$ gets exactly the angles of
# position 100 at $s = 1$. Other schemes (NTK-aware, YaRN) rescale the frequencies unevenly,
# but the idea is the same: context extension is mostly done by changing these angles.

# %%
same = torch.allclose(rope_reference(q_vec, torch.tensor([400]), scaling=4.0), rope_reference(q_vec, torch.tensor([100])))
print("position 400 at scaling 4 == position 100 unscaled:", same)

# %% [markdown]
# ## Sharing keys and values: MHA, GQA, MQA
#
# At decode time each layer stores the keys and values of every past token (the KV cache of
# notebook 03), and that cache is what fills accelerator memory. Keeping all $H$ query heads
# but fewer key/value heads shrinks it:
#
# - **MHA** (multi-head): $H$ key/value heads, one per query head;
# - **GQA** (grouped-query): $H_{kv}$ key/value heads, each shared by a group of
#   $H / H_{kv}$ consecutive query heads (Llama 3 uses 8 KV heads);
# - **MQA** (multi-query): a single key/value head shared by all queries.

# %% [markdown]
# The picture shows the sharing for the course model's own head counts: each key/value head
# serves one group of consecutive query heads.

# %%
from course_lib.diagrams import gqa_head_sharing

gqa_head_sharing(query_heads=get_config("tinychat").n_heads, kv_heads=get_config("tinychat").n_kv_heads);

# %% [markdown]
# What the sharing buys, in cache bytes per token for the course model's geometry (read from
# its config in the cell below; float32): K and V, times layers, times KV heads, times head
# width, times bytes per number.

# %%
base = get_config("tinychat")
print(f"tinychat: {base.n_layers} layers, {base.n_heads} query heads, head width {base.head_dim} "
      f"(= d_model {base.d_model} / {base.n_heads} heads)")
for label, n_kv in (("MHA", base.n_heads), ("GQA", base.n_kv_heads), ("MQA", 1)):
    per_token = 2 * base.n_layers * n_kv * base.head_dim * 4
    print(f"{label}: {n_kv} KV head(s) -> {per_token:>6,} bytes per token, "
          f"{per_token * base.max_seq_len / 2**20:.2f} MiB for a full {base.max_seq_len}-token context")

# %% [markdown]
# ## The course model
#
# The package ships a small decoder-only transformer in the Llama style:
#
# - token embedding → $L$ blocks → final RMSNorm → output head (logits over the vocabulary);
# - each block: `x + attention(RMSNorm(x))`, then `x + MLP(RMSNorm(x))`;
# - RMSNorm rescales each vector to unit root-mean-square (no mean subtraction, no bias),
#   then multiplies by a learned weight per feature;
# - attention uses RoPE and grouped-query attention;
# - the MLP is gated (SwiGLU): `down(silu(gate(x)) * up(x))`, where
#   $\mathrm{silu}(z) = z \cdot \sigma(z)$.
#
# The next cell loads the trained weights if they are installed, and otherwise builds the
# same architecture with seeded random weights, saying which one you are looking at.

# %%
try:
    model = load_model("tinychat", device="cpu")
    source = "trained tinychat weights"
except WeightsNotFoundError:
    model = Transformer(get_config("tinychat"), generator=torch.Generator().manual_seed(0)).eval()
    source = "RANDOM weights (the trained model is not installed yet: run `course train`)"
try:
    tokenizer = load_tokenizer("tinychat")
except (WeightsNotFoundError, ImportError):
    tokenizer = None
cfg = model.config
print(f"model: {source}")
print(f"{cfg.n_layers} layers, d_model {cfg.d_model}, {cfg.n_heads} query heads, {cfg.n_kv_heads} KV heads, "
      f"head width {cfg.head_dim}, vocab {cfg.vocab_size}, context {cfg.max_seq_len}, "
      f"{model.num_parameters():,} parameters")

# %% [markdown]
# One block's weights, by name and shape. A linear layer stores its matrix as
# `(out_features, in_features)`, so applying it to `h` is `h @ W.T`.

# %%
for name, tensor in model.layers[0].state_dict().items():
    print(f"{name:<34} {tuple(tensor.shape)}")

# %% [markdown]
# ### Pre-norm
#
# The original transformer normalised *after* each residual addition (**post-norm**):
# `x = Norm(x + f(x))`. Almost every recent model normalises the *input of each branch*
# instead (**pre-norm**): `x = x + f(Norm(x))`. The residual stream itself is never
# normalised inside the blocks, so there is a clean identity path from the embedding to the
# output: gradients reach the first layers undiminished, and deep stacks train stably
# without the long learning-rate warm-up post-norm needs. The price is that the stream's
# size grows with depth, which is why a pre-norm model ends with one last norm before the
# output head. The cell below shows that growth on the course model: the root-mean-square of
# the residual stream entering each block, on one prompt.

# %%
stream_prompt = torch.randint(0, cfg.vocab_size, (1, 12), generator=torch.Generator().manual_seed(0))
if tokenizer is not None:
    stream_prompt = torch.tensor([tokenizer.encode("<|user|>What is 2 + 2?<|end|><|assistant|>", allowed_special="all")])
block_inputs = []
hooks = [layer.register_forward_pre_hook(lambda module, args: block_inputs.append(args[0].detach()))
         for layer in model.layers]
with torch.no_grad():
    model(stream_prompt)
for hook in hooks:
    hook.remove()
for layer_idx, stream in enumerate(block_inputs):
    print(f"into block {layer_idx}: rms of the residual stream = {stream.pow(2).mean().sqrt().item():.3f}")

# %% [markdown]
# ### Exercise 5 — one tinychat block
#
# Put the pieces together. In one cell, write three functions:
#
# - `rms_norm(x, weight, eps)`: over the last axis,
#   $\mathrm{weight} \cdot x / \sqrt{\mathrm{mean}(x^2) + \mathrm{eps}}$, with eps *inside*
#   the square root (it matters for small activations) and no mean subtraction.
# - `repeat_kv(x, n_rep)`: `(B, H_kv, T, D)` → `(B, H_kv * n_rep, T, D)`, repeating each
#   key/value head `n_rep` times in place, so that query head $h$ reads key/value head
#   $\lfloor h / n_{rep} \rfloor$ (heads `[a, b]` become `[a, a, b, b]` for `n_rep = 2`, not
#   `[a, b, a, b]`). `n_rep = 1` returns the input unchanged; `n_rep < 1` raises `ValueError`.
# - `transformer_block(x, weights, config)`: `x` is the residual stream entering the block,
#   float32 of shape `(B, T, d_model)`, its tokens at positions $0 \dots T-1$; `weights` is a
#   dict of tensors named as printed above (`"input_layernorm.weight"`,
#   `"self_attn.q_proj.weight"`, ..., `"mlp.down_proj.weight"`); `config` is a dict of plain
#   numbers: `n_heads`, `n_kv_heads`, `head_dim`, `norm_eps`, `rope_theta`. Read every size
#   from `config` (the tests also try other head counts and RoPE bases, and batches of
#   several sequences). Return the block's output, same shape as `x`:
#   1. `h = rms_norm(x, input_layernorm.weight, norm_eps)` (pre-norm: normalise the branch input);
#   2. project `h` to queries, keys and values; split them into `n_heads`, `n_kv_heads` and
#      `n_kv_heads` heads of width `head_dim`;
#   3. rotate queries and keys with RoPE at positions $0 \dots T-1$ and base `rope_theta`;
#   4. share each key/value head among `n_heads / n_kv_heads` consecutive query heads;
#   5. causal attention, heads merged, then the output projection `o_proj`;
#   6. first residual: `x = x + attention output`;
#   7. second residual: `x + down(silu(gate(h2)) * up(h2))` with
#      `h2 = rms_norm(x, post_attention_layernorm.weight, norm_eps)`.
#
# Call your earlier answers (`scaled_dot_product_attention`, `causal_mask`, `split_heads`,
# `merge_heads`, `apply_rope`) rather than course_lib's model classes: the grader runs your
# block on its own. The test feeds your block the real activations that enter each of the
# trained model's layers and compares with that layer's output. `hint("transformer_block")`
# shows hints one at a time.

# %% [solution] transformer_block
def rms_norm(x, weight, eps):
    ### BEGIN SOLUTION
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)
    ### END SOLUTION

def repeat_kv(x, n_rep):
    ### BEGIN SOLUTION
    if n_rep < 1:
        raise ValueError(f"n_rep must be at least 1, got {n_rep}")
    batch, n_kv, seq, head_dim = x.shape
    x = x[:, :, None].expand(batch, n_kv, n_rep, seq, head_dim)  # (B, Hkv, n_rep, T, D)
    return x.reshape(batch, n_kv * n_rep, seq, head_dim)  # (B, H, T, D)
    ### END SOLUTION

def transformer_block(x, weights, config):
    ### BEGIN SOLUTION
    w, eps = weights, config["norm_eps"]
    n_heads, n_kv_heads = config["n_heads"], config["n_kv_heads"]
    seq = x.shape[1]
    positions = torch.arange(seq)

    h = rms_norm(x, w["input_layernorm.weight"], eps)  # pre-norm: the branch sees a normalised copy
    q = split_heads(h @ w["self_attn.q_proj.weight"].T, n_heads)  # (B, H, T, D)
    k = split_heads(h @ w["self_attn.k_proj.weight"].T, n_kv_heads)  # (B, Hkv, T, D)
    v = split_heads(h @ w["self_attn.v_proj.weight"].T, n_kv_heads)  # (B, Hkv, T, D)
    q, k = apply_rope(q, positions, config["rope_theta"]), apply_rope(k, positions, config["rope_theta"])
    n_rep = n_heads // n_kv_heads
    attended = scaled_dot_product_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask=causal_mask(seq))
    x = x + merge_heads(attended) @ w["self_attn.o_proj.weight"].T  # first residual

    h2 = rms_norm(x, w["post_attention_layernorm.weight"], eps)
    gated = F.silu(h2 @ w["mlp.gate_proj.weight"].T) * (h2 @ w["mlp.up_proj.weight"].T)  # (B, T, d_ff)
    return x + gated @ w["mlp.down_proj.weight"].T  # second residual
    ### END SOLUTION

# %% [tests] transformer_block points=5
check.transformer_block(transformer_block, rms_norm, repeat_kv)

# %% [markdown]
# ## The quadratic cost, measured
#
# The score matrix has one entry per (query, key) pair: $n^2$ of them for $n$ tokens. Double
# the context and the score work and memory grow fourfold; going from a 4k to an 8k context
# makes that part of prefill 4× larger. The timings below come from this machine: one head
# of width 64 in float32, the scores $QK^\top$ and their exponentials written into a buffer
# allocated beforehand (so the operating system's page faults do not blur the picture), best
# of 5 runs. Expect some noise on a shared CPU.

# %%
lengths = [512, 1024, 2048, 4096]
seconds, mebibytes = [], []
for n in lengths:
    q, k_t = torch.randn(n, 64), torch.randn(64, n)
    scores = torch.empty(n, n)  # (n, n): one score per (query, key) pair
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        torch.matmul(q, k_t, out=scores)
        scores.sub_(scores.amax(dim=-1, keepdim=True)).exp_()  # the softmax numerators, in place
        best = min(best, time.perf_counter() - start)
    seconds.append(best)
    mebibytes.append(scores.numel() * scores.element_size() / 2**20)
    del scores
for i, n in enumerate(lengths):
    growth = "" if i == 0 else f"  x{seconds[i] / seconds[i - 1]:.1f} time, x{mebibytes[i] / mebibytes[i - 1]:.0f} memory"
    print(f"n = {n:>5}: {seconds[i] * 1e3:7.2f} ms, scores {mebibytes[i]:7.1f} MiB{growth}")

fig, ax = plt.subplots(figsize=(5, 3))
ax.loglog(lengths, seconds, "o-", label="measured time")
ax.loglog(lengths, [seconds[0] * (n / lengths[0]) ** 2 for n in lengths], "--", label="n^2 from the first point")
ax.set_xlabel("sequence length n")
ax.set_ylabel("seconds")
ax.legend()
ax.set_title("Attention scores grow as n^2")
plt.show()

# %% [markdown]
# A single step can jump above 4× when the score matrix outgrows one of the CPU's caches;
# read the trend across the whole range, which follows the $n^2$ line.
#
# Tiled attention (FlashAttention's idea, in `course_lib.attention.tiled_attention`) computes
# exactly the same result without ever holding the whole $n \times n$ matrix: it streams
# keys in blocks and keeps a running maximum and running sum for the softmax. The work stays
# quadratic; the memory becomes linear.
#
# ### Answers to $O(n^2)$ that change the result
#
# Tiling keeps attention exact. Three families give up something to cut the work itself:
#
# - **Sparse attention**: each query sees a fixed pattern of keys (local blocks plus a few
#   strided or global positions, as in Sparse Transformer, Longformer, BigBird). Work grows
#   roughly as $n \cdot$ (keys per query). What it gives up: a token can reach a distant one
#   only through the pattern, often over several layers.
# - **Sliding-window attention**: each query sees only the last $w$ keys (Mistral 7B used
#   $w = 4{,}096$; Gemma 2 alternates windowed and full layers). Work and KV cache grow as
#   $n \cdot w$, and the cache stops growing at $w$ tokens per layer. What it gives up: direct
#   access to anything older than $w$; information from further back survives only if earlier
#   layers carried it forward.
# - **Linear attention**: replace $\mathrm{softmax}(q \cdot k)$ by a product of feature maps
#   $\phi(q) \cdot \phi(k)$, so $\sum_j \phi(k_j) v_j^\top$ can be kept as a running state of
#   fixed size (the idea behind RetNet, Mamba-style state-space layers and other recurrent
#   variants). Work is linear in $n$ and the "cache" is constant. What it gives up: the
#   sharp, content-based lookup of softmax; exact recall of one token from far back is where
#   these models are weakest, which is why hybrids keep some full-attention layers.
#
# The memory the scores would need if they were held, for one head of one layer at 128k
# tokens in 16-bit numbers, full attention against a 4,096-token window:

# %%
n_tokens, window, bytes_per_score = 128 * 1024, 4096, 2
full_scores = n_tokens * n_tokens * bytes_per_score
windowed_scores = n_tokens * window * bytes_per_score
print(f"full attention at {n_tokens:,} tokens: {full_scores / 2**30:,.1f} GiB of scores per head per layer")
print(f"{window:,}-token sliding window:     {windowed_scores / 2**30:,.1f} GiB "
      f"({full_scores / windowed_scores:.0f}x less)")

# %% [markdown]
# ## Attention heat maps in the trained model
#
# Each panel shows one head: row $i$ is the distribution of query $i$ over the keys; the
# upper triangle is empty because of the causal mask. Rather than pick heads at random and
# hope, the next cell *measures* two patterns over a few chat prompts, for every head:
#
# - the **previous-token score**: the average weight a query puts on the token just before it;
# - the **first-token score**: the average weight a query (other than the first) puts on
#   position 0, a common "resting place" for heads with nothing to do.
#
# A head that spread its weight evenly over the visible keys would score $1/(i+1)$ at query
# $i$ on both; that uniform baseline is printed next to the best heads so you can judge how
# specialised they really are. (With random weights every head sits near the baseline.)

# %%
chat_prompts = ["<|user|>What is 2 + 2?<|end|><|assistant|>",
                "<|user|>Tell me a story about a cat.<|end|><|assistant|>",
                "<|user|>Name three colours.<|end|><|assistant|>"]
fallback = torch.Generator().manual_seed(0)
prompt_ids = [tokenizer.encode(p, allowed_special="all") if tokenizer is not None
              else torch.randint(0, cfg.vocab_size, (12,), generator=fallback).tolist() for p in chat_prompts]

previous_score = torch.zeros(cfg.n_layers, cfg.n_heads)
first_score = torch.zeros(cfg.n_layers, cfg.n_heads)
uniform_score = 0.0
for ids in prompt_ids:
    maps = torch.stack([m[0] for m in model.attention_maps(torch.tensor([ids]))])  # (L, H, T, T)
    rows = torch.arange(1, len(ids))  # queries 1..T-1 (query 0 can only see itself)
    previous_score += maps[..., rows, rows - 1].mean(-1) / len(prompt_ids)
    first_score += maps[..., rows, 0].mean(-1) / len(prompt_ids)
    uniform_score += (1.0 / (rows + 1)).mean().item() / len(prompt_ids)

def best_head(scores):
    flat = int(scores.argmax())
    return flat // cfg.n_heads, flat % cfg.n_heads, scores.max().item()

chosen = {"previous-token": best_head(previous_score), "first-token": best_head(first_score)}
for pattern, (layer_idx, head, score) in chosen.items():
    print(f"best {pattern} head: layer {layer_idx}, head {head}, score {score:.2f} "
          f"(a uniform head scores {uniform_score:.2f})")

# %%
ids = prompt_ids[0]
labels = [tokenizer.decode([i]) for i in ids] if tokenizer is not None else [str(i) for i in ids]
maps = model.attention_maps(torch.tensor([ids]))  # one (1, H, T, T) tensor per layer
fig, axes = plt.subplots(1, len(chosen), figsize=(10, 5))
for ax, (pattern, (layer_idx, head, score)) in zip(axes, chosen.items()):
    ax.imshow(maps[layer_idx][0, head], cmap="viridis", vmin=0, vmax=1)
    ax.set_title(f"{pattern} head: layer {layer_idx}, head {head}\nscore {score:.2f} "
                 f"(uniform {uniform_score:.2f})", fontsize=9)
    ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
fig.suptitle(f"Attention weights ({source.split(' (')[0]})")
plt.tight_layout()
plt.show()

# %% [markdown]
# Compare each printed score with the uniform baseline: in a model this small the best
# heads lean towards their pattern rather than locking onto it, and large models show much
# sharper versions of the same patterns. A caution that matters in interviews and in
# practice: attention weights show where information was *routed* in one layer, not *why*
# the model produced its output. Values are mixed, passed through MLPs and later layers, and
# a small weight on a large value can matter more than a large weight on a small one. Treat
# heat maps as a view of routing, not as an explanation.

# %% [markdown]
# ## Interview probes
#
# Answer each question aloud before you read its points, then count the points you made. The
# cards come from the course's probe bank (`course_lib/drills/probes.toml`), the same cards the
# interview drills ask.

# %%
from course_lib.drills.cards import show_probes

show_probes("02_attention")

# %% [markdown]
# Practise them here: the panel asks this notebook's numeric problems and probe cards and
# schedules them in the same history as `course drill` in a terminal. Nothing is saved until
# you press Start.

# %%
from course_lib.drills.widget import notebook_panel

notebook_panel("02_attention")

# %% [markdown]
# ## Recap
# - Attention is softmax($QK^\top/\sqrt{d_k}$)$V$: scores, weights that sum to 1, a mix of values.
# - The causal mask lets one pass train every position and keeps decoding from reading
#   the future; with a cache, queries are the last positions.
# - Without positions attention ignores order; RoPE rotates queries and keys so that scores
#   depend only on relative offsets, and rescaling its angles is how contexts get extended.
# - Heads split the features; GQA and MQA share keys and values among query heads and shrink
#   the cache, which is where notebook 03 goes next.
# - A block is pre-norm attention and a pre-norm gated MLP, each added to the residual
#   stream; yours reproduces the trained model's layers.
# - The score matrix is $n \times n$: doubling the context quadruples that work. Tiling
#   saves the memory exactly; sparse, windowed and linear attention save the work by giving
#   up some access to the past.
#
# **Self-check:**
# 1. Why does a boolean mask have to set hidden scores to $-\infty$ rather than a large
#    negative number such as $-10^4$?
# 2. With 3 cached tokens and 2 new ones, which keys may the second new query see?
# 3. Why does RoPE make $q \cdot k$ depend only on the distance between two tokens?
# 4. In tinychat, how many query heads share each key/value head, and by what factor does
#    that shrink the KV cache compared with multi-head attention?
# 5. In your block, where exactly are the two norms applied, and what would change if you
#    normalised the residual stream after each addition instead?
# 6. What does a 4,096-token sliding window give up at 128k tokens, and what does it save?
