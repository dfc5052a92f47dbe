# %% [markdown]
# # 00 · After you press Enter
#
# **Prerequisites:** Python and a little NumPy (arrays, `np.exp`, `.sum()`); no machine
# learning needed. This is the first notebook: start here.
#
# **Time:** about 55 minutes
#
# **Grading:** the course's own implementations that the setup cell imports are there for the
# demos. While your notebook is graded they are switched off, and so are the visible checks
# and the libraries the tests compare against: each answer must be your own code.
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
# - say what pretraining, instruction tuning and preference tuning each change, and what
#   none of them gives a model;
# - price a whole conversation from its messages, with a cached prefix.
#
# Stuck on an exercise? `hint("exercise_name")` shows one hint at a time, gentlest first.

# %% [setup]
import numpy as np
import matplotlib.pyplot as plt
import tiktoken

import course_lib.tokenization  # puts tiktoken's rank files in place: no download needed
from course_lib.tokenization.chat_template import render_chat

cl100k = tiktoken.get_encoding("cl100k_base")  # GPT-4-era production tokenizer

# %% [checks]
# The visible checks and their hints (grading runs without them: the answers must be your own).
from course_lib.checks import orientation as check
from course_lib.checks.hints import Hints
hint = Hints(check.HINTS)

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
# The neural network is steps 3 to 5 and the forward pass repeated inside step 7. Step 6,
# the decoding rule, is ordinary code: a few lines that read the logits and pick a token. The
# model itself is one function: a token sequence in, one score per vocabulary entry for the
# next token out. Templates, the decoding rule, tools, retrieval, caches and validators are
# ordinary code wrapped around that core, and the product's guarantees come from that wrapper.

# %%
from course_lib.diagrams import request_pipeline

request_pipeline();

# %% [markdown]
# ## Press Enter and watch
#
# Here is the whole path for a message of your own. The panel below runs the course's small
# model, `tinychat`, in this kernel through the same serving engine the later notebooks take
# apart, and records what each stage did for your request while it ran: the prompt as token
# chips (the chat template's role markers in blue), the time to the first token, every
# generated token with the probability it was drawn at, how many blocks of KV memory the
# request held at each step, and why the reply ended. Click a generated token to see the
# distribution it came from, before and after the sampling rules. Type a message and press
# Enter; it has already sent one.
#
# Most of what it shows is explained over the next eight notebooks. Come back to it after each
# one: the panel stays the same, but you will be able to read more of it.

# %%
from course_lib.xray.panel import xray_panel

xray_panel("What is 2 + 2?")

# %% [markdown]
# ## Where the network's behaviour comes from
#
# The weights that steps 3 to 7 use are made in three stages, each starting from the last:
#
# - **Pretraining** predicts the next token of a huge pile of text. It gives the model its
#   grammar, its general knowledge and its skills, frozen at the date the data was collected.
# - **Instruction tuning** (supervised fine-tuning) trains on example conversations written in
#   the chat template. It teaches the format: answer the user's turn, then emit the end
#   token. Knowledge barely changes.
# - **Preference tuning** (RLHF, DPO and relatives) trains on pairs of answers where people
#   (or a reward model) preferred one. It shifts style: helpfulness, refusals, length, tone.
#
# None of them gives the model a way to learn a new fact after training, or to look one up.
# A product that must know today's price or your company's documents puts that text into the
# prompt at request time (retrieval, tool calls): ordinary code again, in steps 1 and 9, not
# new weights. The course's own model skipped two of the stages: it was trained from scratch
# on generated chat conversations only, with the loss taken on the assistant's tokens, which
# is instruction tuning's recipe; there was no pretraining and no preference tuning.

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
ids = cl100k.encode(prompt)  # the markers are plain text to cl100k: it was not trained on them
print(len(ids), "tokens:", ids)
print([cl100k.decode([i]) for i in ids])

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
# - **Overflow.** `np.exp(x)` is `inf` once `x` passes the log of the largest number the
#   type can hold, and then `inf / inf` gives NaN. In the low-precision types that inference
#   runs in, that threshold is close (the first cell below prints it for each type).
# - **Small T.** Dividing by $T$ multiplies every logit by $1/T$: a modest logit becomes a
#   huge exponent, and at $T = 0$ the division is undefined, yet "temperature 0" is the
#   everyday name for greedy decoding.

# %%
for dtype in (np.float64, np.float32, np.float16):
    print(f"{dtype.__name__:>8}: exp(x) overflows once x > {float(np.log(np.finfo(dtype).max)):.1f}")

# %%
logit, T = 12.0, 0.1
with np.errstate(over="ignore", invalid="ignore"):
    print(f"logit {logit} at T = {T} is an exponent of {logit / T:.0f}:",
          "float32 exp ->", np.exp(np.float32(logit / T)))
    print("float16 exp of the logit alone ->", np.exp(np.float16(logit)))
    big = np.array([1000.0, 999.0])
    print("naive softmax of [1000, 999] in float64:", np.exp(big) / np.exp(big).sum())

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
#
# `hint("softmax_with_temperature")` gives a hint; run it again for the next one.

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
# Prices are quoted in dollars per million tokens. A chat model keeps no memory between
# requests: every turn sends the *whole* conversation again. Providers therefore cache the
# start of a prompt they have just seen and bill that cached prefix at a discount.
#
# ### Exercise 2 — price a conversation
#
# Write `conversation_cost(messages, completion_tokens, *, cached_messages=0,
# input_usd_per_mtok, cached_usd_per_mtok, output_usd_per_mtok)`, where `messages` is a list
# of `{"role": ..., "content": ...}` dicts, returning a dict
# `{"prompt_tokens": int, "cached_tokens": int, "usd": float}`:
#
# - a message costs the number of `cl100k_base` tokens of its `content` (the setup cell made
#   `cl100k`), plus **4** tokens of overhead for its role and turn markers (this course's
#   round figure; each provider's template has its own);
# - text that looks like a special token (`<|endoftext|>`) is counted as ordinary text:
#   encode with `disallowed_special=()`;
# - `prompt_tokens` is the sum over all messages; `cached_tokens` is the sum over the first
#   `cached_messages` messages, the prefix the provider has cached;
# - `usd` prices the cached tokens at `cached_usd_per_mtok`, the rest of the prompt at
#   `input_usd_per_mtok` and `completion_tokens` at `output_usd_per_mtok`, all per million;
# - `completion_tokens` must be an `int` ≥ 0, and `cached_messages` an `int` from 0 to
#   `len(messages)`; anything else (a float such as `2.5` or `20.0`, a string, a count out
#   of range) raises `ValueError`.
#
# `hint("conversation_cost")` is there if you need it.

# %% [solution] conversation_cost
def conversation_cost(messages, completion_tokens, *, cached_messages=0,
                      input_usd_per_mtok, cached_usd_per_mtok, output_usd_per_mtok):
    ### BEGIN SOLUTION
    if not isinstance(completion_tokens, int) or completion_tokens < 0:
        raise ValueError(f"completion_tokens must be a non-negative int, got {completion_tokens!r}")
    if not isinstance(cached_messages, int) or not 0 <= cached_messages <= len(messages):
        raise ValueError(f"cached_messages must be an int from 0 to {len(messages)}, got {cached_messages!r}")
    counts = [len(cl100k.encode(m["content"], disallowed_special=())) + 4 for m in messages]
    prompt, cached = sum(counts), sum(counts[:cached_messages])
    usd = (cached * cached_usd_per_mtok + (prompt - cached) * input_usd_per_mtok
           + completion_tokens * output_usd_per_mtok) / 1_000_000
    return {"prompt_tokens": prompt, "cached_tokens": cached, "usd": usd}
    ### END SOLUTION

# %% [tests] conversation_cost points=2
check.conversation_cost(conversation_cost)

# %% [markdown]
# Now a conversation that grows turn by turn, at representative prices of \$3 per million
# input tokens, \$0.30 cached and \$15 output. Each answer is a stand-in reply, billed at its
# own cl100k token count. Each request resends every earlier message; with caching, all of
# them but the new user turn are the cached prefix.

# %%
prices = dict(input_usd_per_mtok=3.0, cached_usd_per_mtok=0.3, output_usd_per_mtok=15.0)
chat = [{"role": "system", "content": "You are a patient maths tutor. Explain every step."}]
for turn in range(1, 6):
    chat.append({"role": "user", "content": f"Question {turn}: what is {turn} times 17, and why?"})
    reply = f"{turn} times 17 is {turn * 17}: add seventeen to itself, one step per unit. " * 4
    reply_tokens = len(cl100k.encode(reply))
    cold_bill = conversation_cost(chat, reply_tokens, **prices)
    cached_bill = conversation_cost(chat, reply_tokens, cached_messages=len(chat) - 1, **prices)
    print(f"turn {turn}: {cold_bill['prompt_tokens']:>4} prompt + {reply_tokens} output tokens, "
          f"${cold_bill['usd']:.6f} without cache, ${cached_bill['usd']:.6f} with the prefix cached")
    chat.append({"role": "assistant", "content": reply})

# %% [markdown]
# The prompt grows with every turn, so a long chat's later turns cost more than its first,
# and the cached discount matters more the longer the history.

# %% [markdown]
# ## The whole request, on the course's own model
#
# The course ships a small transformer trained on a narrow chat corpus (notebook 02 opens it
# up). It runs here on the CPU. `trace_request` sends one question through every stage
# listed at the top of this notebook, decoding greedily, and times each one; the last stage is
# a deterministic check on the answer, the kind of guarantee the product (not the model) owns.
#
# The first call of anything in PyTorch pays one-time costs (allocating memory, choosing
# kernels, filling CPU caches), and a timer would charge them all to prefill. So the request
# runs once to warm up; then it runs three more times and we keep the fastest run, the one
# least disturbed by whatever else the machine is doing. The first line the cell prints
# compares the cold prefill with the kept one. `finish_reason` says why generation ended,
# with the names OpenAI's API uses: `"stop"` when the model emitted its end-of-turn token,
# `"length"` when the token cap was reached.

# %%
from course_lib.model import load_model, load_tokenizer
from course_lib.request_trace import trace_request

model = load_model("tinychat", device="cpu")
tokenizer = load_tokenizer("tinychat")
question = [{"role": "user", "content": "What is 2 + 2?"}]


def answers_four(text):
    return text.strip().rstrip(".").split()[-1] in ("4", "four")


cold = trace_request(model, tokenizer, question, max_new_tokens=24, validate=answers_four)  # warm-up
warm_runs = [trace_request(model, tokenizer, question, max_new_tokens=24, validate=answers_four)
             for _ in range(3)]
trace = min(warm_runs, key=lambda run: run.total_seconds)
print(f"prefill: {cold.seconds('prefill') * 1e3:.2f} ms on the first call, "
      f"{trace.seconds('prefill') * 1e3:.2f} ms in the fastest warm run")
print("answer:", repr(trace.text), "| finish_reason:", trace.finish_reason, "| valid:", trace.valid)
print(trace.table())

# %%
fig, ax = plt.subplots(figsize=(6, 2.6))
ax.barh([s.stage for s in trace.stages][::-1], [s.seconds * 1e3 for s in trace.stages][::-1])
ax.set_xlabel("milliseconds")
ax.set_title(f"{trace.prompt_tokens} prompt tokens, {trace.completion_tokens} generated (warm)")
plt.show()

# %% [markdown]
# Prefill reads every prompt token in one parallel pass; decode pays one full forward pass
# *per generated token*. That asymmetry, small here, is the heart of notebook 03 (the KV
# cache). Per generated token:

# %%
decode_steps = trace.completion_tokens - 1  # the first token came out of prefill
print(f"prefill {trace.seconds('prefill') * 1e3:.2f} ms for {trace.prompt_tokens} tokens; "
      f"decode {trace.seconds('decode') * 1e3 / max(decode_steps, 1):.2f} ms per token over {decode_steps} steps")

# %% [markdown]
# ## Interview probes
#
# Answer each question aloud before you read its points, then count the points you made. The
# cards come from the course's probe bank (`course_lib/drills/probes.toml`), the same cards the
# interview drills ask.

# %%
from course_lib.drills.cards import show_probes

show_probes("00_orientation")

# %% [markdown]
# Practise them here: the panel asks this notebook's numeric problems and probe cards and
# schedules them in the same history as `course drill` in a terminal. Nothing is saved until
# you press Start.

# %%
from course_lib.drills.widget import notebook_panel

notebook_panel("00_orientation")

# %% [markdown]
# ## Recap
# - A chat request is a pipeline; only its middle (embedding, prefill, the repeated forward
#   pass) is a neural network. The decoding rule, the template, the stop check and the
#   validators are ordinary code.
# - Pretraining gives knowledge, instruction tuning the chat format, preference tuning the
#   style; facts that change come in through the prompt.
# - Temperature divides the logits before the softmax; subtract the maximum so nothing
#   overflows (in float16 a modest exponent already does), and treat $T = 0$ as argmax with
#   ties shared.
# - Every turn resends the conversation: cost grows with history, and a cached prefix is
#   cheaper. Tokens are where notebook 01 begins.
#
# **Self-check:**
# 1. Which of the ten stages run the neural network, and why is the decoding rule not one of
#    them?
# 2. Why does subtracting the largest logit leave the probabilities unchanged, and what does it
#    protect against at $T = 0.1$?
# 3. With $T = 0$ and the logits `[5, 5, 1]`, what probabilities should a softmax return?
# 4. A conversation has a 2,000-token history and a 20-token new question. Which part can a
#    provider bill at the cached price, and why?
# 5. Why does the notebook run the request once before timing it?
