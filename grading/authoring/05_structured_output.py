# %% [markdown]
# # 05 · Structured output and tool calling
#
# Most requests that reach a model in production are not chats with a person. A program sent
# them, and the program wants something it can act on: a JSON record that fits its schema,
# or a request to run one of its functions with arguments it can check. Prose that *looks*
# like JSON is not enough; one missing brace and the caller crashes. This notebook is about
# the code around the model that turns "usually right" into "always parses", and about the
# things that code still cannot promise.
#
# **By the end of this notebook you can**
# - say what constrained decoding guarantees (every output that ends on the end token parses
#   and fits the schema) and what it does not (that the values are true);
# - build a token mask from a small constraint, compile regexes and JSON Schemas into
#   automata, and explain why the automaton has to read bytes rather than characters;
# - put the mask in the right place in the sampler and write the constrained decode loop
#   that returns valid JSON from the course model whenever it ends on the end token;
# - measure validity with and without the mask, and what the mask costs per token;
# - write a capped retry loop that feeds the error back, and a tool dispatcher that checks
#   the allow-list, the arguments, the permission and an idempotency key before anything runs;
# - name the failure modes of structured output and tool calling, and the defence for each.
#
# **Prerequisites:** notebook 04 (the generate loop, `SamplingParams`, temperature and
# top-p, seeded generators) and notebook 01 (tokens are byte strings; UTF-8). You should be
# comfortable with Python dicts and bytes, PyTorch boolean masks, and what JSON looks like.
# No automata theory is assumed.
#
# **Time:** about 185 minutes (a first careful pass with all six exercises).
#
# **Grading:** the course's own implementations that the setup cell imports are there for the
# demos. While your notebook is graded they are switched off, and so are the visible checks
# and the libraries the tests compare against: each answer must be your own code.

# %% [setup]
import json
import time
from collections import Counter

import jsonschema
import matplotlib.pyplot as plt
import numpy as np
import pydantic
import torch

from course_lib.generation import generate, generate_many
from course_lib.model import load_model, load_tokenizer
from course_lib.sampling import (
    SamplingParams,
    apply_min_p,
    apply_temperature,
    apply_top_k,
    apply_top_p,
    sample_from_probs,
)
from course_lib.structured.dfa import compile_regex
from course_lib.structured.errors import UnsatisfiableSchema, UnsupportedPattern, UnsupportedSchema
from course_lib.structured.generate import generate_structured, generate_structured_many
from course_lib.structured.guide import JSONGuide, RegexGuide
from course_lib.structured.schema import schema_to_regex
from course_lib.structured.vocabulary import TokenVocabulary
from course_lib.tokenization import get_encoding
from course_lib.tokenization.chat_template import encode_chat
from course_lib.tools import (
    Dispatcher,
    RefundRequest,
    ToolCall,
    demo_book,
    parse_tinychat_tool_call,
    refund_registry,
    run_tool_loop,
    tinychat_registry,
)

MAX_ERROR_CHARS = 200  # how much of a validation error the retry loop feeds back to the model

# %% [checks]
# The visible checks and their hints (grading runs without them: the answers must be your own).
from course_lib.checks import structured as check
from course_lib.checks.hints import Hints
hint = Hints(check.HINTS)  # hint("exercise_name") shows the next hint for that exercise

# %% [markdown]
# ## What the application needs
#
# The course model, `tinychat`, was trained (among other things) to turn a booking written
# in prose into a JSON record. Here is the record our application expects, as a JSON Schema:

# %%
model = load_model("tinychat", device="cpu")
tokenizer = load_tokenizer("tinychat")

BOOKING_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 20},
        "party_size": {"type": "integer", "minimum": 1, "maximum": 12},
        "day": {"type": "string", "enum": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday",
                                           "Saturday", "Sunday"]},
        "time": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"},
    },
    "required": ["name", "party_size", "day", "time"],
    "additionalProperties": False,
}
booking = [{"role": "user", "content": "Extract the booking as JSON: table for 3 under Patel, Saturday 19:00 please."}]


def verdict(text, schema=BOOKING_SCHEMA):
    """'valid', or what went wrong first: the JSON itself, or the schema."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        return f"not JSON ({error.msg})"
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as error:
        return f"parses, breaks the schema: {error.message[:50]}"
    return "valid"


samples = generate_many(model, tokenizer, booking, SamplingParams(temperature=1.5, max_new_tokens=80), 8,
                        generator=torch.Generator().manual_seed(3))
for sample in samples:
    print(f"{verdict(sample.text):<58} {sample.text[:70]!r}")

# %% [markdown]
# At temperature 1.5 not every reply can be used, as the verdicts show: one stray token is
# enough to break the JSON. A reply that parses can still break the schema, and one can fit
# the schema perfectly and state the wrong booking; the count over many more draws below
# finds each kind.
# Lowering the temperature makes failures rarer, not impossible, and every model, however
# large, slips now and then. Saying "respond in JSON" in the prompt has the same limit. An
# application needs two guarantees it can build on:
#
# 1. **The output parses and fits the schema**, every time. Constrained decoding gives this
#    with two conditions attached, which the rest of the notebook shows: generation must end
#    on the end token (a reply cut off by `max_new_tokens` is unfinished, valid or not), and
#    the grammar the decoder follows is a *subset* of the schema (keys in one fixed order,
#    whitespace bounded), so everything it lets through fits the schema, but not every
#    record that fits the schema can come out.
# 2. **A tool call is checked by code before anything runs**: the tool exists, the arguments
#    fit its signature, the caller is allowed, and a retry cannot do the same thing twice.
#
# The first is the job of *constrained decoding*; the second of the *dispatcher*. Both are
# ordinary code around the model.
#
# ## The idea: let the grammar veto tokens
#
# A constraint (a list of options, a regex, a JSON Schema) defines a *language*: the set of
# strings it accepts. Call a piece of text a **live prefix** when some string of the language
# starts with it: `{"na` is a live prefix of the booking language, `{"na}` is not. The
# decoder keeps one invariant: *the text so far is a live prefix*. At every step it asks,
# for each token of the vocabulary, whether appending it keeps the invariant, and bans the
# tokens that do not. The end token is allowed only when the text so far is already a whole
# string of the language. If generation then stops on the end token, the output is in the
# language by construction: no parser needed to find out, no retry. If it stops because the
# token budget ran out, the text is only a live prefix, and nothing is guaranteed.
#
# Start with the smallest constraint: a choice between a few strings. Which tokens may come
# next after the model has written `n`, when the options are `yes`, `no`, `none` and
# `maybe`? By hand, for a few candidate tokens:

# %%
options = ["yes", "no", "none", "maybe"]
emitted = b"n"
print(f"emitted so far: {emitted!r}")
for piece in (b"o", b"one", b"on", b"ne", b"yes", b"o!"):
    prefix_of = [option for option in options if option.encode("utf-8").startswith(emitted + piece)]
    print(f"  token {piece!r:8} -> text {emitted + piece!r:10} live prefix of {prefix_of or 'nothing'}")

# %% [markdown]
# Two details make the rule exact. The comparison is on **bytes**, because that is what
# tokens are (notebook 01), and a token may end halfway through a character. And special
# tokens such as `<|end|>` spell no text at all, so "the empty string is a prefix" must never
# let them in; the end token gets its own rule.
#
# ### Exercise 1 — a mask for a choice of strings
#
# Write `enum_allowed_tokens(options, token_bytes, emitted, eos_id)`:
#
# - `options` is a list of `str`; `token_bytes[t]` is the byte string of token ID `t`, with
#   `b""` for special tokens; `emitted` is the bytes generated so far; `eos_id` is the end
#   token's ID.
# - Return the **sorted list** of token IDs `t` whose bytes are not `b""` and for which
#   `emitted + token_bytes[t]` is a prefix of (or equal to) some option's UTF-8 encoding.
# - Add `eos_id` when `emitted` equals some option's UTF-8 encoding exactly, and only then.
# - A special token (`b""`) is never allowed as text. Compare bytes, never decoded text: a
#   token that ends inside a character must still be allowed when its bytes fit.
# - When no option starts with `emitted`, the answer is the empty list.
#
# Stuck? `hint("enum_allowed_tokens")` shows a hint; run it again for the next one.

# %% [solution] enum_allowed_tokens
def enum_allowed_tokens(options, token_bytes, emitted, eos_id):
    ### BEGIN SOLUTION
    encoded = [option.encode("utf-8") for option in options]
    allowed = [token for token, piece in enumerate(token_bytes)
               if piece != b"" and any(target.startswith(emitted + piece) for target in encoded)]
    if emitted in encoded:
        allowed.append(eos_id)
    return sorted(allowed)
    ### END SOLUTION

# %% [tests] enum_allowed_tokens points=2
check.enum_allowed_tokens(enum_allowed_tokens)

# %% [markdown]
# The last visible checks ran your function over tinychat's whole vocabulary and compared
# it with the course's `RegexGuide` for the alternation `Monday|Tuesday|...|Sunday`. Here is
# what that mask looks like along one answer:

# %%
vocab = TokenVocabulary.of(tokenizer)
days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
for emitted in (b"", b"T", b"Thu", b"Thursday"):
    allowed = enum_allowed_tokens(days, list(vocab.token_bytes), emitted, vocab.eos_id)
    shown = [tokenizer.decode([t]) if t != vocab.eos_id else "<|end|>" for t in allowed]
    print(f"after {emitted!r:12} {len(allowed):3} of {vocab.size} tokens allowed: {shown[:12]}")

# %% [markdown]
# At the start only a handful of tokens are legal; after `Thursday` exactly one is, the end
# token. The sampler never gets to see any other.
#
# ## From a regex to an automaton
#
# Listing the options stops working as soon as the language is infinite: "any integer",
# "any string without a quote". We need a finite machine that reads text one symbol at a
# time and can say, after every symbol, whether the text is still a live prefix. That
# machine is a **deterministic finite automaton** (DFA): a set of states, a start state, a
# table "in state *s*, symbol *c* leads to state *s'*", and a set of accepting states. The
# course compiles a regex (a common subset: literals, classes, groups, `| ? * + {m,n}`) into
# the smallest such DFA, and prunes every state from which no accepting state can be
# reached, so "not dead" means exactly "some continuation matches". Here is JSON's integer
# syntax:

# %%
integer_dfa = compile_regex(r"-?(0|[1-9][0-9]*)")
print(integer_dfa)


def interval(lo, hi):
    return repr(chr(lo)) if lo == hi else f"[{chr(lo)}-{chr(hi)}]"


for state in range(integer_dfa.n_states):
    edges = ", ".join(f"{interval(lo, hi)} -> {target}" for lo, hi, target in integer_dfa.transitions(state))
    print(f"state {state}{' (accepting)' if integer_dfa.is_accepting(state) else '':13}: {edges or 'no way on'}")
for text in ("-12", "012", "-", "7"):
    print(f"{text!r:6} full match: {integer_dfa.fullmatch(text)}")
try:
    compile_regex(r"(a+)\1")  # a backreference: "the same text again" needs memory a DFA does not have
except UnsupportedPattern as error:
    print(f"outside the subset: {error}")

# %%
def draw_dfa(dfa, title):
    """States on a line, one arrow per edge, labelled with its character range."""
    fig, ax = plt.subplots(figsize=(8, 2.4))
    x = {state: 2.0 * state for state in range(dfa.n_states)}
    for state in range(dfa.n_states):
        ax.add_patch(plt.Circle((x[state], 0), 0.35, fill=False, lw=2 if dfa.is_accepting(state) else 1))
        if dfa.is_accepting(state):
            ax.add_patch(plt.Circle((x[state], 0), 0.28, fill=False))
        ax.text(x[state], 0, str(state), ha="center", va="center")
        for lo, hi, target in dfa.transitions(state):
            if target == state:  # a loop: its label above the state
                ax.annotate("", (x[state] + 0.15, 0.33), (x[state] - 0.15, 0.33),
                            arrowprops=dict(arrowstyle="->", connectionstyle="arc3,rad=-2.5"))
                ax.text(x[state], 0.95, interval(lo, hi), ha="center", fontsize=9)
                continue
            bend = 0.35 if target > state else -0.35
            ax.annotate("", (x[target] - 0.35 * np.sign(target - state), 0),
                        (x[state] + 0.35 * np.sign(target - state), 0),
                        arrowprops=dict(arrowstyle="->", connectionstyle=f"arc3,rad={-bend}"))
            ax.text((x[state] + x[target]) / 2, 0.28 + 0.3 * abs(target - state) * (1 if bend > 0 else -1),
                    interval(lo, hi), ha="center", fontsize=9, bbox=dict(fc="white", ec="none", pad=0.5))
    ax.annotate("start", (x[dfa.start] - 0.35, 0), (x[dfa.start] - 1.2, 0), arrowprops=dict(arrowstyle="->"),
                va="center")
    ax.set_xlim(-1.4, 2.0 * dfa.n_states - 1)
    ax.set_ylim(-1.2, 1.3)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title)
    plt.show()


draw_dfa(integer_dfa, "the DFA of -?(0|[1-9][0-9]*): double circles accept")

# %% [markdown]
# Read it as the decoder would: from state 0 the only live characters are `-` and the
# digits; after `0` the number is complete and nothing may follow (no leading zeros); after
# `1`-`9` any number of digits may follow. One table lookup per character answers "still a
# live prefix?". The last printed line is the approach's limit: a backreference means "the
# same text again", which takes unbounded memory, so no finite automaton exists and the
# compiler refuses the pattern rather than approximate it.
#
# ### Why the automaton must read bytes
#
# A model does not emit characters; it emits tokens, which are byte strings, and a byte-level
# tokenizer is free to cut a character in two. cl100k_base does it on ordinary Chinese text:

# %%
cl100k = get_encoding("cl100k_base")
for text in ("快速排序", "naïve café"):
    pieces = [cl100k.decode_single_token_bytes(t) for t in cl100k.encode(text)]
    print(f"{text!r}: {pieces}")
half = cl100k.decode_single_token_bytes(cl100k.encode("快速排序")[0])
try:
    half.decode("utf-8")
except UnicodeDecodeError as error:
    print(f"the first token, {half!r}, is not text on its own: {error.reason}")

# %% [markdown]
# `快` is three bytes, `e5 bf ab`, and the first token holds two of them. A character DFA has
# no way to step on "two thirds of a character". So the course converts the character DFA
# into an equivalent DFA over **UTF-8 bytes** (`.to_bytes()`): every character edge becomes
# a short chain of byte edges, and a state halfway through a character is an ordinary state.
# Its transition table is an array of shape `(states, 256)`, with `-1` for "dead":

# %%
char_dfa = compile_regex("café|€+")
byte_dfa = char_dfa.to_bytes()
print(f"character DFA: {char_dfa.n_states} states; byte DFA: {byte_dfa.n_states} states, "
      f"table {byte_dfa.table.shape} {byte_dfa.table.dtype}")
for data in (b"caf", "caf".encode() + "é".encode()[:1], "café".encode(), "€".encode()[:2], b"cafe"):
    state = byte_dfa.walk(byte_dfa.start, data)
    print(f"{data!r:24} -> state {state}{' (accepting)' if state is not None and byte_dfa.is_accepting(state) else ''}")

# %% [markdown]
# `b'caf\xc3'` (half an `é`) is a live prefix, `b'cafe'` is not. Walking a token through this
# table is the whole per-token question the mask asks.
#
# ### Exercise 2 — walk a token through the byte DFA
#
# Write `walk_token(table, state, token)`:
#
# - `table[s][b]` is the state after byte `b` (0-255) from state `s`, and `-1` means dead.
#   `table` is either a list of lists or a NumPy array of shape `(S, 256)`; index it the
#   same way for both.
# - Read the bytes of `token` in order and return the state after the last one (an
#   integer: a Python `int` or a NumPy integer).
# - Return `None` as soon as a byte leads to `-1`, without reading further (in Python
#   `table[-1]` is the *last row*, so going on from a dead state gives nonsense).
# - An empty token returns `state` unchanged. State 0 is the start state, an ordinary
#   state: never test a state's truth value.
#
# Stuck? `hint("walk_token")` shows a hint; run it again for the next one.

# %% [solution] walk_token
def walk_token(table, state, token):
    ### BEGIN SOLUTION
    for byte in token:
        state = int(table[state][byte])
        if state < 0:
            return None
    return state
    ### END SOLUTION

# %% [tests] walk_token points=2
check.walk_token(walk_token)

# %% [markdown]
# With `walk_token`, a mask is one walk per token: the tokens that survive from a state are
# the allowed ones (plus the end token in an accepting state). Build the booking schema's
# guide for tinychat, walk the greedy answer into its first string, and compute that state's mask
# by brute force over the whole vocabulary:

# %%
booking_guide = JSONGuide(BOOKING_SCHEMA, tokenizer)
greedy = generate_structured(model, tokenizer, booking, guide=booking_guide,
                             params=SamplingParams(temperature=0, max_new_tokens=80))
print(f"greedy: {greedy.text}")
table = booking_guide.dfa.table
middle = booking_guide.dfa.walk(booking_guide.initial_state, greedy.text[:len('{"name": "')].encode())


def brute_force_mask(state):
    allowed = [t for t, piece in enumerate(vocab.token_bytes) if piece and walk_token(table, state, piece) is not None]
    return sorted(allowed + ([vocab.eos_id] if state in booking_guide.dfa.accepting else []))


mine = brute_force_mask(middle)
print(f"state {middle} (after '{{\"name\": \"'): {len(mine)} tokens allowed; "
      f"same as the guide: {mine == booking_guide.allowed_tokens(middle)}")
banned = [t for t in (tokenizer.encode('"}')[0], tokenizer.encode("\n")[0]) if t not in mine]
print("some allowed:", [tokenizer.decode([t]) for t in mine[:5]], "... banned, e.g.:", [tokenizer.decode([t]) for t in banned])

# %% [markdown]
# The guide gets the same set without walking anything at decode time: when it is built, it
# walks the vocabulary's byte trie (shared prefixes walked once) through the DFA for every
# state, and stores one boolean row per state. That is the *index*. Decoding then looks up a
# row:

# %%
def median_seconds(fn, number, repeats=5):
    """Seconds per call of fn: one warm-up call, then the median of `repeats` timings of `number` calls
    (the median, so one slow run on a busy machine does not move it)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return float(np.median(times))


brute_seconds = median_seconds(lambda: brute_force_mask(middle), number=4)
lookup_seconds = median_seconds(lambda: booking_guide.mask(middle), number=200)
print(f"brute force over {vocab.size} tokens: {brute_seconds * 1e3:.2f} ms per step")
print(f"the guide's row lookup:          {lookup_seconds * 1e6:.1f} µs per step "
      f"({brute_seconds / lookup_seconds:.0f}x faster)")

# %% [markdown]
# ## From a JSON Schema to a regex
#
# A JSON Schema is a list of constraints, not a grammar, but the part that describes shape
# can be written as a regex: keys (emitted in the order the schema lists them), strings
# without raw quotes or control characters, integers in a range, enums. `schema_to_regex`
# compiles that part, and the guide compiles the regex into a byte DFA as above. A small
# schema, with no whitespace allowed, to keep it readable:

# %%
answer_schema = {"type": "object", "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 999}},
                 "required": ["answer"], "additionalProperties": False}
print(schema_to_regex(answer_schema, whitespace=""))
print("with the default whitespace (at most one space between tokens):")
print(schema_to_regex(answer_schema))
booking_grammar = compile_regex(schema_to_regex(BOOKING_SCHEMA))
record = {"name": "Patel", "party_size": 3, "day": "Saturday", "time": "19:00"}
for label, text in [("as the grammar writes it", json.dumps(record)),
                    ("keys in another order", json.dumps(dict(reversed(record.items())))),
                    ("two spaces after a colon", json.dumps(record).replace(": ", ":  ", 1)),
                    ("pretty-printed", json.dumps(record, indent=1))]:
    print(f"booking record, {label:<25} the schema: {verdict(text):<6} the grammar: "
          f"{'allows it' if booking_grammar.fullmatch(text) else 'never writes it'}")

# %% [markdown]
# The range `0..999` became an exact regex (`\d|[1-9]\d|[1-9]\d{2}`): integer ranges are
# regular, so nothing is approximated. The whitespace is bounded on purpose: with `\s*`
# allowed everywhere, a model that has lost the thread can emit spaces until it runs out of
# tokens, and the object never closes.
#
# The last four lines show the price: the grammar is a *subset* of the schema. Every record
# it lets through fits the schema, but the schema also accepts records the grammar never
# writes: keys in another order, more whitespace, a pretty-printed layout. For a decoder
# that is fine (one way to write each record is enough); just do not use the grammar as a
# validator for JSON that arrives from elsewhere.
#
# Not every keyword has a regex, and a compiler that silently dropped one would let the
# model emit output the schema rejects. The course's compiler refuses instead, and says where:

# %%
for name, schema in [
    ("allOf", {"type": "object", "properties": {"refund": {"allOf": [{"type": "number"}, {"minimum": 0}]}},
               "required": ["refund"]}),
    ("minLength > maxLength", {"type": "object", "properties": {"code": {"type": "string", "minLength": 3,
                                                                         "maxLength": 2}}, "required": ["code"]}),
]:
    try:
        schema_to_regex(schema)
    except (UnsupportedSchema, UnsatisfiableSchema) as error:
        print(f"{name}: {type(error).__name__} at {error.pointer}\n    {error}")

# %% [markdown]
# The first is *unsupported*: the compiler cannot honour `allOf` exactly, so it names the
# keyword and its JSON Pointer (`/properties/refund`) and stops. The second is
# *unsatisfiable*: no string has at least 3 and at most 2 characters, so no output could
# ever be valid, and that is almost certainly a bug in the schema. Both errors surface when
# the schema is registered, not in the middle of a request.
#
# Along a whole answer, the booking guide's mask opens and closes as the JSON goes: almost
# the whole vocabulary inside the free-text name, a handful of tokens at the keys and the
# punctuation (the different ways to spell the same next characters), nine or ten at a
# digit.

# %%
state, widths, labels = booking_guide.initial_state, [], []
for token in greedy.token_ids:
    widths.append(len(booking_guide.allowed_tokens(state)))
    labels.append("<|end|>" if token == booking_guide.eos_id else tokenizer.decode([token]))
    state = booking_guide.next_state(state, token)
fig, ax = plt.subplots(figsize=(11, 2.8))
ax.bar(range(len(widths)), widths)
ax.set_xticks(range(len(widths)), labels, rotation=90, fontsize=8)
ax.set_yscale("log")
ax.set_ylabel("allowed tokens")
ax.set_title(f"booking schema on tinychat: allowed tokens before each token of the greedy answer (of {vocab.size})")
fig.tight_layout()
plt.show()
print(f"{sum(w <= 3 for w in widths)} of {len(widths)} steps had at most 3 legal tokens, "
      f"{sum(w == 1 for w in widths)} exactly one; the widest step allowed {max(widths)}")

# %% [markdown]
# Where the grammar leaves one way to go, the model is not really choosing: the grammar
# writes the text. Some engines (SGLang's jump-forward decoding, llguidance's fast-forward
# tokens) append such forced text without a forward pass per token; the course engine keeps
# to one token per step.
#
# ## Where the mask goes in the sampler
#
# The mask is one more logits processor: every banned token's logit becomes `-inf`. The
# question is *when*. Notebook 04's pipeline was penalties, temperature, top-k, top-p,
# min-p. The mask goes **after the penalties and before temperature and the filters**.
# Temperature does not care (`-inf / T` is still `-inf`), but the filters do: they rank
# tokens by probability over whatever vocabulary they are given. Run over the full
# vocabulary, top-p may keep only tokens the grammar bans, and the mask then leaves nothing;
# or it sizes the nucleus using probability mass the grammar is about to throw away. Here is
# the first answer token for "What is 2 + 3?" under the `{"answer": integer}` schema:

# %%
answer_guide = JSONGuide(answer_schema, tokenizer)
question = [{"role": "user", "content": "What is 2 + 3?"}]
with torch.inference_mode():
    first_logits = model(torch.tensor([encode_chat(tokenizer, question)]))[0, -1].float()  # (V,)
legal = answer_guide.mask(answer_guide.initial_state)
probs = torch.softmax(first_logits, -1)
top = probs.topk(3)
print("the model's favourites:", [(tokenizer.decode([i]), round(p, 3)) for i, p in zip(top.indices.tolist(), top.values.tolist())])
print(f"legal tokens: {[tokenizer.decode([t]) for t in legal.nonzero().flatten().tolist()]}, "
      f"holding {probs[legal].sum().item():.2e} of the probability")
nucleus = torch.isfinite(apply_top_p(first_logits, 0.9))
print(f"top-p 0.9 first, mask second: {int((nucleus & legal).sum())} tokens left")
masked_first = torch.isfinite(apply_top_p(first_logits.masked_fill(~legal, float('-inf')), 0.9))
print(f"mask first, top-p 0.9 second: {int(masked_first.sum())} token(s) left")

# %% [markdown]
# The model wants to start its usual sentence, and the grammar wants `{`. Filter first, and
# the sampler has nothing to draw from; mask first, and the filters work on the legal tokens
# as if they were the whole vocabulary. (That the grammar here overrules the model this
# strongly is itself a warning, which we come back to below.)
#
# ### Exercise 3 — one constrained sampling step
#
# Write `constrained_sample(logits, allowed, params, generator)` for one position's logits
# (shape `(V,)`), a boolean tensor `allowed` of the same shape, a `SamplingParams` and a
# `torch.Generator`. Return the sampled token ID as a Python `int`:
#
# 1. If no token is allowed, raise `ValueError`.
# 2. Ban first: every token whose `allowed` entry is `False` gets logit `-inf` (not 0: a
#    logit of 0 is an ordinary, often likely, token).
# 3. Greedy: if `params.temperature == 0`, return the index of the largest masked logit
#    (`argmax`), drawing nothing from the generator.
# 4. Otherwise apply temperature, top-k, top-p and min-p in that order, with `params`'
#    values (the reference filters `apply_temperature`, `apply_top_k`, `apply_top_p`,
#    `apply_min_p` are imported, or use your own from notebook 04). Penalties are not part
#    of this exercise.
# 5. Take the softmax and draw exactly one token by inverse CDF, as in notebook 04: one
#    float64 uniform `u` from `generator`, the first index whose cumulative sum exceeds `u`
#    times the total. (`sample_from_probs(probs, generator)` does exactly this.) The course's
#    sampler takes the softmax in float64, and so should you; a float32 softmax gives the same
#    draws except when a uniform lands within rounding error of a boundary, and the tests
#    leave such draws out, so they cannot tell the two apart.
# 6. Return a Python `int` on both paths, greedy and sampled, never a tensor.
#
# Stuck? `hint("constrained_sample")` shows a hint; run it again for the next one.

# %% [solution] constrained_sample
def constrained_sample(logits, allowed, params, generator):
    ### BEGIN SOLUTION
    if not bool(allowed.any()):
        raise ValueError("no token is allowed in this state: the grammar has nowhere to go")
    z = logits.masked_fill(~allowed, float("-inf"))  # the grammar first: filters see legal tokens only
    if params.temperature == 0:
        return int(z.argmax())
    z = apply_temperature(z, params.temperature)
    z = apply_top_k(z, params.top_k)
    z = apply_top_p(z, params.top_p)
    z = apply_min_p(z, params.min_p)
    probs = torch.softmax(z.double(), dim=-1)  # (V,)
    return int(sample_from_probs(probs, generator))
    ### END SOLUTION

# %% [tests] constrained_sample points=3
check.constrained_sample(constrained_sample)

# %% [markdown]
# ### Exercise 4 — the constrained decode loop
#
# Write `constrained_decode(model, tokenizer, messages, guide, params, generator)`. It is
# notebook 04's generate loop with the guide inside:
#
# 1. Start from the prompt's token IDs, `encode_chat(tokenizer, messages)` (call the list
#    `ids`), in the guide's `initial_state`.
# 2. At most `params.max_new_tokens` times: take the logits of the last position
#    (`model(torch.tensor([ids]))[0, -1]`, under `torch.no_grad()`), pick a token with your
#    `constrained_sample(logits, guide.mask(state), params, generator)`, and append it to
#    `ids` and to the list of new token IDs.
# 3. If the token is `guide.eos_id`, stop with finish reason `"stop"`: the text is the
#    decoded new tokens *before* the end token, and the value is `json.loads(text)`.
#    Otherwise move on to the state `guide.next_state(state, token)` returns.
# 4. If the budget runs out first, the finish reason is `"length"`, the text is everything
#    decoded, and the value is `None`: half an object is never handed back as a value. That
#    holds even when the text so far happens to be a complete object: only the end token
#    says the reply is finished, so never parse the text of a cut reply.
# 5. Use the `generator` you were given for every draw (never re-seed it); it may be `None`
#    when `params.temperature == 0`.
#
# Return a dict with exactly the keys `"text"`, `"value"`, `"token_ids"` (the new token
# IDs, the end token included when there is one) and `"finish_reason"`.
#
# Stuck? `hint("constrained_decode")` shows a hint; run it again for the next one.

# %% [solution] constrained_decode
def constrained_decode(model, tokenizer, messages, guide, params, generator=None):
    ### BEGIN SOLUTION
    ids = encode_chat(tokenizer, messages)
    state, new = guide.initial_state, []
    for _ in range(params.max_new_tokens):
        with torch.no_grad():
            logits = model(torch.tensor([ids]))[0, -1].float()  # (V,)
        token = constrained_sample(logits, guide.mask(state), params, generator)
        ids.append(token)
        new.append(token)
        if token == guide.eos_id:
            text = tokenizer.decode(new[:-1])
            return {"text": text, "value": json.loads(text), "token_ids": new, "finish_reason": "stop"}
        state = guide.next_state(state, token)
    return {"text": tokenizer.decode(new), "value": None, "token_ids": new, "finish_reason": "length"}
    ### END SOLUTION

# %% [tests] constrained_decode points=3
check.constrained_decode(constrained_decode)

# %% [markdown]
# Your loop, on the prompt whose free samples broke at the top of the notebook, at the same
# temperature:

# %%
for seed in range(3):
    out = constrained_decode(model, tokenizer, booking, booking_guide, SamplingParams(temperature=1.5, max_new_tokens=80),
                             torch.Generator().manual_seed(seed))
    print(f"seed {seed}: {out['finish_reason']}, {verdict(out['text']):6} {out['text']}")

# %% [markdown]
# ## Measured: validity with and without the mask
#
# Many seeded samples of the booking prompt at temperature 1.5, decoded as one batch, once
# freely and once through the guide. For each we ask three questions: does it parse, does it
# fit the schema, and are the values the ones the prompt states?

# %%
truth = {"name": "Patel", "party_size": 3, "day": "Saturday", "time": "19:00"}
n_samples = 200
hot = SamplingParams(temperature=1.5, max_new_tokens=80)
free = generate_many(model, tokenizer, booking, hot, n_samples, generator=torch.Generator().manual_seed(1))
masked = generate_structured_many(model, tokenizer, booking, n_samples, guide=booking_guide, params=hot,
                                  generator=torch.Generator().manual_seed(1))


def tally(texts):
    parses = fits = right = 0
    for text in texts:
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            continue
        parses += 1
        if verdict(text) == "valid":
            fits += 1
            right += value == truth
    return {"parses": parses, "fits the schema": fits, "values correct": right}


counts = {"no mask": tally(r.text for r in free), "with the mask": tally(r.text for r in masked)}
for name, row in counts.items():
    print(f"{name:>14}: " + ", ".join(f"{k} {v}/{n_samples}" for k, v in row.items())
          + f"; valid but wrong: {row['fits the schema'] - row['values correct']}")
print(f"masked samples cut short by max_new_tokens: {sum(r.finish_reason == 'length' for r in masked)}")
valid_wrong = [r.value for r in masked if r.ok and r.value != truth]
only_name = sum(all(v[k] == truth[k] for k in truth if k != "name") for v in valid_wrong)
print(f"masked, valid and wrong: {len(valid_wrong)}, of which {only_name} differ only in the name; most common names:",
      Counter(v["name"] for v in valid_wrong).most_common(4))
flagged = sum(v["name"] not in booking[0]["content"] for v in valid_wrong)
print(f"a semantic check, 'the name occurs in the request', flags {flagged} of those {len(valid_wrong)}")

# %%
fig, ax = plt.subplots(figsize=(7, 3))
keys = list(counts["no mask"])
for offset, (name, row) in zip((-0.2, 0.2), counts.items()):
    ax.bar(np.arange(len(keys)) + offset, [row[k] for k in keys], width=0.4, label=name)
ax.set_xticks(range(len(keys)), keys)
ax.set_ylabel(f"of {n_samples} samples (T = 1.5)")
ax.set_title("tinychat, booking extraction: what the mask guarantees, and what it does not")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# With the mask every sample parses and fits the schema (and none ran out of
# `max_new_tokens`, the one way a masked sample could still be cut short); without the mask a
# share does not. The
# mask also helps the content: a reply that stays inside the grammar keeps looking like the
# training data, so fewer of them derail, and most of the records it added are correct. But
# compare the second and third pairs of bars: the gap between them is the masked records
# that are valid and wrong, most often a wrong name (a mangled "Patel", or letters that are
# no name at all) with everything else right; a "Patel" among the most common names is a
# record that is wrong in another field. The mask repaired the syntax of replies
# whose content had already gone astray, and from the outside those look exactly like good
# ones. No schema can tell them apart; a check on meaning can catch some, as the last line
# shows: the application knows the request, so it can demand that the extracted name occur
# in it. A wrong day or party size needs a check of its own.
#
# ## Syntax, not semantics
#
# That gap is the central limit of constrained decoding. The grammar knows what a booking
# *looks like*; it has no idea what this booking *says*. It is starkest when the schema
# forces a format the model was never trained to produce. tinychat answers arithmetic in a
# sentence, in digits or in words; force `{"answer": <integer>}` on it, greedily:

# %%
for q in ("What is 2 + 3?", "What is 7 * 8?", "What is 4 + 4?", "What is 17 + 25?"):
    messages = [{"role": "user", "content": q}]
    forced = generate_structured(model, tokenizer, messages, guide=answer_guide,
                                 params=SamplingParams(temperature=0, max_new_tokens=24))
    plain = generate(model, tokenizer, messages, SamplingParams(temperature=0, max_new_tokens=24))
    print(f"{q:<18} schema-forced: {forced.text:<18} valid={verdict(forced.text, answer_schema) == 'valid'}"
          f"   free: {plain.text!r}")

# %% [markdown]
# Every forced answer is a valid `{"answer": integer}` and most are absurd: the model wanted
# to start a sentence, the grammar banned every token it liked, and the digits that followed
# were whatever scraped through. The free answers come in forms the model was trained to
# write, and they are not all right either: a tiny model's arithmetic is memorised, and
# 17 + 25 goes past the operands (up to 20) it saw in training. Either way, a schema-valid
# integer is not a correct integer. Two practical lessons:
#
# - Ask for a format the model knows. A constraint that fights the model's distribution
#   (look at how little probability the legal tokens had above) buys syntax at the price of
#   meaning. Put the schema and an example in the prompt too, so the mask rarely has to bite.
# - Check values in code: ranges, enums, cross-field invariants (a total equals the sum of
#   its lines), and anything the application can recompute or look up. That is *semantic
#   validation*, and it runs on the server, after decoding, whatever decoding did.
#
# ## What the mask costs
#
# Two costs: building the index (once per schema and tokenizer, then cached), and one row
# lookup per generated token. On tinychat's small vocabulary, and on cl100k_base's large one
# (a small regex there, to keep this notebook fast; `benchmarks/` has a 10-field schema):

# %%
def cost(name, build, n_lookups=400):
    start = time.perf_counter()
    guide = build()
    built = time.perf_counter() - start  # one build: it is a one-off cost
    states = np.random.default_rng(0).integers(0, guide.n_states, n_lookups).tolist()
    lookup = median_seconds(lambda: [guide.mask(s) for s in states], number=1) / n_lookups
    print(f"{name:<44} {guide.n_states:4} states x {guide.vocab_size:6} tokens: "
          f"index {built * 1e3:7.1f} ms, lookup {lookup * 1e6:5.1f} µs per token")
    return lookup


prompt_ids = torch.tensor([encode_chat(tokenizer, booking)])
with torch.inference_mode():
    step_seconds = median_seconds(lambda: model(prompt_ids), number=3)
print(f"one step of your decode loop (tinychat's forward pass over the booking prompt): {step_seconds * 1e3:.1f} ms")


lookups = [cost("tinychat, booking schema", lambda: JSONGuide(BOOKING_SCHEMA, tokenizer))]
start = time.perf_counter()
cl100k_vocab = TokenVocabulary.of(cl100k)
print(f"cl100k_base byte trie (once per tokenizer): {time.perf_counter() - start:.2f} s, "
      f"{cl100k_vocab.n_nodes} nodes")
lookups.append(cost("cl100k_base, '{\"answer\": <0..999>}' regex",
                    lambda: RegexGuide(schema_to_regex(answer_schema), cl100k_vocab)))
print(f"the slower lookup is {step_seconds / max(lookups):.0f}x shorter than the decode step")

# %% [markdown]
# A lookup costs microseconds, a small fraction of a decode step of even this tiny model (the
# last line prints the ratio). The one-off costs are the ones that grow: the byte trie, once
# per tokenizer, and the index, once per schema, whose size is states x vocabulary. A real
# schema has many more states than this small regex, and a first request that must wait for
# its index pays for it in latency.
# Production engines (Outlines, XGrammar, llguidance) spend their cleverness there:
# compiling ahead and caching per schema, computing masks lazily, or checking only the token
# the sampler is about to pick and falling back to the full mask when it is rejected. Two more
# consequences worth knowing: the engine must hold the mask in sync with every row of a
# batch (one state per row), and a speculative or parallel decoder must roll the state back
# with the tokens it rejects.
#
# ## When you cannot constrain: validate, feed the error back, and stop in time
#
# A hosted API may not accept your schema (most support a subset), and a prompt-only model
# gives no mask at all. The fallback is to parse and validate the reply, and on failure ask
# again *with the error*, so the next attempt knows what to fix. Two rules make it safe:
# the loop is **capped** (a model that cannot produce the format will not learn to in ten
# tries, and each try is a full, billed generation), and the error fed back is **bounded**
# (a validator that echoes a 10 kB input must not flood the context).
#
# ### Exercise 5 — a capped retry loop
#
# Write `retry_until_valid(propose, validate, messages, max_retries=2)`:
#
# - `propose(conversation)` returns the model's reply text; `validate(text)` returns a value
#   or raises `ValueError` (`json.JSONDecodeError` is one) for a rejected reply.
# - Copy `messages` first and never modify the caller's list.
# - Make at most `max_retries + 1` attempts. Each attempt calls `propose` with the
#   conversation so far, then `validate` on the reply; if it returns, return
#   `(value, attempts)`, where `attempts` counts the calls to `propose` so far.
# - On a `ValueError`, append `{"role": "assistant", "content": text}` and then
#   `{"role": "user", "content": "Your reply was rejected: " + str(error)[:MAX_ERROR_CHARS]}`
#   to the conversation, and try again.
# - Any other exception propagates: it is a bug in the validator, not a bad reply.
# - If every attempt fails, return `(None, max_retries + 1)`. A negative `max_retries`
#   raises `ValueError`.
#
# Stuck? `hint("retry_until_valid")` shows a hint; run it again for the next one.

# %% [solution] retry_until_valid
def retry_until_valid(propose, validate, messages, max_retries=2):
    ### BEGIN SOLUTION
    if max_retries < 0:
        raise ValueError(f"max_retries must be >= 0, got {max_retries}")
    conversation = [dict(message) for message in messages]
    for attempt in range(1, max_retries + 2):  # a for loop: the cap holds whatever the model does
        text = propose([dict(message) for message in conversation])
        try:
            return validate(text), attempt
        except ValueError as error:
            conversation.append({"role": "assistant", "content": text})
            conversation.append({"role": "user", "content": "Your reply was rejected: " + str(error)[:MAX_ERROR_CHARS]})
    return None, max_retries + 1
    ### END SOLUTION

# %% [tests] retry_until_valid points=2
check.retry_until_valid(retry_until_valid)

# %% [markdown]
# Now with tinychat at temperature 1.5 as the proposer and the booking schema as the
# validator, over 30 requests, two ways: a proposer that reads the whole conversation,
# rejected replies and error messages included (what your loop sends), and one that ignores
# all that and simply samples the original request again.

# %%
def booking_validator(text):
    value = json.loads(text)
    try:
        jsonschema.validate(value, BOOKING_SCHEMA)
    except jsonschema.ValidationError as error:  # a schema violation is a rejected reply too
        raise ValueError(f"schema violation at {error.json_path}: {error.message}") from None
    return value


def tinychat_proposer(generator, spent, fresh):
    def propose(conversation):
        reply = generate(model, tokenizer, booking if fresh else conversation,
                         SamplingParams(temperature=1.5, max_new_tokens=80), generator=generator)
        spent.append(len(reply.token_ids))
        return reply.text
    return propose


for fresh in (False, True):
    generator, spent = torch.Generator().manual_seed(3), []
    outcomes = [retry_until_valid(tinychat_proposer(generator, spent, fresh), booking_validator, booking)
                for _ in range(30)]
    needed = [n if value is not None else "gave up" for value, n in outcomes]
    name = "fresh sample of the request" if fresh else "reads the error feedback"
    print(f"{name:<28}: attempts {({k: needed.count(k) for k in (1, 2, 3, 'gave up')})}, "
          f"{len(spent)} generations, {sum(spent)} tokens")
conversation = booking + [{"role": "assistant", "content": '{"name": "Patel", "party_size": 3'},
                          {"role": "user", "content": "Your reply was rejected: Expecting ',' delimiter"}]
print("what tinychat says after a rejection:",
      [generate(model, tokenizer, conversation, SamplingParams(temperature=1.5, max_new_tokens=40),
                generator=torch.Generator().manual_seed(s)).text for s in range(3)])

# %% [markdown]
# Most first replies are valid either way (the 1s); compare what happens to the requests whose
# first reply was rejected. tinychat was never trained on a conversation in which its reply is
# rejected, so the feedback turn pushes it off its training distribution, and what it writes
# next is not a corrected record (the third line). The error feedback helps only a
# model that can read it; large instruction-tuned models usually can, and then the error
# text is what makes the second attempt better than the first. Resampling the original
# request is the cruder fallback, and it works here because most free samples were valid to
# begin with. Either way, every retry is another full generation, as slow and as billed as
# the first. Retries are a fallback, not a plan: constrained decoding removes syntax
# failures before they happen, and no retry can repair a value that is valid and wrong,
# because nothing flags it; only a semantic check can.
#
# ## Tool calls: the model proposes, code disposes
#
# A tool call is structured output with a purpose: the model writes which function it wants
# and with which arguments, and *stops*. The runtime parses the request, checks it, runs the
# function, appends the result to the conversation as a `tool` message, and calls the model
# again, which now answers from the result. The model never executes anything; it only
# proposes. tinychat was trained on four tools:

# %%
registry = tinychat_registry()
transcript = run_tool_loop(model, tokenizer, [{"role": "user", "content": "What's the weather in Paris?"}], registry)
print(transcript.render())

# %% [markdown]
# On the wire, OpenAI's Chat Completions API carries the same exchange with ids that pair a
# call with its result, and one detail that trips people up: `arguments` is a JSON
# **string**, not an object. The model wrote characters, and nobody has parsed or validated
# them yet; the API hands them to you as it got them.

# %%
wire = transcript.openai_messages()
print(json.dumps(wire[1], indent=2))
arguments = wire[1]["tool_calls"][0]["function"]["arguments"]
print(f"type of arguments: {type(arguments).__name__}; parsed: {json.loads(arguments)}")
print(json.dumps(wire[2]))

# %% [markdown]
# Everything in that string is a *proposal*. The model can name a tool that does not exist,
# invent an argument, pass a string where a number belongs, or ask for something the user
# may not do; and when a timeout makes the client resend, the same side effect arrives
# twice. The dispatcher is where code says no.
#
# ### Exercise 6 — a dispatcher that checks before it runs
#
# Write `dispatch(call, tools, permissions, store, caller)`:
#
# - `call` is a dict `{"id": str, "name": str, "arguments": str}` (the arguments as a JSON
#   string, as on the wire), with an optional `"idempotency_key": str`.
# - `tools` maps a name to `{"parameters": JSON Schema, "fn": callable, "permission": str or
#   None, "side_effects": bool}`; `permissions` is the set of permissions the caller holds;
#   `store` is a dict you keep idempotency records in (it persists across calls, and across
#   callers); `caller` is the id (a `str`) of the user or session that sent the call.
# - Return `{"ok": bool, "content": str, "error": kind or None}`. Check, in this order, and
#   return at the first failure with `"ok": False`, a non-empty message in `"content"` and:
#   1. `"unknown_tool"`: the name is not in `tools` (the allow-list);
#   2. `"invalid_arguments"`: the arguments are not a JSON object, or do not validate
#      against the tool's `"parameters"` (use `jsonschema`);
#   3. `"permission_denied"`: the tool has a permission the caller does not hold;
#   4. only for a tool with `"side_effects": True`: `"missing_idempotency_key"` when the call
#      has no key. A key belongs to its caller: keep records under `(caller, key)`, so that
#      a caller who sends another caller's key never receives the other's result. If
#      `(caller, key)` is already in `store`, return the stored result when the stored call
#      had the same name and the same parsed arguments, and `"idempotency_conflict"`
#      otherwise; in both cases the tool does not run. A tool without side effects ignores
#      keys and runs every time.
# - Then run `fn(**arguments)`. Success: `{"ok": True, "content": json.dumps(return value),
#   "error": None}`. If it raises, `"tool_error"` (a result the model can read, not a crash).
# - For a side-effecting tool, store the result under `(caller, key)`, success or
#   `"tool_error"` alike: once the function has started, a retry must not start it again.
# - No tool runs unless every check before it has passed.
#
# Stuck? `hint("dispatch")` shows a hint; run it again for the next one.

# %% [solution] dispatch
def dispatch(call, tools, permissions, store, caller):
    ### BEGIN SOLUTION
    def refuse(kind, message):
        return {"ok": False, "content": f"error ({kind}): {message}", "error": kind}

    name = call["name"]
    if name not in tools:
        return refuse("unknown_tool", f"there is no tool {name!r}; the tools are {sorted(tools)}")
    tool = tools[name]
    try:
        arguments = json.loads(call["arguments"])
    except (TypeError, ValueError) as error:
        return refuse("invalid_arguments", f"the arguments are not JSON ({error})")
    if not isinstance(arguments, dict):
        return refuse("invalid_arguments", "the arguments must be a JSON object")
    problem = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(tool["parameters"]).iter_errors(arguments))
    if problem is not None:
        return refuse("invalid_arguments", f"at {problem.json_path}: {problem.message}")
    if tool["permission"] is not None and tool["permission"] not in permissions:
        return refuse("permission_denied", f"{name} needs the permission {tool['permission']!r}")
    key = call.get("idempotency_key")
    if tool["side_effects"]:
        if key is None:
            return refuse("missing_idempotency_key", f"{name} changes state; send an idempotency key")
        if (caller, key) in store:  # keys are per caller: another caller's record never answers
            first_name, first_arguments, first_result = store[(caller, key)]
            if (first_name, first_arguments) != (name, arguments):
                return refuse("idempotency_conflict", f"key {key!r} was used for another request")
            return first_result
    try:
        result = {"ok": True, "content": json.dumps(tool["fn"](**arguments)), "error": None}
    except Exception as error:  # the failure goes back to the model as a message
        result = refuse("tool_error", f"{name} failed: {type(error).__name__}: {error}")
    if tool["side_effects"]:
        store[(caller, key)] = (name, arguments, result)
    return result
    ### END SOLUTION

# %% [tests] dispatch points=3
check.dispatch(dispatch)

# %% [markdown]
# Your dispatcher on a call that tinychat proposes, and on three it did not: a fabricated
# argument, a tool that is not on the list, and the right call from a caller without
# permission.

# %%
proposal = transcript.steps[0].proposal
parsed = parse_tinychat_tool_call(proposal)
my_tools = {tool.name: {"parameters": tool.parameters, "fn": tool.fn, "permission": tool.permission,
                        "side_effects": tool.side_effects} for tool in registry}
my_tools["lookup_order"]["permission"] = "orders:read"  # pretend order status is private
for call in (
    {"id": parsed.id, "name": parsed.name, "arguments": json.dumps(parsed.arguments)},
    {"id": "c2", "name": "get_weather", "arguments": '{"city": "Paris", "units": "kelvin"}'},
    {"id": "c3", "name": "delete_account", "arguments": "{}"},
    {"id": "c4", "name": "lookup_order", "arguments": '{"order_id": "K4821"}'},
):
    result = dispatch(call, my_tools, set(), {}, "alice")
    print(f"{call['name']:<15} {call['arguments']:<40} -> {result['error'] or 'ok'}: {result['content'][:60]}")

# %% [markdown]
# ## Failure modes and their defences
#
# | failure | what it looks like | defence |
# | --- | --- | --- |
# | invalid JSON | a missing brace, a truncated object, prose around the JSON | constrained decoding; where you cannot constrain, parse and retry with the error fed back, capped (e.g. 2 retries) |
# | valid but wrong value | `{"answer": 230}` for 2 + 3; the wrong party size | server-side semantic validation: enums, ranges, cross-field invariants, recomputing or looking up what you can |
# | fabricated tool arguments | an extra `"units"`, a string for a number, an order id of the wrong shape | validate against the tool's real signature (its JSON Schema), then the caller's permissions, before running |
# | a tool or action that does not exist, or is not allowed | `delete_account`; a refund without the right | the allow-list (registry) and a permission check the model cannot influence |
# | duplicate side effects on retry | the client times out and resends; the refund runs twice | an idempotency key per intended action, scoped to its caller; a repeat returns the stored result |
# | unverified postcondition | "refund issued" while the write failed or went elsewhere | read the authoritative state back after the call and report what it says |
# | instructions inside data | a tool result or document says "ignore previous instructions" | treat tool output as data: it never changes permissions, the allow-list or the checks |
#
# ## End to end: a refund
#
# Money is where every row of that table matters. The course's refund tool takes its
# arguments through a pydantic model, `RefundRequest`, whose validator holds a rule the JSON
# Schema does not state: a refund is a positive amount in whole cents.

# %%
for arguments in ({"order_id": "A1234", "amount": "20.00", "currency": "USD", "reason": "arrived late"},
                  {"order_id": "A1234", "amount": -5, "currency": "USD", "reason": "arrived late"},
                  {"order_id": "A1234", "amount": "7.505", "currency": "USD", "reason": "arrived late"},
                  {"order_id": "a1234", "amount": 5, "currency": "BTC", "reason": ""}):
    try:
        print("ok:", RefundRequest.model_validate(arguments))
    except pydantic.ValidationError as error:
        print("rejected:", "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()))

# %% [markdown]
# The rest lives in the tool and the dispatcher, never in the model: the session's user
# (not an argument the model could fill in) must own the order, the currency must match, the
# amount must fit what is left to refund, the caller needs `refunds:write`, every call needs
# an idempotency key, and after the write the tool reads the order back from the store. Alice
# looks up her order; its customer note carries an injected instruction:

# %%
book = demo_book()
refunds = Dispatcher(refund_registry(book, user="alice"))
looked_up = refunds.dispatch(ToolCall("c1", "lookup_order", {"order_id": "A1234"}))
note = json.loads(looked_up.content)["note"]
print(f"lookup ok={looked_up.ok}; the note is a JSON string value: {note!r}")
as_tool_turn = encode_chat(tokenizer, [{"role": "tool", "content": looked_up.content}], add_generation_prompt=False)
end_token = tokenizer.special_tokens["<|end|>"]
print(f"encoded as a tool turn: {as_tool_turn.count(end_token)} <|end|> token (the template's own); "
      "the <|end|><|system|> in the note stayed plain text")

# %% [markdown]
# Whatever the model makes of that note, the checks do not read it. Suppose the model
# obeys it and proposes the refund the note asks for, then a refund too large, then a fair
# refund from a caller without `refunds:write`, then the fair one with the permission, sent
# twice because the client retried:

# %%
attempts = [
    ("obeys the note", ToolCall("c2", "refund_order", {"order_id": "B7777", "amount": 5000, "currency": "USD",
                                                        "reason": "as instructed"}), {"refunds:write"}, "t-1"),
    ("too much", ToolCall("c3", "refund_order", {"order_id": "A1234", "amount": 500, "currency": "USD",
                                                  "reason": "arrived late"}), {"refunds:write"}, "t-2"),
    ("no permission", ToolCall("c4", "refund_order", {"order_id": "A1234", "amount": 20, "currency": "USD",
                                                       "reason": "arrived late"}), set(), "t-3"),
    ("fair", ToolCall("c5", "refund_order", {"order_id": "A1234", "amount": 20, "currency": "USD",
                                              "reason": "arrived late"}), {"refunds:write"}, "t-4"),
    ("fair, retried", ToolCall("c6", "refund_order", {"order_id": "A1234", "amount": 20, "currency": "USD",
                                                       "reason": "arrived late"}), {"refunds:write"}, "t-4"),
]
for label, call, held, key in attempts:
    result = refunds.dispatch(call, permissions=held, idempotency_key=key, caller="alice")
    outcome = "ok" + (" (replayed)" if result.replayed else "") if result.ok else result.error_kind
    print(f"{label:<14} -> {outcome:<18} {result.content[:80]}")
print(f"money that actually moved: {book.refunds}; order A1234 now shows {book.get('A1234').refunded} refunded")

# %% [markdown]
# Mallory's order is refused because it is not Alice's, whatever the text said; the
# oversized refund because the store knows what is left; the caller without the permission
# before the tool runs at all; the retried one returns the first outcome and moves no
# money. The reply the model writes after that is still just a proposal of *wording*: the
# facts it may report are the ones the tool read back from the store.

# %% [markdown]
# ## Interview probes
#
# Answer each question aloud before you read its points, then count the points you made. The
# cards come from the course's probe bank (`course_lib/drills/probes.toml`), the same cards the
# interview drills ask.

# %%
from course_lib.drills.cards import show_probes

show_probes("05_structured_output")

# %% [markdown]
# Practise them here: the panel asks this notebook's numeric problems and probe cards and
# schedules them in the same history as `course drill` in a terminal. Nothing is saved until
# you press Start.

# %%
from course_lib.drills.widget import notebook_panel

notebook_panel("05_structured_output")

# %% [markdown]
# ## Recap
# - An application needs output that parses and fits a schema, and tool calls that code
#   checks before anything runs. Prompts and low temperatures make failures rare, not
#   impossible. Constrained decoding makes them impossible only for a reply that ends on the
#   end token, and only within the subset of the schema its grammar spells (fixed key order,
#   bounded whitespace).
# - Constrained decoding keeps the text a live prefix of the schema's language: at each step
#   the sampler may only pick tokens that keep it so, and the end token only where the
#   language may stop.
# - Regex -> DFA -> byte DFA: tokens are byte strings that can end inside a character, so the
#   automaton reads UTF-8 bytes. A JSON Schema compiles to a regex where its keywords allow,
#   and unsupported or unsatisfiable schemas are refused loudly, with a JSON Pointer.
# - The mask is a logits processor after the penalties and before temperature, top-k, top-p
#   and min-p, so the filters rank legal tokens only. Its index is built once; a lookup per
#   token costs microseconds.
# - It guarantees syntax, never semantics: a valid integer can be the wrong integer. Values
#   are checked server-side; where you cannot constrain, retry with the error, capped.
# - Tool calls: the model proposes, code disposes. The dispatcher checks the allow-list, the
#   arguments, the permission and the caller's idempotency key, in that order, then runs; the
#   postcondition is read back from the authoritative store; tool output is data.
#
# **Self-check:**
# 1. After the model has written `no`, with options `no` and `none`, which tokens does the
#    mask allow, and why must the end token be among them?
# 2. Why can a character-level DFA not decide whether cl100k_base's first token of "快速"
#    is allowed, and what does the byte DFA do instead?
# 3. What goes wrong if top-p runs before the grammar mask? Why does temperature not care?
# 4. Constrained decoding returned `{"answer": 230}` for "What is 2 + 3?". Which defence
#    from the table catches that, and which ones cannot?
# 5. Why is the retry loop a `for` loop over `max_retries + 1` attempts, and why is the
#    error text cut to a fixed length?
# 6. A refund call times out and the client sends it again. What makes the second one
#    harmless, and what should the dispatcher store when the first one failed halfway?
