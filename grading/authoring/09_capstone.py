# %% [markdown]
# # 09 · Capstone: one request, end to end
#
# Eight notebooks took the request apart. This one puts it back together. A user asks the
# course's assistant a question; we follow that single request through every stage you built:
# retrieval and the context window, the template and the bill, prefill and decode on the
# serving engine with the KV cache counted in bytes, the sampling rule, the grammar that shapes
# the reply, the check on its citation, and the trace that records it all. Along the way we keep
# asking one question: *which component makes this promise hold?* The model makes none of
# them; the code around it makes all of them, or nobody does. Then you do the three jobs an
# engineer on such a product does most: attribute a guarantee, budget a deployment, and
# diagnose a failed request from its trace.
#
# **By the end of this notebook you can**
# - run one grounded request through the whole course pipeline, with every stage timed and its
#   tokens, KV bytes and cost counted;
# - say, for each guarantee a product gives, which component owns it, and which promise nobody
#   can make;
# - work a latency and cost budget for a production scenario (TTFT, decode's memory floor,
#   a prefix cache, price per request and per day, an SLO) with the drills' formulas;
# - read a failed request's trace, name the stage that broke and the fix;
# - drill every topic of the course, here or with `course drill` in a terminal.
#
# **Prerequisites:** all of notebooks 00 to 08. In particular notebook 03 (KV bytes per
# token), 04 (sampling parameters and seeds), 05 (grammar guides, the tool dispatcher), 06 (the
# engine, TTFT and the decode roofline) and 07 (packing, grounding, the trace log).
#
# **Time:** about 120 minutes (a first careful pass with all three exercises).
#
# **Grading:** the course's own implementations that the setup cell imports are there for the
# demos. While your notebook is graded they are switched off, and so are the visible checks
# and the libraries the tests compare against: each answer must be your own code.
#
# Stuck on an exercise? `hint("exercise_name")` shows one hint at a time, gentlest first.

# %% [setup]
import hashlib
import json
import re
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import jsonschema
import matplotlib.pyplot as plt
import torch

from course_lib.capstone import COMPONENTS, FIXES, GUARANTEES, STAGES
from course_lib.context import (BM25Index, ContextOverflow, Passage, TraceLog, TraceRecord, pack_context, redact,
                                verify)
from course_lib.data.grounded import GROUNDED_ABSTAIN
from course_lib.drills.problem_formulas import request_cost_usd
from course_lib.drills.problems import make_problem
from course_lib.kv_memory import kv_bytes_per_token
from course_lib.model import data_dir, load_model, load_tokenizer, use_reference_threads
from course_lib.sampling import SamplingParams
from course_lib.serving import Engine
from course_lib.structured.guide import JSONGuide, RegexGuide
from course_lib.tokenization.chat_template import encode_chat
from course_lib.tools import Dispatcher, demo_book, parse_tinychat_tool_call, refund_registry, tinychat_registry

use_reference_threads()  # two CPU threads, as on the course's reference machine (the grader sets one)

# %% [checks]
# The visible checks and their hints (grading runs without them: the answers must be your own).
from course_lib.checks import capstone as check
from course_lib.checks.hints import Hints
hint = Hints(check.HINTS)  # hint("exercise_name") shows the next hint for that exercise

# %% [markdown]
# ## The request and the pipeline
#
# The assistant answers questions from a small store of facts and cites the fact it used. Most
# of the facts are about made-up things (tinychat's weights cannot know them, so the answer
# must come from the store). A user asks: *"What is the chemical symbol for katorwenium?"*
# The application, not the model, runs these stages, in this order:
#
# 1. **retrieve** the passages that match the question (BM25, notebook 07);
# 2. **pack** them with the system prompt into the window, keeping room for the reply;
# 3. **tokenize and bill**: the exact prompt tokens, template markers included;
# 4. **build the grammar** the reply must follow: a statement citing one of the shown
#    passages, or the abstention sentence;
# 5. **prefill** the prompt and **decode** the reply on the engine, sampling each token under
#    the request's parameters and the grammar's mask;
# 6. **ground**: check the citation, and the reply's statement against the cited passage;
# 7. **trace**: write a redacted, hash-chained record of all of it.
#
# First the pieces every stage needs: the model, the fact store, and the request's settings.

# %%
model = load_model("tinychat", device="cpu")
tokenizer = load_tokenizer("tinychat")
facts = {"1": "A kimbrel has 6 legs.", "2": "The capital of Veltoria is Marn.", "3": "Every dorvex walks on 4 legs.",
         "4": "The chemical symbol for katorwenium is Gs.", "5": "A spider has 8 legs.", "6": "The capital of Peru is Lima.",
         "7": "A kimbrel sleeps in trees."}
store = BM25Index()
for pid, text in facts.items():
    store.add(pid, text)
SYSTEM = "You are TinyChat."  # one of the system prompts tinychat was trained with
WINDOW, RESERVE, MARGIN = model.config.max_seq_len, 48, 8  # tokens: the window, the reply's room, slack
PRICES = {"input_usd_per_mtok": 3.0, "output_usd_per_mtok": 15.0}  # representative hosted prices
PARAMS = SamplingParams(temperature=0.7, top_p=0.9, seed=0, max_new_tokens=RESERVE)
question = "What is the chemical symbol for katorwenium?"
print(f"window {WINDOW} tokens, {RESERVE} kept for the reply, margin {MARGIN}; {len(store)} passages in the store")

# %% [markdown]
# ## Stages 1 and 2: retrieve and pack
#
# Retrieval ranks the store for the question and keeps the top three. The packer then lays out
# the prompt (the system message; then the question, the fenced passages and the question
# again) and counts it through the chat template. It keeps whole passages in rank order while
# they fit in `window - reserve - margin`, and drops the rest.

# %%
def retrieve(text, k=3):
    return [Passage(pid, facts[pid], score) for pid, score in store.search(text, k=k)]


def pack(text, passages, window=WINDOW):
    return pack_context(SYSTEM, [], [{"role": "user", "content": text}], passages, tokenizer=tokenizer,
                        window=window, reserve_output=RESERVE, margin=MARGIN, policy="passages-first")


found = retrieve(question)
packed = pack(question, found)
print(packed.report())

# %% [markdown]
# What if the parts that must always be sent do not fit? The packer refuses to build the
# prompt at all, rather than send one that leaves the reply no room. The system prompt,
# repeated two hundred times:

# %%
try:
    pack_context(SYSTEM * 200, [], [{"role": "user", "content": question}], found, tokenizer=tokenizer,
                 window=WINDOW, reserve_output=RESERVE, margin=MARGIN)
except ContextOverflow as error:
    print(f"ContextOverflow ({error.over} tokens over): {str(error)[:120]}...")

# %% [markdown]
# ## Stage 3: tokenize and bill
#
# The bill is a count of tokens, and the count must be the one the model actually reads:
# the chat template's role and end markers are tokens too. `encode_chat` renders the messages
# through the template and encodes the whole thing, so its count is the true one.

# %%
prompt_ids = encode_chat(tokenizer, packed.messages)
print(f"{len(prompt_ids)} prompt tokens (the packer counted {packed.prompt_tokens}); "
      f"{packed.template_tokens} of them are template markers ({packed.template_tokens / len(prompt_ids):.0%})")
worst = request_cost_usd(len(prompt_ids), RESERVE, **PRICES)
print(f"at ${PRICES['input_usd_per_mtok']}/M in and ${PRICES['output_usd_per_mtok']}/M out (representative), "
      f"this request costs at most ${worst:.6f}, or ${worst * 1e6:,.0f} per million such requests")

# %% [markdown]
# A bill computed from the words the user typed would miss every one of those marker tokens.
#
# ## Stage 4: the grammar of the reply
#
# The reply must be one of two shapes: a short statement followed by the id of a passage the
# prompt *showed*, in brackets, or exactly the abstention sentence. Notebook 05's `RegexGuide`
# compiles that into a token mask, built per request because the shown ids change.

# %%
ABSTAIN_RE = GROUNDED_ABSTAIN.replace(".", r"\.")


def reply_guide(shown_ids):
    cited = rf"[A-Za-z0-9 .]{{1,80}} \[(?:{'|'.join(shown_ids)})\]|" if shown_ids else ""
    return RegexGuide(cited + ABSTAIN_RE, tokenizer)


cfg = model.config
guide = reply_guide(list(packed.kept_passages))
first_mask = guide.allowed_tokens(guide.initial_state)
print(f"shown passages {list(packed.kept_passages)}: {len(first_mask)} of {cfg.vocab_size} token ids "
      "may start the reply")

# %% [markdown]
# ## Stage 5: prefill, decode and the KV cache
#
# The engine runs the request. Its first step is **prefill**: every prompt token in one
# forward pass, which also yields the first reply token. Each later step is one **decode**
# step: one token, reading the whole KV cache. We time each step, and watch how many of the
# engine's KV blocks the request holds. tinychat's cache is float32, so a token costs
# $2 \times \text{layers} \times \text{KV heads} \times \text{head dim} \times 4$ bytes.

# %%
kv_per_token = kv_bytes_per_token(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, bytes_per_element=4)


def run_engine(messages, params, guide=None, engine=None):
    """One request on the engine: its text, token counts, step times and peak KV blocks."""
    engine = engine or Engine(model, tokenizer, max_num_seqs=1)
    engine.add_request(messages, params, guide=guide)
    text, completion, steps, peak, reason = "", 0, [], 0, None
    while engine.has_unfinished():
        start = time.perf_counter()
        (out,) = engine.step()
        steps.append(time.perf_counter() - start)
        peak = max(peak, engine.stats().num_used_blocks)
        text, completion, reason = text + out.text, completion + len(out.token_ids), out.finish_reason or reason
    return {"text": text, "completion_tokens": completion, "finish_reason": reason, "prefill_s": steps[0],
            "decode_s": sum(steps[1:]), "steps": len(steps), "peak_blocks": peak,
            "pool_blocks": engine.block_manager.num_blocks, "block_size": engine.block_manager.block_size}


run = run_engine(packed.messages, PARAMS, guide)
cached = len(prompt_ids) + run["completion_tokens"] - 1  # the last token is sampled, never fed back
print(f"reply: {run['text']!r} ({run['completion_tokens']} tokens, finish_reason {run['finish_reason']!r})")
print(f"prefill {run['prefill_s'] * 1e3:.1f} ms for {len(prompt_ids)} tokens; decode {run['decode_s'] * 1e3:.1f} ms "
      f"for {run['steps'] - 1} steps")
print(f"KV cache: {kv_per_token:,} bytes per token x {cached} tokens = {cached * kv_per_token / 1024:.0f} KiB; "
      f"the engine held {run['peak_blocks']} blocks of {run['block_size']} tokens "
      f"({run['peak_blocks'] * run['block_size'] * kv_per_token / 1024:.0f} KiB) "
      f"of a {run['pool_blocks'] * run['block_size'] * kv_per_token / 1024:.0f} KiB pool")

# %% [markdown]
# The blocks round the cache up to whole blocks: that is the paging of notebook 06. The pool is
# fixed when the engine starts, and the scheduler admits a request only if its worst case
# (prompt plus `max_new_tokens`) can fit. The engine also ends every request at
# `max_new_tokens` (or at the window's end), whatever the model would write next. Both
# promises, shown on engines built to break them:

# %%
try:
    Engine(model, tokenizer, num_blocks=2).add_request(packed.messages, PARAMS)
except ValueError as error:
    print(f"refused at admission: {str(error)[:150]}...")
capped = run_engine(packed.messages, SamplingParams(temperature=0.7, top_p=0.9, seed=0, max_new_tokens=3))
print(f"max_new_tokens=3: {capped['completion_tokens']} tokens, finish_reason {capped['finish_reason']!r}, "
      f"{capped['text']!r}")

# %% [markdown]
# ## The sampling rule and its seed
#
# The request samples at temperature 0.7 with top-p 0.9 (notebook 04), so its reply is a draw.
# The sampler draws every token from a random generator of the request's own, seeded from
# `params.seed`, so the other requests in the batch never consume its random numbers. That
# makes the draws repeat, not the logits they are drawn from: notebook 04 showed that a batch
# of another shape, or other hardware, can change the logits in their last bits, and a draw
# near a boundary then flips. So the promise is: the same prompt, parameters and seed give the
# same reply *on the same hardware, in a batch of the same shape*. Here every run is alone in
# its batch on this machine. Run the request twice more with the seed and once with another:

# %%
again = run_engine(packed.messages, PARAMS, reply_guide(list(packed.kept_passages)))
other = run_engine(packed.messages, SamplingParams(temperature=0.7, top_p=0.9, seed=1, max_new_tokens=RESERVE),
                   reply_guide(list(packed.kept_passages)))
print(f"seed {PARAMS.seed}, first run:     {run['text']!r}")
print(f"seed {PARAMS.seed}, second run:    {again['text']!r} (identical: {again['text'] == run['text']})")
print(f"seed 1:                {other['text']!r} (identical to seed {PARAMS.seed}: {other['text'] == run['text']})")

# %% [markdown]
# A different seed may or may not change the words: when the model is confident, most draws
# agree. What the seed guarantees is the repeat, not the variety.
#
# ## Stage 6: ground the reply
#
# The grammar already made the *form* right. Grounding checks the *content* against the
# evidence: split off the cited id, confirm the id was shown, and look for the reply's
# statement, word for word, in that passage's text (tinychat was trained to repeat the
# sentence it relies on). The result decides the request's final state.

# %%
def ground(reply, shown):
    """(final_state, validation) for a grounded reply; a check that does not apply is left out."""
    text = reply.strip()
    if text == GROUNDED_ABSTAIN:
        return "abstained", {"format": True}
    cited_form = re.fullmatch(r"(.+?) \[(\d+)\]", text)
    if cited_form is None:
        return "error", {"format": False}
    stated, cited = cited_form.groups()
    passages = {p.id: p.text for p in shown}
    supported = cited in passages and stated in passages[cited]
    return "answered", {"format": True, "cited_shown": cited in passages, "claim_supported": supported}


shown = [p for p in found if p.id in packed.kept_passages]
print(ground(run["text"], shown))

# %% [markdown]
# The printed validation is the whole request's verdict: the reply has the cited form, the id
# it cites was shown, and its statement is that passage's sentence word for word. The sentence
# is compared whole, not only the symbol in it, so a reply with the right value under a
# wrong name fails `claim_supported`; one of the failing requests below does just that.
#
# Notice what the check can and cannot say. It proves that the reply's sentence is in the
# passage the reply cites. It cannot prove that the passage is right, or that the sentence
# answers the question that was asked.
# No stage of this pipeline checks the *truth* of an answer: the best it can do is tie every
# claim to a source that a person can audit.
#
# ## Stage 7: the trace
#
# Finally the record. Everything above goes into one `TraceRecord` (notebook 07): versions,
# parameters, the passages shown, the checks, tokens, stage times and cost. `TraceLog`
# redacts the personal data its patterns recognise (email addresses, card numbers, phone
# numbers) before it writes, and chains each line to the one before with a hash: an edited
# line no longer matches its own hash, and a line inserted or removed breaks the link of the
# line after it.
#
# Here the stages become functions, so that `serve` can run the whole request in one call and
# time each stage. The trace's `metadata` carries what a diagnosis needs: the passages the
# packer dropped, why decoding stopped, and a tool error when there was one.

# %%
WEIGHTS_SHA = hashlib.sha256((data_dir("tinychat") / "model.safetensors").read_bytes()).hexdigest()


def record_for(request_id, *, params, guided, shown_ids, validation, tokens, latency_ms, cost, state, metadata):
    return TraceRecord(
        request_id=request_id, timestamp=datetime.now(timezone.utc).isoformat(), app_version="notebook-08",
        model="tinychat", weights_sha256=WEIGHTS_SHA, template="tinychat-chat",
        decoding={"temperature": params.temperature, "top_p": params.top_p, "seed": params.seed,
                  "max_new_tokens": params.max_new_tokens, "guided": guided},
        retrieval={"index_version": store.version, "passage_ids": shown_ids}, tools_version="tinychat-tools",
        policy_version="passages-first", validation=validation, tokens=tokens, latency_ms=latency_ms,
        cost_usd=cost, final_state=state, metadata=metadata)

# %%
def serve(text, *, params=PARAMS, window=WINDOW, guided=True, request_id="req-1", user_note=""):
    """One grounded request through every stage; returns its TraceRecord."""
    ms, clock = {}, time.perf_counter
    start = clock()
    found = retrieve(text)
    ms["retrieve"] = (clock() - start) * 1e3
    start = clock()
    packed = pack(text, found, window)
    ms["pack + count"] = (clock() - start) * 1e3
    shown = [p for p in found if p.id in packed.kept_passages]
    start = clock()
    guide = reply_guide([p.id for p in shown]) if guided else None
    ms["grammar"] = (clock() - start) * 1e3
    run = run_engine(packed.messages, params, guide)
    ms["prefill"], ms["decode"] = run["prefill_s"] * 1e3, run["decode_s"] * 1e3
    start = clock()
    state, validation = ground(run["text"], shown)
    if run["finish_reason"] == "length":
        state = "error"  # a reply cut by the cap is not an answer
    ms["ground"] = (clock() - start) * 1e3
    billed = len(encode_chat(tokenizer, packed.messages))  # the tokens the model reads, markers included
    cost = request_cost_usd(billed, run["completion_tokens"], **PRICES)
    dropped = [d.ref for d in packed.dropped if d.kind == "passage"]
    return record_for(request_id, params=params, guided=guided, shown_ids=[p.id for p in shown],
                      validation=validation, tokens={"prompt": billed,
                                                     "completion": run["completion_tokens"]},
                      latency_ms=ms, cost=cost, state=state,
                      metadata={"window": window, "dropped": dropped, "finish_reason": run["finish_reason"],
                                "tool_error": None, "reply": run["text"], "note": user_note})

# %% [markdown]
# Serve the question once more, this time end to end, and append its record to a fresh log
# file. The request carries a note with the user's email address, as support tools often do.

# %%
folder = Path(tempfile.mkdtemp())
log = TraceLog(folder / "trace.jsonl")
record = serve(question, user_note="asked by ann@example.com")
start = time.perf_counter()
log.append(record)
write_ms = (time.perf_counter() - start) * 1e3
written = (folder / "trace.jsonl").read_text()
print(written[:600], "...")
print(f"the address is in the file: {'ann@example.com' in written}; the placeholder is: {'[EMAIL]' in written}")
print(verify(folder / "trace.jsonl"))
print(f"spelt out, an address passes the patterns: {redact('write to ann at example dot com')!r}")

# %% [markdown]
# The log replaced the address with `[EMAIL]` before hashing the line, so the address was
# never stored. The last line is the limit of that promise: redaction matches patterns, so an
# address written in words, or a name, goes into the log as typed.
#
# Here is where the request spent its time (this `serve` call ran after several earlier
# requests, so one-time start-up costs are not in it), with the trace write added:

# %%
stages = {**record.latency_ms, "write trace": write_ms}
for stage, ms in stages.items():
    print(f"{stage:<14} {ms:8.2f} ms")
print(f"{'total':<14} {sum(stages.values()):8.2f} ms   final state: {record.final_state}, "
      f"{record.tokens['prompt']} + {record.tokens['completion']} tokens, ${record.cost_usd:.6f}")
fig, ax = plt.subplots(figsize=(7, 2.6))
ax.barh(list(stages)[::-1], list(stages.values())[::-1])
ax.set_xscale("log")
ax.set_xlabel("milliseconds (log scale)")
ax.set_title("one grounded request on tinychat, stage by stage")
plt.show()
model_ms = stages["prefill"] + stages["decode"]
print(f"the model's forward passes (prefill + decode): {model_ms / sum(stages.values()):.0%} of the time")

# %% [markdown]
# The log scale matters: the stages differ by orders of magnitude. Retrieval, packing,
# grounding and the trace write are ordinary code over a prompt this short. If the grammar
# stage stands out among them, that is because its guide is compiled for each request (the
# pattern names the shown ids); a product caches compiled guides by pattern.
#
# ## Schemas and tools
#
# Two more promises from notebook 05, on the same engine. First, a reply that must be a JSON
# record fitting a schema: `JSONGuide` compiles the schema into a mask, and `jsonschema` (the
# reference validator) confirms the result.

# %%
BOOKING_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 20},
                   "party_size": {"type": "integer", "minimum": 1, "maximum": 12},
                   "day": {"type": "string", "enum": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday",
                                                      "Saturday", "Sunday"]},
                   "time": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"}},
    "required": ["name", "party_size", "day", "time"], "additionalProperties": False}
booking = [{"role": "user", "content": "Extract the booking as JSON: table for 3 under Patel, Saturday 19:00 please."}]
start = time.perf_counter()
booking_guide = JSONGuide(BOOKING_SCHEMA, tokenizer)
guide_ms = (time.perf_counter() - start) * 1e3
hot_booking = run_engine(booking, SamplingParams(temperature=1.2, seed=5, max_new_tokens=400), booking_guide)
jsonschema.validate(json.loads(hot_booking["text"]), BOOKING_SCHEMA)  # raises if it does not fit
print(f"guide built in {guide_ms:.1f} ms; at temperature 1.2 the reply ({hot_booking['finish_reason']!r}) is "
      f"{hot_booking['text']}")
print("it validates against the schema (jsonschema raised nothing)")

# %% [markdown]
# Even at a high temperature the reply validates: the mask never let a token through that
# would break the schema. Whether the *values* are the ones in the user's sentence is another
# matter, and the mask cannot know it.
#
# The mask promises that every token keeps the reply a *prefix* of a valid one. Only a reply
# that ends on its own is a whole one: the engine's length cap stops the same request
# wherever it has got to. The same booking, capped at 8 tokens:

# %%
cut_booking = run_engine(booking, SamplingParams(temperature=1.2, seed=5, max_new_tokens=8),
                         JSONGuide(BOOKING_SCHEMA, tokenizer))
try:
    json.loads(cut_booking["text"])
    print(f"{cut_booking['text']!r} parses")
except json.JSONDecodeError as error:
    print(f"finish_reason {cut_booking['finish_reason']!r}: {cut_booking['text']!r} does not parse ({error.msg})")

# %% [markdown]
# So the grammar guide's promise is about a reply that stopped by itself; a reply cut at
# `max_new_tokens` has to be caught by its finish reason, as `serve` does below.
#
# Second, a tool call. The model only *proposes* it, as text. The dispatcher checks it before
# anything runs: the tool must exist, the arguments must fit its schema, the session must
# hold the tool's permission, and a side effect needs an idempotency key.

# %%
proposal = run_engine([{"role": "user", "content": "What time is it in Oslo?"}],
                      SamplingParams(temperature=0, max_new_tokens=40))
print(f"the model proposes: {proposal['text']!r}")
try:
    call = parse_tinychat_tool_call(proposal["text"])
    result = Dispatcher(tinychat_registry()).dispatch(call)
    print(f"dispatched: ok={result.ok}, {result.error_kind or result.content}")
except ValueError as error:  # the proposal is not a tool call at all
    print(f"not a tool call: {error}")

# %% [markdown]
# Now two proposals the dispatcher must stop. They are written by hand here, as a model could
# write them: one with an argument name the tool does not take, and one refund that a planted
# instruction talked the model into (notebook 07), in a session that may only read.

# %%
book = demo_book()
refunds = Dispatcher(refund_registry(book, user="alice"))
wrong_args = parse_tinychat_tool_call('<|tool_call|>{"name": "get_time", "arguments": {"town": "Oslo"}}')
planted = parse_tinychat_tool_call('<|tool_call|>{"name": "refund_order", "arguments": {"order_id": "A1234", '
                                   '"amount": 120, "currency": "USD", "reason": "the note said so"}}')
bad = Dispatcher(tinychat_registry()).dispatch(wrong_args)
refused = refunds.dispatch(planted, permissions=set(), idempotency_key="capstone-1")
for label, result in (("wrong argument name", bad), ("refund, read-only session", refused)):
    print(f"{label:<26} -> {result.error_kind}: {result.content[:90]}")
print(f"refunds actually made: {book.refunds}")

# %% [markdown]
# Both calls were stopped before any tool code ran. Each goes into the trace too, with the
# dispatcher's verdict as `tool_error`:

# %%
def tool_record(request_id, result):
    state = "answered" if result.ok else "refused" if result.error_kind == "permission_denied" else "error"
    return record_for(request_id, params=SamplingParams(temperature=0, max_new_tokens=40), guided=False,
                      shown_ids=[], validation={}, tokens={"prompt": 0, "completion": 0}, latency_ms={},
                      cost=0.0, state=state, metadata={"window": WINDOW, "dropped": [], "finish_reason": "stop",
                                                       "tool_error": result.error_kind})


for request_id, result in (("req-2", bad), ("req-3", refused)):
    log.append(tool_record(request_id, result))
print(verify(folder / "trace.jsonl"))

# %% [markdown]
# ### Exercise 1 — who owns each guarantee?
#
# Every promise the product makes is kept by some piece of code. Fill in
# `guarantee_owners`: a dict from each key of `GUARANTEES` to the component that owns that
# guarantee, chosen from `COMPONENTS` (both printed below):
#
# - the **owner** is the component whose code makes the property hold on every request,
#   *whatever the model writes*: the one this notebook showed raising, refusing, masking,
#   capping, seeding, checking or redacting. A check that only finds a bad reply afterwards
#   does not own "the reply is right"; but when the property *is* a check ("... is checked",
#   "... is detected"), its owner is the component that does the checking;
# - the model owns no guarantee: it is the one component that is allowed to be wrong;
# - a property that no component enforces belongs to `"nobody"`;
# - read each statement whole: several say under which conditions the promise holds (a reply
#   that ends on its own, the same hardware and batch shape, a head kept elsewhere, the forms
#   the patterns match). A promise kept within its stated conditions has an owner; outside them
#   it was never made;
# - every key of `GUARANTEES` appears exactly once, and every value is spelt exactly as in
#   `COMPONENTS` (`"engine"` covers its scheduler and block manager; `"sampler"` the sampling
#   rule and its seeded generator; `"tokenizer"` the chat template it encodes through, which
#   the packer borrows to count).
#
# The checks tell you which entries are wrong, not what they should be. Stuck?
# `hint("guarantee_owners")`.

# %%
print("COMPONENTS:", ", ".join(COMPONENTS))
for key, text in GUARANTEES.items():
    print(f"  {key:<16} {text}")

# %% [solution] guarantee_owners
guarantee_owners = {key: None for key in GUARANTEES}  # fill in one of COMPONENTS for each key
### BEGIN SOLUTION
guarantee_owners.update({
    "prompt_fits": "context packer",
    "template_billed": "tokenizer",
    "kv_fits": "engine",
    "length_capped": "engine",
    "seed_repeats": "sampler",
    "reply_parses": "grammar guide",
    "arguments_valid": "dispatcher",
    "tool_permitted": "dispatcher",
    "claim_supported": "grounding check",
    "log_untampered": "trace log",
    "no_pii_logged": "trace log",
    "answer_true": "nobody",
})
### END SOLUTION

# %% [tests] guarantee_owners points=2
check.guarantee_owners(guarantee_owners)

# %% [markdown]
# The pattern: every guarantee is a piece of ordinary, testable code placed around the model,
# and each can be tested without the model at all (a packer with a made-up tokenizer, a
# dispatcher with a fake tool). Only the last one has no owner, which is why the reductions of
# notebook 07 matter.
#
# ## Budgeting a deployment
#
# tinychat on a laptop says little about a production bill. The same arithmetic does: a
# request's latency is its time in the queue, then prefill, then one decode step per further
# token; its cost is its tokens at their prices. The drills ask this every day; here is one
# of their problems, with its worked solution:

# %%
drill = make_problem("request_latency", 8)
print(drill.question)
print("---")
print(drill.solution)

# %% [markdown]
# A real budget adds three things the drill leaves out:
#
# - a **prefix cache**: the first `cached_tokens` of the prompt were seen before (the same
#   system prompt and tool specs), so they skip prefill and are billed at the cached price;
# - the decode step from the hardware, not a given number: a step must read every weight and
#   the request's whole KV cache (notebooks 03 and 06), so it takes at least bytes read /
#   bandwidth, and real kernels reach only a share of the datasheet bandwidth;
# - a **service-level objective** (SLO): limits on TTFT and on total latency.
#
# The scenario for this exercise: an 8B model in bf16 on one H100-class GPU (representative
# datasheet bandwidth, 3,350 GB/s, of which kernels reach 70%), 128 KiB of KV cache per token,
# 3,000-token prompts of which 2,000 are a cached prefix, 300-token replies, 200,000 requests
# a day, prices of $3 / $0.30 / $15 per million input / cached / output tokens
# (representative), and an SLO of 300 ms TTFT and 4 s in total.
#
# ### Exercise 2 — a latency and cost budget
#
# Write `latency_cost_budget(scenario)`. `scenario` is a dict with the keys `prompt_tokens`,
# `cached_tokens`, `output_tokens`, `queue_ms`, `prefill_tokens_per_s`, `n_params`,
# `bytes_per_param`, `kv_bytes_per_token`, `bandwidth_gb_s`, `bandwidth_utilization`,
# `input_usd_per_mtok`, `cached_usd_per_mtok`, `output_usd_per_mtok`, `requests_per_day`,
# `ttft_slo_ms` and `latency_slo_s`. Return a dict with exactly these keys:
#
# - `"ttft_s"`: `queue_ms / 1000 + (prompt_tokens - cached_tokens) / prefill_tokens_per_s`
#   (cached tokens skip prefill; prefill yields the first output token);
# - `"decode_s_per_token"`: `(n_params * bytes_per_param + kv_bytes_per_token *
#   (prompt_tokens + output_tokens)) / (bandwidth_gb_s * 1e9 * bandwidth_utilization)`: the
#   weights and the KV cache at the reply's last step, read at the reached bandwidth
#   (1 GB = $10^9$ bytes);
# - `"latency_s"`: `ttft_s + (output_tokens - 1) * decode_s_per_token`;
# - `"usd_per_request"`: uncached prompt tokens at `input_usd_per_mtok`, cached ones at
#   `cached_usd_per_mtok`, output tokens at `output_usd_per_mtok`, all per million;
# - `"usd_per_day"`: `usd_per_request * requests_per_day`;
# - `"meets_slo"`: `True` when `ttft_s * 1000 <= ttft_slo_ms` and `latency_s <= latency_slo_s`.
#
# Raise `ValueError`, naming the offending key in the message (not echoing the whole
# scenario, which names every key), when a key is missing;
# when `prompt_tokens` or `output_tokens` is not an `int` of at least 1; when
# `requests_per_day` is not an `int` of at least 0; when `cached_tokens` is not an `int` from 0
# to `prompt_tokens - 1` (the last prompt token is always computed: it produces the first
# output token); when `prefill_tokens_per_s`, `n_params`, `bytes_per_param` or
# `bandwidth_gb_s` is not above 0; when `bandwidth_utilization` is not in (0, 1]; when
# `queue_ms`, `kv_bytes_per_token`, a price or an SLO is negative; or when any of these
# numbers is not a finite `int` or `float` (a string, NaN or infinity).
#
# The drills' formulas (`course_lib.drills.problem_formulas`) are switched off while grading:
# write the arithmetic yourself. Stuck? `hint("latency_cost_budget")`.

# %% [solution] latency_cost_budget
def latency_cost_budget(scenario):
    ### BEGIN SOLUTION
    keys = ("prompt_tokens", "cached_tokens", "output_tokens", "queue_ms", "prefill_tokens_per_s", "n_params",
            "bytes_per_param", "kv_bytes_per_token", "bandwidth_gb_s", "bandwidth_utilization", "input_usd_per_mtok",
            "cached_usd_per_mtok", "output_usd_per_mtok", "requests_per_day", "ttft_slo_ms", "latency_slo_s")
    for key in keys:
        if key not in scenario:
            raise ValueError(f"the scenario has no {key}")
    s = scenario

    def is_int(value):
        return isinstance(value, int) and not isinstance(value, bool)

    def is_number(value):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
            and abs(value) != float("inf")

    for key in ("prompt_tokens", "output_tokens"):
        if not is_int(s[key]) or s[key] < 1:
            raise ValueError(f"{key} must be an int >= 1, got {s[key]!r}")
    if not is_int(s["requests_per_day"]) or s["requests_per_day"] < 0:
        raise ValueError(f"requests_per_day must be an int >= 0, got {s['requests_per_day']!r}")
    if not is_int(s["cached_tokens"]) or not 0 <= s["cached_tokens"] < s["prompt_tokens"]:
        raise ValueError(f"cached_tokens must be an int from 0 to prompt_tokens - 1, got {s['cached_tokens']!r}")
    for key in ("prefill_tokens_per_s", "n_params", "bytes_per_param", "bandwidth_gb_s"):
        if not is_number(s[key]) or s[key] <= 0:
            raise ValueError(f"{key} must be above 0, got {s[key]!r}")
    if not is_number(s["bandwidth_utilization"]) or not 0 < s["bandwidth_utilization"] <= 1:
        raise ValueError(f"bandwidth_utilization must be in (0, 1], got {s['bandwidth_utilization']!r}")
    for key in ("queue_ms", "kv_bytes_per_token", "input_usd_per_mtok", "cached_usd_per_mtok", "output_usd_per_mtok",
                "ttft_slo_ms", "latency_slo_s"):
        if not is_number(s[key]) or s[key] < 0:
            raise ValueError(f"{key} must be 0 or more, got {s[key]!r}")
    prompt, cached, output = s["prompt_tokens"], s["cached_tokens"], s["output_tokens"]
    ttft = s["queue_ms"] / 1000 + (prompt - cached) / s["prefill_tokens_per_s"]
    bytes_read = s["n_params"] * s["bytes_per_param"] + s["kv_bytes_per_token"] * (prompt + output)
    step = bytes_read / (s["bandwidth_gb_s"] * 1e9 * s["bandwidth_utilization"])
    latency = ttft + (output - 1) * step
    usd = ((prompt - cached) * s["input_usd_per_mtok"] + cached * s["cached_usd_per_mtok"]
           + output * s["output_usd_per_mtok"]) / 1e6
    return {"ttft_s": ttft, "decode_s_per_token": step, "latency_s": latency, "usd_per_request": usd,
            "usd_per_day": usd * s["requests_per_day"],
            "meets_slo": ttft * 1000 <= s["ttft_slo_ms"] and latency <= s["latency_slo_s"]}
    ### END SOLUTION

# %% [tests] latency_cost_budget points=3
check.latency_cost_budget(latency_cost_budget)

# %% [markdown]
# The scenario, and what the prefix cache is worth. The sweep keeps everything else fixed and
# moves the cached share of the prompt from none to nearly all of it:

# %%
scenario = check.production_scenario()
budget = latency_cost_budget(scenario)
for key, value in budget.items():
    print(f"{key:<19} {value:.4g}" if not isinstance(value, bool) else f"{key:<19} {value}")
shares = [i / 20 for i in range(20)]
sweep = [latency_cost_budget(dict(scenario, cached_tokens=int(share * scenario["prompt_tokens"]))) for share in shares]
fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3))
left.plot(shares, [b["ttft_s"] * 1e3 for b in sweep], "o-", ms=3)
left.axhline(scenario["ttft_slo_ms"], color="grey", linestyle="--", label="TTFT limit")
left.set_xlabel("share of the prompt cached")
left.set_ylabel("TTFT (ms)")
left.legend()
right.plot(shares, [b["usd_per_day"] for b in sweep], "o-", ms=3)
right.set_xlabel("share of the prompt cached")
right.set_ylabel("USD per day")
plt.show()
without = latency_cost_budget(dict(scenario, cached_tokens=0))
print(f"without the cache: TTFT {without['ttft_s'] * 1e3:.0f} ms, ${without['usd_per_day']:,.0f} a day, "
      f"meets the SLO: {without['meets_slo']}")
print(f"decode is {budget['decode_s_per_token'] * 1e3:.2f} ms per token, so the "
      f"{scenario['output_tokens'] - 1} decode steps take {(budget['latency_s'] - budget['ttft_s']):.2f} s "
      f"of the {budget['latency_s']:.2f} s")

# %% [markdown]
# Read the two levers apart. The cache moves TTFT and the input bill; it does nothing for the
# decode steps, which dominate the latency of a long reply. For those the levers are a shorter
# reply (an output cap, a terser format), fewer bytes per step (int8 or int4 weights, a
# smaller KV cache through GQA), or faster memory.
#
# ## When a request goes wrong: reading the trace
#
# The first request went through every stage and was answered. Here are four that fail, on
# purpose, each produced by running the real pipeline with one thing changed. Look at the
# trace fields, not at the reply text.
#
# 1. **A window too small for the evidence.** The budget is cut until the system prompt and
#    the question fit but no passage does. With no passage shown, the grammar allows only the
#    abstention.
# 2. **A cap too low.** `max_new_tokens=2`: two tokens, far fewer than a cited sentence needs.
# 3. **A hot, unguided sampler.** Temperature 5.0, top-p off, no grammar: nothing holds the
#    reply to the cited form, and a distribution that flat makes the draws close to noise.
# 4. **A value the model cannot copy.** *"What is the capital of Veltoria?"* The store
#    answers it (Marn), but every made-up capital tinychat learned to copy in training has
#    two syllables, so after "Mar" it goes on to a second syllable of its own. The grammar
#    keeps the reply in the cited form; grounding compares its sentence with the passage.

# %%
empty = pack(question, [])
tight = empty.prompt_tokens + RESERVE + MARGIN + 1  # room for the question, not for one passage
failing = {
    "small window": serve(question, window=tight, request_id="req-4"),
    "low cap": serve(question, params=SamplingParams(temperature=0.7, top_p=0.9, seed=0, max_new_tokens=2),
                     request_id="req-5"),
    "hot sampler": serve(question, params=SamplingParams(temperature=5.0, seed=0, max_new_tokens=RESERVE),
                         guided=False, request_id="req-6"),
    "short name": serve("What is the capital of Veltoria?", request_id="req-7"),
}
for label, rec in failing.items():
    log.append(rec)
    m = rec.metadata
    print(f"{label:<13} state={rec.final_state:<9} T={rec.decoding['temperature']:<4} "
          f"guided={rec.decoding['guided']!s:<5} "
          f"dropped={m['dropped']} finish={m['finish_reason']} validation={rec.validation}")
    print(f"{'':<13} reply: {m['reply'][:70]!r}")

# %% [markdown]
# ### Exercise 3 — diagnose a trace
#
# Write `diagnose_trace(record)`: `record` is a trace record as a plain dict
# (`TraceRecord.to_dict()`, the shape above). Return `{"stage": ..., "fix": ...}` with the
# stage from `STAGES` and the fix from `FIXES`. The fields that matter:
#
# - `record["metadata"]["tool_error"]`: `None`, or the dispatcher's error kind;
# - `record["metadata"]["dropped"]`: ids of passages the packer dropped (may be empty);
# - `record["metadata"]["finish_reason"]`: `"stop"` or `"length"`;
# - `record["decoding"]["temperature"]`;
# - `record["validation"]`: may hold `"format"`, `"cited_shown"` and `"claim_supported"`.
#   A check that did not apply is **absent**; only the value `False` is a failure;
# - `record["final_state"]`: one of `"answered"`, `"abstained"`, `"refused"`, `"error"`;
#   anything else raises `ValueError`, whatever the other fields hold (check it before any of
#   the rules below: a tool trace with a broken final state is a broken record, not a refusal).
#
# Apply these rules **in this order** and return at the first that matches:
#
# 1. `tool_error` is `"permission_denied"` → `tool`, `none` (the dispatcher refused as it
#    should; nothing to fix). Any other tool error → `tool`, `constrain_tool_call` (decode
#    the call under the tool's JSON schema, so the name and arguments always fit).
# 2. Passages were dropped and `final_state` is not `"answered"` → `packing`,
#    `shrink_context` (fewer or shorter passages, a smaller reserve, or a bigger budget).
# 3. `format` is `False` and the temperature is **above** 1.0 → `sampling`,
#    `lower_temperature`.
# 4. `finish_reason` is `"length"` → `decoding`, `raise_max_tokens`.
# 5. `format` is `False` → `decoding`, `constrain_output` (decode under the reply grammar).
# 6. `cited_shown` is `False` → `grounding`, `constrain_output` (a grammar built from the
#    shown ids makes any other citation impossible).
# 7. `claim_supported` is `False` → `grounding`, `block_unsupported` (do not show the answer;
#    abstain or retry).
# 8. Otherwise the request is healthy: `{"stage": "none", "fix": "none"}` (the strings, not
#    `None`). An abstention with nothing dropped is healthy: declining is a designed path.
#
# The checks run your function on many generated traces of every kind, healthy ones included,
# so it must follow the rules, not recognise the four above. Stuck? `hint("diagnose_trace")`.

# %%
print("STAGES:", ", ".join(STAGES))
print("FIXES: ", ", ".join(FIXES))

# %% [solution] diagnose_trace
def diagnose_trace(record):
    ### BEGIN SOLUTION
    if record.get("final_state") not in ("answered", "abstained", "refused", "error"):
        raise ValueError(f"final_state must be answered, abstained, refused or error, "
                         f"got {record.get('final_state')!r}")
    meta, checks = record["metadata"], record["validation"]
    if meta["tool_error"] is not None:
        return {"stage": "tool", "fix": "none" if meta["tool_error"] == "permission_denied" else "constrain_tool_call"}
    if meta["dropped"] and record["final_state"] != "answered":
        return {"stage": "packing", "fix": "shrink_context"}
    if checks.get("format") is False and record["decoding"]["temperature"] > 1.0:
        return {"stage": "sampling", "fix": "lower_temperature"}
    if meta["finish_reason"] == "length":
        return {"stage": "decoding", "fix": "raise_max_tokens"}
    if checks.get("format") is False:
        return {"stage": "decoding", "fix": "constrain_output"}
    if checks.get("cited_shown") is False:
        return {"stage": "grounding", "fix": "constrain_output"}
    if checks.get("claim_supported") is False:
        return {"stage": "grounding", "fix": "block_unsupported"}
    return {"stage": "none", "fix": "none"}
    ### END SOLUTION

# %% [tests] diagnose_trace points=3
check.diagnose_trace(diagnose_trace)

# %% [markdown]
# Your diagnosis of every request this notebook logged, read back from the log file itself
# (after checking that the chain is intact):

# %%
result = verify(folder / "trace.jsonl")
print(f"log verified: {result.ok}, {result.records} records")
for rec in log.records():
    diagnosis = diagnose_trace(rec.to_dict())
    print(f"{rec.request_id}: {rec.final_state:<9} -> stage {diagnosis['stage']:<9} fix {diagnosis['fix']}")

# %% [markdown]
# And the log's own guarantee once more: change one request's final state in the file, and
# `verify` names the line.

# %%
lines = (folder / "trace.jsonl").read_text().splitlines()
lines[1] = lines[1].replace('"final_state":"error"', '"final_state":"answered"', 1)
(folder / "edited.jsonl").write_text("\n".join(lines) + "\n")
print(verify(folder / "edited.jsonl"))

# %% [markdown]
# Its limit: cut the last lines off, and what is left is a shorter chain that is intact, so
# the lines alone cannot show it. The log's *head* (its record count and last hash, taken with
# `log.head()`) kept somewhere else can: `verify` given the head checks that the chain still
# reaches it.

# %%
head = log.head()  # in a product, stored away from the log (a second store, a signed digest)
kept = (folder / "trace.jsonl").read_text().splitlines()[:2]  # the first two lines, unedited
(folder / "cut.jsonl").write_text("\n".join(kept) + "\n")
print(f"without the head: {verify(folder / 'cut.jsonl')}")
print(f"with the head:    {verify(folder / 'cut.jsonl', head)}")

# %% [markdown]
# ## Written answers
#
# This notebook's interview questions, answered in writing: type each answer in the cell under
# its question, in your own words, before you read the cards in the next section. They are
# graded by hand, a share of the points for each point a strong answer makes; your feedback
# shows the rubric.

# %% [written] probes=09_capstone points=2

# %% [markdown]
# ## Interview probes
#
# The same questions as cards. Answer each aloud (or compare your written answer) before you
# read its points, then count the points you made. The cards come from the course's probe bank
# (`course_lib/drills/probes.toml`), the same cards the interview drills ask.

# %%
from course_lib.drills.cards import show_probes

show_probes("09_capstone")

# %% [markdown]
# ## The request, X-rayed
#
# Notebook 00 opened with this panel; it is the same one, on the same engine. It has already
# sent the capstone's question; compare what you see with the pipeline above. The panel sends
# the bare question, with no passages, no grammar and no grounding check, so nothing stands
# between the model's guess and the reply. Every stage it shows is now one you have built:
# the template and its tokens, prefill and decode, the sampling rules behind each token, the
# KV blocks taken and returned, and what ended the reply.

# %%
from course_lib.xray.panel import xray_panel

xray_panel(question, model=model, tokenizer=tokenizer)

# %% [markdown]
# ## The drills: every topic
#
# The panel below draws from the whole course: numeric problems on every topic (KV bytes for a
# random geometry, a softmax at a temperature, a nucleus size, TTFT and decode time, a context
# budget, a daily bill) with fresh numbers each time, and every probe card of notebooks 00 to
# 09. Answers are graded at once, and each card is scheduled for review by how well you did,
# so the cards you miss come back sooner. Nothing is saved until you press Start.
#
# The same drills run in a terminal, on the same history: `course drill` (add `--topic
# serving` for one topic, `--review` for the cards due, or `--mock 20m` for a timed mock
# interview; `course drill --help` lists the options).

# %%
from course_lib.drills.widget import drill_panel

drill_panel()

# %% [markdown]
# ## Recap
# - One request crosses seven stages around the model: retrieve, pack, tokenize and bill,
#   build the grammar, prefill and decode, ground, trace. Each is timed and recorded in the
#   request's trace.
# - Every guarantee a product gives is kept by ordinary code placed around the model, within
#   the conditions the guarantee states (a reply not cut at the cap, the same hardware and
#   batch shape, a head kept elsewhere, the forms the redaction patterns match), and can be
#   tested without the model. The model keeps none; and no component can promise that an
#   answer is true, only that each claim is tied to a source someone can audit.
# - A budget is arithmetic on tokens: TTFT = queue + uncached prompt / prefill rate; a decode
#   step is bounded by bytes read / bandwidth; cost is tokens at their prices. A prefix cache
#   helps TTFT and the input bill, not decode.
# - A trace is for diagnosis: tool errors, dropped passages, the temperature, the finish reason
#   and the validation results point at the stage that failed and at its fix.
#
# **Self-check:**
# 1. A user says the assistant "made up a citation". Which trace fields do you read first, and
#    which component would have made it impossible?
# 2. Why is a permission refusal in a trace not a bug to fix, and what would be the bug?
# 3. The prefix cache covers 90% of a 10,000-token prompt. What happens to TTFT, to the input
#    bill and to the decode time?
# 4. An 8B model in int8 instead of bf16, at the same bandwidth: roughly how does the time per
#    decode step change, and why not exactly by half?
# 5. The same prompt, parameters and seed gave two different replies in production. Name two
#    causes the seed cannot rule out.
