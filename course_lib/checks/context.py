"""Visible checks for notebook 07 (context, hallucination and the product boundary).

One case per rule each exercise states. The course's own code serves as the oracle where it
has the same rule: ``pack_context(policy="passages-first")`` for the packer (on real text,
counted by the tokenizer), ``rank_bm25.BM25Okapi`` and ``BM25Index`` for BM25,
``course_lib.context.calibration`` for the threshold, ``course_lib.context.cost`` for the cost,
and the trace log's ``canonical``, ``entry_hash`` and ``verify`` for the hash chain. The
packer's numeric cases use ``reference_fit``, the rules stated as fitting prefixes rather than
as the exercise's loops; the redaction rule (simpler than the trace log's) is checked on
hand-worked cases and on texts whose redaction is known by how they were built. The hidden
tests (grading/hidden/07_context.py) use the same sources.
"""
from __future__ import annotations

import copy
import itertools
import json
import math
import random
import re
from collections import Counter

from course_lib.checks.report import CheckFailed, expect_close, expect_equal, expect_raises

# -- exercise 1: the context packer --------------------------------------------------------------
PACK_KEYS = ["left", "passages", "prompt_tokens", "turns"]


def reference_fit(window, reserve_output, margin, system_tokens, question_tokens, turns, passages) -> dict:
    """The packing rules stated as prefixes, not as the exercise's loops: the kept passages are the
    longest prefix of the ranking (score descending, ties in input order) that fits beside the
    required parts; the kept turns are the longest run of newest turns that fits in what is left."""
    budget = window - reserve_output - margin
    required = system_tokens + question_tokens
    if required > budget:
        raise ValueError(f"over by {required - budget} tokens")

    def fitting(sizes, room):  # how many of sizes, from the first, fit in room together
        return sum(1 for total in itertools.accumulate(sizes) if total <= room)

    ranking = sorted(passages, key=lambda p: -p[2])
    kept = ranking[:fitting([p[1] for p in ranking], budget - required)]
    used = required + sum(p[1] for p in kept)
    newest = fitting(turns[::-1], budget - used)
    used += sum(turns[len(turns) - newest:])
    return {"passages": [p[0] for p in kept], "turns": list(range(len(turns) - newest, len(turns))),
            "prompt_tokens": used, "left": budget - used}


def _plain_fit(result):
    if not isinstance(result, dict):
        return result
    out = dict(result)
    for key in ("passages", "turns"):
        if isinstance(out.get(key), tuple):
            out[key] = list(out[key])
    return out


def _overflow_message(call) -> str:
    try:
        call()
    except ValueError as exc:
        return str(exc)
    except Exception as exc:  # the wrong kind of error is a failure, with its name
        raise CheckFailed(f"overflow: expected ValueError, got {type(exc).__name__}: {exc}") from None
    raise CheckFailed("overflow: expected ValueError saying by how many tokens, got no error. Hint: "
                      "raise ValueError when system_tokens + question_tokens > window - reserve_output - margin")


def _real_request_counts():
    """A real request, counted piece by piece through the chat template, and what the
    course's packer (passages-first) makes of it."""
    from course_lib.context.budget import pack_context
    from course_lib.data.passages import Passage, user_with_passages
    from course_lib.model import load_tokenizer
    from course_lib.tokenization.chat_template import encode_chat

    tokenizer = load_tokenizer("tinychat")
    system = "You are TinyChat. Answer from the passages and cite the passage id."
    history = [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help?"},
               {"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4"},
               {"role": "user", "content": "And the capital of Peru?"}, {"role": "assistant", "content": "Lima."},
               {"role": "user", "content": "How many legs does a kimbrel have?"}]
    passages = [Passage("3", "A kimbrel has 6 legs.", 2.1), Passage("8", "A spider has 8 legs.", 0.9),
                Passage("5", "Every kimbrel walks on 6 legs, except in winter, when it rests.", 1.4),
                Passage("1", "The capital of Peru is Lima.", 0.2)]

    def cost(messages):
        return len(encode_chat(tokenizer, messages, add_generation_prompt=False))

    question = history[-1]["content"]
    system_tokens = cost([{"role": "system", "content": system}])
    question_tokens = cost([history[-1]]) + len(encode_chat(tokenizer, []))  # + the generation prompt
    ranked = sorted(passages, key=lambda p: -p.score)
    rows = []
    for i, p in enumerate(ranked):
        grown = cost([{"role": "user", "content": user_with_passages(question, ranked[:i + 1])}])
        before = cost([{"role": "user", "content": user_with_passages(question, ranked[:i])}])
        rows.append([p.id, grown - before, p.score])
    turns = [cost(history[i:i + 2]) for i in range(0, len(history) - 1, 2)]
    return tokenizer, system, history, passages, system_tokens, question_tokens, rows, turns, pack_context


def fit_context(fn) -> None:
    def run(window, reserve, margin, system, question, turns, passages):
        return _plain_fit(fn(window, reserve, margin, system, question, list(turns), copy.deepcopy(passages)))

    passages = [["a", 30, 0.5], ["b", 20, 2.0], ["c", 25, 1.0]]
    got = run(200, 40, 10, 50, 20, [15, 18, 12], passages)
    expect_equal("returns a dict with passages, turns, prompt_tokens, left", sorted(got) if isinstance(got, dict) else got,
                 PACK_KEYS)
    expect_equal("worked example: budget 200 - 40 - 10 = 150; passages by score: b, c, a all fit (75 tokens)",
                 got["passages"], ["b", "c", "a"], hint="sort by score, highest first; keep each that fits")
    expect_equal("worked example: 150 - 70 - 75 = 5 left: no turn fits", got["turns"], [])
    expect_equal("worked example: prompt_tokens counts system, question and everything kept (145), left = 5",
                 [got["prompt_tokens"], got["left"]], [145, 5],
                 hint="prompt_tokens = system + question + kept passages + kept turns; left = budget - prompt_tokens")
    got = run(200, 40, 0, 50, 20, [15, 18, 12], passages)
    expect_equal("the margin counts too: with margin 0 the budget is 160 and one turn fits", got["turns"], [2],
                 hint="budget = window - reserve_output - margin")
    got = run(300, 100, 10, 50, 20, [15, 18, 12], passages)
    expect_equal("the reserved output counts: budget 300 - 100 - 10 = 190, passages 75, turns 45", [got["turns"], got["left"]],
                 [[0, 1, 2], 0], hint="budget = window - reserve_output - margin")
    got = run(190, 0, 0, 50, 20, [15, 18, 12], passages)
    expect_equal("an exact fit is kept (tokens <= left)", [got["passages"], got["turns"], got["left"]],
                 [["b", "c", "a"], [0, 1, 2], 0], hint="a piece fits when its tokens are at most what is left")
    got = run(110, 0, 0, 50, 20, [5, 5, 5], [["big", 50, 3.0], ["small", 5, 2.0], ["tiny", 1, 1.0]])
    expect_equal("passages are kept whole, as a prefix of the ranking: once one does not fit, every lower one is "
                 "dropped (a smaller one does not jump the queue)", got["passages"], [],
                 hint="break at the first passage that does not fit, do not skip it and continue")
    expect_equal("... and the history then takes what is left: all three turns", got["turns"], [0, 1, 2])
    got = run(90, 0, 0, 30, 10, [20, 20, 25, 15], [])
    expect_equal("history: the newest turns are kept, the oldest dropped first", got["turns"], [2, 3],
                 hint="walk the turns from the newest (the end of the list) back")
    expect_equal("kept turns are returned oldest first (ascending indices)", got["turns"], sorted(got["turns"]))
    got = run(110, 0, 0, 30, 10, [5, 40, 20, 15], [])
    expect_equal("history: at the first turn that does not fit, it and every older turn are dropped (no gaps)",
                 got["turns"], [2, 3], hint="break at the first turn that does not fit; a kept history has no holes")
    got = run(150, 0, 0, 30, 10, [40, 20, 20], [["p", 50, 1.0], ["q", 20, 0.5]])
    expect_equal("passages come first: they take the budget, then turns get what is left (passages-first)",
                 [got["passages"], got["turns"]], [["p", "q"], [1, 2]],
                 hint="fill the passages in rank order before the history")
    got = run(500, 0, 0, 10, 10, [], [["x", 5, 1.0], ["y", 5, 2.0], ["z", 5, 1.0], ["w", 5, 2.0]])
    expect_equal("ties keep the input order (a stable sort by score, highest first)", got["passages"],
                 ["y", "w", "x", "z"], hint="sorted(passages, key=lambda p: -p[2]) is stable")
    got = run(60, 0, 0, 30, 10, [], [["x", 5, 1.0]])
    expect_equal("no turns at all: an empty history", [got["turns"], got["prompt_tokens"], got["left"]], [[], 45, 15])
    message = _overflow_message(lambda: run(100, 30, 10, 45, 20, [5], [["a", 1, 1.0]]))
    print("✓ system + question over the budget raises ValueError ->", repr(message))
    if not re.search(r"(?<![\d.])5(?![\d.])", message):
        raise CheckFailed(f"the overflow message must say by how many tokens (65 needed, budget 60: over by 5), "
                          f"got {message!r}. Hint: f'... over by {{needed - budget}} tokens'")
    print("✓ ... and the message says by how many tokens (5)")
    message = _overflow_message(lambda: run(512, 128, 16, 300, 97, [], []))
    if not re.search(r"(?<![\d.])29(?![\d.])", message):
        raise CheckFailed(f"the overflow message must say by how many tokens (397 needed, budget 368: over by 29), "
                          f"got {message!r}")
    print("✓ a second overflow: the message says over by 29 ->", repr(message))
    got = run(100, 30, 10, 40, 20, [5], [["a", 1, 1.0]])
    expect_equal("required parts that exactly fill the budget do not raise", [got["passages"], got["left"]], [[], 0])

    tokenizer, system, history, passages_, system_tokens, question_tokens, rows, turns, pack_context = _real_request_counts()
    for window in (420, 200, 170, 150, 130):
        packed = pack_context(system, [], history, passages_, tokenizer=tokenizer, window=window, reserve_output=64,
                              margin=4, policy="passages-first")
        got = run(window, 64, 4, system_tokens, question_tokens, turns, rows)
        kept_turns = [(len(turns) - packed.kept_turns) + i for i in range(packed.kept_turns)]
        expect_equal(f"real text counted by the tokenizer, window {window}: the same passages, turns and prompt "
                     "tokens as the course's pack_context(policy='passages-first')",
                     [got["passages"], got["turns"], got["prompt_tokens"]],
                     [list(packed.kept_passages), kept_turns, packed.prompt_tokens])
    rng = random.Random(7)
    for case in range(30):
        turns = [rng.randint(1, 40) for _ in range(rng.randint(0, 8))]
        passages = [[f"p{i}", rng.randint(1, 60), rng.choice([0.5, 1.0, 1.5, rng.uniform(0, 3)])]
                    for i in range(rng.randint(0, 7))]
        system, question = rng.randint(1, 60), rng.randint(1, 30)
        window, reserve, margin = rng.randint(120, 400), rng.randint(0, 80), rng.randint(0, 20)
        args = (window, reserve, margin, system, question, turns, passages)
        try:
            expected = reference_fit(*args)
        except ValueError:
            expect_raises(f"random case {case}: required parts over the budget raise ValueError",
                          lambda: run(*args), ValueError)
            continue
        expect_equal(f"random case {case} ({len(passages)} passages, {len(turns)} turns, budget "
                     f"{window - reserve - margin})", run(*args), expected)


# -- exercise 2: BM25 ----------------------------------------------------------------------------
def _okapi(query, corpus, k1=1.5, b=0.75, epsilon=0.25) -> list[float]:
    from rank_bm25 import BM25Okapi

    return [float(s) for s in BM25Okapi(corpus, k1=k1, b=b, epsilon=epsilon).get_scores(query)]


def _idf_table(corpus):
    n = len(corpus)
    holding = Counter(t for doc in corpus for t in set(doc))
    return {t: math.log(n - m + 0.5) - math.log(m + 0.5) for t, m in holding.items()}


def bm25_scores(fn) -> None:
    def run(query, corpus, **kw):
        return fn(list(query), [list(doc) for doc in corpus], **kw)

    corpus = [["tokyo", "is", "the", "capital", "of", "japan"], ["paris", "is", "the", "capital", "of", "france"],
              ["kyoto", "was", "the", "capital", "of", "japan", "for", "a", "thousand", "years"],
              ["rome", "is", "the", "capital", "of", "italy"], ["sushi", "is", "a", "dish", "from", "japan"]]
    got = run(["capital", "of", "japan"], corpus)
    expect_equal("returns one score per passage", len(got) if hasattr(got, "__len__") else got, len(corpus))
    expect_close("the worked example: 'capital of japan' over five passages, equal to rank_bm25's BM25Okapi",
                 got, _okapi(["capital", "of", "japan"], corpus), atol=1e-9,
                 hint="idf = log(N - n + 0.5) - log(n + 0.5); negative idfs become epsilon x the average idf")
    expect_close("... and to the course's BM25Index", got, _course_index_scores(corpus, "capital of japan"), atol=1e-9)
    idf = _idf_table(corpus)
    floor = 0.25 * sum(idf.values()) / len(idf)
    one = run(["capital"], corpus)
    dl = [len(d) for d in corpus]
    avgdl = sum(dl) / len(dl)
    expect_close("'capital' is in 4 of 5 passages: idf < 0, so it is replaced by epsilon x average idf (over every "
                 "corpus term, before the floor)",
                 one, [floor * 2.5 / (1 + 1.5 * (0.25 + 0.75 * d / avgdl)) if "capital" in doc else 0.0
                       for d, doc in zip(dl, corpus)], atol=1e-9,
                 hint="floor = epsilon * sum(idf.values()) / len(idf), computed before any idf is replaced")
    half = [["x", "y"], ["x", "z"], ["w"], ["v"]]
    expect_close("a term in exactly half the passages has idf log(1) = 0: it is not floored (only idf < 0 is)",
                 run(["x"], half), [0.0, 0.0, 0.0, 0.0], atol=1e-12,
                 hint="replace an idf only when it is strictly below 0")
    expect_close("a query term that appears in no passage adds 0", run(["zebra", "sushi"], corpus),
                 _okapi(["zebra", "sushi"], corpus), atol=1e-9)
    expect_close("a repeated query term counts each time", run(["japan", "japan"], corpus),
                 [2 * s for s in run(["japan"], corpus)], atol=1e-9,
                 hint="loop over query_terms as given, not over set(query_terms)")
    tf = [["cat", "cat", "cat", "dog"], ["dog", "dog", "eel"], ["eel", "fox", "gnu", "hen"], ["fox", "ant"], ["bee"]]
    expect_close("term frequency saturates: 3 x 'cat' scores more than 1 x, but less than 3 times as much",
                 run(["cat"], tf), _okapi(["cat"], tf), atol=1e-9,
                 hint="tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)), with tf the count in the passage")
    expect_close("n(q) counts passages holding the term, not its occurrences", run(["dog"], tf), _okapi(["dog"], tf),
                 atol=1e-9, hint="a term repeated in one passage still counts once in n(q)")
    expect_close("b = 0: no length normalization", run(["dog"], tf, b=0.0), _okapi(["dog"], tf, b=0.0), atol=1e-9)
    expect_close("k1 = 0.5, b = 1: full length normalization", run(["cat", "fox"], tf, k1=0.5, b=1.0),
                 _okapi(["cat", "fox"], tf, k1=0.5, b=1.0), atol=1e-9)
    expect_close("epsilon = 0.5 changes the floor", run(["capital", "japan"], corpus, epsilon=0.5),
                 _okapi(["capital", "japan"], corpus, epsilon=0.5), atol=1e-9)
    common = [["a", "b"], ["a", "b"], ["a", "c"]]
    expect_close("a tiny corpus of common terms: the average idf, and so the floor, is negative; keep it",
                 run(["a", "b"], common), _okapi(["a", "b"], common), atol=1e-9,
                 hint="do not clamp the floor at 0: BM25Okapi keeps a negative floor")
    expect_close("an empty passage among others scores 0", run(["a"], [["a", "b"], [], ["c"]]),
                 _okapi(["a"], [["a", "b"], [], ["c"]]), atol=1e-9)
    expect_raises("an empty corpus raises ValueError", lambda: run(["a"], []), ValueError)
    expect_raises("a corpus with no term at all raises ValueError", lambda: run(["a"], [[], []]), ValueError)
    rng = random.Random(25)
    vocab = [f"w{i}" for i in range(12)]
    for case in range(25):
        corpus = [[rng.choice(vocab[:rng.randint(2, 12)]) for _ in range(rng.randint(1, 12))] for _ in range(rng.randint(1, 9))]
        query = [rng.choice(vocab) for _ in range(rng.randint(1, 5))]
        k1, b = rng.choice([1.2, 1.5, 2.0]), rng.choice([0.0, 0.5, 0.75, 1.0])
        expect_close(f"random corpus {case} ({len(corpus)} passages, k1={k1}, b={b}): equal to BM25Okapi",
                     run(query, corpus, k1=k1, b=b), _okapi(query, corpus, k1=k1, b=b), atol=1e-9)


def _course_index_scores(corpus, query):
    from course_lib.context.bm25 import BM25Index

    index = BM25Index()
    for i, doc in enumerate(corpus):
        index.add(str(i), " ".join(doc))
    return list(index.scores(query).values())


# -- exercise 3: cost per successful task --------------------------------------------------------
COST_KEYS = ["per_request", "per_success", "tokens_usd"]


def task_cost(fn) -> None:
    got = fn(100, 80, 50_000, 10_000, 0.50, 1.50)
    expect_equal("returns a dict with tokens_usd, per_request, per_success", sorted(got) if isinstance(got, dict) else got,
                 COST_KEYS)
    expect_close("the token bill: 50,000 prompt tokens at $0.50 and 10,000 completion tokens at $1.50 per million",
                 got["tokens_usd"], 0.025 + 0.015, rtol=1e-9,
                 hint="prices are per MILLION tokens: prompt_tokens * input_per_million / 1e6 + ...")
    expect_close("cost per request = the bill / requests", got["per_request"], 0.04 / 100, rtol=1e-9)
    expect_close("cost per success = the bill / successes (failures were paid for too)", got["per_success"], 0.04 / 80,
                 rtol=1e-9, hint="divide by the successes, not the requests")
    got = fn(10, 10, 1_000_000, 0, 2.0, 100.0)
    expect_close("input tokens are priced at the input price", got["tokens_usd"], 2.0, rtol=1e-9,
                 hint="prompt tokens use input_per_million, completion tokens output_per_million")
    got = fn(10, 10, 0, 1_000_000, 100.0, 3.0)
    expect_close("completion tokens are priced at the output price", got["tokens_usd"], 3.0, rtol=1e-9)
    got = fn(100, 80, 50_000, 10_000, 0.50, 1.50, failure_cost=0.25)
    expect_close("each FAILED request adds failure_cost to the cost per success: (0.04 + 20 x 0.25) / 80",
                 got["per_success"], (0.04 + 20 * 0.25) / 80, rtol=1e-9,
                 hint="failures = requests - successes; only they carry failure_cost")
    expect_close("... but not to the cost per request, which is the token bill alone", got["per_request"], 0.04 / 100,
                 rtol=1e-9, hint="per_request is tokens_usd / requests")
    expect_close("... nor to the token bill", got["tokens_usd"], 0.04, rtol=1e-9)
    got = fn(5, 0, 1000, 100, 1.0, 1.0)
    expect_equal("no success at all: the cost per success is infinite (math.inf)", got["per_success"], math.inf,
                 hint="if successes == 0 return math.inf instead of dividing")
    expect_close("... while each request still cost its tokens", got["per_request"], 1100 / 1e6 / 5, rtol=1e-9)
    cheap, good = fn(100, 60, 40_000, 8_000, 0.10, 0.40), fn(100, 97, 40_000, 8_000, 0.15, 0.60)
    expect_equal("the lesson: the cheaper model per request can cost more per success (with a $0.02 escalation "
                 "per failure)", [cheap["per_request"] < good["per_request"],
                                  fn(100, 60, 40_000, 8_000, 0.10, 0.40, failure_cost=0.02)["per_success"]
                                  > fn(100, 97, 40_000, 8_000, 0.15, 0.60, failure_cost=0.02)["per_success"]],
                 [True, True])
    for label, args in (("zero requests", (0, 0, 10, 10, 1.0, 1.0)), ("more successes than requests", (3, 4, 10, 10, 1.0, 1.0)),
                        ("negative successes", (3, -1, 10, 10, 1.0, 1.0)), ("negative prompt tokens", (3, 1, -10, 10, 1.0, 1.0)),
                        ("negative completion tokens", (3, 1, 10, -10, 1.0, 1.0)),
                        ("a negative input price", (3, 1, 10, 10, -1.0, 1.0)),
                        ("a negative output price", (3, 1, 10, 10, 1.0, -1.0)),
                        ("a negative failure cost", (3, 1, 10, 10, 1.0, 1.0, -0.5))):
        expect_raises(f"{label} raises ValueError", lambda: fn(*args), ValueError)
    rng = random.Random(33)
    for case in range(15):
        requests = rng.randint(1, 500)
        args = (requests, rng.choice([0, requests, rng.randint(0, requests)]), rng.randint(0, 10**6), rng.randint(0, 10**5),
                rng.uniform(0, 5), rng.uniform(0, 20), rng.choice([0.0, rng.uniform(0, 2)]))
        got, expected = fn(*args), _course_cost(*args)
        expect_close(f"random run {case} ({args[0]} requests, {args[1]} successes): every figure, as "
                     "course_lib.context.cost (plus failure_cost per failure, spread over the successes)",
                     [got["tokens_usd"], got["per_request"], got["per_success"]], expected, rtol=1e-9, atol=1e-15)


def _course_cost(requests, successes, prompt_tokens, completion_tokens, input_price, output_price, failure_cost):
    """[tokens_usd, per_request, per_success] from the course's cost module."""
    from course_lib.context.cost import ModelPrice, TaskRun, cost_per_request, cost_per_success, total_cost

    run = TaskRun("m", "t", requests, successes, prompt_tokens, completion_tokens)
    price = ModelPrice("m", input_price, output_price)
    return [total_cost(run, price), cost_per_request(run, price), cost_per_success(run, price, failure_cost)]


# -- exercise 4: redaction and the hash chain ----------------------------------------------------
# The notebook's redaction rule is the exercise's own (simpler than the course's trace log), so
# its expectations are hand-worked cases and texts whose redaction is known by how they were
# built (``_planted_pii_text``); the chain's format is checked with the trace log's own
# ``canonical``, ``entry_hash`` and ``verify``, the production code that reads these logs.
def _luhn_complete(prefix: str) -> str:
    """prefix + the check digit that makes it Luhn-valid."""
    from course_lib.context.trace_log import luhn_valid

    return next(prefix + d for d in "0123456789" if luhn_valid(prefix + d))


REDACT_CASES = [
    ("an email", "write to ann.lee+work@mail.example.co.uk today", "write to [EMAIL] today"),
    ("a Luhn-valid card, grouped by spaces", "card 4111 1111 1111 1111 expires", "card [CARD] expires"),
    ("a Luhn-valid card, grouped by dashes", "card 5500-0000-0000-0004.", "card [CARD]."),
    ("a Luhn-valid card, no separators (15 digits)", "amex 378282246310005 ok", "amex [CARD] ok"),
    ("a card comes before a phone: 15 Luhn-valid digits with spaces are a card", "amex 3782 822463 10005 ok",
     "amex [CARD] ok"),
    ("a card-length number that fails Luhn is not a card (and too long for a phone)",
     "ref 4111 1111 1111 1112 kept", "ref 4111 1111 1111 1112 kept"),
    ("an international phone", "call +44 20 7946 0958 now", "call [PHONE] now"),
    ("a phone written with dashes", "or 555-123-4567.", "or [PHONE]."),
    ("a phone starting with + and no separator", "sms +15551234567", "sms [PHONE]"),
    ("a bare run of 10 digits is an id, not a phone", "order 5551234567 shipped", "order 5551234567 shipped"),
    ("short numbers, dates and amounts stay", "on 2024-05-01 pay 12.50 for 3 items, order 123456",
     "on 2024-05-01 pay 12.50 for 3 items, order 123456"),
    ("a number glued to letters stays", "hex a1234567890b and id x4111111111111111", "hex a1234567890b and id x4111111111111111"),
    ("emails are redacted before numbers", "mail tel-555-123-4567@example.com", "mail [EMAIL]"),
    ("a Luhn-valid 16-digit run starting with + is a phone? no: 16 digits is too long for a phone",
     "x +4111111111111111 y", "x +4111111111111111 y"),
    ("several in one text", "ann@x.io paid 4012 8888 8888 1881, call +1 555 010 9999",
     "[EMAIL] paid [CARD], call [PHONE]"),
    ("a 13-digit Luhn-valid run is a card, not a phone", f"n {_luhn_complete('422222222222')} z", "n [CARD] z"),
    ("a 19-digit Luhn-valid run is a card", f"n {_luhn_complete('600000000000000000')} z", "n [CARD] z"),
    ("a 12-digit run with separators is a phone (9 to 15 digits)", "n 12 3456 7890 11 z", "n [PHONE] z"),
    ("a 9-digit run with separators is a phone (9 to 15 digits)", "tel 612 345 678 ok", "tel [PHONE] ok"),
    ("a 15-digit run starting with + is a phone", "tel +12 345 678 901 234 5 ok", "tel [PHONE] ok"),
    ("Luhn subtracts 9 from a doubled digit above 9: a valid card", "pay 5555 5555 5555 4444 ok", "pay [CARD] ok"),
    ("8 digits with separators is too short for a phone", "n 1234-5678 z", "n 1234-5678 z"),
]


def _records():
    return [{"request_id": "req-1", "model": "tinychat", "tokens": {"prompt": 12, "completion": 4},
             "latency_ms": {"prefill": 2.5, "decode": 11.0}, "final_state": "answered",
             "metadata": {"user": "ann@example.com", "notes": ["card 4111 1111 1111 1111", "ok"],
                          "replies_to": {"bo@ex.com": 2}}},
            {"request_id": "req-2", "model": "tinychat", "tokens": {"prompt": 30, "completion": 6},
             "latency_ms": {"prefill": 4.0}, "final_state": "abstained",
             "metadata": {"city": "Zürich", "phone": "+41 44 668 18 00", "count": 3}},
            {"request_id": "req-3", "model": "tinychat-draft", "tokens": {"prompt": 8, "completion": 2},
             "latency_ms": {}, "final_state": "error", "metadata": {"ok": False, "value": None, "ratio": 0.5}}]


def _redacted_records():
    """``_records()`` as the rules store them: each email, card and phone in a string replaced."""
    records = _records()
    records[0]["metadata"] = {"user": "[EMAIL]", "notes": ["card [CARD]", "ok"], "replies_to": {"[EMAIL]": 2}}
    records[1]["metadata"]["phone"] = "[PHONE]"
    return records


def _tamper(lines: list[str], how: str) -> list[str]:
    from course_lib.context.trace_log import canonical, entry_hash

    lines = list(lines)
    if how == "edit":
        entry = json.loads(lines[1])
        entry["record"]["final_state"] = "answered"
        lines[1] = canonical(entry).decode("utf-8")
    elif how == "remove":
        del lines[1]
    elif how == "swap":
        lines[1], lines[2] = lines[2], lines[1]
    elif how == "truncate":
        lines[2] = lines[2][: len(lines[2]) // 2]
    elif how == "rehash":  # edit a record and fix its own hash, but not the next line's prev
        entry = json.loads(lines[0])
        entry["record"]["model"] = "gpt-x"
        entry["hash"] = entry_hash(entry["record"], entry["prev"])
        lines[0] = canonical(entry).decode("utf-8")
    elif how == "genesis":  # the first line claims another predecessor, its hash recomputed to match
        entry = json.loads(lines[0])
        entry["prev"] = "1" * 64
        entry["hash"] = entry_hash(entry["record"], entry["prev"])
        lines[0] = canonical(entry).decode("utf-8")
    elif how == "not_entry":
        lines[1] = json.dumps(["a", "list"])
    elif how == "insert":  # line 2 again after itself
        lines.insert(2, lines[1])
    elif how == "missing_key":  # a dict, but without its record
        entry = json.loads(lines[1])
        lines[1] = json.dumps({"hash": entry["hash"], "prev": entry["prev"]})
    return lines


LUHN_CASES = [("the exercise's example that passes", "4111111111111111"),
              ("the exercise's example that fails", "4111111111111112"),
              ("a doubled digit above 9 has 9 subtracted (79927398713 passes)", "79927398713"),
              ("... and one digit changed fails", "79927398710"),
              ("odd length: still every second digit from the RIGHT (378282246310005 passes)", "378282246310005")]


def trace_chain(redact_fn, chain_fn, first_bad_fn, luhn_fn=None) -> None:
    from course_lib.context.trace_log import luhn_valid

    for label, digits in LUHN_CASES if luhn_fn is not None else ():
        expect_equal(f"luhn_ok: {label}", luhn_fn(digits), luhn_valid(digits),
                     hint="from the right: double the 2nd, 4th, ... digit, minus 9 when above 9; sum % 10 == 0")
    for label, text, expected in REDACT_CASES:
        expect_equal(f"redact: {label}", redact_fn(text), expected,
                     hint="emails first; then each NUMBER_RE run: a card if no leading + and 13-19 digits that pass "
                          "Luhn, else a phone if 9-15 digits and it starts with + or has a separator")
    rng = random.Random(44)
    for case in range(20):
        text, expected = _planted_pii_text(rng)
        expect_equal(f"redact: random text {case} (each email, card and phone planted in it replaced)",
                     redact_fn(text), expected)
    from course_lib.context.trace_log import GENESIS, canonical, entry_hash

    records = _records()
    lines = chain_fn(records)  # the very dicts: a chain that redacts in place changes them
    expect_equal("chain: one line (a str) per record", [type(line).__name__ for line in lines], ["str"] * len(records))
    entries = [json.loads(line) for line in lines]
    first = entries[0]
    expect_equal("chain: each line is canonical JSON of {hash, prev, record}", lines,
                 [canonical({"hash": e.get("hash"), "prev": e.get("prev"), "record": e.get("record")}).decode()
                  for e in entries], hint="canonical({'hash': h, 'prev': prev, 'record': clean}).decode('utf-8')")
    expect_equal("chain: the first line's prev is 64 zeros (GENESIS)", first["prev"], GENESIS)
    expect_equal("chain: every string in the record is redacted, at any depth (dicts and lists)",
                 {k: v for k, v in first["record"]["metadata"].items() if k != "replies_to"},
                 {"user": "[EMAIL]", "notes": ["card [CARD]", "ok"]},
                 hint="walk dicts and lists recursively and apply redact_pii to every str")
    expect_equal("chain: dict keys are redacted too", first["record"]["metadata"].get("replies_to"), {"[EMAIL]": 2},
                 hint="build each dict as {redact_pii(key): clean(value) ...}")
    expect_equal("chain: hash = sha256 of canonical({'prev': prev, 'record': redacted record}), hex",
                 [e["hash"] for e in entries], [entry_hash(e["record"], e["prev"]) for e in entries],
                 hint="hash the REDACTED record together with prev; .hexdigest()")
    expect_equal("chain: each line's prev is the previous line's hash", [e["prev"] for e in entries[1:]],
                 [e["hash"] for e in entries[:-1]])
    expect_equal("chain: non-ASCII text is kept as is (ensure_ascii=False), numbers and None unchanged",
                 [entries[1]["record"]["metadata"]["city"], entries[2]["record"]["metadata"]], ["Zürich",
                                                                                             {"ok": False, "value": None, "ratio": 0.5}])
    expect_equal("chain: every record is stored redacted, every other field as it was",
                 [e["record"] for e in entries], _redacted_records())
    expect_equal("chain: the caller's records are not changed", records, _records(),
                 hint="build new dicts while redacting; do not write into the records you were given")
    expect_equal("chain: no records, no lines", list(chain_fn([])), [])
    import tempfile
    from pathlib import Path

    from course_lib.context.trace_log import verify

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        result = verify(path)
    expect_equal("chain: the course's `course trace verify` accepts your lines", [result.ok, result.records], [True, 3])
    expect_equal("first_bad_line: an intact log -> None", first_bad_fn(list(lines)), None)
    expect_equal("first_bad_line: an empty log -> None", first_bad_fn([]), None)
    expect_equal("first_bad_line: a log cut after a good line is, line by line, an intact chain -> None",
                 first_bad_fn(list(lines[:-1])), None)
    for how, line, rule in (("edit", 2, "an edited record breaks its own hash"),
                            ("remove", 2, "a removed line breaks the next line's prev"),
                            ("swap", 2, "swapped lines break the chain at the first of them"),
                            ("truncate", 3, "a truncated line (not JSON) is bad, not a crash"),
                            ("rehash", 2, "an edit with its own hash recomputed is caught by the next prev"),
                            ("genesis", 1, "the first line's prev must be GENESIS"),
                            ("not_entry", 2, "a JSON line that is not an entry is bad, not a crash"),
                            ("missing_key", 2, "a JSON dict without hash, prev and record is bad, not a crash"),
                            ("insert", 3, "a duplicated line breaks the chain at the copy")):
        expect_equal(f"first_bad_line: {rule} (line numbers start at 1)", first_bad_fn(_tamper(lines, how)), line,
                     hint="recompute each hash, compare each prev with the previous line's hash (GENESIS first), "
                          "return the 1-based number of the first bad line; catch json errors")


def _planted_pii_text(rng: random.Random) -> tuple[str, str]:
    """A text built from pieces whose redaction is known by construction, and that redaction.
    The joins (a comma, a semicolon, " and ") never extend a run of digits, so each piece keeps
    its own fate: a Luhn-valid 16-digit card, a 9-12 digit phone written with + or spaces, and an
    email are replaced; words, 16-digit numbers that fail Luhn, bare ids, dates and amounts stay."""
    from course_lib.context.trace_log import luhn_valid

    pieces = []
    for _ in range(rng.randint(2, 6)):
        kind = rng.choice(["word", "email", "card", "badcard", "phone", "id", "date", "amount"])
        if kind == "word":
            word = rng.choice(["hello", "order", "café", "refund", "x9", "see"])
            pieces.append((word, word))
        elif kind == "email":
            pieces.append((f"{rng.choice(['bo', 'a.b', 'c_d'])}{rng.randint(1, 99)}@{rng.choice(['ex', 'mail'])}.com",
                           "[EMAIL]"))
        elif kind in ("card", "badcard"):
            number = _luhn_complete("4" + "".join(rng.choice("0123456789") for _ in range(14)))
            if kind == "badcard":  # one digit changed: Luhn catches every single-digit error
                number = number[:-1] + str((int(number[-1]) + rng.randint(1, 9)) % 10)
            assert luhn_valid(number) == (kind == "card")
            sep = rng.choice(["", " ", "-"])
            text = sep.join(number[i:i + 4] for i in range(0, 16, 4))
            pieces.append((text, "[CARD]" if kind == "card" else text))
        elif kind == "phone":
            digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(9, 12)))
            pieces.append((rng.choice(["+", ""]) + " ".join(digits[i:i + 3] for i in range(0, len(digits), 3)),
                           "[PHONE]"))
        elif kind == "id":
            number = str(rng.randint(10**5, 10**11))
            pieces.append((number, number))
        elif kind == "date":
            date = f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}"
            pieces.append((date, date))
        else:
            amount = f"{rng.randint(1, 999)}.{rng.randint(10, 99)}"
            pieces.append((amount, amount))
    join, end = rng.choice([", ", "; ", " and "]), rng.choice(["", ".", "!"])
    return join.join(t for t, _ in pieces) + end, join.join(r for _, r in pieces) + end


# -- exercise 5: the abstention threshold --------------------------------------------------------
SELECTIVE_KEYS = ["accuracy", "answered", "coverage", "wrong_answered"]


def abstention_threshold(pick_fn, selective_fn) -> None:
    from course_lib.context.calibration import apply_threshold, choose_threshold

    conf = [0.95, 0.9, 0.85, 0.8, 0.6, 0.55, 0.3, 0.2]
    right = [True, True, True, False, True, False, False, False]
    expect_close("the worked example: target 0.8 -> 0.6 (5 answered, 4 right)", pick_fn(list(conf), list(right), 0.8), 0.6,
                 atol=0, hint="try each distinct confidence t; answered = those with confidence >= t")
    expect_close("the LOWEST threshold that reaches the target (most questions answered): target 0.75",
                 pick_fn(list(conf), list(right), 0.75), 0.6, atol=0,
                 hint="of all the thresholds that reach the target, return the smallest")
    bumpy = [0.9, 0.8, 0.7, 0.6, 0.5]
    ok = [True, False, True, True, True]
    expect_close("accuracy need not rise with the threshold: 0.9 reaches 1.0, 0.8 only 0.5, 0.5 reaches 0.8",
                 pick_fn(bumpy, ok, 0.8), 0.5, atol=0,
                 hint="do not stop at the first threshold that misses the target; check every candidate")
    expect_close("a threshold's answered set includes confidences EQUAL to it (>=)",
                 pick_fn([0.7, 0.7, 0.4], [True, False, True], 0.6), 0.4, atol=0,
                 hint="answered means confidence >= threshold")
    expect_close("accuracy exactly at the target counts as reaching it (>=), computed as right / answered",
                 pick_fn([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.15, 0.1],
                         [True] * 7 + [False] * 3, 0.7), 0.1, atol=0)
    expect_close("candidates are the confidences themselves, not a grid", pick_fn([0.93, 0.71, 0.42], [True, True, False], 0.9),
                 0.71, atol=0)
    expect_equal("no threshold reaches the target: math.inf (answer nothing)", pick_fn([0.9, 0.8], [False, False], 0.5),
                 math.inf, hint="return math.inf when no candidate reaches the target")
    expect_close("target 1.0 with a perfect top answer", pick_fn([0.99, 0.5], [True, False], 1.0), 0.99, atol=0)
    for label, args in (("lengths differ", ([0.5, 0.6], [True], 0.8)), ("no answers", ([], [], 0.8)),
                        ("target 0", ([0.5], [True], 0.0)), ("target above 1", ([0.5], [True], 1.2)),
                        ("a confidence above 1", ([1.5, 0.2], [True, False], 0.8)),
                        ("a negative confidence", ([-0.1, 0.2], [True, False], 0.8))):
        expect_raises(f"pick_threshold: {label} raises ValueError", lambda: pick_fn(*args), ValueError)
    got = selective_fn(list(conf), list(right), 0.6)
    expect_equal("selective_answer returns a dict with coverage, accuracy, answered, wrong_answered",
                 sorted(got) if isinstance(got, dict) else got, SELECTIVE_KEYS)
    expect_close("the worked example at 0.6: coverage 5/8, accuracy 4/5", [got["coverage"], got["accuracy"]],
                 [5 / 8, 4 / 5], hint="coverage = answered / all questions; accuracy = right / answered")
    expect_equal("... 5 answered, 1 of them wrong (the wrong answers a user would see)",
                 [got["answered"], got["wrong_answered"]], [5, 1], hint="wrong_answered counts answered ones only")
    none = selective_fn(list(conf), list(right), math.inf)
    expect_equal("threshold math.inf: nothing answered, accuracy None", [none["coverage"], none["accuracy"], none["answered"],
                                                                         none["wrong_answered"]], [0.0, None, 0, 0],
                 hint="accuracy is None when no question is answered")
    everything = selective_fn(list(conf), list(right), 0.0)
    expect_close("threshold 0: everything answered", [everything["coverage"], everything["accuracy"]], [1.0, 0.5])
    rng = random.Random(55)
    for case in range(25):
        n = rng.randint(1, 40)
        conf = [round(rng.random(), rng.choice([1, 2, 3])) for _ in range(n)]
        right = [rng.random() < c + rng.uniform(-0.3, 0.3) for c in conf]
        target = rng.choice([0.5, 0.7, 0.8, 0.9, 0.95, 1.0])
        expected = choose_threshold(conf, right, target_accuracy=target)
        got = pick_fn(list(conf), list(right), target)
        if math.isinf(expected):
            expect_equal(f"random case {case} ({n} answers, target {target}): as calibration.choose_threshold", got, math.inf)
        else:
            expect_close(f"random case {case} ({n} answers, target {target}): as calibration.choose_threshold", got,
                         expected, atol=0)
        threshold = rng.choice([expected, rng.random(), 0.0])
        if math.isinf(threshold):
            continue
        s = apply_threshold(conf, right, threshold)
        got = selective_fn(list(conf), list(right), threshold)
        expect_equal(f"random case {case}: selective_answer at {threshold:.3g} as calibration.apply_threshold",
                     [got["answered"], got["wrong_answered"]], [s.answered, s.wrong_answered])
        expect_close(f"random case {case}: coverage and accuracy as calibration.apply_threshold",
                     [got["coverage"], -1.0 if got["accuracy"] is None else got["accuracy"]],
                     [s.coverage, -1.0 if math.isnan(s.accuracy_answered) else s.accuracy_answered], atol=1e-12)


# Progressive hints, gentlest first; the last one all but gives the method (see checks/hints.py).
HINTS = {
    "fit_context": [
        "Three numbers first: budget = window - reserve_output - margin; used = system_tokens + question_tokens; "
        "if used > budget, raise ValueError(f'... over by {used - budget} tokens').",
        "Passages: for pid, tokens, score in sorted(passages, key=lambda p: -p[2]) (a stable sort keeps ties in "
        "input order). Keep it while used + tokens <= budget; at the first that does not fit, break.",
        "History: for index in reversed(range(len(turns))): break at the first turn that does not fit, else keep "
        "it (kept.insert(0, index)) and add its tokens. Return passages, turns, prompt_tokens=used, left=budget-used.",
    ],
    "bm25_scores": [
        "Precompute once: N, avgdl = total length / N, a Counter per passage (tf), and n(q) = how many passages "
        "contain each term (count each passage once: Counter(t for doc in corpus for t in set(doc))).",
        "idf = log(N - n + 0.5) - log(n + 0.5) for EVERY corpus term; floor = epsilon * (sum of those idfs / how "
        "many terms); then replace each idf < 0 by the floor (not <= 0, and do not clamp the floor).",
        "Per passage: sum over the query terms as given (repeats count) of idf.get(q, 0) * tf * (k1 + 1) / "
        "(tf + k1 * (1 - b + b * dl / avgdl)). Raise ValueError first when the corpus has no term at all.",
    ],
    "task_cost": [
        "Validate first: requests >= 1, 0 <= successes <= requests, nothing negative.",
        "tokens_usd = (prompt_tokens * input_per_million + completion_tokens * output_per_million) / 1e6; "
        "per_request = tokens_usd / requests.",
        "per_success = (tokens_usd + (requests - successes) * failure_cost) / successes, or math.inf when "
        "successes == 0.",
    ],
    "trace_chain": [
        "redact_pii: EMAIL_RE.sub('[EMAIL]', text) first; then NUMBER_RE.sub(fn, text) where fn looks at one run "
        "(match.group()) and its digits (re.sub(r'\\D', '', run)).",
        "Luhn: walk the digits from the right; double every second one (subtract 9 if the result is above 9); "
        "the total must be a multiple of 10. A card: no leading +, 13-19 digits, Luhn. A phone: 9-15 digits and "
        "(a leading + or run != digits).",
        "chain_records: redact recursively into new dicts/lists (keys too); h = hashlib.sha256(canonical({'prev': prev, "
        "'record': clean})).hexdigest(); line = canonical({'hash': h, 'prev': prev, 'record': clean}).decode(); "
        "prev = h. first_bad_line: json.loads in a try; recompute h; compare prev; return the 1-based number.",
    ],
    "abstention_threshold": [
        "For one threshold t: answered = [ok for c, ok in zip(confidences, correct) if c >= t]; accuracy = "
        "sum(answered) / len(answered).",
        "Try every distinct confidence as t, keep those whose accuracy >= target_accuracy, return the smallest "
        "(math.inf if none). Accuracy is not monotone: do not stop early.",
        "selective_answer: coverage = len(answered) / len(confidences); accuracy None if nothing answered; "
        "wrong_answered = len(answered) - sum(answered). Validate lengths, emptiness, 0 < target <= 1, 0 <= c <= 1.",
    ],
}
