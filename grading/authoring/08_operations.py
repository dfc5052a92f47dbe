# %% [markdown]
# # 08 · Running the model in production
#
# Notebook 07 drew the product boundary: what goes into the window, what happens to the reply,
# which model to pay for. This notebook is about the days after launch. The model is deployed,
# traffic arrives, and the questions change: the eval dropped after a redeploy, is it the model?
# The large model timed out, what did the user get instead? Which slice of traffic is failing
# while the average looks fine? How do you ship a new version to one user in twenty and take
# it back in one step? Every answer here is computed on the course's three deployments:
# `tinychat`, its small sibling `tinychat-draft`, and `tinychat` with int8 weights (the
# "redeploy").
#
# **By the end of this notebook you can**
# - tell noise from drift: the spread of repeated sampled trials, and a paired comparison on
#   pinned greedy decoding with a confidence interval;
# - route tasks to the model that is cheapest per success, and write a fallback chain that
#   moves on only for outages and invalid replies; measure what an untested fallback costs;
# - aggregate a server's trace log into rates by slice, with alert thresholds and a minimum
#   count;
# - compare a candidate in shadow, assign a sticky canary by a hash of the user id, stop it
#   with a rule, and roll back in one assignment;
# - filter a token stream for a phrase split across tokens, and say what the hold-back costs;
# - put a material effect behind a confirmation bound to the user;
# - keep an agent's memory inside a budget, and measure whether a model's words or its
#   probabilities say more about whether it is right.
#
# **Prerequisites:** notebook 04 (seeds and greedy decoding), 05 (the tool dispatcher and its
# idempotency keys), 06 (the engine, int8 weights, `course serve`) and 07 (cost per successful
# task, the trace log, calibration). You should be comfortable with Python dicts, `hashlib` and
# `statistics`.
#
# **Time:** about 160 minutes (a first careful pass with all five exercises).
#
# **Grading:** the course's own implementations that the setup cell imports are there for the
# demos. While your notebook is graded they are switched off, and so are the visible checks
# and the libraries the tests compare against: each answer must be your own code.

# %% [setup]
import concurrent.futures
import hashlib
import json
import math
import random
import statistics
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt

from course_lib.api.child_server import child_server
from course_lib.context.cost import cost_table
from course_lib.context.grounding import reply_confidence
from course_lib.context.model_selection import measure_runs, priced
from course_lib.context.trace_log import verify
from course_lib.data.corpus import heldout_split
from course_lib.data.scoring import SCORERS
from course_lib.model import load_model, load_tokenizer, use_reference_threads
from course_lib.operations import memory, verbal
from course_lib.operations.approval import ApprovalGate
from course_lib.operations.drift import sampling_spread
from course_lib.operations.monitoring import events_from_trace
from course_lib.operations.replay import replay
from course_lib.operations.rollout import Rollout
from course_lib.operations.routing import engine_backend, mix_cost_per_success, route_by_task
from course_lib.sampling import SamplingParams
from course_lib.serving import Engine, quantize_int8
from course_lib.tools import Dispatcher, demo_book, refund_registry
from course_lib.tools.wire import ToolCall

use_reference_threads()  # two CPU threads, as on the course's reference machine (the grader sets one)

# %% [checks]
# The visible checks and their hints (grading runs without them: the answers must be your own).
from course_lib.checks import operations as check
from course_lib.checks.hints import Hints
hint = Hints(check.HINTS)  # hint("exercise_name") shows the next hint for that exercise

# %% [markdown]
# ## Three deployments and a fixed input set
#
# A deployment is more than weights: it is the weights, the tokenizer and template, the decoding
# parameters and the serving code, all at pinned versions. We have three: `tinychat` (fp32,
# the one in production), `tinychat` with int8 weights (the redeploy we are asked to ship) and
# `tinychat-draft` (a much smaller model). The fixed input set is 50 held-out
# conversations of each of the corpus's six tasks, scored by the corpus's own scorers.

# %%
model = load_model("tinychat")
tokenizer = load_tokenizer("tinychat")
draft = load_model("tinychat-draft")
int8 = quantize_int8(model)
conversations = heldout_split(50)
print(f"{len(conversations)} conversations:", ", ".join(f"{t} {sum(c.task == t for c in conversations)}"
                                                       for t in dict.fromkeys(c.task for c in conversations)))
sizes = {name: sum(p.numel() for p in m.parameters()) for name, m in (("tinychat", model), ("tinychat-draft", draft))}
print(f"parameters: tinychat {sizes['tinychat']:,}, tinychat-draft {sizes['tinychat-draft']:,} "
      f"({sizes['tinychat'] / sizes['tinychat-draft']:.1f}x fewer)")

# %% [markdown]
# ## Noise or drift
#
# A score is a random variable twice over. Sampling draws different tokens on every run, and the
# input set is one sample of the traffic. Before a score change means anything you need to know
# how far the score moves when *nothing* changed. Four runs of the production deployment,
# sampled at temperature 1 with different seeds, on the same 300 inputs:

# %%
trials = [replay(model, tokenizer, conversations, name=f"sampled, seed {s}", temperature=1.0, seed=1000 * s)
          for s in range(4)]
spread = sampling_spread([t.accuracy for t in trials])
for t in trials:
    print(f"{t.name}: {t.accuracy:.1%}")
print(f"spread: mean {spread['mean']:.1%}, stdev {spread['stdev']:.2%}, "
      f"range {spread['range'] * 100:.1f} points between the best and the worst run")

# %% [markdown]
# Runs of one unchanged deployment differ, by the range on the last line. So a difference of that
# size between one sampled run of a new version and one of the old says nothing yet. Two fixes
# remove most of that noise.
# **Pin the decoding**: greedy decoding has no draws, so a replay gives the same replies every
# time. **Pair the comparison**: run *both* deployments on the *same* inputs and compare input by
# input. An input that both get right or both get wrong says nothing about the change; only the
# inputs that flipped do. That is why a paired test can see a change far smaller than the spread
# of two independent runs.
#
# ### Exercise 1 — the paired comparison
#
# Write `paired_comparison(before, after, z=1.96)`. `before` and `after` are lists of bools, one
# per input, the same inputs in the same order (True: the reply was right).
#
# - The per-input difference is `d = int(after[i]) - int(before[i])` (-1, 0 or +1).
# - `delta` is the mean of the differences (equal to after's accuracy minus before's).
# - `se` is the **sample** standard deviation of the differences (dividing by n - 1,
#   `statistics.stdev`) divided by `sqrt(n)`.
# - `low = delta - z * se`, `high = delta + z * se`.
# - `verdict` is `"worse"` when `high < 0`, `"better"` when `low > 0`, else `"noise"` (the
#   interval contains 0, boundaries included).
# - `right_to_wrong` and `wrong_to_right` count the inputs with `d == -1` and `d == +1`.
# - Return the dict `{"delta", "se", "low", "high", "verdict", "right_to_wrong",
#   "wrong_to_right"}`.
# - Raise `ValueError` when the lists differ in length, have fewer than 2 inputs, hold anything
#   but bools, or when `z` is not a positive number.
#
# Stuck? `hint("paired_comparison")`.

# %% [solution] paired_comparison
def paired_comparison(before, after, z=1.96):
    ### BEGIN SOLUTION
    if len(before) != len(after):
        raise ValueError(f"before has {len(before)} scores and after {len(after)}: score the same inputs")
    if len(before) < 2:
        raise ValueError("a paired comparison needs at least 2 inputs")
    if not all(type(flag) is bool for flag in list(before) + list(after)):
        raise ValueError("every score must be a bool")
    if isinstance(z, bool) or not isinstance(z, (int, float)) or not z > 0:
        raise ValueError(f"z must be a positive number, got {z!r}")
    diffs = [int(a) - int(b) for b, a in zip(before, after)]
    delta = sum(diffs) / len(diffs)
    se = statistics.stdev(diffs) / math.sqrt(len(diffs))
    low, high = delta - z * se, delta + z * se
    verdict = "worse" if high < 0 else "better" if low > 0 else "noise"
    return {"delta": delta, "se": se, "low": low, "high": high, "verdict": verdict,
            "right_to_wrong": diffs.count(-1), "wrong_to_right": diffs.count(1)}
    ### END SOLUTION

# %% [tests] paired_comparison points=3
check.paired_comparison(paired_comparison)

# %% [markdown]
# First, the noise. The two sampled runs furthest apart, compared input by input:

# %%
best, worst = max(trials, key=lambda t: t.accuracy), min(trials, key=lambda t: t.accuracy)
noise = paired_comparison(list(best.correct), list(worst.correct))
print(f"{worst.name} vs {best.name}: {noise['delta'] * 100:+.1f} points, 95% interval "
      f"[{noise['low'] * 100:+.1f}, {noise['high'] * 100:+.1f}] -> {noise['verdict']} "
      f"({noise['right_to_wrong']} inputs flipped to wrong, {noise['wrong_to_right']} to right)")

# %% [markdown]
# The same deployment, a drop all the same, and an interval that contains zero: the flips go
# both ways, as random draws do. Now the redeploy. It ships the int8 weights *and* a
# configuration change someone thought harmless: the default reply cap went from 48 tokens to 34.
# Both replays are greedy, so each is exactly repeatable.

# %%
production = replay(model, tokenizer, conversations, name="fp32, cap 48")
redeploy = replay(int8, tokenizer, conversations, name="int8, cap 34", max_new_tokens=34)
drift = paired_comparison(list(production.correct), list(redeploy.correct))
print(f"production {production.accuracy:.1%}, redeploy {redeploy.accuracy:.1%}: {drift['delta'] * 100:+.1f} points, "
      f"95% interval [{drift['low'] * 100:+.1f}, {drift['high'] * 100:+.1f}] -> {drift['verdict']} "
      f"({drift['right_to_wrong']} flipped to wrong, {drift['wrong_to_right']} to right)")

# %% [markdown]
# This time the interval lies below zero: every flip went the same way. The drop is real. Is it
# the model? Change one thing at a time, and look at *how* the failures end:

# %%
weights_only = replay(int8, tokenizer, conversations, name="int8, cap 48")
alone = paired_comparison(list(production.correct), list(weights_only.correct))
cut = [i for i, (ok, new) in enumerate(zip(production.correct, redeploy.correct)) if ok and not new]
print(f"int8 weights alone: {alone['delta'] * 100:+.1f} points ({alone['verdict']}); "
      f"{sum(a != b for a, b in zip(production.replies, weights_only.replies))} of {len(conversations)} replies differ")
print(f"the {len(cut)} inputs the redeploy broke end with: "
      f"{sorted(set(redeploy.finish_reasons[i] for i in cut))}, tasks {sorted(set(redeploy.tasks[i] for i in cut))}")
fig, ax = plt.subplots(figsize=(7, 2.4))
ax.plot([t.accuracy * 100 for t in trials], [2] * len(trials), "o", color="grey", label="sampled runs, same deployment")
for y, run, colour in ((1, production, "tab:blue"), (1, weights_only, "tab:green"), (0, redeploy, "tab:red")):
    ax.plot(run.accuracy * 100, y, "D", color=colour, label=run.name)
ax.set_yticks([0, 1, 2], ["redeploy", "greedy", "sampled"])
ax.set_xlabel("accuracy on the 300 inputs (%)")
ax.legend(fontsize=7, loc="lower left")
plt.show()

# %% [markdown]
# The weights are not the cause: int8 alone leaves the score unchanged. Every broken input hit
# the reply cap (`length`): it is the configuration. That is the answer to "the eval dropped
# 2% after a redeploy, is it the model?": pin everything, replay the same inputs on both
# stacks, pair the comparison, then change one thing at a time and read the failures'
# finish reasons and tasks. A drop inside the noise of repeated runs is not a finding; a drop
# outside it still needs a cause.
#
# ## Route by task, with a fallback you have tested
#
# The small model does a fraction of the work per token. Is it good enough? Per task, not on
# average: notebook 07 priced each model per *successful* task from its measured throughput,
# and the router is that table read per task.

# %%
sample = [c for task in dict.fromkeys(c.task for c in conversations)
          for c in [c for c in conversations if c.task == task][:20]]
measured = measure_runs({"tinychat": model, "tinychat-draft": draft}, tokenizer, sample, max_new_tokens=48)
prices = priced(measured)
print(cost_table(measured.all_runs(), prices))
FAILURE_COST = 0.001  # dollars per failed task (a retry, a person's time, a user lost): an assumption, stated
route = route_by_task(measured.all_runs(), prices, failure_cost=FAILURE_COST)
print("route:", route)
for name, plan in (("everything to tinychat", {t: "tinychat" for t in route}),
                   ("everything to tinychat-draft", {t: "tinychat-draft" for t in route}), ("routed", route)):
    tokens = mix_cost_per_success(measured.all_runs(), prices, plan)
    total = mix_cost_per_success(measured.all_runs(), prices, plan, failure_cost=FAILURE_COST)
    print(f"{name:30s} per 1,000,000 successful tasks: tokens ${tokens * 1e6:.3f}, "
          f"with the failures ${total * 1e6:,.2f}")

# %% [markdown]
# On tokens alone (the table's `$/success`) the small model is the cheaper choice on every task
# it gets mostly right, even where it fails a few requests: each of its requests costs less, and
# a failed request's tokens cost almost nothing. A failure costs far more than its tokens: someone
# retries, escalates or leaves. With that cost on each failure, the router sends the small model
# only the tasks it gets as right as the large one, and grounded questions, which the small
# model mostly gets wrong, stay on `tinychat`. The routed mix pays a smaller token bill than
# the large model alone, costs about the same per success once failures are priced, and far less
# than the small model alone. Where tokens are dear (a large model on rented GPUs), that token
# saving is the point of routing; here, where tokens cost almost nothing, its value is capacity:
# the small model serves the tasks routed to it in less machine time. The routes hold only as long as
# the measurements do, so they are re-measured for every new model revision, and revisions are
# pinned.
#
# Then the day the large model is slow. A request that times out must go somewhere, and a reply
# that fails its check (an extraction that is not valid JSON) can be retried on another model.
# Anything else that goes wrong is a bug, and falling back would hide it.
#
# ### Exercise 2 — the fallback chain
#
# Write `serve_with_fallback(request, backends, validate)`. `backends` is a list of `(name,
# call)` pairs in order of preference; `call(request)` returns the reply text; `validate(reply)`
# returns True when the reply is acceptable.
#
# - Call the backends in order, each **at most once**, and stop at the first whose reply
#   `validate` accepts. The attempt's outcome is `"ok"`.
# - A call that raises `TimeoutError` or `ConnectionError` (including their subclasses) is an
#   outage: record `"unavailable"` and try the next backend.
# - A reply that `validate` rejects is `"invalid"`: try the next backend.
# - Any **other** exception from a call propagates unchanged (no further backend is called).
# - Return `{"reply": ..., "served_by": name, "attempts": [[name, outcome], ...],
#   "fell_back": bool}`: `attempts` lists every call made, in order; `fell_back` is True when
#   more than one backend was called. When every backend fails, `reply` and `served_by` are
#   None.
# - Raise `ValueError` for an empty list of backends or two backends with the same name, before
#   calling any.
#
# Stuck? `hint("serve_with_fallback")`.

# %% [solution] serve_with_fallback
def serve_with_fallback(request, backends, validate):
    ### BEGIN SOLUTION
    if not backends:
        raise ValueError("give at least one (name, call) backend")
    names = [name for name, _ in backends]
    if len(set(names)) != len(names):
        raise ValueError(f"backend names must be distinct: {names}")
    attempts = []
    for name, call in backends:
        try:
            reply = call(request)
        except (TimeoutError, ConnectionError):
            attempts.append([name, "unavailable"])
            continue
        if validate(reply):
            attempts.append([name, "ok"])
            return {"reply": reply, "served_by": name, "attempts": attempts, "fell_back": len(attempts) > 1}
        attempts.append([name, "invalid"])
    return {"reply": None, "served_by": None, "attempts": attempts, "fell_back": len(attempts) > 1}
    ### END SOLUTION

# %% [tests] serve_with_fallback points=3
check.serve_with_fallback(serve_with_fallback)

# %% [markdown]
# Now inject the failures. The large model times out on every third request; the fallback is
# first the small model (the route above keeps grounded questions off it, and nobody tested it as
# their fallback), then int8 `tinychat` (the redeploy, whose greedy replies we just compared with
# production's). The replies are scored afterwards; in production nothing would score them, so
# the only signal would be the attempts log.

# %%
class Flaky:
    """A backend that times out on every n-th call: an injected outage."""

    def __init__(self, call, every):
        self.call, self.every, self.calls = call, every, 0

    def __call__(self, request):
        self.calls += 1
        if self.calls % self.every == 0:
            raise TimeoutError("no reply within the deadline (injected)")
        return self.call(request)


grounded = [c for c in conversations if c.task == "grounded"][:30]
backends = {"tinychat": engine_backend(model, tokenizer), "tinychat-draft": engine_backend(draft, tokenizer),
            "tinychat-int8": engine_backend(int8, tokenizer)}
plans = {"no outage": ["tinychat"], "fallback never tested (draft)": ["tinychat", "tinychat-draft"],
         "fallback tested (int8)": ["tinychat", "tinychat-int8"]}
for label, names in plans.items():
    primary = Flaky(backends[names[0]], every=3 if len(names) > 1 else 10**9)
    chain = [(names[0], primary)] + [(name, backends[name]) for name in names[1:]]
    served = [serve_with_fallback(c.prompt_messages, chain, lambda reply: bool(reply.strip())) for c in grounded]
    right = [SCORERS["grounded"](s["reply"] or "", c.expected) for s, c in zip(served, grounded)]
    caught = [ok for s, ok in zip(served, right) if s["fell_back"]]
    print(f"{label:32s} {sum(right) / len(right):.0%} right; {len(caught)} fell back"
          + (f", {sum(caught)} of them right" if caught else "") + "; errors raised: 0")

# %% [markdown]
# Every request got a reply and no error was raised in any of the three runs, so a dashboard of
# errors would show all of them healthy. Only the untested fallback lost answers: the small model
# gets most grounded questions wrong (fewer than half of the requests that fell back to it were
# answered right), and nothing in the serving path knows that. A fallback is a
# deployment of its own; it needs the same replay and paired comparison as the primary, and its
# own slice on the dashboard (`served_by`), or its failures are silent.
#
# ## Monitoring by slice
#
# In production nothing scores the replies, so the signals are what the server can see:
# errors, replies cut by the length cap, replies that fail their schema, declines, and safety
# rule matches. Here is a real load through `course serve`: a separate process writing the
# redacted, hash-chained trace log of notebook 07, and the official `openai` client sending
# each request with its task as OpenAI `metadata` (the trace keeps it, so the log can be sliced).
# One client is misconfigured: it caps extraction replies at 16 tokens. And three requests paste
# a whole document into the prompt.

# %%
log_path = Path(tempfile.mkdtemp(prefix="ops-")) / "trace.jsonl"
refunds = [c for c in conversations if c.task == "extraction" and "order_id" in c.expected]
load = [c for task in ("arithmetic", "fact", "tool", "grounded")
        for c in [c for c in conversations if c.task == task][:20]]
load = load[:40] + refunds[:10] + load[40:]
CAPS = {"extraction": 16}  # the misconfigured client's reply cap for extractions; 48 for the rest
RECORD = {"type": "object", "required": ["order_id", "amount", "reason"],  # refund extractions, under the grammar
          "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}, "reason": {"type": "string"}}}


def send(client, convo, padding=""):
    extra = {"response_format": {"type": "json_schema", "json_schema": {"name": "record", "schema": RECORD}}} \
        if convo.task == "extraction" else {}
    messages = [dict(m) for m in convo.prompt_messages]
    messages[-1]["content"] += padding
    try:
        reply = client.chat.completions.create(model="tinychat", messages=messages, temperature=0,
                                               max_tokens=CAPS.get(convo.task, 48), metadata={"task": convo.task},
                                               extra_headers={"X-Course-Xray": "1"}, **extra)
        return {"task": convo.task, "request_id": reply.id, "reply": reply.choices[0].message.content or ""}
    except Exception as error:  # an HTTP error is an event the monitor must count, not a crash
        return {"task": convo.task, "request_id": None, "reply": None, "error": str(error)[:80]}


with child_server("--max-num-seqs", "8", "--trace-log", str(log_path)) as base_url:  # stopped at the end
    from openai import OpenAI

    client = OpenAI(base_url=base_url + "/v1", api_key="not-needed", max_retries=0)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        sent = list(pool.map(lambda c: send(client, c), load))
        # three grounded requests that paste a whole document: over the window, rejected
        sent += list(pool.map(lambda c: send(client, c, padding=" background" * 600), load[-3:]))
entries = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
events = events_from_trace(entries, sent)
print(f"{len(sent)} requests sent, {len(entries)} trace lines; the log verifies: {verify(log_path).ok}")
print("a rejected request:", next(o["error"] for o in sent if o["request_id"] is None))
print("one event:", events[0])

# %% [markdown]
# (A request's trace line is written when it ends, before its reply is sent, so the log is
# complete by the time the client has every reply.)
#
# ### Exercise 3 — rates by slice
#
# Write `slice_report(events, by, thresholds, min_count)`. Each event is a dict of slice fields
# (such as `"task"` or `"length"`) and flags (such as `"truncated": True`).
#
# - Group the events by the value of `event[by]`; return one row per group, sorted by
#   `str(value)`.
# - A row is `{"slice": value, "count": n, "rates": {name: rate}, "alerts": [names],
#   "enough": bool}`. For every name in `thresholds`, `rate` is the share of the group's events
#   whose flag `event[name]` is true.
# - `enough` is `count >= min_count`. `alerts` lists, in the order of `thresholds`, the names
#   whose rate is **strictly above** its threshold, but only when `enough` (a rate from fewer
#   than `min_count` requests never raises an alert; it is still reported).
# - Raise `ValueError` when `min_count` is not an int of at least 1, when a threshold is outside
#   [0, 1], or when an event lacks `by` or one of the threshold names.
#
# Stuck? `hint("slice_report")`.

# %% [solution] slice_report
def slice_report(events, by, thresholds, min_count):
    ### BEGIN SOLUTION
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
        raise ValueError(f"min_count must be an int >= 1, got {min_count!r}")
    for name, limit in thresholds.items():
        if not 0 <= limit <= 1:
            raise ValueError(f"threshold {name!r} is {limit}, not a rate in [0, 1]")
    groups = {}
    for event in events:
        for key in [by, *thresholds]:
            if key not in event:
                raise ValueError(f"an event has no {key!r}: {event}")
        groups.setdefault(event[by], []).append(event)
    rows = []
    for value in sorted(groups, key=str):
        group = groups[value]
        rates = {name: sum(1 for e in group if e[name]) / len(group) for name in thresholds}
        enough = len(group) >= min_count
        alerts = [name for name in thresholds if enough and rates[name] > thresholds[name]]
        rows.append({"slice": value, "count": len(group), "rates": rates, "alerts": alerts, "enough": enough})
    return rows
    ### END SOLUTION

# %% [tests] slice_report points=3
check.slice_report(slice_report)

# %% [markdown]
# The same events, sliced three ways. The thresholds are what a team would set for these rates
# (errors and safety events almost never, a few truncations and declines), and a slice needs 10
# requests before it can alert.

# %%
THRESHOLDS = {"error": 0.01, "truncated": 0.15, "invalid_schema": 0.15, "refusal": 0.35, "safety": 0.0}
overall = {name: sum(e[name] for e in events) / len(events) for name in THRESHOLDS}
print("all traffic: " + ", ".join(f"{name} {rate:.0%}" for name, rate in overall.items())
      + "  ALERT: " + ", ".join(name for name, rate in overall.items() if rate > THRESHOLDS[name]))
for by in ("task", "length", "model"):
    for row in slice_report(events, by, THRESHOLDS, min_count=10):
        shown = ", ".join(f"{name} {rate:.0%}" for name, rate in row["rates"].items() if rate)
        print(f"  {by}={row['slice']:<11} n={row['count']:<3} {shown or 'all rates 0'}"
              + (f"  ALERT: {', '.join(row['alerts'])}" if row["alerts"] else "")
              + ("" if row["enough"] else "  (too few to alert)"))

# %% [markdown]
# Over all traffic only the error rate crosses its threshold; truncation and invalid schemas
# stay under theirs, because the broken client sends a small share of the requests. By task, the
# extraction slice is broken on every request: each reply was cut at 16 tokens, so none of them
# is valid JSON. A team watching the average would not see it. The errors need the client's
# side: the three rejected requests never reached the engine, so they have no trace line, no
# model and no prompt length, and a monitor reading only the server's log would count none of
# them. Their "unknown" slices are below the minimum count, so they show a rate and raise no
# alert, while the grounded slice (where the client tagged them) has enough requests and does.
# The refusal alert on long prompts is not a fault. Long prompts here are mostly grounded
# questions, which carry their passages, and declining is the right reply to one whose passages
# hold no answer; so the slice where those questions collect can sit above a refusal threshold set
# once for all traffic. A refusal rate means something only against what that traffic should
# decline, which is why its threshold is set per task in practice.
#
# ## Shadow traffic, a sticky canary and an atomic rollback
#
# Suppose the redeploy's cap is fixed and int8 `tinychat` is ready to go out. **Shadow traffic**
# comes first: the candidate receives a copy of real requests, its replies are logged and never
# shown, and the two are compared offline. We already have that comparison for our 300 inputs:

# %%
agree = sum(a == b for a, b in zip(production.replies, weights_only.replies))
print(f"shadow: int8 replied word for word as production on {agree} of {len(conversations)} inputs; "
      f"accuracy {production.accuracy:.1%} vs {weights_only.accuracy:.1%}")

# %% [markdown]
# Shadow traffic shows what the candidate *would* say, not what users do with it: the
# follow-up questions, retries and complaints only come from a **canary**, a small share of
# real users served by the candidate. Two rules make a canary trustworthy. The share must be
# **sticky**: a user always lands in the same arm, so they see one model and their outcomes can
# be attributed. And it needs a **stop rule** decided in advance, with the sample size it needs.
#
# ### Exercise 4 — canary arms and the stop rule
#
# Write two functions.
#
# `canary_arm(user_id, salt, canary_percent)`:
# - the user's bucket is the first 8 bytes of `sha256(f"{salt}:{user_id}".encode())` read as a
#   big-endian unsigned integer, modulo 10,000;
# - return `"canary"` when `bucket < canary_percent * 100`, else `"stable"`;
# - raise `ValueError` when `canary_percent` is outside [0, 100].
#
# `canary_decision(stable, canary, tolerance, min_per_arm, z=1.96)`, each arm an `(errors,
# requests)` pair:
# - return `"wait"` while either arm has fewer than `min_per_arm` requests, or no requests;
# - otherwise, with `p_s` and `p_c` the arms' error rates and
#   `half = z * sqrt(p_s * (1 - p_s) / n_s + p_c * (1 - p_c) / n_c)` (arms of different sizes):
#   `"rollback"` when `p_c - p_s - half > 0` (the canary is worse beyond doubt); else
#   `"promote"` when `p_c - p_s + half <= tolerance` (it is no worse than the tolerance);
#   else `"wait"`;
# - raise `ValueError` when a count is negative or not an int, when an arm has more errors than
#   requests, or when `tolerance` is negative.
#
# Stuck? `hint("canary")`.

# %% [solution] canary
def canary_arm(user_id, salt, canary_percent):
    ### BEGIN SOLUTION
    if not 0 <= canary_percent <= 100:
        raise ValueError(f"canary_percent must be in [0, 100], got {canary_percent}")
    bucket = int.from_bytes(hashlib.sha256(f"{salt}:{user_id}".encode()).digest()[:8], "big") % 10_000
    return "canary" if bucket < canary_percent * 100 else "stable"
    ### END SOLUTION


def canary_decision(stable, canary, tolerance, min_per_arm, z=1.96):
    ### BEGIN SOLUTION
    for name, (errors, requests) in (("stable", stable), ("canary", canary)):
        for count in (errors, requests):
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ValueError(f"{name}: counts must be ints >= 0, got {(errors, requests)}")
        if errors > requests:
            raise ValueError(f"{name}: {errors} errors in {requests} requests")
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    (e_s, n_s), (e_c, n_c) = stable, canary
    if min(n_s, n_c) < max(min_per_arm, 1):
        return "wait"
    p_s, p_c = e_s / n_s, e_c / n_c
    half = z * math.sqrt(p_s * (1 - p_s) / n_s + p_c * (1 - p_c) / n_c)
    if p_c - p_s - half > 0:
        return "rollback"
    if p_c - p_s + half <= tolerance:
        return "promote"
    return "wait"
    ### END SOLUTION

# %% [tests] canary points=3
check.canary(canary_arm, canary_decision)

# %% [markdown]
# A 5% canary over 2,000 users: the share that lands in it, and whether anyone ever changes arm.

# %%
users = [f"user-{i}" for i in range(2000)]
arms = {u: canary_arm(u, "release-8", 5.0) for u in users}
print(f"{sum(a == 'canary' for a in arms.values()) / len(users):.1%} of users in the canary; "
      f"arms that changed when asked again: {sum(canary_arm(u, 'release-8', 5.0) != a for u, a in arms.items())}")
print(f"with a new salt, {sum(canary_arm(u, 'release-9', 5.0) == 'canary' for u in users)} users are in the canary, "
      f"{sum(canary_arm(u, 'release-9', 5.0) == 'canary' == arms[u] for u in users)} of them also in the old one")

# %% [markdown]
# Now let the stop rule watch traffic arrive, 19 stable requests for every canary request. Two
# candidates: int8 `tinychat` (an error is a wrong reply on our inputs) and the draft model
# shipped by mistake. The tolerance is 2 points of error rate, and no decision is taken before
# 100 requests per arm.

# %%
def watch(candidate, rounds=300, seed=0):
    """Feed the stop rule batches of simulated traffic drawn from the measured replays."""
    rng, stable_err, canary_err = random.Random(seed), [0, 0], [0, 0]
    for step in range(1, rounds + 1):
        for _ in range(190):
            stable_err[0] += not production.correct[rng.randrange(len(conversations))]
            stable_err[1] += 1
        for _ in range(10):
            canary_err[0] += not candidate.correct[rng.randrange(len(conversations))]
            canary_err[1] += 1
        decision = canary_decision(tuple(stable_err), tuple(canary_err), tolerance=0.02, min_per_arm=100)
        if decision != "wait":
            return decision, canary_err[1]
    return decision, canary_err[1]  # still "wait" after every round


draft_run = replay(draft, tokenizer, conversations, name="tinychat-draft")
for run in (weights_only, draft_run):
    decision, seen = watch(run)
    print(f"{run.name:16s} error rate {1 - run.accuracy:.1%} vs {1 - production.accuracy:.1%}: "
          f"{decision} after {seen} canary requests")

# %% [markdown]
# The draft is rolled back at the first decision point, because its errors are far above
# stable's. The int8 candidate, with the same error rate as production, is promoted once "no
# worse than 2 points" is shown: that needs enough canary requests for the interval's upper end
# to come under the tolerance (the printed count), never fewer than the minimum per arm. The
# canary arm is the slow one: every canary request arrives with 19 stable ones, so a decision
# that needs N canary requests waits for 20N requests of traffic. That is the cost of a small
# canary: it limits the harm and stretches the time to a decision. Worked out before launch, it
# is the sample size the rollout needs.
#
# The rollback itself must be one step. The deployments sit behind one pointer; a request takes
# its deployment when it is admitted and keeps it to the end. Two requests are in flight on the
# canary when it is rolled back:

# %%
engines = {"stable": Engine.for_job(model, tokenizer, rows=4), "canary": Engine.for_job(int8, tokenizer, rows=4)}
rollout = Rollout(stable="stable", canary="canary", canary_percent=50.0, salt="release-8")
canary_users = [u for u in users if rollout.arm_for(u) == "canary"][:2]
in_flight = {}
params = SamplingParams(temperature=0, max_new_tokens=24)
for u, convo in zip(canary_users, conversations):
    arm = rollout.deployment_for(u)
    in_flight[u] = (arm, engines[arm].add_request(convo.prompt_messages, params))
engines["canary"].step()  # both are past prefill
rollout.rollback()
print("after the rollback, new requests from those users go to:", [rollout.deployment_for(u) for u in canary_users])
finished = {}
while engines["canary"].has_unfinished():
    for out in engines["canary"].step():
        if out.finished:
            finished[out.request_id] = out.finish_reason
print("the in-flight requests finished on:", {u: (arm, finished[rid]) for u, (arm, rid) in in_flight.items()})

# %% [markdown]
# ## Filtering a stream
#
# A streamed reply is shown a token at a time, and an output filter (notebook 07's safety
# rules, a list of phrases that must never reach a user) has to decide before each token is
# shown. A phrase can arrive split over several tokens. Here is how `tinychat`'s tokenizer
# splits a sentence that contains a made-up internal codename:

# %%
BANNED = ["project nightjar"]
leaky = "Sure. Our roadmap is internal, but project Nightjar ships in May."
pieces = [tokenizer.decode([t]) for t in tokenizer.encode(leaky)]
print(pieces)
print("any single token contains a banned phrase:",
      any(phrase in p.lower() for p in pieces for phrase in BANNED))

# %% [markdown]
# No single token matches, so a per-token check passes it all. The filter has to look at the text
# so far, and it must **hold back** any tail that could still become a banned phrase: after
# `" project"` it cannot show `" project"` yet, because the next tokens might spell `" Nightjar"`
# (here they are `" N"`, `"ight"`, `"j"`, `"ar"`).
#
# ### Exercise 5 — a streaming filter
#
# Write `filter_stream(chunks, banned)`. `chunks` are the texts of the tokens in order; `banned`
# is a list of phrases. Matching is case-insensitive: compare `text.lower()` with
# `phrase.lower()` (the tests use text whose lowercase has the same length).
#
# - Keep the text so far `S`. After each chunk is added to `S`:
#   - if any banned phrase occurs anywhere in `S`, the stream is **blocked**: this chunk
#     releases `""` and no further chunk is read (the rest of the stream is dropped);
#   - otherwise, hold back the **longest tail** of `S` that is the beginning of some banned
#     phrase, and release every character before that tail not yet released (possibly `""`).
# - When the chunks run out and the stream is not blocked, release everything still held, as
#   one more entry.
# - Return `{"released": [one string per chunk read, then the final flush when not blocked],
#   "blocked": bool, "held_max": the most characters held back after any chunk}`.
# - Raise `ValueError` when `banned` is empty or holds an empty phrase.
#
# Stuck? `hint("filter_stream")`.

# %% [solution] filter_stream
def filter_stream(chunks, banned):
    ### BEGIN SOLUTION
    phrases = [p.lower() for p in banned]
    if not phrases or not all(phrases):
        raise ValueError("give at least one banned phrase, none empty")
    text, released, out, held_max = "", 0, [], 0
    for chunk in chunks:
        text += chunk
        lowered = text.lower()
        if any(p in lowered for p in phrases):
            out.append("")
            return {"released": out, "blocked": True, "held_max": held_max}
        cut = len(text)
        for start in range(released, len(text)):
            if any(p.startswith(lowered[start:]) for p in phrases):
                cut = start
                break
        out.append(text[released:cut])
        released = cut
        held_max = max(held_max, len(text) - released)
    out.append(text[released:])
    return {"released": out, "blocked": False, "held_max": held_max}
    ### END SOLUTION

# %% [tests] filter_stream points=3
check.filter_stream(filter_stream)

# %% [markdown]
# The leaky sentence through the filter, then a harmless one (`"projects"` starts like the
# phrase, so a little is held back and then let go), and what the filter costs per token
# against one decode step of `tinychat`:

# %%
for text in (leaky, "Both projects ship in May."):
    result = filter_stream([tokenizer.decode([t]) for t in tokenizer.encode(text)], BANNED)
    print(f"blocked={result['blocked']}, held back at most {result['held_max']} characters, "
          f"the user saw: {''.join(result['released'])!r}")
stream_pieces = [tokenizer.decode([t]) for t in tokenizer.encode("Both projects ship in May. " * 8)]
filter_stream(stream_pieces, BANNED)  # warm-up
rounds = []
for _ in range(5):
    t0 = time.perf_counter()
    filter_stream(stream_pieces, BANNED)
    rounds.append((time.perf_counter() - t0) / len(stream_pieces))
timed = Engine(model, tokenizer, max_num_seqs=1)
steps = []
timed.add_request([{"role": "user", "content": "What is 12 + 30?"}], SamplingParams(temperature=0, max_new_tokens=16),
                  eos_ids=())
while timed.has_unfinished():
    t0 = time.perf_counter()
    timed.step()
    steps.append(time.perf_counter() - t0)
print(f"filter: {statistics.median(rounds) * 1e6:.0f} µs per token (median of 5 rounds over "
      f"{len(stream_pieces)} tokens); one decode step: {statistics.median(steps[1:]) * 1e3:.2f} ms")

# %% [markdown]
# This exercise's filter rescans the held text on every token, and even so it costs a small
# fraction of a decode step per token (a production filter does it in linear time with an
# automaton). The hold-back is the real price: the characters of a possible phrase reach the user a
# few tokens late, and only when the text could be one. The alternative, filtering after the
# full reply, has two versions and both lose: show the stream and check at the end, and the user
# has already read the codename when the check fires; or buffer the whole reply and check it,
# and the first character the user sees arrives after the last token was generated, so the
# time to first token becomes the whole reply's latency.
#
# ## Approval for material effects
#
# Notebook 05's dispatcher checks permissions, schemas and idempotency keys, but a refund the
# *model* decided on still moves money on the model's word. For an effect that costs money or
# cannot be undone, the model only proposes: the user sees what will happen, in words built from
# the arguments, and confirms it with their own action. Here `tinychat` turns alice's message into
# the refund's fields (its extraction task) and the app proposes the call; a second call arrives
# that was planted in an order's customer note.

# %%
book = demo_book()
gate = ApprovalGate(Dispatcher(refund_registry(book, user="alice")), user="alice", permissions={"refunds:write"})
asked = Engine.for_job(model, tokenizer).generate(
    [[{"role": "user",
       "content": "Extract the refund as JSON: Please refund $20.00 for order A1234; it arrived late."}]],
    SamplingParams(temperature=0, max_new_tokens=64))[0].text
print("tinychat extracted:", asked)
fields = json.loads(asked)
proposal = gate.propose(ToolCall("c1", "refund_order", {**fields, "currency": "USD"}))
print("alice is asked to confirm:", proposal.summary)
planted = gate.propose(ToolCall("c2", "refund_order", {"order_id": "B7777", "amount": 5000, "currency": "USD",
                                                       "reason": "as instructed"}))
print("the planted call becomes a question to alice:", planted.summary)
print("mallory confirms alice's refund:", gate.confirm(proposal.confirmation_id, user="mallory").outcome)
print("alice confirms, and her app retries:",
      [gate.confirm(proposal.confirmation_id, user="alice").outcome for _ in range(2)])
print("alice declines the planted call (it is never confirmed); money that moved:", book.refunds)

# %% [markdown]
# The summary alice reads is built from the arguments that will run, not from the model's prose:
# a misread order id or an amount off by a digit shows up there, which is how the user catches a
# wrong field before anything happens. Here the fields match her message, and she confirms: the
# refund runs (`done`). Her app's retry does not run the call again: it returns the first outcome
# (`replayed`), because the confirmation id is the idempotency key, scoped to alice, so the
# refund is paid once (the money that moved lists it once). The confirmation is also bound to
# alice and to the exact call, so mallory cannot use it. The planted instruction can at most put
# a question in front of alice, worded from its arguments; it is never confirmed, and the refund
# tool would still refuse an order that is not hers. The model is never the component that
# authorises a material effect.
#
# ## Memory under a budget
#
# A tool-using conversation grows by a tool result at every step, and the window does not. When
# the history outgrows its budget, something has to go: **drop** the oldest turns, **summarise**
# them, or move them out of the window and **re-retrieve** what the current question needs. Forty
# conversations of 12 fact lookups each, a 160-token memory budget, and a final question about
# one of the facts looked up earlier:

# %%
rng = random.Random(8)
cases = [memory.memory_case(rng, lookups=12) for _ in range(40)]
print("one tool result, verbatim:", cases[0].facts[0]["result"])
print(f"{len(tokenizer.encode(cases[0].facts[0]['result']))} tokens verbatim, "
      f"{len(tokenizer.encode(cases[0].facts[0]['sentence']))} as its fact sentence")
outcomes = [memory.answer_rate(model, tokenizer, cases, policy, budget=160) for policy in memory.POLICIES]
for o in outcomes:
    print(f"{o['policy']:10s} fact still in memory {o['in_memory']:.0%}, answered right {o['answered']:.0%}, "
          f"answered although the fact was gone {o['made_up']:.0%}")
fig, ax = plt.subplots(figsize=(6, 2.4))
for offset, key, label in ((-0.25, "in_memory", "fact in memory"), (0, "answered", "answered right"),
                           (0.25, "made_up", "made up")):
    ax.bar([i + offset for i in range(len(outcomes))], [o[key] * 100 for o in outcomes], 0.25, label=label)
ax.set_xticks(range(len(outcomes)), [o["policy"] for o in outcomes])
ax.set_ylabel("% of conversations")
ax.legend(fontsize=7)
plt.show()

# %% [markdown]
# Dropping keeps only the newest two verbatim results, so most facts are gone, and in many of
# those conversations the model does the worst thing available: it answers anyway, inventing a
# value for an entity it has no passage about (the "made up" bar). Summarising into one sentence
# per lookup keeps more facts in the same budget, and when the fact is gone the model almost
# always declines instead of inventing. Re-retrieval keeps everything outside the window and
# brings back the few sentences that match the question, so the fact is in memory in every
# conversation here and the answer is mostly right. The lesson generalises: what you keep in the
# window should be chosen for the *current* question, and a policy is judged by what the model
# can still answer, measured.
#
# ## Verbal confidence
#
# Users read words like "I think" or "definitely" as a confidence. Do `tinychat`'s words carry
# any? Its greedy replies to 120 held-out grounded questions, sorted by their certainty words,
# beside the reply's probability (notebook 07's confidence):

# %%
scored = reply_confidence(model, tokenizer, [c for c in heldout_split(120, seed=99) if c.task == "grounded"])
texts, correct = [s.text for s in scored], [s.correct for s in scored]
for name, (count, accuracy) in verbal.by_certainty(texts, correct).items():
    print(f"{name:9s} {count:4d} replies" + (f", {accuracy:.0%} right" if accuracy is not None else ""))
plain = [s for s in scored if verbal.verbal_certainty(s.text) == "plain"]
print(f"among the plain answers, probability ranks right above wrong with AUROC "
      f"{verbal.auroc([s.confidence for s in plain], [s.correct for s in plain]):.2f} (0.5 = chance)")

# %% [markdown]
# `tinychat` has exactly two registers: a plain statement with a citation, or the decline. It
# never hedges and never insists, because nothing in its training data does, so among the answers
# its words say nothing about which are right. Its probability says a little more: it ranks right
# answers above wrong ones more often than chance would (an AUROC above 0.5). The plain answers
# are nearly all right, though, so that estimate rests on a handful of wrong replies; it takes
# more questions to pin down (notebook 07 turned the same probability into an abstention
# threshold).
# Large models do produce certainty phrases, and studies find them poorly calibrated and often
# overconfident; whether they carry information is a measurement on your own data, exactly like
# this one, and never an assumption.
#
# ## Interview probes
#
# Answer each question aloud before you read its points, then count the points you made. The
# cards come from the course's probe bank (`course_lib/drills/probes.toml`), the same cards the
# interview drills ask.

# %%
from course_lib.drills.cards import show_probes

show_probes("08_operations")

# %% [markdown]
# Practise them here: the panel asks this notebook's numeric problems and probe cards and
# schedules them in the same history as `course drill` in a terminal. Nothing is saved until
# you press Start.

# %%
from course_lib.drills.widget import notebook_panel

notebook_panel("08_operations")

# %% [markdown]
# ## Recap
# - A score moves between runs of an unchanged deployment. Pin decoding, replay the same inputs
#   on both stacks and pair the comparison: only the flipped inputs count, and the interval
#   says whether the change is real. Then change one thing at a time and read how the failures
#   end.
# - Route each task to the model that is cheapest per *success*, measured. Fall back only on
#   outages and invalid replies; a bug must surface. An untested fallback fails silently, so it
#   needs its own replay and its own slice.
# - Monitor rates by slice (errors, truncation, invalid schema, refusals, safety events) with a
#   threshold each and a minimum count; averages hide a broken slice.
# - Release through shadow traffic, then a sticky canary with a stop rule and its sample size;
#   roll back by moving one pointer while in-flight requests finish on their arm.
# - A streaming filter holds back any tail that could start a banned phrase; filtering after
#   the reply is either too late or makes the first token wait for the last.
# - A material effect runs only on the user's confirmation, bound to the user and the exact
#   call, with an idempotency key scoped to that user.
# - Keep in the window what the current question needs; re-retrieve rather than drop. Measure
#   whether words or probabilities carry confidence before anyone relies on either.
#
# **Self-check:**
# 1. A 300-input eval drops from 97.7% to 95.7% after a redeploy; 6 inputs flipped to wrong and
#    none to right. Is that outside the noise, and what do you look at next?
# 2. Why must a fallback chain let a `KeyError` from a backend propagate?
# 3. A slice of 4 requests has a 50% error rate. Should it page someone?
# 4. Why hash the user id with a salt instead of assigning arms at random per request?
# 5. Your streaming filter holds back at most 15 characters. What does that cost the user, and
#    when?
# 6. The model's tool call says "refund 5000 USD to B7777". Which component stops the money from
#    moving?
