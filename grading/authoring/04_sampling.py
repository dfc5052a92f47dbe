# %% [markdown]
# # 04 · Sampling and generation control
#
# The model hands back one score per vocabulary entry. Everything between those scores and
# the next token is a *decoding rule*, and it is ordinary code you control: temperature,
# truncation filters, penalties, stop conditions, and a random number generator.
#
# **By the end of this notebook you can**
# - implement temperature, top-k, top-p (nucleus), min-p and the three common penalties, and
#   say exactly what each does to a distribution, edge cases included;
# - detect stop strings that arrive split across tokens, and cap the length;
# - build a seeded sampler and say what a seed does, and does not, make repeatable;
# - write the whole generate loop yourself, from your own processors, sampler and stop check,
#   and get the same tokens as a reference loop on the course model;
# - read the "2 + 2" trace on the course model: what temperature changes and what it cannot;
# - say what beam search is and why chat serving rarely uses it.
#
# **Prerequisites:** notebook 00 (logits, softmax with temperature, the request's stages) and
# notebook 01 (tokens and the chat template); notebooks 02 and 03 help but are not needed.
# You should be comfortable with PyTorch tensors, `dim=-1` and boolean masks.
#
# **Time:** about 175 minutes (a first careful pass with all eight exercises).
#
# **Grading:** the course's own implementations that the setup cell imports are there for the
# demos. While your notebook is graded they are switched off, and so are the visible checks
# and the libraries the tests compare against: each answer must be your own code.

# %% [setup]
import math
import re

import matplotlib.pyplot as plt
import torch

from course_lib.generation import generate, generate_many
from course_lib.model import load_model, load_tokenizer, prefill
from course_lib.sampling import SamplingParams, chi_square_gof, frequencies, next_token_probs, sample_next_token
from course_lib.tokenization.chat_template import render_chat


# %% [checks]
# The visible checks and their hints (grading runs without them: the answers must be your own).
from course_lib.checks import sampling as check
from course_lib.checks.hints import Hints
hint = Hints(check.HINTS)  # hint("exercise_name") shows the next hint for that exercise

# %% [markdown]
# ## A real next-token distribution
#
# We ask the course model, `tinychat`, the question this notebook is built around, and look
# at the distribution over its first answer token.

# %%
model = load_model("tinychat", device="cpu")
tokenizer = load_tokenizer("tinychat")
prompt = render_chat([{"role": "user", "content": "What is 2 + 2?"}])
prompt_ids = tokenizer.encode(prompt, allowed_special="all")
with torch.no_grad():
    logits = prefill(model, torch.tensor([prompt_ids]), model.new_cache(1))[0]  # (V,)
print(prompt)
print(f"{len(prompt_ids)} prompt tokens, vocabulary of {logits.shape[-1]}")

def show_top(logits_row, k=10, title=""):
    """Bar chart of the k most likely next tokens."""
    probs = torch.softmax(logits_row.float(), -1)
    top = probs.topk(k)
    labels = [repr(tokenizer.decode([i])) for i in top.indices.tolist()]
    fig, ax = plt.subplots(figsize=(7, 2.6))
    ax.bar(labels, top.values.tolist())
    ax.set_ylabel("probability")
    ax.set_title(title)
    ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    plt.show()

show_top(logits, title="tinychat: first answer token for 'What is 2 + 2?'")

# %% [markdown]
# ## Temperature
#
# Temperature $T$ divides the logits before the softmax. $T < 1$ sharpens the distribution
# towards the top token, $T > 1$ flattens it, $T = 1$ leaves the model's own distribution.
# $T = 0$ is defined as its limit: all the mass on the argmax, which is greedy decoding.
#
# ### Exercise 1 — temperature
#
# Write `apply_temperature(logits, temperature)` for a float tensor of shape `(V,)` or
# `(B, V)` (rows are independent), returning a new tensor:
#
# - `temperature > 0`: the logits divided by it (a `-inf` logit stays `-inf`);
# - `temperature == 0`: in each row, the first maximal logit (the one `torch.argmax` picks)
#   keeps its value and every other entry becomes `-inf`;
# - a negative temperature raises `ValueError`.
#
# Stuck? `hint("apply_temperature")` shows a hint; run it again for the next one.

# %% [solution] apply_temperature
def apply_temperature(logits, temperature):
    ### BEGIN SOLUTION
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature == 0:
        top = logits.argmax(dim=-1, keepdim=True)  # (..., 1)
        return torch.full_like(logits, float("-inf")).scatter(-1, top, logits.gather(-1, top))
    return logits / temperature
    ### END SOLUTION

# %% [tests] apply_temperature points=2
check.apply_temperature(apply_temperature)

# %% [markdown]
# On the model's real distribution, temperature moves mass between the same candidates; it
# never adds a token the model gave no weight to, and never removes one:

# %%
for T in (0.5, 1.0, 2.0):
    probs = torch.softmax(apply_temperature(logits, T), -1)
    top = probs.topk(3)
    pairs = ", ".join(f"{tokenizer.decode([i])!r}: {p:.3f}" for i, p in zip(top.indices.tolist(), top.values.tolist()))
    entropy = -(probs * probs.clamp_min(1e-30).log()).sum() / math.log(2)
    print(f"T = {T}: {pairs}   (entropy {entropy:.2f} bits)")

# %% [markdown]
# ## Truncation: top-k, top-p, min-p
#
# High temperatures give the long tail of unlikely tokens real probability, and one bad
# token can derail a whole answer. Truncation filters remove the tail before sampling by
# setting those logits to `-inf`:
#
# - **top-k** keeps the $k$ most likely tokens, whatever the shape of the distribution;
# - **top-p (nucleus)** keeps the smallest set of most likely tokens whose probabilities add
#   up to at least $p$, so the set is small when the model is sure and large when it is not;
# - **min-p** keeps tokens whose probability is at least `min_p` times the top token's.
#
# ### Exercise 2 — top-k
#
# Write `top_k_filter(logits, k)` for `(V,)` or `(B, V)` logits: in each row, keep every
# logit that is greater than or equal to the row's k-th largest value (so ties with the
# k-th are kept) and set the rest to `-inf`. `k == 0` or `k >= V` keeps everything; a
# negative `k` raises `ValueError`. Kept logits are returned unchanged.
#
# Stuck? `hint("top_k_filter")` shows a hint; run it again for the next one.

# %% [solution] top_k_filter
def top_k_filter(logits, k):
    ### BEGIN SOLUTION
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if k == 0 or k >= logits.shape[-1]:
        return logits.clone()
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1)
    return logits.masked_fill(logits < kth, float("-inf"))
    ### END SOLUTION

# %% [tests] top_k_filter points=2
check.top_k_filter(top_k_filter)

# %% [markdown]
# ### Exercise 3 — top-p (nucleus)
#
# Write `top_p_filter(logits, p)` for `(V,)` or `(B, V)` logits. In each row, with
# probabilities from the softmax:
#
# 1. rank the tokens from most to least likely;
# 2. keep a token when the total probability of the tokens ranked *above* it is still below
#    `p` (so the most likely token is always kept, and the kept set is the smallest one whose
#    mass reaches `p`);
# 3. also keep every token whose probability equals that of the least likely kept token, so
#    the result never depends on how a sort orders ties;
# 4. set every other logit to `-inf`; kept logits are returned unchanged.
#
# `p` must satisfy `0 < p <= 1` (otherwise `ValueError`); `p == 1` keeps everything.
# A `-inf` logit has probability 0 and stays `-inf`.
#
# Stuck? `hint("top_p_filter")` shows a hint; run it again for the next one.

# %% [solution] top_p_filter
def top_p_filter(logits, p):
    ### BEGIN SOLUTION
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")
    if p == 1:
        return logits.clone()
    probs = torch.softmax(logits.double(), dim=-1)
    sorted_probs, _ = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    kept = (mass_before < p) & (sorted_probs > 0)
    smallest = sorted_probs.masked_fill(~kept, float("inf")).amin(dim=-1, keepdim=True)
    return logits.masked_fill(probs < smallest, float("-inf"))
    ### END SOLUTION

# %% [tests] top_p_filter points=3
check.top_p_filter(top_p_filter)

# %% [markdown]
# The point of top-p is that its set adapts. Compare two moments of the same answer: the
# first token, where the model is choosing how to phrase its reply, and the token right
# after "The answer is ", where only the number is left to say:

# %%
sure_prefix = prompt + "The answer is "
with torch.no_grad():
    sure_ids = tokenizer.encode(sure_prefix, allowed_special="all")
    sure_logits = prefill(model, torch.tensor([sure_ids]), model.new_cache(1))[0]  # (V,)
for name, row in (("first token", logits), ("after 'The answer is '", sure_logits)):
    sizes = [int(torch.isfinite(top_p_filter(row, p)).sum()) for p in (0.5, 0.9, 0.99)]
    print(f"{name:>24}: nucleus size at p = 0.5 / 0.9 / 0.99 -> {sizes}")
show_top(sure_logits, title="tinychat: the token after 'The answer is '")

# %% [markdown]
# ### Exercise 4 — min-p
#
# Write `min_p_filter(logits, min_p)` for `(V,)` or `(B, V)` logits: keep the tokens whose
# probability is at least `min_p` times the row's largest probability, set the rest to
# `-inf` (kept logits unchanged). `min_p` must be in `[0, 1]` (otherwise `ValueError`);
# 0 keeps everything.
#
# Stuck? `hint("min_p_filter")` shows a hint; run it again for the next one.

# %% [solution] min_p_filter
def min_p_filter(logits, min_p):
    ### BEGIN SOLUTION
    if not 0 <= min_p <= 1:
        raise ValueError(f"min_p must be in [0, 1], got {min_p}")
    probs = torch.softmax(logits.double(), dim=-1)
    bound = min_p * probs.amax(dim=-1, keepdim=True)
    return logits.masked_fill(probs < bound, float("-inf"))
    ### END SOLUTION

# %% [tests] min_p_filter points=2
check.min_p_filter(min_p_filter)

# %% [markdown]
# ## Penalties
#
# Penalties push down tokens that already appeared, to fight loops and repetition. Two
# families are in everyday use, with different definitions:
#
# - **frequency and presence penalties** (OpenAI's API): for a token generated `count` times
#   so far, `logit -= count * frequency_penalty + (count > 0) * presence_penalty`. Subtraction:
#   the frequency penalty grows with every repeat, the presence penalty is a flat toll;
# - **repetition penalty** (Hugging Face's, from the CTRL paper): for a token already present,
#   a positive logit is *divided* by the penalty and a negative one *multiplied* by it, so
#   either way the token becomes less likely. Dividing a negative logit would do the opposite,
#   which is why the rule has two branches.
#
# ### Exercise 5 — penalties
#
# Write `apply_penalties(logits, generated_ids, frequency_penalty=0.0, presence_penalty=0.0,
# repetition_penalty=1.0)` for 1-D logits `(V,)` and a list of previously generated token
# IDs. Apply the repetition penalty first (to every token that occurs in `generated_ids`),
# then subtract the frequency and presence penalties. Return a new tensor.
# `repetition_penalty <= 0` raises `ValueError`; tokens that never occurred are unchanged.
#
# Stuck? `hint("apply_penalties")` shows a hint; run it again for the next one.

# %% [solution] apply_penalties
def apply_penalties(logits, generated_ids, frequency_penalty=0.0, presence_penalty=0.0, repetition_penalty=1.0):
    ### BEGIN SOLUTION
    if repetition_penalty <= 0:
        raise ValueError(f"repetition_penalty must be > 0, got {repetition_penalty}")
    counts = torch.zeros(logits.shape[-1], dtype=logits.dtype)
    for token in generated_ids:
        counts[token] += 1
    seen = counts > 0
    penalised = torch.where(logits < 0, logits * repetition_penalty, logits / repetition_penalty)
    out = torch.where(seen, penalised, logits)
    return out - counts * frequency_penalty - seen.to(logits.dtype) * presence_penalty
    ### END SOLUTION

# %% [tests] apply_penalties points=2
check.apply_penalties(apply_penalties)

# %% [markdown]
# In `course_lib.sampling`, generation counts the *generated* tokens for the frequency and
# presence penalties (as OpenAI does) and prompt plus generated tokens for the repetition
# penalty (as Hugging Face does). Here is a greedy answer under each penalty:

# %%
question = render_chat([{"role": "user", "content": "What is 7 * 7?"}])  # an answer that repeats the question
for params in (SamplingParams(temperature=0, max_new_tokens=24),
               SamplingParams(temperature=0, max_new_tokens=24, presence_penalty=2.0),
               SamplingParams(temperature=0, max_new_tokens=24, frequency_penalty=2.0),
               SamplingParams(temperature=0, max_new_tokens=24, repetition_penalty=3.0)):
    result = generate(model, tokenizer, question, params)
    knobs = (f"presence={params.presence_penalty}, frequency={params.frequency_penalty}, "
             f"repetition={params.repetition_penalty}")
    print(f"{knobs:<46} -> {result.text!r}")

# %% [markdown]
# To see why the additive penalties may leave a greedy answer alone, look at the steps of
# the unpenalised answer that repeat a token, and at how far that token leads the runner-up.
# A presence or frequency penalty of 2 only flips the choice when the lead is smaller:

# %%
plain = generate(model, tokenizer, question, SamplingParams(temperature=0, max_new_tokens=24))
answer = list(plain.token_ids)
with torch.no_grad():
    ids = torch.tensor([list(plain.prompt_ids) + answer])  # (1, T)
    step_logits = model(ids)[0, len(plain.prompt_ids) - 1:-1]  # (answer length, V): logits at each choice
for step, token in enumerate(answer):
    if token in answer[:step]:
        best_two = step_logits[step].topk(2)
        lead = float(best_two.values[0] - best_two.values[1])
        runner_up = tokenizer.decode([int(best_two.indices[1])])
        print(f"step {step}: repeats {tokenizer.decode([token])!r}, leads {runner_up!r} by {lead:.1f} logits")

# %% [markdown]
# OpenAI's API accepts frequency and presence penalties between -2 and 2. At the largest
# setting, a token that has appeared loses 2 logits to the presence penalty, and the
# frequency penalty takes another 2 for every time it appeared. A lead like the ones printed
# above survives a first repeat, so on a confident model these penalties change little; they
# matter where the top candidates are close, which is exactly where sampling happens. The repetition penalty is
# multiplicative and, in Hugging Face's convention, also counts the prompt's tokens: a strong
# one pushes the model away from restating the question, even when restating it is the
# right thing to do. At 3.0 above, the answer no longer restates `7 * 7` and says the number
# in words instead: another phrasing the model learned, right here only because one exists
# that avoids the prompt's tokens. A reply that has to repeat a name or a number from the
# question has no such way out. No penalty can tell a tiresome repeat from a necessary one,
# such as the quotes and commas that JSON repeats by design.

# %% [markdown]
# ## Stopping
#
# Generation ends on the first of: the model's end token (`<|end|>` here), a caller's stop
# string, or the token cap. Chat APIs report which, and this course uses OpenAI's names
# throughout: finish reason `"stop"` for the end token or a stop string, `"length"` for the
# cap. Stop strings are matched in the *text*, because tokens do not line up with them:
# `"\nUser:"` can arrive in pieces that begin before it and end inside it. Below, tinychat's
# tokenizer glues the newline to the period in front of it and splits `User` into three
# pieces. A streaming server must also hold back any tail of the text that could still grow
# into a stop string, or it would show the start of one and then have to take it back.

# %%
example = "The answer is 4.\nUser: and 3 + 3?"
pieces = [tokenizer.decode([t]) for t in tokenizer.encode(example)]
print(pieces)

# %% [markdown]
# ### Exercise 6 — stop strings across token boundaries
#
# Write `stop_at(pieces, stops)` that reads text pieces (decoded tokens) in order and returns
# `(text, stopped)`. `pieces` may be any iterable: a list, or a generator that yields tokens
# as the model produces them (so iterate over it once; do not index it or take its length). Append each piece to the text; after each piece, if the text contains
# any of the stop strings, return the text before the earliest occurrence (the smallest start
# index over all stops present) and `True`, without reading further pieces. If the pieces
# run out first, return the whole text and `False`.
#
# Stuck? `hint("stop_at")` shows a hint; run it again for the next one.

# %% [solution] stop_at
def stop_at(pieces, stops):
    ### BEGIN SOLUTION
    text = ""
    for piece in pieces:
        text += piece
        hits = [text.find(s) for s in stops if s in text]
        if hits:
            return text[:min(hits)], True
    return text, False
    ### END SOLUTION

# %% [tests] stop_at points=3
check.stop_at(stop_at)

# %% [markdown]
# The library's `StopSequenceMatcher` does the same incrementally and also reports which
# part of the text is safe to show while streaming. In a real generation the stop string and
# everything after it are cut from the returned text (the tokens printed show the stop
# string arriving over several of them), and a cap shorter than the answer ends it with
# `"length"`:

# %%
sentence = render_chat([{"role": "user", "content": "What is 2 + 2? Answer in a sentence."}])
result = generate(model, tokenizer, sentence, SamplingParams(temperature=0, max_new_tokens=20, stop=["= 4", "is 4"]))
print(repr(result.text), result.finish_reason, "- tokens:", [tokenizer.decode([t]) for t in result.token_ids])
cap = len(result.token_ids) // 2  # fewer tokens than the same greedy answer took to reach its stop string
result = generate(model, tokenizer, sentence, SamplingParams(temperature=0, max_new_tokens=cap))
print(repr(result.text), result.finish_reason, f"- a cap of {cap} tokens")

# %% [markdown]
# ## A seeded sampler
#
# Sampling needs randomness, and reproducible sampling needs that randomness to come from an
# explicit, seeded source rather than a hidden global one. The simplest exact sampler is
# inverse-CDF sampling: draw one uniform number $u \in [0, 1)$, walk the cumulative
# probabilities, and return the first token whose cumulative probability exceeds $u$.
#
# A seed only replays a generation if every implementation turns the same random numbers
# into the same tokens. Many correct samplers exist (`torch.multinomial` is one), and each
# consumes the random stream in its own way, so the same seed gives different tokens in
# each. This course fixes one rule, the one `course_lib`, your generate loop below and the
# grader all follow: **one uniform number per sampled token, turned into a token by inverse
# CDF.** One number per step also keeps later steps in step: a sampler that drew two would
# shift every draw after it.
#
# ### Exercise 7 — a seeded sampler
#
# Write `sample_token(probs, generator)` for a 1-D tensor of non-negative weights (they need
# not sum to 1) and a `torch.Generator`. Each call:
#
# - takes exactly one uniform number $u \in [0, 1)$ from `generator`, drawn as a float64
#   (a generator's float32 and float64 streams differ), and no other random number from
#   anywhere;
# - returns, as a Python `int`, the smallest index whose cumulative sum of the weights
#   (computed in float64) is greater than $u \times$ total, where total is the sum of all the
#   weights. Scaling by the total copes with weights that do not add up to exactly 1, and a
#   token of weight 0 can then never be chosen.
#
# Stuck? `hint("sample_token")` shows a hint; run it again for the next one.

# %% [solution] sample_token
def sample_token(probs, generator):
    ### BEGIN SOLUTION
    u = torch.rand((), generator=generator, dtype=torch.float64).item()
    cdf = probs.double().cumsum(dim=0)
    return int(torch.searchsorted(cdf, u * cdf[-1].item(), right=True).clamp_max(len(cdf) - 1))
    ### END SOLUTION

# %% [tests] sample_token points=3
check.sample_token(sample_token)

# %% [markdown]
# Checking a sampler means comparing *distributions*, not single draws: draw many times and
# run a chi-square goodness-of-fit test against the probabilities it should follow. Your
# sampler on the real 2 + 2 distribution at $T = 1.5$ (top 20 tokens, renormalised), 3,000
# draws. The p-value is itself a draw: for a correct sampler it is spread evenly between 0
# and 1, so about one seed in twenty gives p below 0.05 however good the sampler; a sampler
# that follows the wrong distribution drives it to zero on every seed.

# %%
probs = next_token_probs(logits, SamplingParams(temperature=1.5, top_k=20)).double()
gen = torch.Generator().manual_seed(3)
counts = torch.zeros_like(probs)
for _ in range(3000):
    counts[sample_token(probs, gen)] += 1
result = chi_square_gof(counts, probs)
print(f"chi-square = {result.statistic:.1f} on {result.dof} degrees of freedom, p-value = {result.p_value:.3f}")
wrong = next_token_probs(logits, SamplingParams(temperature=1.0, top_k=20)).double()
print(f"against the T = 1.0 distribution instead: p-value = {chi_square_gof(counts, wrong).p_value:.2g}")

# %% [markdown]
# ## The whole loop, from your own parts
#
# You now have every piece a generate loop needs: processors that reshape the logits, a
# sampler that turns them into a token, and a stop check. Put them together and run them on
# the course model.
#
# ### Exercise 8 — the generate loop
#
# Write `generate_text(model, prompt_ids, *, tokenizer, max_new_tokens, temperature=1.0,
# top_k=0, top_p=1.0, seed=0, stop=())` that returns `(token_ids, text, finish_reason)`.
# Build one generator at the start of the call, `torch.Generator().manual_seed(seed)`, and
# then, for at most `max_new_tokens` steps:
#
# 1. the next token's logits are the model's output at the last position for the prompt
#    plus everything generated so far, `model(torch.tensor([ids]))[0, -1]`, computed without
#    gradients (`torch.no_grad()` or `torch.inference_mode()`); recomputing everything each
#    step is slow but simple, and notebook 03's cache would give the same tokens;
# 2. apply, in this order, your `apply_temperature`, `top_k_filter` and `top_p_filter`,
#    take `torch.softmax(..., dim=-1)` of the result and pick the token with your
#    `sample_token` and that one generator (at temperature 0 only the argmax is left, so the
#    sampler returns it);
# 3. append the token to `token_ids`. If it is the end token (`<|end|>`, whose ID is
#    `tokenizer.encode("<|end|>", allowed_special="all")[0]`), stop with finish reason
#    `"stop"`; the end token stays in `token_ids` (it was generated and is billed) but not
#    in `text`;
# 4. otherwise let the text be `tokenizer.decode(token_ids)`; if it contains any of the
#    `stop` strings, cut it before the earliest one (your `stop_at` does that) and stop with
#    finish reason `"stop"`;
# 5. if `max_new_tokens` tokens came without a stop, finish with `"length"` and the whole text.
#
# `token_ids` is a list of Python ints (the new tokens only, not the prompt). The grader runs
# your loop on tinychat and compares it with its own loop on its own copy of the model:
# greedy answers must match exactly, and, because you follow the one-uniform-per-step rule,
# seeded sampled answers must match token for token too. Stuck? `hint("generate_text")`.

# %% [solution] generate_text
def generate_text(model, prompt_ids, *, tokenizer, max_new_tokens, temperature=1.0, top_k=0, top_p=1.0, seed=0,
                  stop=()):
    ### BEGIN SOLUTION
    end_id = tokenizer.encode("<|end|>", allowed_special="all")[0]
    generator = torch.Generator().manual_seed(seed)
    ids, token_ids = list(prompt_ids), []
    for _ in range(max_new_tokens):
        with torch.inference_mode():  # no gradients needed
            logits = model(torch.tensor([ids]))[0, -1]  # (V,)
        logits = top_p_filter(top_k_filter(apply_temperature(logits, temperature), top_k), top_p)
        token = sample_token(torch.softmax(logits, dim=-1), generator)
        ids.append(token)
        token_ids.append(token)
        if token == end_id:
            return token_ids, tokenizer.decode(token_ids[:-1]), "stop"
        text, stopped = stop_at([tokenizer.decode(token_ids)], stop)
        if stopped:
            return token_ids, text, "stop"
    return token_ids, tokenizer.decode(token_ids), "length"
    ### END SOLUTION

# %% [tests] generate_text points=4
check.generate_text(generate_text)

# %% [markdown]
# Your loop, on the question of this notebook, greedy and then sampled:

# %%
for knobs in (dict(temperature=0), dict(temperature=1.0, seed=0), dict(temperature=2.0, top_p=0.5, seed=0)):
    ids, text, reason = generate_text(model, prompt_ids, tokenizer=tokenizer, max_new_tokens=16, **knobs)
    print(f"{str(knobs):<48} {len(ids):>2} tokens, {reason!r:>8}: {text!r}")

# %% [markdown]
# ## The "2 + 2" trace
#
# Now the library's loop, on the course model, with five decoding rules: greedy; the seed
# material's two temperatures, 0.7 and 1.5, alone; a moderate temperature with top-p, a
# common chat default; and a temperature high enough, 2.5, that the tail of the
# distribution shows. Several samples each:

# %%
settings = {
    "greedy (T = 0)": SamplingParams(temperature=0, max_new_tokens=16),
    "T = 0.7": SamplingParams(temperature=0.7, max_new_tokens=16),
    "T = 0.8, top-p 0.9": SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=16),
    "T = 1.5": SamplingParams(temperature=1.5, max_new_tokens=16),
    "T = 2.5": SamplingParams(temperature=2.5, max_new_tokens=16),
}
for name, params in settings.items():
    samples = [generate(model, tokenizer, prompt, params, generator=torch.Generator().manual_seed(s)).text
               for s in range(5)]
    print(f"{name}:")
    for text in samples:
        print(f"    {text!r}")

# %% [markdown]
# Wording varies with sampling; what matters is whether the *number* varies. The helper
# below reads the number an answer states ("2 + 2 = 4." → 4, "four" → 4), and
# `generate_many` draws a few hundred answers per setting in one batched run.

# %%
SMALL = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
         "sixteen seventeen eighteen nineteen").split()
TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
        "ninety": 90}

def answer_value(text):
    """The number an answer states: its last integer, else a number word; None if neither."""
    digits = re.findall(r"-?\d+", text)
    if digits:
        return int(digits[-1])
    words = re.findall(r"[a-z]+", text.lower())
    for i, word in enumerate(words):
        if word in TENS:
            unit = SMALL.index(words[i + 1]) if i + 1 < len(words) and words[i + 1] in SMALL[1:10] else 0
            return TENS[word] + unit
        if word in SMALL:
            return SMALL.index(word)
    return None

n_samples = 200
answer_counts = {}
for name, params in settings.items():
    results = generate_many(model, tokenizer, prompt, params, n_samples, generator=torch.Generator().manual_seed(1))
    answer_counts[name] = frequencies(answer_value(r.text) for r in results)
    wordings = len({r.text for r in results})
    top = ", ".join(f"{value}: {share:.0%}" for value, count, share in answer_counts[name][:5])
    print(f"{name:<20} {wordings:>3} distinct wordings; answers -> {top}")

# %%
fig, axes = plt.subplots(1, len(answer_counts), figsize=(13, 2.8), sharey=True)
for ax, (name, rows) in zip(axes, answer_counts.items()):
    rows = rows[:8]
    ax.bar([str(value) for value, _, _ in rows], [share for _, _, share in rows])
    ax.set_title(name)
    ax.set_xlabel("stated answer")
axes[0].set_ylabel(f"share of {n_samples} samples")
fig.tight_layout()
plt.show()

# %% [markdown]
# Greedy returns the same answer every time here (one model, one input, one batch shape).
# Low and moderate temperatures vary how the answer is phrased far more than what it says.
# As the temperature rises, compare the share of 4 across the five panels: wrong numbers and
# broken text appear as the tail of the distribution gets sampled. Temperature widens the set
# of candidates the sampler may pick; it does not make any candidate more true.
#
# ## What a seed fixes, and what it does not
#
# A seed fixes the sampler's stream of random numbers. Same model, same input, same
# parameters, same seed, same batch shape and hardware: same output.

# %%
params = SamplingParams(temperature=1.5, max_new_tokens=16)
for seed in (3, 3, 4, 4):
    result = generate(model, tokenizer, prompt, params, generator=torch.Generator().manual_seed(seed))
    print(f"seed {seed}: {result.text!r}")

# %% [markdown]
# A serving system batches your request with other people's, and how the rows of a batch
# get their random numbers is a design choice. Systems that honour a per-request seed (vLLM
# is one) give each request its own generator, seeded from that request's seed, so a
# request's draws do not depend on its neighbours. The simpler design, one stream shared by
# the whole batch, is what `generate_many` does here; it shows what goes wrong without
# per-request generators. Draw twelve first tokens from the real distribution at $T = 1$,
# alone, as row 0 of a batch of 8 sharing one stream, and as row 0 of a batch of 8 where
# each row has its own generator:

# %%
params = SamplingParams(temperature=1.0)
alone_gen, batch_gen = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
alone = [tokenizer.decode([int(sample_next_token(logits, params, alone_gen))]) for _ in range(12)]
in_batch = [tokenizer.decode([int(sample_next_token(logits.expand(8, -1), params, batch_gen)[0])])
            for _ in range(12)]
# One generator per request: row 0 is seeded with 7, its neighbours with seeds of their own.
request_gens = [torch.Generator().manual_seed(seed) for seed in (7, 101, 102, 103, 104, 105, 106, 107)]
per_request = []
for _ in range(12):
    step = [tokenizer.decode([int(sample_next_token(logits, params, g))]) for g in request_gens]  # one draw per row
    per_request.append(step[0])
print("alone:                   ", alone)
print("row 0 of 8, shared stream:", in_batch)
print("row 0 of 8, own generator:", per_request)
print("own generator matches alone:", per_request == alone)

# %% [markdown]
# With a shared stream, the first draw agrees (both take the stream's first number); after
# that, row 0 gets every eighth number instead of every one. With its own generator, row 0
# draws exactly what it drew alone, whatever its neighbours do. In whole generations the
# shared stream bites wherever the model is unsure. Over twenty seeds at $T = 1.5$, how often
# does the answer change when the request runs as row 0 of a shared-stream batch of 8 instead
# of alone?

# %%
params = SamplingParams(temperature=1.5, max_new_tokens=16)
changed = 0
for seed in range(20):
    one = generate(model, tokenizer, prompt, params, generator=torch.Generator().manual_seed(seed))
    row0 = generate_many(model, tokenizer, prompt, params, 8, generator=torch.Generator().manual_seed(seed))[0]
    changed += one.token_ids != row0.token_ids
print(f"{changed} of 20 seeds gave a different answer in the shared-stream batch")

# %% [markdown]
# Per-request generators fix the random numbers, not the logits. The logits are not
# guaranteed bit-identical across batch shapes: floating-point
# addition is not associative, and kernels choose different summation orders for different
# shapes and hardware.

# %%
print("(0.1 + 0.2) + 0.3 == 0.1 + (0.2 + 0.3):", (0.1 + 0.2) + 0.3 == 0.1 + (0.2 + 0.3))
with torch.no_grad():
    one = prefill(model, torch.tensor([prompt_ids]), model.new_cache(1))  # (1, V)
    many = prefill(model, torch.tensor([prompt_ids] * 16), model.new_cache(16))  # (16, V)
print(f"largest difference between row 0 alone and in a batch of 16: {(one[0] - many[0]).abs().max().item():.2e}")

# %% [markdown]
# Whether that prints zero depends on the machine: on a CPU the two shapes may well be
# summed in the same order, while GPU kernels choose other tilings for other batch sizes and
# differ in the last bits. A difference that small is enough to flip a sampled token whenever
# the uniform number lands near a boundary between two tokens, and a change of library
# version, model revision, retrieved document or tool result moves outputs far more. So test stochastic behaviour by repeated trials and compare distributions, as above, and
# make exact guarantees deterministic *downstream* of the model, in validators and checks,
# rather than by pinning a seed.
#
# ## Try it: the distribution under your settings
#
# The figure below is drawn once, statically, for three settings of the first-token
# distribution of the 2 + 2 answer. With a live Jupyter front end, the sliders under it
# redraw that distribution as you move them.

# %%
def draw_distribution(temperature=1.0, top_k=0, top_p=1.0, ax=None, row=logits):
    """Bar chart of the 15 most likely tokens after temperature, top-k and top-p."""
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    probs = next_token_probs(row, params)
    order = torch.softmax(row.float(), -1).topk(15).indices  # fixed order: the raw ranking
    labels = [repr(tokenizer.decode([i])) for i in order.tolist()]
    standalone = ax is None
    if standalone:
        fig, ax = plt.subplots(figsize=(7, 2.6))
    ax.bar(labels, probs[order].tolist())
    kept = int((probs > 0).sum())
    ax.set_title(f"T={temperature:g}, top-k={top_k}, top-p={top_p:g}: {kept} tokens kept", fontsize=9)
    ax.set_ylim(0, 1)
    ax.tick_params(axis="x", rotation=60, labelsize=7)
    if standalone:
        plt.show()

fig, axes = plt.subplots(1, 3, figsize=(12, 3), sharey=True)
for ax, knobs in zip(axes, [(1.0, 0, 1.0), (0.5, 0, 1.0), (1.5, 5, 0.9)]):
    draw_distribution(*knobs, ax=ax)
fig.tight_layout()
plt.show()

# %%
try:
    import ipywidgets as widgets
    from IPython.display import display
except ImportError:  # no widget library: the static figure above is the whole story
    widgets = None
if widgets is not None:
    display(widgets.interactive(
        draw_distribution,
        temperature=widgets.FloatSlider(value=1.0, min=0.0, max=3.0, step=0.05, description="temperature"),
        top_k=widgets.IntSlider(value=0, min=0, max=50, description="top-k (0 = off)"),
        top_p=widgets.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.05, description="top-p"),
        ax=widgets.fixed(None), row=widgets.fixed(logits),
    ))

# %% [markdown]
# ## Beam search, and why chat rarely uses it
#
# Greedy decoding picks the best *token* at each step, which need not give the most likely
# *answer*. Beam search keeps the `width` best partial answers, scored by their summed
# log-probability; at each step it extends every one of them by every token and keeps the
# `width` best of all those candidates. A small version on tinychat (no length penalty):

# %%
END = tokenizer.special_tokens["<|end|>"]  # the end-of-turn token's ID

def beam_search(prompt_ids, width=4, steps=10):
    """The `width` best continuations by summed log-probability, best first."""
    beams = [([], 0.0)]  # (new tokens, summed log-probability)
    for _ in range(steps):
        candidates = []
        for tokens, score in beams:
            if tokens and tokens[-1] == END:
                candidates.append((tokens, score))  # a finished answer stops collecting log-probabilities
                continue
            with torch.no_grad():
                logprobs = torch.log_softmax(model(torch.tensor([prompt_ids + tokens]))[0, -1].float(), -1)  # (V,)
            best = logprobs.topk(width)
            candidates += [(tokens + [int(i)], score + float(v)) for v, i in zip(best.values, best.indices)]
        beams = sorted(candidates, key=lambda beam: beam[1], reverse=True)[:width]
    return beams

for tokens, score in beam_search(list(prompt_ids)):
    finished = "finished" if tokens[-1] == END else "open"
    print(f"log-probability {score:6.2f} ({finished}, {len(tokens)} tokens): {tokenizer.decode([t for t in tokens if t != END])!r}")

# %% [markdown]
# Every token adds a negative log-probability, so a finished answer stops losing score while
# longer ones keep paying: beam search favours short answers, and implementations divide the
# score by a power of the length to compensate. For open-ended text, the most likely sequence
# is also the dull one: bland, generic and prone to repeating itself. And it is expensive:
# every beam is a sequence with its own KV cache and its own row in each decode step. For
# tinychat, with 100 answer tokens after this prompt:

# %%
cfg = model.config
bytes_per_value = next(model.parameters()).element_size()
kv_bytes_per_token = 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * bytes_per_value  # K and V, every layer
answer_tokens = 100
print(f"KV cache per token: {kv_bytes_per_token} bytes")
for width in (1, 4):
    copied = width * (len(prompt_ids) + answer_tokens) * kv_bytes_per_token
    shared = (len(prompt_ids) + width * answer_tokens) * kv_bytes_per_token
    print(f"beam width {width}: {copied / 1024:5.1f} KiB with a prompt copy per beam, {shared / 1024:5.1f} KiB "
          f"if the beams share the prompt's cache; {width} row(s) of decode work per step")
    if width == 1:
        one_copied, one_shared = copied, shared
print(f"width 4 over width 1: {copied / one_copied:.1f}x with prompt copies, {shared / one_shared:.1f}x with a shared prompt")

# %% [markdown]
# So a width-4 beam costs close to four requests' worth of cache and decode compute, which
# means fewer requests fit in a batch, and its final answer is only known once the beams
# settle, which fights streaming. Chat serving samples instead. Beam search stays where
# there is one right answer and the most likely sequence is the goal: machine translation,
# speech recognition, short constrained outputs such as a label or a query.

# %% [markdown]
# ## Interview probes
#
# Answer each question aloud before you read its points, then count the points you made. The
# cards come from the course's probe bank (`course_lib/drills/probes.toml`), the same cards the
# interview drills ask.

# %%
from course_lib.drills.cards import show_probes

show_probes("04_sampling")

# %% [markdown]
# Practise them here: the panel asks this notebook's numeric problems and probe cards and
# schedules them in the same history as `course drill` in a terminal. Nothing is saved until
# you press Start.

# %%
from course_lib.drills.widget import notebook_panel

notebook_panel("04_sampling")

# %% [markdown]
# ## Recap
# - Greedy (T = 0) is argmax: repeatable only for a fixed model, input and batch shape (the
#   logits moved with the batch shape above), and not more correct.
# - Temperature rescales logits; top-k, top-p and min-p truncate the tail; penalties push
#   down repeats (subtractive frequency/presence, multiplicative repetition).
# - Stop strings are matched in the decoded text, across token boundaries, and trimmed.
# - A seed fixes the sampler's random stream only; serving systems give each request its own
#   seeded generator, and batch shape, kernels and revisions still move the logits. Compare
#   distributions with repeated trials.
# - The generate loop is those parts in order: logits of the last position, processors,
#   softmax, one seeded draw, then the end token, stop strings and the cap, reported as
#   `"stop"` or `"length"`.
# - Beam search keeps the k best partial answers; chat serving rarely uses it (k times the
#   KV cache and compute, bland and short answers), translation and constrained tasks still do.
#
# **Self-check:**
# 1. At $T = 0$, what does your `apply_temperature` return, and why is that not "a very small $T$"?
# 2. With probabilities 0.5, 0.3, 0.15, 0.05, which tokens does top-p keep at $p = 0.6$, and
#    which does min-p keep at 0.25?
# 3. Why must a stop string be searched for in the accumulated text rather than in each token?
# 4. Two implementations sample from the same distribution with the same seed and get
#    different tokens. Is one of them wrong? What rule makes them agree?
# 5. Name three things that can change a seeded, greedy answer between two runs.
# 6. How much more KV-cache memory does beam width 4 need than width 1, and why do chat APIs
#    sample instead?
