# %% [markdown]
# # 00 · After you press Enter
#
# You type a question into a chat box and press Enter. A second or two later, words start
# to stream back. This course follows that one request through every stage in between, and
# in each notebook you build a stage yourself and measure it.
#
# **By the end of this notebook you can**
# - name the stages of a chat request in order, and say which ones are the model and which
#   are ordinary software around it;
# - turn a vector of logits into next-token probabilities at any temperature, without
#   overflow and without NaN;
# - price a request from its token counts.

# %% [setup]
import numpy as np
import matplotlib.pyplot as plt
import tiktoken

import course_lib.tokenization  # puts tiktoken's rank files in place: no download needed
from course_lib.tokenization.chat_template import render_chat
from course_lib.checks import orientation as check

# %% [markdown]
# ## The stages, in order
#
# 1. **Chat template.** Your message, the system prompt and any earlier turns are joined
#    into one string, with special markers saying who speaks where.
# 2. **Tokenization.** That string becomes a list of integer token IDs.
# 3. **Embedding.** Each ID picks a row of a learned matrix: one vector per token.
# 4. **Prefill.** The transformer stack reads the whole prompt at once, in parallel.
# 5. **Logits.** The last position yields one score per vocabulary entry for the *next*
#    token.
# 6. **Decoding rule.** Greedy picks the top score; sampling draws from the probabilities.
# 7. **Decode loop.** The new token is appended and the model runs again, one token at a
#    time, reusing stored keys and values (the KV cache), until a stop token, a stop
#    string or a length cap ends it.
# 8. **Detokenization.** IDs turn back into text, streamed as they arrive.
# 9. **Post-processing.** Schema validation, safety filters, formatting.
# 10. **Response and trace.** The answer, plus token counts, latency per stage and cost.
#
# Only steps 3 to 7 are the neural network. The model itself is one function: a token
# sequence in, a probability distribution over the next token out. Templates, tools,
# retrieval, caches and validators are ordinary, deterministic code wrapped around a
# probabilistic core, and the product's guarantees come from that wrapper.

# %% [markdown]
# ## Steps 1 and 2, live
#
# Here is a short chat rendered with the course's template, then counted with a real
# production tokenizer (`cl100k_base`, used by GPT-4-era models).

# %%
messages = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is 2 + 2?"},
]
prompt = render_chat(messages)
print(prompt)

# %%
enc = tiktoken.get_encoding("cl100k_base")
ids = enc.encode(prompt)  # the markers are plain text to cl100k: it was not trained on them
print(len(ids), "tokens:", ids)
print([enc.decode([i]) for i in ids])

# %% [markdown]
# Notice how the role markers cost several tokens each under an encoding that does not know
# them. A model trained with this template has each marker as one special token; notebook 01
# shows why user text must never be allowed to produce those special IDs.

# %% [markdown]
# ## Steps 5 and 6: from logits to probabilities
#
# The last layer gives a score $z_i$ (a *logit*) for every token in the vocabulary. The
# softmax turns scores into probabilities, and the temperature $T$ divides the scores first:
#
# $$p_i = \frac{e^{z_i / T}}{\sum_j e^{z_j / T}}$$
#
# Take three candidate tokens with logits $z = [2, 1, 0]$ and compute the probabilities at
# three temperatures, directly from the formula:

# %%
z = np.array([2.0, 1.0, 0.0])
for T in (0.7, 1.0, 1.5):
    p = np.exp(z / T) / np.exp(z / T).sum()
    print(f"T = {T}: {np.round(p, 3)}")

# %%
fig, ax = plt.subplots(figsize=(6, 3))
width = 0.25
for k, T in enumerate((0.7, 1.0, 1.5)):
    p = np.exp(z / T) / np.exp(z / T).sum()
    ax.bar(np.arange(3) + (k - 1) * width, p, width, label=f"T = {T}")
ax.set_xticks(range(3), ["token A (z=2)", "token B (z=1)", "token C (z=0)"])
ax.set_ylabel("probability")
ax.set_title("Lower temperature concentrates the mass; higher spreads it")
ax.legend()
plt.show()

# %% [markdown]
# Lower $T$ sharpens the distribution towards the top logit; higher $T$ flattens it. The
# formula above has two traps, and they are exactly what real logits hit:
#
# - **Overflow.** Logits of a few hundred are ordinary in low-precision inference, and
#   `np.exp(1000.0)` is `inf`, so `inf / inf` gives NaN.
# - **T → 0.** Dividing by zero is undefined, yet "temperature 0" is the everyday name for
#   greedy decoding, and tiny temperatures overflow even sooner.

# %%
with np.errstate(over="ignore", invalid="ignore"):
    big = np.array([1000.0, 999.0])
    print("naive softmax of [1000, 999]:", np.exp(big) / np.exp(big).sum())

# %% [markdown]
# ### Exercise 1 — a softmax that never breaks
#
# Write `softmax_with_temperature(logits, temperature)` that returns a float NumPy array of
# probabilities summing to 1, such that:
#
# - it is numerically stable: subtract the largest logit before exponentiating (this does not
#   change the result, since the common factor cancels, and makes every exponent ≤ 0);
# - `temperature == 0` returns the limit $T \to 0^+$: all the mass on the largest logit,
#   shared equally if several logits tie for the top;
# - a logit of `-inf` (a masked token) gets probability exactly 0;
# - a negative temperature raises `ValueError`.

# %% [solution] softmax_with_temperature
def softmax_with_temperature(logits, temperature=1.0):
    ### BEGIN SOLUTION
    z = np.asarray(logits, dtype=np.float64)
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    top = z.max()
    if temperature == 0:
        winners = (z == top).astype(np.float64)
        return winners / winners.sum()
    weights = np.exp((z - top) / temperature)
    return weights / weights.sum()
    ### END SOLUTION

# %% [tests] softmax_with_temperature points=3
check.softmax_with_temperature(softmax_with_temperature)

# %% [markdown]
# With a correct softmax you can see the limit happen: as $T$ shrinks, the distribution
# collapses onto the top token, which is exactly greedy decoding.

# %%
for T in (2.0, 1.0, 0.5, 0.1, 0.01, 0.0):
    print(f"T = {T:<5} ->", np.round(softmax_with_temperature([2.0, 1.0, 0.0], T), 4))

# %% [markdown]
# ## Step 10: the bill
#
# Hosted models charge per token, with output tokens usually several times dearer than input
# tokens (they are generated one at a time; the prompt is processed in one parallel pass).
# Prices are quoted in dollars per million tokens.
#
# ### Exercise 2 — price a request
#
# Write `request_cost(prompt_tokens, completion_tokens, *, input_usd_per_mtok,
# output_usd_per_mtok)` returning the cost in dollars. Token counts must be non-negative
# integers; anything else raises `ValueError`.

# %% [solution] request_cost
def request_cost(prompt_tokens, completion_tokens, *, input_usd_per_mtok, output_usd_per_mtok):
    ### BEGIN SOLUTION
    for n in (prompt_tokens, completion_tokens):
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"token counts must be non-negative ints, got {n!r}")
    return (prompt_tokens * input_usd_per_mtok + completion_tokens * output_usd_per_mtok) / 1_000_000
    ### END SOLUTION

# %% [tests] request_cost points=2
check.request_cost(request_cost)

# %% [markdown]
# The prompt from the start of this notebook, answered with 50 tokens, at representative
# prices of \$3 in and \$15 out per million tokens:

# %%
print(f"${request_cost(len(ids), 50, input_usd_per_mtok=3.0, output_usd_per_mtok=15.0):.6f}")

# %% [markdown]
# ## The whole request, on the course's own model
#
# The course ships a small transformer trained on a narrow chat corpus (notebook 02 opens it
# up). It runs here on the CPU. `trace_request` sends one question through every stage
# listed at the top of this notebook and times each one; the last stage is a deterministic
# check on the answer, the kind of guarantee the product (not the model) owns.

# %%
from course_lib.model import load_model, load_tokenizer
from course_lib.request_trace import trace_request

model = load_model("tinychat", device="cpu")
tokenizer = load_tokenizer("tinychat")
question = [{"role": "user", "content": "What is 2 + 2?"}]
trace = trace_request(model, tokenizer, question, max_new_tokens=24,
                      validate=lambda text: text.strip().rstrip(".").split()[-1] in ("4", "four"))
print("answer:", repr(trace.text), "| finished by:", trace.finish_reason, "| valid:", trace.valid)
print(trace.table())

# %%
fig, ax = plt.subplots(figsize=(6, 2.6))
ax.barh([s.stage for s in trace.stages][::-1], [s.seconds * 1e3 for s in trace.stages][::-1])
ax.set_xlabel("milliseconds")
ax.set_title(f"{trace.prompt_tokens} prompt tokens, {trace.completion_tokens} generated")
plt.show()

# %% [markdown]
# Prefill reads every prompt token in one parallel pass; decode pays one full forward pass
# *per generated token*. That asymmetry, small here, is the heart of notebooks 03 and 06.
# The bill for this request, at the same representative prices:

# %%
print(f"${request_cost(trace.prompt_tokens, trace.completion_tokens, input_usd_per_mtok=3.0, output_usd_per_mtok=15.0):.6f}")

# %% [markdown]
# ## Interview probes
#
# **"Walk me through what happens when I press Enter in ChatGPT."**
# - *Strong:* names the stages in order (template, tokenize, prefill, logits, decoding
#   rule, decode loop with KV cache, stop condition, detokenize, post-process); separates
#   prefill (parallel, sets time to first token) from decode (one token per step, sets the
#   streaming speed); says the model is a next-token distribution and the rest is
#   deterministic software that owns the guarantees.
# - *Weak:* "the model reads the question and writes the answer", with no tokens, no loop,
#   and no idea where latency or cost come from.
#
# **"What does temperature 0 mean?"**
# - *Strong:* the $T \to 0$ limit of the softmax, i.e. greedy argmax: repeatable for a fixed
#   model revision and inputs, but not more *correct*; it removes sampling variety only.
# - *Weak:* "it makes the model factual" or "it turns randomness off everywhere".
#
# ## Recap
# - A chat request is a pipeline; only its middle is a neural network.
# - Temperature rescales logits before the softmax; compute it stably, and treat $T = 0$ as
#   argmax.
# - Cost and latency are counted in tokens, which is where notebook 01 begins.
