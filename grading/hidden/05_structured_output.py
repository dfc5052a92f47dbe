"""Hidden tests for 05_structured_output, run in the grader's process (see course_lib/pipeline/hidden.py).

Where each exercise's expectations come from (none of them is the solution's code):

- enum_allowed_tokens: a prefix test on each token's bytes, in plain Python (``_enum``).
- walk_token: a fold over the token's bytes with an absorbing dead state (``_walk``).
- constrained_sample: the mask and processors with plain torch operations (``_processed``),
  the draw placed by bisection on the cumulative sums of the seeded uniform stream.
- constrained_decode: the course's own guided decoding (``course_lib.generation.generate``
  with the guide, through the serving engine), run by ``course_lib.checks.structured`` in the
  grader's process; jsonschema as the independent judge of every sampled output.
- retry_until_valid and dispatch: the exercise's rules replayed in plain Python (for dispatch,
  idempotency records keyed by (caller, key), as the exercise states).

torch builds tensors and is the oracle of the uniform stream a seeded ``torch.Generator``
yields; course_lib supplies the shipped model, tokenizer and guides. Callables (propose,
validate, tools) and generators are built in the learner's kernel by the scripts below,
which return plain data.
"""
import bisect
import copy
import functools
import json
import random

import jsonschema
import numpy as np
import torch

from course_lib.pipeline.hidden import Once
from course_lib.pipeline.hidden import item as _item  # one part of a shared answer

REFERENCES = (
    "course_lib.sampling.batch.process_logits",
    "course_lib.sampling.processors.apply_token_mask",
    "course_lib.sampling.sampler.sample_next_token",
    "course_lib.sampling.sampler.next_token_probs",
    "course_lib.sampling.batch.filter_rows",
    "course_lib.sampling.batch.sample_batch",
    "course_lib.serving.request.sample_rows",
    "course_lib.generation.generate.generate",
    "course_lib.generation.generate.generate_many",
    "course_lib.structured.generate.generate_structured",
    "course_lib.structured.generate.generate_structured_many",
    "course_lib.structured.retry.parse_with_retries",
    "course_lib.tools.dispatch.Dispatcher",
)
NEG_INF = float("-inf")


def _n(count, word):
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


# -- exercise 1 -------------------------------------------------------------------------------
def _enum(options, tokens, emitted, eos):
    targets = [o.encode("utf-8") for o in options]
    ids = [t for t, b in enumerate(tokens) if b and any(x[:len(emitted + b)] == emitted + b for x in targets)]
    return sorted(ids + ([eos] if emitted in targets else []))


def _enum_rule(options, tokens, emitted, eos):
    targets = [o.encode("utf-8") for o in options]
    expected = _enum(options, tokens, emitted, eos)
    if not any(t.startswith(emitted) for t in targets):
        return "no option starts with what was emitted: the empty list"
    if emitted in targets and any(t != emitted and t.startswith(emitted) for t in targets):
        return "emitted is a whole option and the start of another: the end token and the continuations"
    if emitted in targets:
        return "emitted equals an option: the end token is added"
    if any(not (emitted + tokens[t]).decode("utf-8", "ignore").encode() == emitted + tokens[t]
           for t in expected if t != eos):
        return "a token that ends inside a UTF-8 character is allowed when its bytes fit"
    if emitted == b"":
        return "nothing emitted yet: the tokens that start an option"
    return "emitted + token must be a prefix of an option's bytes"


def enum_allowed_tokens(learner, check):
    f = learner.function("enum_allowed_tokens")
    tokens = [b"st", b"", b"stop", b"s", b"top", b"go", b"g", b"o", b"", b"sto", b"p", b"stops", b"ped", b"pe",
              b"goo", b"\xc3", b"\xbc", b"\xc3\xbc", b"ber", b"\xc3\xbcber"]
    options = ["stop", "go", "stopped", "über"]
    eos = 8
    named = [
        (b"", "nothing emitted yet: the tokens that start an option (special tokens b'' excluded)"),
        (b"s", "emitted + token must be a prefix of an option's bytes"),
        (b"sto", "emitted + token must be a prefix of an option's bytes"),
        (b"g", "a token that completes an option exactly is allowed"),
        (b"stop", "emitted is a whole option and the start of another: the end token and the continuations"),
        (b"go", "emitted equals an option: the end token is added"),
        (b"stopped", "emitted equals an option: the end token is added"),
        (b"gone", "no option starts with what was emitted: the empty list"),
        (b"x", "no option starts with what was emitted: the empty list"),
        (b"\xc3", "a token that ends inside a UTF-8 character is allowed when its bytes fit (after half a character)"),
    ]
    for emitted, rule in named:
        check.equal(f"{rule} (emitted {emitted!r}, {_n(len(tokens), 'token')}, eos {eos})",
                    lambda: f(list(options), list(tokens), emitted, eos), _enum(options, tokens, emitted, eos))
    check.equal("a special token (b'') is never allowed as text, only the end token by its own rule (emitted b'go')",
                lambda: f(["go", "gone"], [b"", b"ne", b"", b"n"], b"go", 2), [1, 2, 3])
    check.equal("a token that ends inside a UTF-8 character is allowed when its bytes fit (emitted b'')",
                lambda: f(["über", "ok"], [b"\xc3", b"o", b"", b"\xc3\xbc", b"x"], b"", 2), [0, 1, 3])
    for emitted in (b"", b"s", b"sto", b"stopp"):
        check.equal(f"the end token only when emitted equals an option exactly, not when it starts one "
                    f"(emitted {emitted!r})", lambda: f(list(options), list(tokens), emitted, eos),
                    _enum(options, tokens, emitted, eos))
    # The end token (ID 1) sorts before the continuations of "ab": appended last, it is out of place.
    check.equal("the result is a sorted list, the end token in its place among the IDs (emitted b'ab')",
                lambda: f(["ab", "abc", "abd"], [b"x", b"", b"c", b"d", b"cd"], b"ab", 1), [1, 2, 3])
    check.equal("no options at all: the empty list (no option starts with anything)",
                lambda: f([], list(tokens), b"", eos), [])
    rng = random.Random(505)
    alphabet = ["a", "b", "é", "ü", "€"]
    for case in range(40):
        opts = sorted({"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 4))})
        raw = b"".join(o.encode() for o in opts) + "".join(alphabet).encode()
        vocab = sorted({raw[i:i + rng.randint(1, 3)] for i in range(len(raw)) for _ in range(2)})
        vocab = [b for b in vocab if b]
        eos = rng.randrange(len(vocab) + 1)
        vocab.insert(eos, b"")
        target = rng.choice(opts).encode()
        emitted = target[:rng.randint(0, len(target))] if rng.random() < 0.85 else rng.choice(vocab) + b"z"
        check.equal(f"{_enum_rule(opts, vocab, emitted, eos)} (random case {case}: {_n(len(opts), 'option')}, "
                    f"{_n(len(vocab), 'token')})", lambda: f(list(opts), list(vocab), emitted, eos),
                    _enum(opts, vocab, emitted, eos))
    from course_lib.model import load_tokenizer
    from course_lib.structured.vocabulary import TokenVocabulary

    vocab = TokenVocabulary.of(load_tokenizer("tinychat"))
    cities = ["Paris", "Oslo", "São Paulo", "Zürich", "Osaka"]
    for emitted in (b"", b"Os", b"S\xc3", "São".encode(), b"Oslo", b"Zz"):
        check.equal(f"tinychat's vocabulary, five cities, after {emitted!r}: {_enum_rule(cities, list(vocab.token_bytes), emitted, vocab.eos_id)}",
                    lambda: f(list(cities), list(vocab.token_bytes), emitted, vocab.eos_id),
                    _enum(cities, list(vocab.token_bytes), emitted, vocab.eos_id))


# -- exercise 2 -------------------------------------------------------------------------------
def _walk(table, state, token):
    """A fold over the token's bytes in which the dead state absorbs: once -1, always -1."""
    final = functools.reduce(lambda s, byte: s if s < 0 else int(table[s][byte]), token, state)
    return None if final < 0 else final


def _walk_rule(table, state, token):
    result = _walk(table, state, token)
    if token == b"":
        return "an empty token leaves the state unchanged"
    if result is None:
        # Does reading on from the dead state (table[-1] in Python) revive the walk?
        s = state
        for i, byte in enumerate(token):
            s = int(table[s][byte])
            if s < 0 and i < len(token) - 1:
                return "a byte that leads to -1 ends the walk with None, whatever bytes follow"
        return "a byte that leads to -1 gives None (not -1)"
    if result == 0:
        return "state 0 is a real state (the start), not 'dead'"
    return "the state after every byte of the token"


def walk_token(learner, check):
    f = learner.function("walk_token")
    table = [[-1] * 256 for _ in range(4)]
    table[0][ord("{")] = 1
    table[1][ord('"')] = 2
    table[2][ord("a")] = 2
    table[2][ord('"')] = 3
    table[3][ord("}")] = 0  # back to the start
    for byte in range(256):
        table[3][byte] = table[3][byte] if table[3][byte] >= 0 else 2  # the last row is almost all live
    named = [
        (0, b'{"aa"', 3, "the state after every byte of the token"),
        (0, b'{"a"}', 0, "state 0 is a real state (the start), not 'dead'"),
        (3, b"}", 0, "state 0 is a real state (the start), not 'dead'"),
        (0, b"x", None, "a byte that leads to -1 gives None (not -1)"),
        (0, b"xa", None, "a byte that leads to -1 ends the walk with None, whatever bytes follow"),
        (1, b'a"', None, "a byte that leads to -1 ends the walk with None, whatever bytes follow"),
        (2, b"", 2, "an empty token leaves the state unchanged"),
        (0, b"", 0, "an empty token leaves the state unchanged"),
        (0, b"{x", None, "a byte that leads to -1 gives None (not -1)"),
    ]
    for kind, given in (("list of lists", table), ("NumPy array", np.array(table, dtype=np.int32))):
        for state, token, expected, rule in named:
            check.equal(f"{rule} ({kind}, state {state}, token {token!r})", lambda: f(given, state, token), expected)
    rng = random.Random(2025)
    for case in range(30):
        S = rng.randint(2, 7)
        rows = [[rng.randrange(S) if rng.random() < 0.5 else -1 for _ in range(256)] for _ in range(S)]
        start = rng.randrange(S)
        token = bytes(rng.randrange(256) for _ in range(rng.randint(0, 5)))
        given = rows if case % 2 else np.array(rows, dtype=np.int32)
        kind = "list of lists" if case % 2 else "NumPy array"
        check.equal(f"{_walk_rule(rows, start, token)} (random {S}-state table as a {kind}, {_n(len(token), 'byte')})",
                    lambda: f(given, start, token), _walk(rows, start, token))
    from course_lib.structured.dfa import compile_regex

    data = compile_regex('"(é|[a-z])*"|€+').to_bytes()
    rows = data.table.tolist()
    for token in ("\"caf".encode(), "\"é".encode()[:2], "\"é\"".encode(), "€".encode()[:1], "€€".encode(),
                  b'"A', "\"é".encode()[:2] + b"x"):
        check.equal(f"{_walk_rule(rows, data.start, token)} (a real byte DFA, token {token!r})",
                    lambda: f(data.table, data.start, token), _walk(rows, data.start, token))


# -- exercise 3 -------------------------------------------------------------------------------
SAMPLE_SCRIPT = """
import torch as _torch
from course_lib.sampling import SamplingParams as _SamplingParams

def _constrained_draws(logits, allowed, knobs, seed, n):
    generator = _torch.Generator().manual_seed(seed)
    params = _SamplingParams(**knobs)
    z = _torch.tensor(logits, dtype=_torch.float32)
    mask = _torch.tensor(allowed, dtype=_torch.bool)
    draws = [constrained_sample(z.clone(), mask.clone(), params, generator) for _ in range(n)]
    following = _torch.rand((), generator=generator, dtype=_torch.float64).item()
    return [int(d) for d in draws], all(type(d) is int for d in draws), following
"""


def _processed(logits, allowed, temperature, top_k, top_p, min_p):
    """The exercise's order, with plain torch operations: mask, T, top-k, top-p, min-p."""
    z = torch.tensor(logits, dtype=torch.float32).masked_fill(~torch.tensor(allowed), NEG_INF)
    z = z / temperature
    if 0 < top_k < len(z):
        z = z.masked_fill(z < torch.sort(z, descending=True).values[top_k - 1], NEG_INF)
    if top_p < 1:
        probs = torch.softmax(z.double(), -1)
        ranked = torch.sort(probs, descending=True).values
        kept = ranked[((torch.cumsum(ranked, 0) - ranked) < top_p) & (ranked > 0)]
        z = z.masked_fill(probs < kept.min(), NEG_INF)
    if min_p > 0:
        probs = torch.softmax(z.double(), -1)
        z = z.masked_fill(probs < min_p * probs.max(), NEG_INF)
    return z


def _uniforms(seed, n):
    twin = torch.Generator().manual_seed(seed)
    return [torch.rand((), generator=twin, dtype=torch.float64).item() for _ in range(n)]


def _draws(logits, allowed, knobs, seed, n):
    """The inverse-CDF draws for n uniforms; stops before a uniform too close to a boundary to call."""
    z = _processed(logits, allowed, knobs.get("temperature", 1.0), knobs.get("top_k", 0), knobs.get("top_p", 1.0),
                   knobs.get("min_p", 0.0))
    cdf = torch.softmax(z.double(), -1).cumsum(0).tolist()
    targets = [u * cdf[-1] for u in _uniforms(seed, n)]
    callable_ = [min(abs(c - t) for c in cdf) >= 1e-9 for t in targets]
    called = targets[:callable_.index(False)] if False in callable_ else targets
    return [bisect.bisect_right(cdf, t) for t in called]  # the first cumulative sum above u x total


def _greedy(logits, allowed):
    z = torch.tensor(logits, dtype=torch.float32).masked_fill(~torch.tensor(allowed), NEG_INF)
    return int(z.argmax())


def constrained_sample(learner, check):
    run = learner.script(SAMPLE_SCRIPT, "_constrained_draws")
    rng = random.Random(3131)
    for case in range(8):
        V = rng.randint(2, 12)
        logits = [rng.uniform(-6, 6) for _ in range(V)]
        allowed = [rng.random() < 0.5 for _ in range(V)]
        allowed[rng.randrange(V)] = True
        seed = rng.randrange(10**6)
        replay = Once(lambda: run(logits, allowed, {"temperature": 0}, seed, 3))
        check.equal(f"greedy (T = 0) returns the best allowed token (random case {case}, {_n(V, 'token')})",
                    _item(0, replay), [_greedy(logits, allowed)] * 3)
        if case < 3:
            check.equal(f"greedy (T = 0) draws nothing from the generator (case {case})", _item(2, replay),
                        _uniforms(seed, 1)[0], edge=True)
    check.equal("greedy with negative logits: a banned token gets -inf, not 0",
                lambda: run([-3.0, -8.0, -9.0, -1.0], [False, True, True, False], {"temperature": 0}, 0, 2)[0], [1, 1])
    check.equal("a banned token gets -inf, not 0 (T = 1, 200 draws never pick it)",
                lambda: sorted(set(run([-9.0, -6.0, -7.0], [False, True, True], {"temperature": 1.0}, 9, 200)[0])), [1, 2])
    # The grammar's favourites are banned: filters applied over the full vocabulary keep only them.
    logits, allowed = [6.0, 5.5, 1.0, 0.2, -1.0], [False, False, True, True, True]
    for knobs, rule in (({"temperature": 1.0, "top_p": 0.6}, "the mask comes before top-p: the nucleus is taken over allowed tokens"),
                        ({"temperature": 1.0, "top_k": 2}, "the mask comes before top-k: the k best allowed tokens are kept"),
                        ({"temperature": 1.0, "min_p": 0.3}, "the mask comes before min-p: the bound is relative to the best allowed token"),
                        ({"temperature": 0.7, "top_p": 0.9, "top_k": 2}, "the mask comes before top-k and top-p together")):
        check.equal(f"{rule} ({', '.join(f'{k}={v}' for k, v in knobs.items())}, 40 draws)",
                    lambda: run(logits, allowed, knobs, 77, 40)[0], _draws(logits, allowed, knobs, 77, 40))
    # Tempered first, the nucleus of [2, 0.5, 0, -1] at T = 3 holds several tokens; at T = 1 only the first.
    check.equal("temperature comes before top-p: the nucleus is taken over the tempered distribution "
                "(temperature=3.0, top_p=0.7, 40 draws)",
                lambda: run([2.0, 0.5, 0.0, -1.0, 4.0], [True, True, True, True, False], {"temperature": 3.0, "top_p": 0.7},
                            21, 40)[0],
                _draws([2.0, 0.5, 0.0, -1.0, 4.0], [True, True, True, True, False], {"temperature": 3.0, "top_p": 0.7},
                       21, 40))
    for case in range(10):
        V = rng.randint(3, 14)
        logits = [rng.uniform(-4, 4) for _ in range(V)]
        allowed = [rng.random() < 0.6 for _ in range(V)]
        allowed[rng.randrange(V)] = True
        knobs = rng.choice([{"temperature": 1.0}, {"temperature": 1.5}, {"temperature": 0.6, "top_k": 3},
                            {"temperature": 1.2, "top_p": 0.8}, {"temperature": 1.0, "min_p": 0.2},
                            {"temperature": 0.9, "top_k": 4, "top_p": 0.9, "min_p": 0.05}])
        seed = rng.randrange(10**6)
        expected = _draws(logits, allowed, knobs, seed, 25)
        replay = Once(lambda: run(logits, allowed, knobs, seed, len(expected)))
        shown = ", ".join(f"{k}={v}" for k, v in knobs.items())
        check.equal(f"seeded draws: mask, then {shown}, softmax, one float64 uniform per call by inverse CDF "
                    f"(random case {case}, {_n(len(expected), 'draw')})", _item(0, replay), expected)
        if case < 3:
            check.that(f"each draw is returned as a Python int (case {case})", _item(1, replay),
                       lambda ok: ok is True, "return int(...), not a tensor", edge=True)
            check.equal(f"each call at T > 0 draws exactly one uniform from the generator (case {case})",
                        _item(2, replay), _uniforms(seed, len(expected) + 1)[-1])
    check.raises("no allowed token at all raises ValueError", lambda: run([1.0, 2.0], [False, False],
                                                                         {"temperature": 1.0}, 0, 1), "ValueError")
    check.raises("no allowed token at all raises ValueError (greedy too)",
                 lambda: run([1.0, 2.0, 0.0], [False, False, False], {"temperature": 0}, 0, 1), "ValueError")


# -- exercise 4 -------------------------------------------------------------------------------
# The learner's loop runs in their kernel on tinychat loaded there, with a guide built there
# from the schema we send; the grader's own loop runs here on its own copy of the model.
DECODE_SCRIPT = """
import json as _json
import torch as _torch

def _decode_on_tinychat(messages, schema, knobs, seed):
    if "_TINYCHAT_FOR_GRADING" not in globals():
        from course_lib.model import load_model as _load_model, load_tokenizer as _load_tokenizer
        globals()["_TINYCHAT_FOR_GRADING"] = (_load_model("tinychat", device="cpu"), _load_tokenizer("tinychat"))
    from course_lib.sampling import SamplingParams as _SamplingParams
    from course_lib.structured.guide import JSONGuide as _JSONGuide
    model, tokenizer = globals()["_TINYCHAT_FOR_GRADING"]
    guides = globals().setdefault("_GUIDES_FOR_GRADING", {})
    key = _json.dumps(schema, sort_keys=True)
    if key not in guides:
        guides[key] = _JSONGuide(schema, tokenizer)
    generator = _torch.Generator().manual_seed(seed)
    out = constrained_decode(model, tokenizer, messages, guides[key], _SamplingParams(**knobs), generator)
    out = dict(out)
    out["token_ids"] = [int(t) for t in out["token_ids"]]
    return out
"""

def _object(**properties):
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
BOOKING = _object(name={"maxLength": 20, "minLength": 1, "type": "string"},
                  party_size={"maximum": 12, "minimum": 1, "type": "integer"},
                  day={"enum": DAYS, "type": "string"},
                  time={"pattern": "^[0-9]{2}:[0-9]{2}$", "type": "string"})
REFUND = _object(order_id={"pattern": "^[A-Z][0-9]{4}$", "type": "string"},
                 amount={"type": "number"},
                 reason={"enum": ["damaged", "late", "wrong_item", "changed_mind"], "type": "string"})


def _ask(text):
    return [{"role": "user", "content": text}]


def _validates(schema):
    def ok(out):
        jsonschema.Draft202012Validator(schema).validate(json.loads(out["text"]))
        return True
    return ok


def constrained_decode(learner, check):
    from course_lib.checks.structured import _reference_decode as course_decode
    from course_lib.model import load_model, load_tokenizer
    from course_lib.structured.guide import JSONGuide

    model, tokenizer = load_model("tinychat", device="cpu"), load_tokenizer("tinychat")
    guides = {"booking": JSONGuide(BOOKING, tokenizer), "refund": JSONGuide(REFUND, tokenizer)}
    schemas = {"booking": BOOKING, "refund": REFUND}
    end_id = tokenizer.special_tokens["<|end|>"]
    run = learner.script(DECODE_SCRIPT, "_decode_on_tinychat")
    greedy_cases = [
        ("booking", "Extract the booking as JSON: Hi, this is Okafor. We are 7 people and would like Sunday at 20:00."),
        ("refund", "Extract the refund as JSON: Order K4821 arrived broken, so I would like $12.50 back."),
        ("booking", "Extract the booking fields as JSON.\nReservation for Rossi: 2 guests, Monday, 18:00."),
    ]
    for schema, text in greedy_cases:
        expected = course_decode(model, tokenizer, _ask(text), guides[schema], 0, 80, 0)
        replay = Once(lambda: run(_ask(text), schemas[schema], {"temperature": 0, "max_new_tokens": 80}, 0))
        label = f"greedy on the {schema} schema ({text[:38]}...)"
        for field in ("token_ids", "text", "finish_reason", "value"):
            check.equal(f"{label}: the {field} equal the grader's greedy constrained loop", _item(field, replay),
                        expected[field])
    hot = "Extract the booking as JSON: table for 3 under Patel, Saturday 19:00 please."
    # A name the model never saw in training: it is unsure, so every draw matters. Unmasked, its
    # seed 0 and 1 draws at T = 1.5 are not valid bookings (the Patel draws mostly are).
    vague = "Extract the booking as JSON: Reservation for Nakamura: 11 guests, Tuesday, 18:30."
    for name, text, seed in [("Patel", hot, s) for s in range(5)] + [("Nakamura", vague, s) for s in (0, 1)]:
        replay = Once(lambda: run(_ask(text), BOOKING, {"temperature": 1.5, "max_new_tokens": 80}, seed))
        label = f"T = 1.5, {name}, seed {seed}"
        check.equal(f"{label}: finish reason 'stop'", _item("finish_reason", replay), "stop")
        check.that(f"{label}: the text parses and validates against the schema (jsonschema)", replay,
                   _validates(BOOKING), "the output does not parse or does not fit the schema: is the mask applied, "
                                        "and the state advanced, at every step?")
        check.that(f"{label}: value = json.loads(text)", replay,
                   lambda out: out["value"] == json.loads(out["text"]), "return the parsed JSON as value")
        check.that(f"{label}: the end token is the last token id and is left out of the text", replay,
                   lambda out: out["token_ids"][-1] == end_id and "<|end|>" not in out["text"]
                   and tokenizer.decode(out["token_ids"][:-1]) == out["text"],
                   "token_ids ends with the end token; text is the decoded tokens before it")
    # Seeded draws on requests the model is unsure of, where a prompt without the assistant's
    # opening (or a generator seeded anew) draws other tokens.
    family = "Extract the booking as JSON: a table tonight for my family."
    seeded = (("Nakamura", vague, 0, {"temperature": 1.5}), ("Nakamura", vague, 1, {"temperature": 1.5}),
              ("Nakamura", vague, 4, {"temperature": 1.0, "top_p": 0.8}), ("a family", family, 0, {"temperature": 1.5}))
    for name, text, seed, knobs in seeded:
        shown = ", ".join(f"{k}={v}" for k, v in knobs.items())
        check.equal(f"{name}, seed {seed}, {shown}: the same tokens as the grader's seeded loop (from "
                    "the prompt encode_chat(tokenizer, messages) gives; one generator, one draw per step)",
                    lambda: run(_ask(text), BOOKING, {**knobs, "max_new_tokens": 80}, seed)["token_ids"],
                    course_decode(model, tokenizer, _ask(text), guides["booking"], knobs["temperature"], 80, seed,
                                  top_p=knobs.get("top_p", 1.0))["token_ids"])
    # A budget that ends exactly on a complete object: every greedy token but the end token.
    whole = course_decode(model, tokenizer, _ask(hot), guides["booking"], 0, 80, 0)
    budget = len(whole["token_ids"]) - 1
    replay = Once(lambda: run(_ask(hot), BOOKING, {"temperature": 0, "max_new_tokens": budget}, 0))
    check.equal(f"a budget that ends exactly on a complete object (max_new_tokens = {budget}) is still cut: "
                "finish reason 'length'", _item("finish_reason", replay), "length")
    check.equal(f"a budget that ends exactly on a complete object (max_new_tokens = {budget}) is still cut: "
                "value None, never the parsed text", _item("value", replay), None)
    check.equal(f"a budget that ends exactly on a complete object (max_new_tokens = {budget}): the tokens and "
                "the whole text", lambda: [replay()["token_ids"], replay()["text"]],
                [whole["token_ids"][:-1], whole["text"]])
    check.that("a finished reply too: a dict with exactly the keys text, value, token_ids, finish_reason",
               lambda: run(_ask(hot), BOOKING, {"temperature": 0, "max_new_tokens": 80}, 0),
               lambda out: isinstance(out, dict) and set(out) == {"text", "value", "token_ids", "finish_reason"},
               "return {'text': ..., 'value': ..., 'token_ids': ..., 'finish_reason': ...}")
    for budget in (6, 1):
        expected = course_decode(model, tokenizer, _ask(hot), guides["booking"], 0, budget, 0)
        replay = Once(lambda: run(_ask(hot), BOOKING, {"temperature": 0, "max_new_tokens": budget}, 0))
        check.equal(f"max_new_tokens = {budget} runs out first: finish reason 'length'", _item("finish_reason", replay),
                    "length")
        check.equal(f"max_new_tokens = {budget} runs out first: value None (half an object is not a value)",
                    _item("value", replay), None)
        check.equal(f"max_new_tokens = {budget} runs out first: the {budget} token ids and their text",
                    lambda: [replay()["token_ids"], replay()["text"]], [expected["token_ids"], expected["text"]])
    check.that("returns a dict with exactly the keys text, value, token_ids, finish_reason",
               lambda: run(_ask(hot), BOOKING, {"temperature": 0, "max_new_tokens": 4}, 0),
               lambda out: isinstance(out, dict) and set(out) == {"text", "value", "token_ids", "finish_reason"},
               "return {'text': ..., 'value': ..., 'token_ids': ..., 'finish_reason': ...}")


# -- exercise 5 -------------------------------------------------------------------------------
RETRY_SCRIPT = """
import copy as _copy
import json as _json

def _validator(rule):
    def validate(text):
        if rule == "bug":
            raise TypeError("the validator itself is broken")
        value = _json.loads(text)
        if rule == "positive" and not (isinstance(value, dict) and isinstance(value.get("amount"), (int, float))
                                       and value["amount"] > 0):
            raise ValueError("amount must be a positive number; the reply was " + text)
        if rule == "wrapped":  # a validator that returns its own value, not the parsed reply
            return {"checked": value}
        return value
    return validate

def _retry_scripted(replies, messages, max_retries, rule):
    seen = []

    def propose(conversation):
        seen.append(_copy.deepcopy(list(conversation)))
        return replies[min(len(seen), len(replies)) - 1]

    given = _copy.deepcopy(messages)
    kwargs = {} if max_retries is None else {"max_retries": max_retries}
    result = retry_until_valid(propose, _validator(rule), given, **kwargs)
    return list(result) if isinstance(result, tuple) else result, seen, given == messages
"""


def _error_of(rule, text):
    """The message the script's validator raises for ``text`` (the same code, run here)."""
    try:
        value = json.loads(text)
    except ValueError as error:  # json.JSONDecodeError
        return str(error)
    if rule == "positive" and not (isinstance(value, dict) and isinstance(value.get("amount"), (int, float))
                                   and value["amount"] > 0):
        return "amount must be a positive number; the reply was " + text
    return None


def _expected_retry(replies, messages, max_retries, rule):
    """(result, the conversation each call to propose saw) under the exercise's rules."""
    cap = 2 if max_retries is None else max_retries
    conversation, seen = copy.deepcopy(messages), []
    for attempt in range(1, cap + 2):
        text = replies[min(attempt, len(replies)) - 1]
        seen.append(copy.deepcopy(conversation))
        error = _error_of(rule, text)
        if error is None:
            value = json.loads(text)
            return [{"checked": value} if rule == "wrapped" else value, attempt], seen
        conversation += [{"role": "assistant", "content": text},
                         {"role": "user", "content": "Your reply was rejected: " + error[:200]}]
    return [None, cap + 1], seen


def retry_until_valid(learner, check):
    run = learner.script(RETRY_SCRIPT, "_retry_scripted")
    ask = [{"role": "system", "content": "You extract refunds."},
           {"role": "user", "content": "Refund $7.50 for order K4821, as JSON."}]
    long_bad = '{"amount": -1, "note": "' + "z" * 400 + '"}'
    cases = [
        (['{"amount": 7.5}'], None, "positive", "a valid first reply returns (value, 1)"),
        (['{"amount": 7.5', '{"amount": 7.5}'], None, "positive",
         "a rejected reply is followed by a second attempt that sees it and its error"),
        (['{"amount": "7.50"}', '{"amount": -7.5}', '{"amount": 7.5}'], 2, "positive",
         "two rejected replies, then a valid one, with max_retries=2"),
        (["nope"], 2, "positive", "always rejected, max_retries=2: (None, 3)"),
        (["nope"], 0, "positive", "max_retries=0: a single attempt, (None, 1)"),
        (['{"amount": 0}', "[1, 2", '{"amount": 0}', "", '{"amount": 3}'], 4, "positive",
         "max_retries=4: the fifth attempt still counts"),
        (['{"amount": 0}', '{"amount": 3}'], 0, "positive", "max_retries=0: no second attempt even if it would succeed"),
        ([long_bad, long_bad, '{"amount": 1}'], 3, "positive",
         "a long error is cut to its first 200 characters (MAX_ERROR_CHARS) in the feedback"),
        (["[]", "{}"], 1, "json", "any value validate returns is the result (here a list)"),
        (["[1", '{"amount": 2}'], 1, "wrapped", "the result is the value validate returns, not the parsed reply"),
    ]
    for replies, max_retries, rule, label in cases:
        expected, seen = _expected_retry(replies, ask, max_retries, rule)
        replay = Once(lambda: run(list(replies), ask, max_retries, rule))
        shown = "default max_retries" if max_retries is None else f"max_retries={max_retries}"
        check.equal(f"{label}: the result ({shown})", _item(0, replay), expected)
        check.equal(f"{label}: at most max_retries + 1 calls to propose ({shown})",
                    lambda: len(replay()[1]), len(seen))
        if len(seen) > 1:
            check.equal(f"{label}: each attempt sees the rejected replies (assistant) and their bounded errors (user)",
                        _item(1, replay), seen)
        check.equal(f"{label}: the caller's messages are left unchanged", _item(2, replay), True, edge=True)
    check.raises("an error other than ValueError propagates (a validator bug is not a bad reply)",
                 lambda: run(["{}"], ask, 2, "bug"), "TypeError")
    for bad in (-1, -3):
        check.raises(f"a negative max_retries raises ValueError ({bad})", lambda: run(["{}"], ask, bad, "json"),
                     "ValueError")


# -- exercise 6 -------------------------------------------------------------------------------
DISPATCH_SCRIPT = """
def _dispatch_session(calls, held, callers):
    ran = []

    def make(name, fails=False):
        def fn(**arguments):
            ran.append([name, arguments])
            if fails:
                raise RuntimeError(name + " is down")
            return {"tool": name, "arguments": arguments}
        return fn

    tools = {}
    for name, spec in _DISPATCH_TOOLS.items():
        tools[name] = {"parameters": spec["parameters"], "fn": make(name, spec.get("fails", False)),
                       "permission": spec["permission"], "side_effects": spec["side_effects"]}
    store, out = {}, []
    for call, permissions, caller in zip(calls, held, callers):
        result = dispatch(dict(call), tools, set(permissions), store, caller)
        out.append([result, len(ran)])
    return out, ran
"""


TOOLS = {
    "get_time": {"parameters": _object(city={"type": "string", "minLength": 1}), "permission": None,
                 "side_effects": False},
    "read_file": {"parameters": _object(path={"type": "string"}), "permission": "files:read", "side_effects": False},
    "transfer": {"parameters": _object(to={"type": "string", "pattern": "^[A-Z]{2}[0-9]{4}$"},
                                       amount={"type": "number", "exclusiveMinimum": 0, "maximum": 1000},
                                       currency={"enum": ["EUR", "USD"]}),
                 "permission": "payments:write", "side_effects": True},
    "send_email": {"parameters": _object(to={"type": "string"}), "permission": None, "side_effects": True,
                   "fails": True},
    "send_sms": {"parameters": _object(to={"type": "string"}), "permission": None, "side_effects": True},
    "log_event": {"parameters": {}, "permission": None, "side_effects": False},  # any JSON value fits
}


def _script_with_tools():
    return f"_DISPATCH_TOOLS = {TOOLS!r}\n" + DISPATCH_SCRIPT


def _oracle(calls, held, callers):
    """The expected (ok, error, content or None, tools run so far) for each call, in plain Python."""
    store, ran, out = {}, 0, []
    for call, permissions, caller in zip(calls, held, callers):
        name = call["name"]
        if name not in TOOLS:
            out.append((False, "unknown_tool", None, ran))
            continue
        tool = TOOLS[name]
        try:
            arguments = json.loads(call["arguments"])
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict) or not jsonschema.Draft202012Validator(tool["parameters"]).is_valid(arguments):
            out.append((False, "invalid_arguments", None, ran))
            continue
        if tool["permission"] is not None and tool["permission"] not in permissions:
            out.append((False, "permission_denied", None, ran))
            continue
        key = call.get("idempotency_key")
        scoped = (caller, key)  # the exercise's rule: a key belongs to the caller that sent it
        if tool["side_effects"]:
            if key is None:
                out.append((False, "missing_idempotency_key", None, ran))
                continue
            if scoped in store:
                first = store[scoped]
                out.append(first[2][:3] + (ran,) if first[:2] == (name, arguments) else
                           (False, "idempotency_conflict", None, ran))
                continue
        ran += 1
        if tool.get("fails"):
            result = (False, "tool_error", None)
        else:
            result = (True, None, json.dumps({"tool": name, "arguments": arguments}))
        if tool["side_effects"]:
            store[scoped] = (name, arguments, result)
        out.append(result + (ran,))
    return out


def _call(name, arguments, key=None, raw=False):
    call = {"id": f"call_{name}", "name": name, "arguments": arguments if raw else json.dumps(arguments)}
    if key is not None:
        call["idempotency_key"] = key
    return call


PAY = {"to": "DE1234", "amount": 250, "currency": "EUR"}
WRITE = ["payments:write"]
SESSIONS = {
    "the allow-list and the arguments": [
        (_call("get_time", {"city": "Lima"}), [], "a valid call runs: ok, content = json.dumps(its return value)"),
        (_call("rm_rf", {"path": "/"}), ["files:read"], "a name not in tools: unknown_tool, nothing runs"),
        (_call("get_time", "{'city': 'Lima'}", raw=True), [], "arguments that are not JSON: invalid_arguments"),
        (_call("get_time", "[\"Lima\"]", raw=True), [], "arguments that are JSON but not an object: invalid_arguments"),
        (_call("log_event", "[\"boot\"]", raw=True), [],
         "arguments that are JSON but not an object: invalid_arguments, even where the schema allows any value"),
        (_call("log_event", "42", raw=True), [],
         "arguments that are JSON but not an object: invalid_arguments, even where the schema allows any value"),
        (_call("log_event", {"event": "boot"}), [], "a valid call runs: ok, content = json.dumps(its return value)"),
        (_call("get_time", {"city": "Lima", "tz": "UTC"}), [], "a fabricated argument fails the schema: invalid_arguments"),
        (_call("get_time", {"city": 7}), [], "a wrong type fails the schema: invalid_arguments"),
        (_call("get_time", {}), [], "a missing required argument fails the schema: invalid_arguments"),
        (_call("read_file", {"path": "/etc/passwd"}), [], "a permission the caller lacks: permission_denied, nothing runs"),
        (_call("read_file", {"path": "notes.txt"}), ["files:read"], "with the permission the call runs"),
    ],
    "side effects and idempotency keys": [
        (_call("transfer", PAY, "k1"), [], "a side-effecting call without the permission: permission_denied, nothing runs"),
        (_call("transfer", PAY), WRITE, "a side-effecting call without a key: missing_idempotency_key, nothing runs"),
        (_call("transfer", PAY, "k1"), WRITE, "with the permission and a key: the transfer runs once"),
        (_call("transfer", PAY, "k1"), WRITE, "a repeated key returns the stored result without running again"),
        (_call("transfer", '{"currency": "EUR", "amount": 250, "to": "DE1234"}', "k1", raw=True), WRITE,
         "the same arguments in another key order are the same request: the stored result, no run"),
        (_call("transfer", {**PAY, "amount": 900}, "k1"), WRITE,
         "the same key with other arguments: idempotency_conflict, nothing runs"),
        (_call("transfer", {**PAY, "amount": 900}, "k2"), WRITE, "a new key is a new request: it runs"),
        (_call("send_email", {"to": "a@b.c"}, "k1"), [], "the same key for another tool: idempotency_conflict"),
        (_call("send_email", {"to": "a@b.c"}, "e1"), [], "a tool that raises gives tool_error, a result and not a crash"),
        (_call("send_email", {"to": "a@b.c"}, "e1"), [],
         "retrying a failed side-effecting call with its key returns the stored tool_error, no second run"),
        (_call("send_email", {"to": "a@b.c"}), [], "a side-effecting call without a key: missing_idempotency_key"),
        (_call("get_time", {"city": "Oslo"}, "t1"), [], "a tool without side effects runs every time, key or not"),
        (_call("get_time", {"city": "Oslo"}, "t1"), [], "a tool without side effects runs every time, key or not"),
    ],
    "keys belong to their caller": [
        (_call("transfer", PAY, "k9"), WRITE, "with the permission and a key: the transfer runs once", "ana"),
        (_call("transfer", PAY, "k9"), WRITE,
         "another caller sending the same key starts its own request: it runs, never returns the other's result",
         "ben"),
        (_call("transfer", PAY, "k9"), WRITE, "a repeated key returns that caller's stored result without running again",
         "ben"),
        (_call("transfer", {**PAY, "amount": 900}, "k9"), WRITE,
         "another caller's key with other arguments is no conflict: a new request, it runs", "cy"),
        (_call("transfer", {**PAY, "amount": 900}, "k9"), WRITE,
         "the same key with other arguments: idempotency_conflict (the caller's own key)", "ana"),
        (_call("send_sms", {"to": "a@b.c"}, "s1"), [], "with a key the side-effecting call runs", "ana"),
        (_call("send_email", {"to": "a@b.c"}, "s1"), [],
         "the same key and the same arguments for another tool: idempotency_conflict", "ana"),
        (_call("send_sms", {"to": "a@b.c"}, "s1"), [], "a repeated key returns that caller's stored result without running again",
         "ana"),
    ],
    "the order of the checks": [
        (_call("wire_money", "not json", raw=True), [], "order: an unknown tool with bad arguments is unknown_tool"),
        (_call("transfer", {**PAY, "amount": -5}, "k1"), [],
         "order: bad arguments and no permission is invalid_arguments"),
        (_call("transfer", {**PAY, "to": "nowhere"}), WRITE, "order: bad arguments and no key is invalid_arguments"),
        (_call("transfer", PAY), [], "order: no permission and no key is permission_denied"),
        (_call("read_file", {"path": 3}), [], "order: bad arguments and no permission is invalid_arguments"),
    ],
}


def _matches(expected):
    ok, error, content, ran = expected

    def predicate(got):
        result, count = got
        if not isinstance(result, dict) or set(result) != {"ok", "content", "error"}:
            return False
        if result["ok"] is not ok or result["error"] != error or count != ran:
            return False
        if ok:
            return result["content"] == content
        return isinstance(result["content"], str) and bool(result["content"])
    return predicate


def dispatch(learner, check):
    run = learner.script(_script_with_tools(), "_dispatch_session")
    for session, steps in SESSIONS.items():
        steps = [step if len(step) == 4 else (*step, "u1") for step in steps]  # one caller unless named
        calls = [call for call, _, _, _ in steps]
        held = [permissions for _, permissions, _, _ in steps]
        callers = [caller for _, _, _, caller in steps]
        replay = Once(lambda: run(calls, held, callers)[0])
        for index, ((call, permissions, rule, caller), expected) in enumerate(zip(steps, _oracle(calls, held, callers))):
            check.that(f"{rule} ({session}, call {index + 1}: {call['name']})", _item(index, replay), _matches(expected),
                       f"the result or the number of tool runs is wrong; results are {{'ok', 'content', 'error'}} "
                       f"and a refused call never runs its tool")
