"""Visible checks for notebook 05 (structured output and tool calling).

The constrained decode loop is compared with the course's own guided decoding
(``course_lib.generation.generate`` with the guide: the serving engine), jsonschema judges every
sampled output, and the other exercises have hand-worked cases.
"""
from __future__ import annotations

import copy
import json

import jsonschema
import numpy as np
import torch

from course_lib.checks.report import expect_equal, expect_raises

# -- exercise 1: the enum mask -----------------------------------------------------------------
# A toy vocabulary: ID 5 is the end token (a special token, so it spells no text).
TOY_TOKENS = [b"y", b"es", b"no", b"yes", b"n", b"", b"o", b"may", b"be", b"maybe!", b"ne"]
TOY_OPTIONS = ["yes", "no", "none", "maybe"]
TOY_EOS = 5


def enum_allowed_tokens(fn) -> None:
    def run(emitted, options=TOY_OPTIONS, tokens=TOY_TOKENS, eos=TOY_EOS):
        got = fn(list(options), list(tokens), emitted, eos)
        return [int(t) for t in got] if isinstance(got, (list, tuple)) else got

    expect_equal("nothing emitted yet: every token that starts an option", run(b""), [0, 2, 3, 4, 7],
                 hint="keep token t when emitted + token_bytes[t] is a prefix of some option's UTF-8 bytes")
    expect_equal("after b'y': only b'es' continues 'yes'", run(b"y"), [1],
                 hint="prefix the token's bytes with what was emitted before comparing")
    expect_equal("after b'yes' (a whole option): only the end token", run(b"yes"), [TOY_EOS],
                 hint="add eos_id when emitted equals an option exactly")
    expect_equal("after b'no' (an option and the start of 'none'): the end token, b'n' and b'ne'", run(b"no"),
                 [4, TOY_EOS, 10], hint="an option can be a prefix of another: both rules apply")
    expect_equal("after b'n': b'o' (for 'no' and 'none')", run(b"n"), [6])
    expect_equal("after b'may': b'be' completes 'maybe'; b'maybe!' is too long", run(b"may"), [8])
    expect_equal("after b'x' (no option starts so): nothing, not even the end token", run(b"x"), [])
    expect_equal("no options at all: nothing, not even the end token", run(b"", options=[]), [])
    expect_equal("option 'yes' after b'y': b'es' only; a special token's b'' is not text", run(b"y", options=["yes"]),
                 [1], hint="skip every token whose bytes are b''; only eos_id may be added, by the eos rule")
    cafe = [b"caf", b"\xc3", b"\xa9", b"\xc3\xa9", b"e", b""]  # b"\xc3" is half of "é"
    expect_equal("'café' vs 'cafe' after b'caf': half an é (b'\\xc3') is allowed", run(b"caf", ["café", "cafe"], cafe, 5),
                 [1, 3, 4], hint="compare bytes, not decoded text: a token may end inside a character")
    expect_equal("after b'caf\\xc3': the other half of the é", run(b"caf\xc3", ["café", "cafe"], cafe, 5), [2])
    expect_equal("after the whole 'café': the end token", run("café".encode(), ["café", "cafe"], cafe, 5), [5])
    result = fn(["no", "none"], [b"ne", b"", b"n"], b"no", 1)
    expect_equal("the result is a sorted list, the end token in its place", (type(result).__name__, result),
                 ("list", [0, 1, 2]), hint="return sorted(ids), after adding eos_id")
    # The same rule over the course model's whole vocabulary, against the course's RegexGuide.
    from course_lib.model import load_tokenizer
    from course_lib.structured.guide import RegexGuide
    from course_lib.structured.vocabulary import TokenVocabulary

    vocab = TokenVocabulary.of(load_tokenizer("tinychat"))
    days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    guide = RegexGuide("|".join(days), vocab)
    for emitted in (b"", b"T", b"Thu", b"Tuesday"):
        state = guide.dfa.walk(guide.initial_state, emitted)
        expect_equal(f"tinychat's {vocab.size} tokens, the seven days, after {emitted!r}: same as RegexGuide",
                     fn(days, list(vocab.token_bytes), emitted, vocab.eos_id), guide.allowed_tokens(state))


# -- exercise 2: walking a token through the byte DFA -------------------------------------------
def _toy_table() -> list[list[int]]:
    """State 0 -a-> 1, 1 -b-> 2, 1 -c-> 0 (back to the start), 2 -x-> 1; -1 everywhere else."""
    table = [[-1] * 256 for _ in range(3)]
    table[0][ord("a")] = 1
    table[1][ord("b")] = 2
    table[1][ord("c")] = 0
    table[2][ord("x")] = 1  # the last row: table[-1] in Python, which a dead state must never read
    return table


def walk_token(fn) -> None:
    table = _toy_table()
    for kind, given in (("a list of lists", table), ("a NumPy array", np.array(table, dtype=np.int32))):
        expect_equal(f"b'ab' from state 0 reaches state 2 ({kind})", fn(given, 0, b"ab"), 2)
        expect_equal(f"b'q' dies at once: None, not -1 ({kind})", fn(given, 0, b"q"), None,
                     hint="return None as soon as the table says -1")
        expect_equal(f"b'ac' leads back to state 0, a real state ({kind})", fn(given, 0, b"ac"), 0,
                     hint="state 0 is the start state, not 'dead': compare with -1 (or None), never test truthiness")
        expect_equal(f"an empty token leaves the state unchanged ({kind})", [fn(given, s, b"") for s in (0, 1, 2)],
                     [0, 1, 2])
        expect_equal(f"b'zx' dies on 'z' and stays dead ({kind})", fn(given, 0, b"zx"), None,
                     hint="stop at the first -1: table[-1] is the last row in Python, so going on revives the walk")
        expect_equal(f"b'abx' ends in state 1 ({kind})", fn(given, 0, b"abx"), 1)
        expect_equal(f"b'ba' dies on the first byte, whatever follows ({kind})", fn(given, 0, b"ba"), None)
    expect_equal("the result is an int (or None)", isinstance(fn(table, 0, b"a"), (int, np.integer)), True)
    from course_lib.structured.dfa import compile_regex

    data = compile_regex("café|€+").to_bytes()
    for token in (b"caf", b"caf\xc3", b"caf\xc3\xa9", b"\xe2\x82", b"\xe2\x82\xac\xe2", b"cafe", b"\xe2\x28"):
        expect_equal(f"the byte DFA of 'café|€+': {token!r} from the start", fn(data.table, data.start, token),
                     data.walk(data.start, token))


# -- exercise 3: one constrained sampling step ----------------------------------------------------
def _uniforms(seed: int, n: int) -> list[float]:
    twin = torch.Generator().manual_seed(seed)
    return [torch.rand((), generator=twin, dtype=torch.float64).item() for _ in range(n)]


def constrained_sample(fn) -> None:
    from course_lib.sampling import SamplingParams, sample_next_token

    def draws(logits, allowed, params, seed, n):
        generator = torch.Generator().manual_seed(seed)
        return [fn(torch.tensor(logits), torch.tensor(allowed), params, generator) for _ in range(n)]

    z, allowed = [3.0, 2.0, 1.0, 0.5], [False, True, True, False]
    expect_equal("greedy (T = 0) takes the best *allowed* token", fn(torch.tensor(z), torch.tensor(allowed),
                                                                    SamplingParams(temperature=0), None), 1,
                 hint="ban the disallowed tokens first (-inf), then take the argmax")
    expect_equal("greedy with negative logits: a banned token must become -inf, not 0",
                 fn(torch.tensor([-5.0, -6.0, -7.0]), torch.tensor([False, True, True]), SamplingParams(temperature=0),
                    None), 1, hint="logits.masked_fill(~allowed, float('-inf')); multiplying by the mask gives 0")
    top = [5.0, 4.0, 1.0, 0.0]
    legal = [False, False, True, True]
    expect_equal("top-p 0.5 after the mask keeps only the best allowed token (20 draws)",
                 draws(top, legal, SamplingParams(temperature=1.0, top_p=0.5), 0, 20), [2] * 20,
                 hint="mask first, then temperature, top-k, top-p and min-p: the filters choose among allowed tokens")
    expect_equal("top-k 1 after the mask keeps the best allowed token (20 draws)",
                 draws(top, legal, SamplingParams(temperature=1.0, top_k=1), 1, 20), [2] * 20)
    expect_equal("min-p 0.5 is measured against the best allowed token (20 draws)",
                 draws(top, legal, SamplingParams(temperature=1.0, min_p=0.5), 2, 20), [2] * 20)
    # At T = 1 top-p 0.7 keeps only the first of [2, 0.5, 0, -1]; tempered to T = 3 first, it keeps several.
    tempered = draws([2.0, 0.5, 0.0, -1.0], [True] * 4, SamplingParams(temperature=3.0, top_p=0.7), 9, 40)
    expect_equal("temperature before top-p: at T = 3 the nucleus of top_p = 0.7 holds more than one token (40 draws)",
                 len(set(tempered)) > 1, True, hint="apply_temperature first, then top-k, top-p and min-p")
    spread = [0.5, 0.1, 0.3, 0.2, 0.0, 0.4]
    mask = [True, False, True, True, False, True]
    for seed, params in ((3, SamplingParams(temperature=1.0)), (4, SamplingParams(temperature=1.5, top_p=0.9)),
                         (5, SamplingParams(temperature=0.7, top_k=3))):
        generator = torch.Generator().manual_seed(seed)
        expected = [int(sample_next_token(torch.tensor(spread), params, generator, allowed=torch.tensor(mask)))
                    for _ in range(30)]
        expect_equal(f"30 seeded draws (seed {seed}, T={params.temperature:g}, top_k={params.top_k}, "
                     f"top_p={params.top_p:g}) follow the inverse-CDF rule", draws(spread, mask, params, seed, 30),
                     expected, hint="softmax in float64, one float64 uniform per call, the first index whose "
                                    "cumulative sum exceeds u x total (sample_from_probs does exactly that)")
    picked = draws(spread, mask, SamplingParams(temperature=2.0), 6, 400)
    expect_equal("400 draws at T = 2 never pick a banned token", set(picked) <= {0, 2, 3, 5}, True)
    generator = torch.Generator().manual_seed(7)
    fn(torch.tensor(spread), torch.tensor(mask), SamplingParams(temperature=1.0), generator)
    expect_equal("one call at T > 0 draws exactly one uniform from the generator",
                 torch.rand((), generator=generator, dtype=torch.float64).item(), _uniforms(7, 2)[1])
    generator = torch.Generator().manual_seed(8)
    fn(torch.tensor(spread), torch.tensor(mask), SamplingParams(temperature=0), generator)
    expect_equal("a greedy call draws nothing", torch.rand((), generator=generator, dtype=torch.float64).item(),
                 _uniforms(8, 1)[0], hint="at T = 0 return the argmax before any sampling")
    expect_equal("returns a Python int", type(fn(torch.tensor(z), torch.tensor(allowed), SamplingParams(temperature=0),
                                                 None)).__name__, "int")
    expect_equal("returns a Python int when it samples (T > 0) too",
                 type(fn(torch.tensor(z), torch.tensor(allowed), SamplingParams(temperature=1.0),
                         torch.Generator().manual_seed(0))).__name__, "int", hint="int(sample_from_probs(...))")
    expect_raises("no allowed token at all raises ValueError",
                  lambda: fn(torch.tensor(z), torch.tensor([False] * 4), SamplingParams(temperature=1.0),
                             torch.Generator().manual_seed(0)), ValueError)
    expect_raises("no allowed token at all raises ValueError, greedy (T = 0) too",
                  lambda: fn(torch.tensor(z), torch.tensor([False] * 4), SamplingParams(temperature=0), None),
                  ValueError, hint="check allowed.any() before the greedy shortcut")


# -- exercise 4: the constrained decode loop ---------------------------------------------------
BOOKING_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 20},
        "party_size": {"type": "integer", "minimum": 1, "maximum": 12},
        "day": {"type": "string", "enum": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday",
                                           "Sunday"]},
        "time": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"},
    },
    "required": ["name", "party_size", "day", "time"],
    "additionalProperties": False,
}


def _reference_decode(model, tokenizer, messages, guide, temperature, max_new_tokens, seed, top_p=1.0):
    """The course's own guided decoding: ``course_lib.generation.generate`` with the guide, which runs
    the serving engine (KV cache, the guide's mask on every row, one float64 uniform per draw),
    read back into the exercise's dict."""
    from course_lib.generation.generate import generate
    from course_lib.sampling import SamplingParams
    from course_lib.tokenization.chat_template import encode_chat

    params = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
    done = generate(model, tokenizer, encode_chat(tokenizer, messages), params,
                    generator=torch.Generator().manual_seed(seed), guide=guide)
    value = json.loads(done.text) if done.finish_reason == "stop" else None
    return {"text": done.text, "value": value, "token_ids": list(done.token_ids), "finish_reason": done.finish_reason}


def _valid(text) -> bool:
    try:
        jsonschema.validate(json.loads(text), BOOKING_SCHEMA)
    except Exception:  # any failure to parse or validate is "not valid"
        return False
    return True


def constrained_decode(fn) -> None:
    from course_lib.model import load_model, load_tokenizer
    from course_lib.sampling import SamplingParams
    from course_lib.structured.guide import JSONGuide

    model, tokenizer = load_model("tinychat", device="cpu"), load_tokenizer("tinychat")
    guide = JSONGuide(BOOKING_SCHEMA, tokenizer)
    easy = [{"role": "user", "content": "Extract the booking as JSON: Book a table for 4 under Garcia on Friday at 19:30."}]
    hard = [{"role": "user", "content": "Extract the booking as JSON: table for 3 under Patel, Saturday 19:00 please."}]

    def run(messages, temperature, max_new_tokens, seed):
        got = fn(model, tokenizer, messages, guide, SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens),
                 torch.Generator().manual_seed(seed))
        if isinstance(got, dict) and "token_ids" in got:
            got = {**got, "token_ids": [int(t) for t in got["token_ids"]]}
        return got

    expected = _reference_decode(model, tokenizer, easy, guide, 0, 60, 0)
    got = run(easy, 0, 60, 0)
    expect_equal("greedy: the same tokens, text, value and finish reason as the course's guided decoding", got,
                 expected, hint="each step: logits of the last position, constrained_sample with "
                                "guide.mask(state), then guide.next_state; stop at guide.eos_id")
    for seed in (0, 1, 2):
        got = run(hard, 1.5, 80, seed)
        ok = isinstance(got, dict) and got.get("finish_reason") == "stop" and _valid(got.get("text")) \
            and got.get("value") == json.loads(got["text"])
        expect_equal(f"T = 1.5, seed {seed}: finishes with 'stop', the text validates, value = json.loads(text)", ok,
                     True, hint="return {'text', 'value', 'token_ids', 'finish_reason'}; the end token is not text")
    vague = [{"role": "user", "content": "Extract the booking as JSON: a table tonight for my family."}]
    for seed in (0, 1):
        expect_equal(f"a vague request at T = 1.5, seed {seed}: the same tokens as the course's guided decoding "
                     "(one generator, one draw per step)", run(vague, 1.5, 80, seed).get("token_ids"),
                     _reference_decode(model, tokenizer, vague, guide, 1.5, 80, seed)["token_ids"],
                     hint="use the generator you were given for every step; never re-seed it")
    short = run(easy, 0, 5, 0)
    expect_equal("max_new_tokens = 5 is too few: finish reason 'length', value None, 5 tokens",
                 (short.get("finish_reason"), short.get("value"), len(short.get("token_ids", ()))), ("length", None, 5),
                 hint="after the loop, return the partial text with value None: never hand back half an object")
    expect_equal("... and the text is all 5 tokens decoded", short.get("text"),
                 tokenizer.decode(expected["token_ids"][:5]))
    whole = len(expected["token_ids"]) - 1  # every token of the greedy answer but the end token
    cut = run(easy, 0, whole, 0)
    expect_equal(f"max_new_tokens = {whole} ends on a complete object, before the end token: 'length', value None",
                 (cut.get("finish_reason"), cut.get("value"), cut.get("text")), ("length", None, expected["text"]),
                 hint="only the end token finishes a reply: after the loop the value is None, even if the text parses")


# -- exercise 5: a capped retry loop -----------------------------------------------------------
def _amount_validator(text):
    value = json.loads(text)  # json.JSONDecodeError is a ValueError
    if not isinstance(value, dict) or not isinstance(value.get("amount"), (int, float)) or value["amount"] <= 0:
        raise ValueError(f"expected an object with a positive number 'amount', got {text[:40]!r}")
    return value


def _scripted(replies):
    seen = []

    def propose(messages):
        seen.append(copy.deepcopy(list(messages)))
        return replies[len(seen) - 1] if len(seen) <= len(replies) else replies[-1]

    return propose, seen


def retry_until_valid(fn) -> None:
    question = [{"role": "user", "content": "Extract the refund as JSON: refund $7.50 for order K4821."}]
    given = copy.deepcopy(question)
    propose, seen = _scripted(['{"amount": 7.5}'])
    expect_equal("a valid first reply: (value, 1)", fn(propose, _amount_validator, given), ({"amount": 7.5}, 1))
    expect_equal("... after one call to propose", len(seen), 1)

    def in_cents(text):
        return round(_amount_validator(text)["amount"] * 100)

    expect_equal("the value is what validate returns (here cents), not the parsed reply",
                 fn(_scripted(['{"amount": 7.5}'])[0], in_cents, given), (750, 1),
                 hint="return validate(text), attempt: the validator decides what the value is")
    bad1, bad2, good = '{"amount": "7.50"', '{"amount": -7.5}', '{"amount": 7.5}'
    propose, seen = _scripted([bad1, bad2, good])
    expect_equal("two bad replies, then a good one (max_retries=2): (value, 3)",
                 fn(propose, _amount_validator, given, max_retries=2), ({"amount": 7.5}, 3))
    try:
        _amount_validator(bad1)
    except ValueError as error:
        first_error = str(error)
    expect_equal("the second call sees the bad reply (assistant) and its error (user)", seen[1] if len(seen) > 1 else None,
                 question + [{"role": "assistant", "content": bad1},
                             {"role": "user", "content": "Your reply was rejected: " + first_error[:200]}],
                 hint="append {'role': 'assistant', 'content': text}, then {'role': 'user', 'content': "
                      "'Your reply was rejected: ' + str(error)[:MAX_ERROR_CHARS]}")
    expect_equal("the third call sees both failed attempts", len(seen[2]) if len(seen) > 2 else None, 5)
    propose, seen = _scripted(["not json"])
    expect_equal("always bad, max_retries=2: (None, 3)", fn(propose, _amount_validator, given, max_retries=2), (None, 3))
    expect_equal("... and exactly 3 calls to propose (the cap holds)", len(seen), 3,
                 hint="at most max_retries + 1 attempts: a for loop over range(max_retries + 1)")
    propose, seen = _scripted(["not json"])
    expect_equal("max_retries=0: one attempt only", (fn(propose, _amount_validator, given, max_retries=0), len(seen)),
                 ((None, 1), 1))

    def wordy(text):
        raise ValueError("x" * 1000)

    propose, seen = _scripted(["?", "?"])
    fn(propose, wordy, given, max_retries=1)
    expect_equal("a 1000-character error is cut to its first 200 characters in the feedback",
                 seen[1][-1]["content"] if len(seen) > 1 else None, "Your reply was rejected: " + "x" * 200)
    expect_equal("the caller's messages are left unchanged", given, question,
                 hint="copy the messages before appending")

    def buggy(text):
        raise TypeError("a bug in the validator, not a bad reply")

    propose, seen = _scripted(["{}"])
    expect_raises("an error other than ValueError propagates (it is a bug, not a bad reply)",
                  lambda: fn(propose, buggy, given), TypeError, hint="catch ValueError only")
    expect_raises("a negative max_retries raises ValueError",
                  lambda: fn(_scripted(["{}"])[0], _amount_validator, given, max_retries=-1), ValueError)


# -- exercise 6: the dispatcher ----------------------------------------------------------------
def _tools(ran):
    def get_weather(city):
        ran.append(("get_weather", city))
        return {"city": city, "temperature_c": 18}

    def refund(order_id, amount):
        ran.append(("refund", order_id, amount))
        return {"order_id": order_id, "refunded": amount}

    def cancel(order_id):
        ran.append(("cancel", order_id))
        raise RuntimeError("the order service timed out")

    def archive(order_id):
        ran.append(("archive", order_id))
        return {"archived": order_id}

    def schema(**properties):
        return {"type": "object", "properties": properties, "required": list(properties),
                "additionalProperties": False}

    return {
        "get_weather": {"parameters": schema(city={"type": "string"}), "fn": get_weather,
                        "permission": None, "side_effects": False},
        "refund": {"parameters": schema(order_id={"type": "string", "pattern": "^[A-Z][0-9]{4}$"},
                                        amount={"type": "number", "exclusiveMinimum": 0}),
                   "fn": refund, "permission": "refunds:write", "side_effects": True},
        "cancel": {"parameters": schema(order_id={"type": "string"}), "fn": cancel,
                   "permission": None, "side_effects": True},
        "archive": {"parameters": schema(order_id={"type": "string"}), "fn": archive,
                    "permission": None, "side_effects": True},
        "ping": {"parameters": {}, "fn": lambda **kwargs: "pong", "permission": None, "side_effects": False},
    }


def _call(name, arguments, key=None):
    call = {"id": "call_1", "name": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}
    if key is not None:
        call["idempotency_key"] = key
    return call


def _kind(result):
    if not isinstance(result, dict):
        return result
    if result.get("ok") is False and not (isinstance(result.get("content"), str) and result["content"]):
        return "an error without a message in content"
    return (result.get("ok"), result.get("error"))


def dispatch(fn) -> None:
    ran, store = [], {}
    tools = _tools(ran)
    admin = {"refunds:write"}
    expect_equal("a valid call runs: ok, content = json.dumps(return value), error None",
                 fn(_call("get_weather", {"city": "Oslo"}), tools, set(), store, "alice"),
                 {"ok": True, "content": json.dumps({"city": "Oslo", "temperature_c": 18}), "error": None})
    expect_equal("a tool that is not registered: unknown_tool", _kind(fn(_call("delete_account", {}), tools, admin, store, "alice")),
                 (False, "unknown_tool"), hint="check the name against tools first")
    ran.clear()
    expect_equal("arguments that are not JSON: invalid_arguments", _kind(fn(_call("get_weather", "{city: Oslo"), tools, set(), store, "alice")),
                 (False, "invalid_arguments"))
    expect_equal("a fabricated extra argument fails the schema: invalid_arguments",
                 _kind(fn(_call("get_weather", {"city": "Oslo", "units": "kelvin"}), tools, set(), store, "alice")),
                 (False, "invalid_arguments"), hint="validate the parsed arguments with jsonschema before running")
    expect_equal("an amount of -5 fails the schema: invalid_arguments",
                 _kind(fn(_call("refund", {"order_id": "A1234", "amount": -5}, "k0"), tools, admin, store, "alice")),
                 (False, "invalid_arguments"))
    expect_equal("... and no tool ran", ran, [])
    expect_equal("refund without the permission: permission_denied",
                 _kind(fn(_call("refund", {"order_id": "A1234", "amount": 20}, "k1"), tools, set(), store, "alice")),
                 (False, "permission_denied"))
    expect_equal("... and the refund did not run", ran, [], hint="check the permission before calling fn")
    expect_equal("a side-effecting call without an idempotency key: missing_idempotency_key",
                 _kind(fn(_call("refund", {"order_id": "A1234", "amount": 20}), tools, admin, store, "alice")),
                 (False, "missing_idempotency_key"))
    first = fn(_call("refund", {"order_id": "A1234", "amount": 20}, "ticket-7"), tools, admin, store, "alice")
    expect_equal("with the permission and a key: the refund runs once", (first, ran),
                 ({"ok": True, "content": json.dumps({"order_id": "A1234", "refunded": 20}), "error": None},
                  [("refund", "A1234", 20)]))
    again = fn(_call("refund", {"order_id": "A1234", "amount": 20}, "ticket-7"), tools, admin, store, "alice")
    expect_equal("the same key again: the stored result, and the refund does not run again", (again, len(ran)),
                 (first, 1), hint="look the key up in store before running; store the result after running")
    expect_equal("the same key with other arguments: idempotency_conflict, nothing runs",
                 (_kind(fn(_call("refund", {"order_id": "A1234", "amount": 99}, "ticket-7"), tools, admin, store, "alice")), len(ran)),
                 ((False, "idempotency_conflict"), 1))
    reordered = '{"amount": 20, "order_id": "A1234"}'  # the same arguments, keys in another order
    expect_equal("the same key, the same arguments in another key order: the stored result, no run",
                 (fn(_call("refund", reordered, "ticket-7"), tools, admin, store, "alice"), len(ran)), (first, 1),
                 hint="compare the parsed arguments (dicts), not the JSON strings")
    expect_equal("the same key for another tool: idempotency_conflict, nothing runs",
                 (_kind(fn(_call("cancel", {"order_id": "A1234"}, "ticket-7"), tools, admin, store, "alice")), len(ran)),
                 ((False, "idempotency_conflict"), 1), hint="store the tool's name with the arguments and compare both")
    fn(_call("archive", {"order_id": "B2000"}, "arch-1"), tools, admin, store, "alice")
    expect_equal("the same key and the same arguments for another tool: idempotency_conflict, nothing runs",
                 (_kind(fn(_call("cancel", {"order_id": "B2000"}, "arch-1"), tools, admin, store, "alice")), len(ran)),
                 ((False, "idempotency_conflict"), 2), hint="compare the stored name too, not only the arguments")
    theirs = fn(_call("refund", {"order_id": "A1234", "amount": 20}, "ticket-7"), tools, admin, store, "bob")
    expect_equal("another caller sending alice's key starts its own request: the refund runs for bob",
                 (theirs, len(ran)), (first, 3),
                 hint="keys belong to their caller: look up and store (caller, key), never the key alone")
    expect_equal("bob's retry with that key returns bob's stored result, no run",
                 (fn(_call("refund", {"order_id": "A1234", "amount": 20}, "ticket-7"), tools, admin, store, "bob"),
                  len(ran)), (theirs, 3))
    expect_equal("a third caller reusing alice's key for other arguments is no conflict: it runs",
                 (_kind(fn(_call("refund", {"order_id": "A1234", "amount": 99}, "ticket-7"), tools, admin, store,
                           "carol")), len(ran)), ((True, None), 4), hint="store[(caller, key)], not store[key]")
    ran.clear()
    fn(_call("get_weather", {"city": "Oslo"}, "w-1"), tools, set(), store, "alice")
    fn(_call("get_weather", {"city": "Oslo"}, "w-1"), tools, set(), store, "alice")
    expect_equal("a tool without side effects runs every time, even with a repeated key", len(ran), 2,
                 hint="the idempotency store is only for tools with side_effects True")
    expect_equal("JSON that is not an object is invalid_arguments, even when the schema allows any value",
                 _kind(fn(_call("ping", "[1, 2]"), tools, set(), store, "alice")), (False, "invalid_arguments"),
                 hint="json.loads gives a list or a number just as happily: check isinstance(arguments, dict)")
    expect_equal("order of checks: an unknown tool with bad arguments is unknown_tool",
                 _kind(fn(_call("wire_money", "not json"), tools, set(), store, "alice")), (False, "unknown_tool"))
    expect_equal("order of checks: bad arguments and no permission is invalid_arguments",
                 _kind(fn(_call("refund", {"order_id": "nope", "amount": 20}, "k2"), tools, set(), store, "alice")),
                 (False, "invalid_arguments"), hint="allow-list, arguments, permission, idempotency key, then run")
    expect_equal("order of checks: no permission and no key is permission_denied",
                 _kind(fn(_call("refund", {"order_id": "A1234", "amount": 20}), tools, set(), store, "alice")),
                 (False, "permission_denied"))
    ran.clear()
    failed = fn(_call("cancel", {"order_id": "A1234"}, "cancel-1"), tools, set(), store, "alice")
    expect_equal("a tool that raises: tool_error (a result, not a crash)", _kind(failed), (False, "tool_error"),
                 hint="wrap fn(**arguments) in try/except Exception")
    expect_equal("retrying the failed side-effecting call with its key returns the stored error, no second run",
                 (fn(_call("cancel", {"order_id": "A1234"}, "cancel-1"), tools, set(), store, "alice"), len(ran)), (failed, 1),
                 hint="store the result of a side-effecting call whether it succeeded or failed")


# Progressive hints, gentlest first; the last one all but gives the method (see checks/hints.py).
HINTS = {
    "enum_allowed_tokens": [
        "Work in bytes throughout: encode each option once with option.encode('utf-8').",
        "A token t is allowed when some option's bytes start with emitted + token_bytes[t]; skip tokens "
        "whose bytes are b'' (special tokens).",
        "Loop over enumerate(token_bytes), collect the allowed IDs, then append eos_id if emitted is in the "
        "list of encoded options, and return sorted(ids).",
    ],
    "walk_token": [
        "Read the bytes one at a time: iterating over a bytes object gives ints 0..255.",
        "After each byte, `state = int(table[state][byte])`; the moment it is -1, return None.",
        "Never test `if not state:`: state 0 is the start state. An empty token skips the loop and returns "
        "the state it was given.",
    ],
    "constrained_sample": [
        "Three steps: ban, filter, draw. The ban comes first so the filters only rank legal tokens.",
        "`z = logits.masked_fill(~allowed, float('-inf'))`; at T = 0 return int(z.argmax()) before anything else.",
        "Then apply_temperature, apply_top_k, apply_top_p, apply_min_p (in that order, with params' values), "
        "`probs = torch.softmax(z.double(), -1)` and `int(sample_from_probs(probs, generator))`.",
    ],
    "constrained_decode": [
        "It is notebook 04's generate loop with one change: the guide's mask goes into every sampling step.",
        "Start with `ids = encode_chat(tokenizer, messages)` and `state = guide.initial_state`; each step take "
        "`model(torch.tensor([ids]))[0, -1]` under torch.no_grad().",
        "`token = constrained_sample(logits, guide.mask(state), params, generator)`; if token == guide.eos_id, "
        "decode the tokens before it and json.loads them ('stop'); else `state = guide.next_state(state, token)`. "
        "Out of budget: 'length' with value None.",
    ],
    "retry_until_valid": [
        "Copy the messages first; the loop appends to your copy only.",
        "`for attempt in range(1, max_retries + 2):` gives the cap for free; return (value, attempt) on success.",
        "On `except ValueError as error:` append the assistant's text, then a user message "
        "'Your reply was rejected: ' + str(error)[:MAX_ERROR_CHARS]; after the loop return (None, max_retries + 1).",
    ],
    "dispatch": [
        "Write a small helper that builds the refusal dict {'ok': False, 'content': message, 'error': kind}, "
        "and return from each check in the order given.",
        "Parse the arguments with json.loads (catch ValueError), check it is a dict, then "
        "`jsonschema.Draft202012Validator(tool['parameters']).is_valid(arguments)`.",
        "For a side-effecting tool: no key -> refuse; (caller, key) in store -> compare the stored (name, "
        "arguments) and return the stored result or a conflict; otherwise run fn(**arguments) in try/except and "
        "store (name, arguments, result) under (caller, key), success or failure.",
    ],
}
