"""Hidden tests for 07_context, run in the grader's process (see course_lib/pipeline/hidden.py).

Where each exercise's expectations come from (none of them is the solution's code):

- fit_context: ``course_lib.checks.context.reference_fit``, the packing rules stated as the
  longest fitting prefix of the ranking and suffix of the turns (not the exercise's loops).
- bm25_scores: the ``rank_bm25`` package's ``BM25Okapi`` (``_okapi``), the production oracle.
- abstention_threshold: the course's ``calibration.choose_threshold`` and ``apply_threshold``
  (a sorted sweep with cumulative sums, not the exercise's scan of candidates).
- task_cost: the course's ``cost.total_cost``, ``cost_per_request`` and ``cost_per_success``,
  with the exercise's failure cost added to what the successes carry.
- trace_chain: ``luhn_ok`` from ``_luhn``, the textbook form (each doubled digit's digits
  summed, not the exercise's "subtract 9"); redaction from hand-worked cases and from texts
  whose redaction is planted by construction; the chain and ``first_bad_line`` from the course's trace log itself
  (``canonical``, ``entry_hash``, ``TraceLog``, ``verify``), on records redacted by hand.

The learner's functions are reached only through ``learner``; one helper script runs in the
learner's kernel to see whether ``chain_records`` changes the records it is given.
"""
import json
import math
import random
import re
import tempfile
from pathlib import Path

from course_lib.checks.context import reference_fit
from course_lib.context.calibration import apply_threshold, choose_threshold
from course_lib.context.cost import ModelPrice, TaskRun, cost_per_request, cost_per_success, total_cost
from course_lib.context.trace_log import GENESIS, TraceLog, TraceRecord, canonical, entry_hash, verify
from course_lib.pipeline.hidden import Once, message_of
from course_lib.pipeline.hidden import item as _item  # one part of a shared answer

REFERENCES = (
    "course_lib.context.budget.pack_context",
    "course_lib.context.bm25.BM25Index",
    "course_lib.context.cost.total_cost",
    "course_lib.context.cost.cost_per_request",
    "course_lib.context.cost.cost_per_success",
    "course_lib.context.trace_log.redact",
    "course_lib.context.trace_log.redact_record",
    "course_lib.context.trace_log._redact_cards",
    "course_lib.context.trace_log.luhn_valid",
    "course_lib.context.trace_log.entry_hash",
    "course_lib.context.trace_log.TraceLog",
    "course_lib.context.trace_log.verify",
    "course_lib.context.calibration.accuracy_coverage",
    "course_lib.context.calibration.choose_threshold",
    "course_lib.context.calibration.apply_threshold",
    "course_lib.checks.context.reference_fit",
)



# -- exercise 1: the context packer -------------------------------------------------------------
def _fit(window, reserve, margin, system, question, turns, passages):
    """(the packing, 0), or (None, tokens over the budget) when the required parts do not fit."""
    try:
        return reference_fit(window, reserve, margin, system, question, turns, passages), 0
    except ValueError:
        return None, system + question - (window - reserve - margin)


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else value


FIT_KEYS = {"passages", "turns", "prompt_tokens", "left"}


def fit_context(learner, check):
    f = learner.function("fit_context")
    named = [
        ("the budget is window - reserve_output - margin (the margin counts)", (220, 40, 16, 50, 20, [9, 30, 14],
                                                                                [["a", 30, 0.5], ["b", 22, 2.0]])),
        ("the budget is window - reserve_output - margin (the reserved output counts)",
         (300, 90, 0, 40, 25, [33, 21, 17, 12], [["x", 40, 1.0], ["y", 30, 0.2]])),
        ("an exact fit is kept (tokens <= left)", (200, 0, 0, 60, 40, [30, 20], [["p", 35, 1.0], ["q", 15, 0.9]])),
        ("passages by score, highest first", (400, 50, 10, 40, 20, [], [["low", 10, 0.1], ["top", 12, 3.5],
                                                                       ["mid", 9, 1.2], ["second", 11, 2.2]])),
        ("the kept passages are listed in rank order, not input order",
         (120, 0, 0, 30, 10, [7], [["c", 20, 0.4], ["a", 25, 1.9], ["b", 30, 0.8], ["d", 40, 0.1]])),
        ("equal scores keep the input order", (400, 0, 0, 10, 10, [], [["d", 5, 1.0], ["b", 5, 2.0], ["c", 5, 1.0],
                                                                       ["a", 5, 2.0], ["e", 5, 1.0]])),
        ("a passage that does not fit stops the ranking: smaller ones below it are dropped too",
         (150, 20, 0, 40, 20, [4, 4], [["big", 60, 2.0], ["small", 8, 1.0], ["tiny", 2, 0.5]])),
        ("a passage that does not fit stops the ranking: smaller ones below it are dropped too (after some fit)",
         (170, 0, 0, 40, 20, [], [["one", 50, 3.0], ["two", 70, 2.0], ["three", 5, 1.0]])),
        ("history: the newest turns are kept, the oldest dropped first", (95, 0, 0, 30, 10, [20, 20, 25, 15], [])),
        ("history: at the first turn that does not fit, it and every older turn are dropped (no holes)",
         (112, 0, 0, 30, 10, [5, 40, 20, 15], [])),
        ("passages take the budget before the turns (passages-first)",
         (150, 0, 0, 30, 10, [40, 20, 20], [["p", 50, 1.0], ["q", 20, 0.5]])),
        ("kept turns are returned oldest first", (300, 0, 0, 20, 20, [11, 12, 13, 14, 15], [])),
        ("prompt_tokens counts the system message, the question and every kept piece; left = budget - prompt_tokens",
         (260, 30, 5, 70, 35, [18, 26, 9], [["m", 44, 0.7], ["n", 31, 0.9]])),
        ("no passages and no turns", (100, 10, 5, 30, 20, [], [])),
        ("required parts that exactly fill the budget do not raise", (100, 30, 10, 40, 20, [5], [["a", 1, 1.0]])),
    ]
    rng = random.Random(707)
    cases = list(named)
    for case in range(30):
        turns = [rng.randint(1, 45) for _ in range(rng.randint(0, 9))]
        passages = [[f"p{i}", rng.randint(1, 70), rng.choice([0.5, 1.0, 2.0, round(rng.uniform(0, 3), 2)])]
                    for i in range(rng.randint(0, 8))]
        args = (rng.randint(150, 500), rng.randint(0, 100), rng.randint(0, 24), rng.randint(1, 80), rng.randint(1, 40),
                turns, passages)
        if _fit(*args)[0] is not None:
            cases.append((f"random case {case}", args))
    for label, args in cases:
        expected, _ = _fit(*args)
        replay = Once(lambda: f(*[list(a) if isinstance(a, list) else a for a in args]))
        check.that(f"returns a dict with passages, turns, prompt_tokens, left ({label})", replay,
                   lambda out: isinstance(out, dict) and set(out) == FIT_KEYS,
                   "return {'passages': [...], 'turns': [...], 'prompt_tokens': int, 'left': int}")
        check.equal(f"kept passages: {label}", lambda: _as_list(_item("passages", replay)()), expected["passages"])
        check.equal(f"kept turns: {label}", lambda: _as_list(_item("turns", replay)()), expected["turns"])
        check.equal(f"prompt_tokens and left: {label}",
                    lambda: [_item("prompt_tokens", replay)(), _item("left", replay)()],
                    [expected["prompt_tokens"], expected["left"]])
    overflows = [(100, 30, 10, 45, 20, [5], [["a", 1, 1.0]]), (512, 128, 16, 300, 97, [], []),
                 (256, 64, 8, 150, 71, [10, 20], [["z", 3, 1.0]]), (90, 0, 0, 80, 47, [], [])]
    for case, args in enumerate(overflows):
        _, over = _fit(*args)
        call = (lambda a: lambda: f(*[list(x) if isinstance(x, list) else x for x in a]))(args)
        check.raises(f"required parts over the budget raise ValueError (overflow {case})", call, "ValueError")
        check.that(f"the overflow message says by how many tokens the budget is exceeded (overflow {case})",
                   message_of(call), lambda m, over=over: m is not None and
                   re.search(rf"(?<![\d.]){over}(?![\d.])", m) is not None,
                   "say in the message how many tokens too many, e.g. 'over by 5 tokens'")


# -- exercise 2: BM25 ------------------------------------------------------------------------------
def _okapi(query, corpus, k1=1.5, b=0.75, epsilon=0.25):
    from rank_bm25 import BM25Okapi  # the production package, as the oracle

    return [float(s) for s in BM25Okapi([list(d) for d in corpus], k1=k1, b=b, epsilon=epsilon).get_scores(list(query))]


JAPAN = [["tokyo", "is", "the", "capital", "of", "japan"], ["paris", "is", "the", "capital", "of", "france"],
         ["kyoto", "was", "the", "capital", "of", "japan", "for", "a", "thousand", "years"],
         ["rome", "is", "the", "capital", "of", "italy"], ["sushi", "is", "a", "dish", "from", "japan"]]
TF = [["cat", "cat", "cat", "dog"], ["cat", "dog", "dog", "eel"], ["eel", "fox", "gnu", "hen"], ["fox", "ant", "bee"],
      ["gnu", "gnu"], ["hen", "ant", "cat", "yak", "owl", "elk"]]


def bm25_scores(learner, check):
    f = learner.function("bm25_scores")
    named = [
        ("the worked example ('capital of japan' over five passages)", ["capital", "of", "japan"], JAPAN, {}),
        ("a term in most passages gets the epsilon floor (epsilon x the average idf of all corpus terms, taken "
         "before flooring)", ["capital", "the"], JAPAN, {}),
        ("a term in most passages gets the epsilon floor, with another epsilon", ["is", "capital"], JAPAN,
         {"epsilon": 0.6}),
        ("an idf of exactly 0 (a term in half the passages) is not floored", ["x"], [["x", "y"], ["x", "z"], ["w"], ["v"]], {}),
        ("the negative floor of a tiny corpus of common terms is kept", ["a", "b"], [["a", "b"], ["a", "b"], ["a", "c"]], {}),
        ("a query term absent from the corpus adds 0", ["zebra", "sushi"], JAPAN, {}),
        ("one score per passage, in corpus order", ["sushi", "dish"], JAPAN, {}),
        ("a repeated query term counts each time", ["japan", "japan", "tokyo"], JAPAN, {}),
        ("term frequency saturates: tf * (k1 + 1) / (tf + k1 * norm)", ["gnu", "dog"], TF, {}),
        ("n(q) counts passages holding the term, not its occurrences", ["gnu", "eel"], TF, {}),
        ("length normalization: b = 0 ignores passage length", ["cat", "ant"], TF, {"b": 0.0}),
        ("length normalization: b = 1 divides by dl / avgdl fully", ["cat", "hen"], TF, {"b": 1.0}),
        ("avgdl is the total number of terms over N", ["yak", "dog"], TF, {"b": 0.9}),
        ("the k1 parameter is used", ["cat", "dog"], TF, {"k1": 0.6}),
        ("the k1 parameter is used (large k1)", ["cat", "gnu"], TF, {"k1": 3.0}),
        ("an empty passage among others scores 0", ["a"], [["a", "b"], [], ["c"]], {}),
        ("a single passage", ["a", "q"], [["a", "b", "a"]], {}),
    ]
    rng = random.Random(2577)
    vocab = [f"t{i}" for i in range(14)]
    for case in range(30):
        corpus = [[rng.choice(vocab[:rng.randint(2, 14)]) for _ in range(rng.randint(1, 14))]
                  for _ in range(rng.randint(1, 10))]
        query = [rng.choice(vocab) for _ in range(rng.randint(1, 6))]
        kw = {"k1": rng.choice([0.9, 1.2, 1.5, 2.0]), "b": rng.choice([0.0, 0.3, 0.75, 1.0]),
              "epsilon": rng.choice([0.25, 0.25, 0.1, 0.5])}
        named.append((f"random corpus {case} ({len(corpus)} passages)", query, corpus, kw))
    for label, query, corpus, kw in named:
        check.close(f"equal to rank_bm25's BM25Okapi: {label}", lambda: f(list(query), [list(d) for d in corpus], **kw),
                    _okapi(query, corpus, **kw), atol=1e-9)
    check.raises("an empty corpus raises ValueError", lambda: f(["a"], []), "ValueError")
    check.raises("a corpus with no term at all raises ValueError", lambda: f(["a"], [[], []]), "ValueError")


# -- exercise 3: the abstention threshold -------------------------------------------------------
def _pick(confidences, correct, target):
    return choose_threshold(confidences, correct, target_accuracy=target)


def _selective(confidences, correct, threshold):
    """apply_threshold's answer in the exercise's shape (accuracy None, not nan, when nothing is answered)."""
    got = apply_threshold(confidences, correct, threshold)
    return {"coverage": got.coverage, "accuracy": got.accuracy_answered if got.answered else None,
            "answered": got.answered, "wrong_answered": got.wrong_answered}


def _is_inf(value):
    return isinstance(value, float) and value == math.inf


def abstention_threshold(learner, check):
    pick, selective = learner.function("pick_threshold"), learner.function("selective_answer")
    named = [
        ("the lowest threshold that reaches the target (most answered)",
         [0.95, 0.9, 0.85, 0.8, 0.6, 0.55, 0.3, 0.2], [True, True, True, False, True, False, False, False], 0.75),
        ("accuracy need not rise with the threshold: every candidate is checked",
         [0.9, 0.8, 0.7, 0.6, 0.5], [True, False, True, True, True], 0.8),
        ("accuracy need not rise with the threshold: every candidate is checked (a dip, then recovery)",
         [0.99, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4], [True, False, False, True, True, True, True, True, True], 0.75),
        ("confidences equal to the threshold are answered (>=)", [0.7, 0.7, 0.4], [True, False, True], 0.6),
        ("confidences equal to the threshold are answered (>=), ties at the top",
         [0.8, 0.8, 0.8, 0.3], [True, True, False, False], 0.6),
        ("accuracy exactly at the target reaches it (>=, right / answered)",
         [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.15, 0.1], [True] * 7 + [False] * 3, 0.7),
        ("candidates are the confidences themselves, not a grid", [0.93, 0.71, 0.42], [True, True, False], 0.9),
        ("candidates are the confidences themselves, not a grid (unrounded)",
         [0.8312, 0.6427, 0.6101, 0.2], [True, True, False, True], 0.9),
        ("accuracy is computed over the answered questions only", [0.9, 0.8, 0.1, 0.05], [True, True, False, False], 0.9),
        ("accuracy is a float division (right / answered)", [0.9, 0.8, 0.7, 0.2], [True, True, False, False], 0.6),
        ("no threshold reaches the target: math.inf (answer nothing)", [0.9, 0.8], [False, False], 0.5),
        ("no threshold reaches the target: math.inf (answer nothing), a high target", [0.9, 0.8, 0.6],
         [True, False, True], 1.0),
        ("target 1.0 with a perfect top answer", [0.99, 0.5], [True, False], 1.0),
        ("every answer right: the lowest confidence", [0.3, 0.6, 0.2], [True, True, True], 0.9),
    ]
    rng = random.Random(5050)
    for case in range(30):
        n = rng.randint(1, 50)
        conf = [round(rng.random(), rng.choice([1, 2, 4])) for _ in range(n)]
        ok = [rng.random() < c + rng.uniform(-0.35, 0.35) for c in conf]
        named.append((f"random case {case} ({n} answers)", conf, ok, rng.choice([0.5, 0.7, 0.8, 0.9, 0.95, 1.0])))
    for label, conf, ok, target in named:
        expected = _pick(conf, ok, target)
        call = (lambda c, o, t: lambda: pick(list(c), list(o), t))(conf, ok, target)
        if math.isinf(expected):
            check.that(f"pick_threshold: {label}", call, _is_inf, "return math.inf when no threshold reaches the target")
        else:
            check.close(f"pick_threshold: {label}", call, expected, atol=0)
    for label, args in (("lengths differ", ([0.5, 0.6], [True], 0.8)), ("no answers", ([], [], 0.8)),
                        ("target 0", ([0.5], [True], 0.0)), ("target above 1", ([0.5], [True], 1.5)),
                        ("a negative target", ([0.5], [True], -0.2)),
                        ("a confidence above 1", ([1.2, 0.2], [True, False], 0.8)),
                        ("a negative confidence", ([-0.3, 0.2], [True, False], 0.8))):
        check.raises(f"pick_threshold: invalid input raises ValueError ({label})", lambda: pick(*args), "ValueError")
    sets = [([0.95, 0.9, 0.85, 0.8, 0.6, 0.55, 0.3, 0.2], [True, True, True, False, True, False, False, False], t)
            for t in (0.6, 0.85, 0.0, 0.2, 0.97)]
    sets += [([0.9, 0.5, 0.5, 0.1], [False, True, False, True], 0.5), ([0.4, 0.3], [True, True], math.inf)]
    for case in range(15):
        n = rng.randint(1, 40)
        conf = [round(rng.random(), 2) for _ in range(n)]
        sets.append((conf, [rng.random() < 0.6 for _ in conf], rng.choice([rng.random(), rng.choice(conf), 0.0])))
    for case, (conf, ok, t) in enumerate(sets):
        expected = _selective(conf, ok, t)
        replay = Once((lambda c, o, th: lambda: selective(list(c), list(o), th))(conf, ok, t))
        shown = f"case {case}: {len(conf)} answers, threshold {t:.3g}"
        check.that(f"selective_answer returns a dict with coverage, accuracy, answered, wrong_answered ({shown})",
                   replay, lambda out: isinstance(out, dict) and set(out) == set(expected),
                   "return {'coverage': ..., 'accuracy': ..., 'answered': ..., 'wrong_answered': ...}")
        check.close(f"coverage = answered / all questions ({shown})", _item("coverage", replay), expected["coverage"],
                    atol=1e-12)
        check.equal(f"answered and wrong_answered count answered questions only ({shown})",
                    lambda: [_item("answered", replay)(), _item("wrong_answered", replay)()],
                    [expected["answered"], expected["wrong_answered"]])
        if expected["accuracy"] is None:
            check.that(f"accuracy is None when nothing is answered ({shown})", _item("accuracy", replay),
                       lambda v: v is None, "nothing answered: accuracy is None", edge=True)
        else:
            check.close(f"accuracy = right / answered ({shown})", _item("accuracy", replay), expected["accuracy"],
                        atol=1e-12)


# -- exercise 4: cost per success -----------------------------------------------------------------
def _cost(requests, successes, prompt_tokens, completion_tokens, input_price, output_price, failure_cost=0.0):
    """The course's cost functions; the failures' extra cost is spread over the successes on top."""
    run = TaskRun("m", "t", requests, successes, prompt_tokens, completion_tokens)
    price = ModelPrice("m", input_price, output_price)
    extra = (requests - successes) * failure_cost / successes if successes else 0.0
    return {"tokens_usd": total_cost(run, price), "per_request": cost_per_request(run, price),
            "per_success": cost_per_success(run, price) + extra}


COST_RULES = {
    "tokens_usd": "the token bill: prompt tokens at the input price, completion tokens at the output price, "
                  "prices per million tokens",
    "per_request": "cost per request is the token bill alone, divided by the requests",
    "per_success": "cost per success divides everything paid by the successes; failure_cost is added for each "
                   "failed request",
}


def task_cost(learner, check):
    f = learner.function("task_cost")
    cases = [(100, 80, 50_000, 10_000, 0.5, 1.5, 0.0), (10, 10, 1_000_000, 0, 2.0, 100.0, 0.0),
             (10, 10, 0, 1_000_000, 100.0, 3.0, 0.0), (100, 80, 50_000, 10_000, 0.5, 1.5, 0.25),
             (40, 1, 12_345, 6_789, 0.15, 0.6, 0.1), (7, 7, 3000, 900, 1.25, 10.0, 5.0),
             (1, 1, 250, 40, 3.0, 15.0, 0.0), (1000, 600, 4_000_000, 800_000, 0.1, 0.4, 0.02),
             (1000, 970, 4_000_000, 800_000, 0.15, 0.6, 0.02)]
    rng = random.Random(4040)
    for _ in range(16):
        requests = rng.randint(1, 2000)
        cases.append((requests, rng.choice([requests, rng.randint(1, requests)]), rng.randint(0, 5 * 10**6),
                      rng.randint(0, 10**6), rng.uniform(0, 8), rng.uniform(0, 30), rng.choice([0.0, rng.uniform(0, 3)])))
    for case, args in enumerate(cases):
        expected = _cost(*args)
        replay = Once((lambda a: lambda: f(*a))(args))
        shown = f"case {case}: {args[0]} requests, {args[1]} successes"
        check.that(f"returns a dict with tokens_usd, per_request, per_success ({shown})", replay,
                   lambda out: isinstance(out, dict) and set(out) == set(COST_RULES),
                   "return {'tokens_usd': ..., 'per_request': ..., 'per_success': ...}")
        for key, rule in COST_RULES.items():
            check.close(f"{rule} ({shown})", _item(key, replay), expected[key], atol=1e-15, rtol=1e-9)
    for case, args in enumerate([(100, 80, 50_000, 10_000, 0.5, 1.5), (7, 3, 1234, 567, 2.0, 8.0)]):
        expected = _cost(*args)
        check.close(f"failure_cost defaults to 0.0 (called without it, case {case})",
                    (lambda a: lambda: [f(*a)[k] for k in COST_RULES])(args), [expected[k] for k in COST_RULES],
                    atol=1e-15, rtol=1e-9)
    for case, args in enumerate([(5, 0, 1000, 100, 1.0, 1.0, 0.0), (12, 0, 0, 0, 0.0, 0.0, 1.0)]):
        check.that(f"no success at all: the cost per success is math.inf (zero successes {case})",
                   _item("per_success", Once((lambda a: lambda: f(*a))(args))), _is_inf,
                   "return math.inf for per_success when successes == 0")
    for label, args in (("zero requests", (0, 0, 10, 10, 1.0, 1.0)), ("more successes than requests", (3, 4, 10, 10, 1.0, 1.0)),
                        ("negative successes", (3, -1, 10, 10, 1.0, 1.0)), ("negative prompt tokens", (3, 1, -10, 10, 1.0, 1.0)),
                        ("negative completion tokens", (3, 1, 10, -1, 1.0, 1.0)),
                        ("a negative input price", (3, 1, 10, 10, -0.5, 1.0)),
                        ("a negative output price", (3, 1, 10, 10, 1.0, -2.0)),
                        ("a negative failure cost", (3, 1, 10, 10, 1.0, 1.0, -0.01))):
        check.raises(f"invalid input raises ValueError ({label})", lambda: f(*args), "ValueError")


# -- exercise 5: redaction and the hash chain -----------------------------------------------------
# Expectations: redaction from hand-worked cases (REDACT_CASES, each with its redacted text) and
# from texts whose redaction is planted by construction (``_planted_text``); the chain and
# first_bad_line from the course's trace log (``entry_hash``, ``canonical``, ``TraceLog`` and
# ``verify``, the production code that writes and reads these logs), on hand-redacted records.
def _luhn(digits):
    """The textbook Luhn test: from the right, every second digit doubled and its digits summed."""
    doubled = [int(c) * (1 + position % 2) for position, c in enumerate(reversed(digits))]
    return sum(sum(map(int, str(d))) for d in doubled) % 10 == 0


def _with_check_digit(prefix):
    return next(prefix + d for d in "0123456789" if _luhn(prefix + d))


def _failing_luhn(number):
    """number with its last digit changed so that it fails Luhn (one changed digit always does)."""
    return next(number[:-1] + d for d in "1234567890" if not _luhn(number[:-1] + d))


REDACT_CASES = [  # (rule, text, the text redacted by hand)
    ("an email address", "contact j.doe_99+x@mail.example.org now", "contact [EMAIL] now"),
    ("a Luhn-valid card grouped by spaces", "card 4242 4242 4242 4242 ok", "card [CARD] ok"),
    ("a Luhn-valid card grouped by dashes", "pay 5105-1051-0510-5100.", "pay [CARD]."),
    ("a Luhn-valid card with no separators", "visa 4012888888881881 end", "visa [CARD] end"),
    ("a card is looked for before a phone: a 15-digit Luhn-valid card written with spaces",
     "amex 3714 496353 98431 paid", "amex [CARD] paid"),
    ("a Luhn-valid card of 13 digits (13 to 19 digits)", f"old {_with_check_digit('422222222222')} card",
     "old [CARD] card"),
    ("a Luhn-valid card of 19 digits (13 to 19 digits)", f"long {_with_check_digit('621234567890123456')} card",
     "long [CARD] card"),
    ("a card-length number that fails Luhn is not a card", "ref 4242 4242 4242 4241 kept",
     "ref 4242 4242 4242 4241 kept"),
    ("a card-length number that fails Luhn is not a card (15 digits: then a phone)", "id 4242-4242-4242-425 x",
     "id [PHONE] x"),
    ("the Luhn check doubles every second digit from the right", f"n {_with_check_digit('7992739871312345')} z",
     "n [CARD] z"),
    ("the Luhn check doubles every second digit from the right (odd length)",
     f"n {_with_check_digit('37144963539843')} z", "n [CARD] z"),
    ("the Luhn check subtracts 9 from a doubled digit above 9", "pay 5555 5555 5555 4444 ok", "pay [CARD] ok"),
    ("an international phone starting with +", "call +33 1 42 68 53 00 today", "call [PHONE] today"),
    ("a phone written with dashes", "or 212-555-0147.", "or [PHONE]."),
    ("a phone starting with + and no separator", "sms +447700900123", "sms [PHONE]"),
    ("a phone of 9 digits (9 to 15 digits)", "tel 612 345 678 ok", "tel [PHONE] ok"),
    ("a phone of 15 digits (9 to 15 digits)", "tel +12 345 678 901 234 5 ok", "tel [PHONE] ok"),
    ("a run starting with + is never a card", "x +4242424242424242 y", "x +4242424242424242 y"),
    ("a bare run of digits is not a phone (an id)", "order 2125550147 shipped", "order 2125550147 shipped"),
    ("8 digits with separators is too short for a phone", "code 1234-5678 z", "code 1234-5678 z"),
    ("16 digits with separators that fail Luhn are neither card nor phone", "n 1111 2222 3333 4445 z",
     "n 1111 2222 3333 4445 z"),
    ("a run of 24 digits (numbers joined by single spaces) is neither card nor phone",
     "ids 1234 5678 9012 3456 7890 1234 x", "ids 1234 5678 9012 3456 7890 1234 x"),
    ("dates, amounts and short numbers stay", "on 2024-05-01 we paid 12.50 for 3 items, order 123456",
     "on 2024-05-01 we paid 12.50 for 3 items, order 123456"),
    ("numbers glued to letters stay", "hash a1234567890b, id x4242424242424242, v2",
     "hash a1234567890b, id x4242424242424242, v2"),
    ("emails are redacted before numbers", "mail tel-212-555-0147@example.com", "mail [EMAIL]"),
    ("emails are redacted before numbers (digits in the domain)", "write to ops@555-123-4567.example.net",
     "write to [EMAIL]"),
    ("several kinds in one text", "ann@x.io paid 4012 8888 8888 1881, call +1 555 010 9999, order 99",
     "[EMAIL] paid [CARD], call [PHONE], order 99"),
    ("text with nothing to redact stays exactly as it was", "Zürich café, 3 items — nothing personal.",
     "Zürich café, 3 items — nothing personal."),
]


LUHN_CASES = [  # (rule, digits): the expectation is _luhn's, the textbook form
    ("the exercise's two examples", "4111111111111111"), ("the exercise's two examples", "4111111111111112"),
    ("a doubled digit above 9 has 9 subtracted", "5555555555554444"),
    ("a doubled digit above 9 has 9 subtracted", "79927398713"),
    ("a doubled digit above 9 has 9 subtracted", "79927398710"),
    ("every second digit from the right is doubled (odd length)", "378282246310005"),
    ("every second digit from the right is doubled (odd length)", "378282246310006"),
    ("a single digit", "0"), ("a single digit", "5"),
]


def _grouped(digits, size, sep):
    return sep.join(digits[i:i + size] for i in range(0, len(digits), size))


def _planted_piece(rng):
    """(text, its redaction, the personal data in it): one piece whose fate is fixed by how it is built."""
    kind = rng.choice(["word", "email", "card", "badcard", "plus", "phone", "id", "longid", "date", "amount"])
    if kind == "word":
        word = rng.choice(["hello", "order", "Zürich", "refund", "x9", "ok", "naïve"])
        return word, word, None
    if kind == "email":
        email = (f"{rng.choice(['bo', 'a.b', 'c_d', 'e-f'])}{rng.randint(1, 999)}@{rng.choice(['ex', 'mail-1'])}."
                 f"{rng.choice(['com', 'co.uk', 'io'])}")
        return email, "[EMAIL]", email
    if kind in ("card", "badcard", "plus"):
        length, sep = rng.choice([13, 15, 16, 16, 19]), rng.choice(["", " ", "-"])
        number = _with_check_digit(rng.choice("3456") + "".join(rng.choice("0123456789") for _ in range(length - 2)))
        if kind == "card":  # Luhn-valid, 13 to 19 digits, no +: a card however it is grouped
            text = _grouped(number, 4, sep)
            return text, "[CARD]", text
        if kind == "badcard":  # fails Luhn: a phone only when 15 digits or fewer and written with separators
            text = _grouped(_failing_luhn(number), 4, sep)
            phone = length <= 15 and sep != ""
        else:  # a leading +: never a card, a phone when 15 digits or fewer
            text = "+" + _grouped(number, 4, sep)
            phone = length <= 15
        return text, "[PHONE]" if phone else text, text if phone else None
    if kind == "phone":  # 9 to 15 digits, written with + or with separators
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(9, 15)))
        plus, sep = rng.choice([(True, ""), (True, " "), (True, "-"), (False, " "), (False, "-")])
        if not plus and len(digits) >= 13:
            digits = _failing_luhn(digits)  # card-length without +: made to fail Luhn, so not a card
        text = ("+" if plus else "") + _grouped(digits, 3, sep)
        return text, "[PHONE]", text
    if kind == "id":  # a bare run of 4 to 12 digits: neither card nor phone
        number = str(rng.randint(10**3, 10**12 - 1))
        return number, number, None
    if kind == "longid":  # a bare run of 13 to 19 digits that fails Luhn: neither card nor phone
        number = _failing_luhn(str(rng.randint(10**12, 10**19 - 1)))
        return number, number, None
    if kind == "date":
        date = f"20{rng.randint(10, 29)}-0{rng.randint(1, 9)}-{rng.randint(10, 28)}"
        return date, date, None
    amount = f"{rng.randint(1, 9999)}.{rng.randint(10, 99)}"
    return amount, amount, None


def _planted_text(rng):
    """(text, its redaction, the personal data planted in it). The joins (a comma, a semicolon,
    " and ") never extend a run of digits, so every piece keeps the fate it was built with."""
    pieces = [_planted_piece(rng) for _ in range(rng.randint(2, 7))]
    join, end = rng.choice([", ", " and ", "; "]), rng.choice(["", ".", "!", "?"])
    return (join.join(p[0] for p in pieces) + end, join.join(p[1] for p in pieces) + end,
            [p[2] for p in pieces if p[2] is not None])


def _course_log(notes):
    """The lines of an intact log written by the course's ``TraceLog``, one record per note."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.jsonl"
        log = TraceLog(path)
        for i, note in enumerate(notes):
            log.append(TraceRecord(request_id=f"r-{i}", timestamp="2026-03-02T10:00:00Z", app_version="grader",
                                   model="tinychat", weights_sha256="ab" * 32, template="tinychat-chat",
                                   decoding={"temperature": 0}, retrieval={"index_version": 1, "passage_ids": []},
                                   tools_version="t1", policy_version="p1", validation={},
                                   tokens={"prompt": 12, "completion": 4}, latency_ms={"prefill": 1.5}, cost_usd=0.0,
                                   final_state="answered", metadata={"note": note}))
        return path.read_text(encoding="utf-8").splitlines()


def _course_verify(lines):
    """What the course's ``verify`` (``course trace verify``) says of these lines."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.jsonl"
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        return verify(path)


_KEEPS_INPUT = """
def _chain_keeps_input(records):
    import copy
    before = copy.deepcopy(records)
    chain_records(records)
    return records == before
"""


def _records():
    return [{"request_id": "r-1", "model": "tinychat", "tokens": {"prompt": 12, "completion": 4},
             "latency_ms": {"prefill": 2.5}, "final_state": "answered",
             "metadata": {"user": "ann@example.com", "notes": ["card 4111 1111 1111 1111", {"deep": "+44 20 7946 0958"}]}},
            {"request_id": "r-2", "model": "tinychat", "tokens": {"prompt": 30, "completion": 6}, "latency_ms": {},
             "final_state": "abstained", "metadata": {"city": "Zürich", "count": 3, "ok": True, "none": None}},
            {"request_id": "r-3", "model": "tinychat-draft", "tokens": {"prompt": 8, "completion": 2},
             "latency_ms": {"decode": 1.25}, "final_state": "error", "metadata": {"reply": "mail bo@ex.com 212-555-0147"}},
            {"request_id": "r-4", "b": [1, 2.5, "x"], "a": "z", "by_caller": {"+1 202 555 0188": "retry"}}]


def _redacted_records():
    """``_records()`` as the rules store them, redacted by hand."""
    records = _records()
    records[0]["metadata"] = {"user": "[EMAIL]", "notes": ["card [CARD]", {"deep": "[PHONE]"}]}
    records[2]["metadata"] = {"reply": "mail [EMAIL] [PHONE]"}
    records[3]["by_caller"] = {"[PHONE]": "retry"}
    return records


def _tampered(lines, how, rng):
    lines = list(lines)
    i = rng.randrange(1, len(lines)) if len(lines) > 1 else 0
    if how == "edit":
        entry = json.loads(lines[i])
        entry["record"]["request_id"] = "forged"
        lines[i] = canonical(entry).decode("utf-8")
    elif how == "remove":  # never the last line: a line must follow it for its prev to break
        del lines[min(i, len(lines) - 2)]
    elif how == "swap":
        j = max(i - 1, 0)
        lines[i], lines[j] = lines[j], lines[i]
    elif how == "truncate":
        lines[i] = lines[i][: len(lines[i]) // 3]
    elif how == "rehash":
        entry = json.loads(lines[i - 1])
        entry["record"]["model"] = "forged"
        entry["hash"] = entry_hash(entry["record"], entry["prev"])
        lines[i - 1] = canonical(entry).decode("utf-8")
    elif how == "genesis":
        entry = json.loads(lines[0])
        entry["prev"] = "f" * 64
        entry["hash"] = entry_hash(entry["record"], entry["prev"])
        lines[0] = canonical(entry).decode("utf-8")
    elif how == "not_entry":
        lines[i] = json.dumps({"hash": "0" * 64, "prev": "1" * 64})
    elif how == "no_record":  # its own hash and the right prev, but no record: only the missing key is wrong
        entry = json.loads(lines[i])
        lines[i] = json.dumps({"hash": entry["hash"], "prev": entry["prev"]})
    elif how == "insert":
        lines.insert(i, lines[i - 1])
    return lines


TAMPER_RULES = {"edit": "an edited record breaks its own hash", "remove": "a removed line breaks the next prev",
                "swap": "swapped lines break the chain at the first of them",
                "truncate": "a truncated line (not JSON) is bad, not a crash",
                "rehash": "an edit with its own hash recomputed is caught by the next prev",
                "genesis": "the first line's prev must be GENESIS",
                "not_entry": "a JSON line that is not a full entry is bad, not a crash",
                "no_record": "a JSON line without its record is bad, not a crash",
                "insert": "a duplicated line breaks the chain"}


def trace_chain(learner, check):
    redact, chain, first_bad = (learner.function(n) for n in ("redact_pii", "chain_records", "first_bad_line"))
    luhn = learner.function("luhn_ok")
    rng = random.Random(9090)
    numbers = list(LUHN_CASES)
    for case in range(12):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(2, 19)))
        numbers.append((f"random number {case}", _with_check_digit(digits[:-1]) if case % 2 else digits))
    for label, digits in numbers:
        check.equal(f"luhn_ok: {label}", (lambda d: lambda: luhn(d))(digits), _luhn(digits))
    for label, text, expected in REDACT_CASES:
        # Text with nothing to redact comes back as it went in: a do-nothing answer passes that.
        check.equal(f"redact_pii: {label}", (lambda t: lambda: redact(t))(text), expected, edge=expected == text)
    for case in range(40):
        text, expected, planted = _planted_text(rng)
        replay = Once((lambda t: lambda: redact(t))(text))
        label = f"random text {case}"
        check.equal(f"redact_pii: {label}", replay, expected, edge=expected == text)
        check.that(f"redact_pii leaves none of the emails, cards and phones planted in it ({label})", replay,
                   lambda out, planted=planted: isinstance(out, str) and not any(p in out for p in planted),
                   "every EMAIL_RE match and every card or phone run must be replaced", edge=True)
    records, redacted = _records(), _redacted_records()
    replay = Once(lambda: chain(_records()))
    check.equal("chain_records: one line (a str) per record", lambda: [type(x).__name__ for x in replay()],
                ["str"] * len(records))
    check.equal("chain_records: each line is canonical JSON of {hash, prev, record}",
                lambda: [canonical(json.loads(x)).decode("utf-8") == x for x in replay()], [True] * len(records))
    check.equal("chain_records: the first line's prev is GENESIS (64 zeros)", lambda: json.loads(replay()[0])["prev"],
                GENESIS)
    check.equal("chain_records: every string in a record is redacted, at any depth (dicts and lists)",
                lambda: [json.loads(x)["record"] for x in replay()], redacted)
    check.equal("chain_records: dict keys are redacted too", lambda: json.loads(replay()[3])["record"].get("by_caller"),
                redacted[3]["by_caller"])
    check.equal("chain_records: hash = sha256 of canonical {prev, redacted record}, hex",
                lambda: [entry_hash(e["record"], e["prev"]) == e["hash"] for e in map(json.loads, replay())],
                [True] * len(records))
    check.equal("chain_records: each line's prev is the previous line's hash",
                lambda: [json.loads(b)["prev"] == json.loads(a)["hash"] for a, b in zip(replay(), replay()[1:])],
                [True] * (len(records) - 1))
    check.equal("chain_records: the course's trace verify accepts every line",
                lambda: [_course_verify(replay()).ok, _course_verify(replay()).records], [True, len(records)])
    check.equal("chain_records: no records, no lines", lambda: chain([]), [])
    single = [{"text": "only one: +1 202 555 0188", "n": 1}]
    check.equal("chain_records: a single record",
                lambda: [[json.loads(x)["record"] for x in chain(single)], _course_verify(chain(single)).ok],
                [[{"text": "only one: [PHONE]", "n": 1}], True])
    keeps = learner.script(_KEEPS_INPUT, "_chain_keeps_input")
    check.that("chain_records does not change the caller's records", lambda: keeps(_records()), lambda v: v is True,
               "redact into new dicts and lists; leave the records you were given as they were", edge=True)
    short_log = _course_log([text for _, text, _ in REDACT_CASES[:4]])
    long_log = _course_log([_planted_text(rng)[0] for _ in range(9)])
    check.equal("first_bad_line: an intact log is None", lambda: first_bad(list(short_log)), None)
    check.equal("first_bad_line: an empty log is None", lambda: first_bad([]), None)
    check.equal("first_bad_line: a long intact log is None", lambda: first_bad(list(long_log)), None)
    check.equal("first_bad_line: a log cut after a good line is, line by line, an intact chain (None)",
                lambda: first_bad(list(long_log[:-2])), _course_verify(long_log[:-2]).bad_line)
    for how, rule in TAMPER_RULES.items():
        for log in (short_log, long_log):
            bad = _tampered(log, how, rng)
            check.equal(f"first_bad_line: {rule} (1-based line numbers, {len(log)}-line log)",
                        (lambda b: lambda: first_bad(b))(bad), _course_verify(bad).bad_line)
