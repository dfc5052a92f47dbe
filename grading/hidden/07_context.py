"""Hidden tests for 07_context, run in the grader's process (see course_lib/pipeline/hidden.py).

Expectations are computed here from the exercise text: plain Python for the packer, the
cost, the threshold and the trace log's redaction (its own regexes and Luhn) and hash chain
(``hashlib`` and ``json``); BM25 against the ``rank_bm25`` package's ``BM25Okapi`` as the
oracle. The learner's functions are reached only through ``learner``; one helper script
runs in the learner's kernel to see whether ``chain_records`` changes the records it is given.
"""
import hashlib
import json
import math
import random
import re

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
    "course_lib.checks.context.reference_cost",
    "course_lib.checks.context.reference_redact",
    "course_lib.checks.context.reference_chain",
)



# -- exercise 1: the context packer -------------------------------------------------------------
def _fit(window, reserve, margin, system, question, turns, passages):
    budget = window - reserve - margin
    used = system + question
    if used > budget:
        return None, used - budget
    order = sorted(range(len(passages)), key=lambda i: (-passages[i][2], i))
    kept = []
    for i in order:
        if used + passages[i][1] > budget:
            break
        kept.append(passages[i][0])
        used += passages[i][1]
    newest_first = []
    for i in range(len(turns) - 1, -1, -1):
        if used + turns[i] > budget:
            break
        newest_first.append(i)
        used += turns[i]
    return {"passages": kept, "turns": newest_first[::-1], "prompt_tokens": used, "left": budget - used}, 0


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
    best = math.inf
    for t in set(confidences):
        answered = [ok for c, ok in zip(confidences, correct) if c >= t]
        if sum(answered) / len(answered) >= target:
            best = min(best, t)
    return best


def _selective(confidences, correct, threshold):
    answered = [ok for c, ok in zip(confidences, correct) if c >= threshold]
    right = sum(answered)
    return {"coverage": len(answered) / len(confidences), "accuracy": right / len(answered) if answered else None,
            "answered": len(answered), "wrong_answered": len(answered) - right}


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
    tokens_usd = (prompt_tokens * input_price + completion_tokens * output_price) / 10**6
    per_success = (tokens_usd + (requests - successes) * failure_cost) / successes if successes else math.inf
    return {"tokens_usd": tokens_usd, "per_request": tokens_usd / requests, "per_success": per_success}


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
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_NUMBER = re.compile(r"(?<![\w+])\+?\d(?:[ -]?\d)*(?!\w)")
_GENESIS = "0" * 64


def _luhn(digits):
    total = 0
    for position, char in enumerate(digits[::-1]):
        value = int(char) * (2 if position % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


def _kind(run):
    """'CARD', 'PHONE' or None for one run of digits, by the exercise's rules."""
    digits = "".join(ch for ch in run if ch.isdigit())
    if not run.startswith("+") and 13 <= len(digits) <= 19 and _luhn(digits):
        return "CARD"
    if 9 <= len(digits) <= 15 and (run.startswith("+") or len(digits) != len(run)):
        return "PHONE"
    return None


def _redact(text):
    text = _EMAIL.sub("[EMAIL]", text)
    return _NUMBER.sub(lambda m: f"[{_kind(m.group())}]" if _kind(m.group()) else m.group(), text)


def _leaks(text):
    """What the redacted text still holds that the rules say must go (empty when clean)."""
    return _EMAIL.findall(text) + [m.group() for m in _NUMBER.finditer(text) if _kind(m.group())]


def _canon(value):
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return text.encode("utf-8")


def _scrub(value):
    if isinstance(value, str):
        return _redact(value)
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def _chain(records):
    lines, prev = [], _GENESIS
    for record in records:
        clean = _scrub(record)
        digest = hashlib.sha256(_canon({"prev": prev, "record": clean})).hexdigest()
        lines.append(_canon({"hash": digest, "prev": prev, "record": clean}).decode("utf-8"))
        prev = digest
    return lines


def _first_bad(lines):
    prev = _GENESIS
    for number, line in enumerate(lines, start=1):
        try:
            entry = json.loads(line)
        except ValueError:
            return number
        if not isinstance(entry, dict) or not {"hash", "prev", "record"} <= set(entry):
            return number
        if entry["prev"] != prev or entry["hash"] != hashlib.sha256(
                _canon({"prev": entry["prev"], "record": entry["record"]})).hexdigest():
            return number
        prev = entry["hash"]
    return None


def _with_check_digit(prefix):
    return next(prefix + d for d in "0123456789" if _luhn(prefix + d))


REDACT_CASES = [
    ("an email address", "contact j.doe_99+x@mail.example.org now"),
    ("a Luhn-valid card grouped by spaces", "card 4242 4242 4242 4242 ok"),
    ("a Luhn-valid card grouped by dashes", "pay 5105-1051-0510-5100."),
    ("a Luhn-valid card with no separators", "visa 4012888888881881 end"),
    ("a Luhn-valid card of 13 digits (13 to 19 digits)", f"old {_with_check_digit('422222222222')} card"),
    ("a Luhn-valid card of 19 digits (13 to 19 digits)", f"long {_with_check_digit('621234567890123456')} card"),
    ("a card-length number that fails Luhn is not a card", "ref 4242 4242 4242 4241 kept"),
    ("a card-length number that fails Luhn is not a card (15 digits: then a phone)", "id 4242-4242-4242-425 x"),
    ("the Luhn check doubles every second digit from the right", f"n {_with_check_digit('7992739871312345')} z"),
    ("the Luhn check doubles every second digit from the right (odd length)", f"n {_with_check_digit('37144963539843')} z"),
    ("an international phone starting with +", "call +33 1 42 68 53 00 today"),
    ("a phone written with dashes", "or 212-555-0147."),
    ("a phone starting with + and no separator", "sms +447700900123"),
    ("a phone of 9 digits (9 to 15 digits)", "tel 612 345 678 ok"),
    ("a phone of 15 digits (9 to 15 digits)", "tel +12 345 678 901 234 5 ok"),
    ("a run starting with + is never a card", "x +4242424242424242 y"),
    ("a bare run of digits is not a phone (an id)", "order 2125550147 shipped"),
    ("8 digits with separators is too short for a phone", "code 1234-5678 z"),
    ("16 digits with separators that fail Luhn are neither card nor phone", "n 1111 2222 3333 4445 z"),
    ("dates, amounts and short numbers stay", "on 2024-05-01 we paid 12.50 for 3 items, order 123456"),
    ("numbers glued to letters stay", "hash a1234567890b, id x4242424242424242, v2"),
    ("emails are redacted before numbers", "mail tel-212-555-0147@example.com"),
    ("emails are redacted before numbers (digits in the domain)", "write to ops@555-123-4567.example.net"),
    ("several kinds in one text", "ann@x.io paid 4012 8888 8888 1881, call +1 555 010 9999, order 99"),
    ("text with nothing to redact stays exactly as it was", "Zürich café, 3 items — nothing personal."),
]


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
            {"request_id": "r-4", "b": [1, 2.5, "x"], "a": "z"}]


def _tampered(lines, how, rng):
    lines = list(lines)
    i = rng.randrange(1, len(lines)) if len(lines) > 1 else 0
    if how == "edit":
        entry = json.loads(lines[i])
        entry["record"]["request_id"] = "forged"
        lines[i] = _canon(entry).decode("utf-8")
    elif how == "remove":
        del lines[i]
    elif how == "swap":
        j = max(i - 1, 0)
        lines[i], lines[j] = lines[j], lines[i]
    elif how == "truncate":
        lines[i] = lines[i][: len(lines[i]) // 3]
    elif how == "rehash":
        entry = json.loads(lines[i - 1])
        entry["record"]["model"] = "forged"
        entry["hash"] = hashlib.sha256(_canon({"prev": entry["prev"], "record": entry["record"]})).hexdigest()
        lines[i - 1] = _canon(entry).decode("utf-8")
    elif how == "genesis":
        entry = json.loads(lines[0])
        entry["prev"] = "f" * 64
        entry["hash"] = hashlib.sha256(_canon({"prev": entry["prev"], "record": entry["record"]})).hexdigest()
        lines[0] = _canon(entry).decode("utf-8")
    elif how == "not_entry":
        lines[i] = json.dumps({"hash": "0" * 64, "prev": "1" * 64})
    elif how == "insert":
        lines.insert(i, lines[i - 1])
    return lines


TAMPER_RULES = {"edit": "an edited record breaks its own hash", "remove": "a removed line breaks the next prev",
                "swap": "swapped lines break the chain at the first of them",
                "truncate": "a truncated line (not JSON) is bad, not a crash",
                "rehash": "an edit with its own hash recomputed is caught by the next prev",
                "genesis": "the first line's prev must be GENESIS",
                "not_entry": "a JSON line that is not a full entry is bad, not a crash",
                "insert": "a duplicated line breaks the chain"}


def _random_text(rng):
    pieces = []
    for _ in range(rng.randint(2, 7)):
        kind = rng.choice(["word", "email", "card", "badcard", "phone", "id", "date", "amount", "plus16"])
        if kind == "word":
            pieces.append(rng.choice(["hello", "order", "Zürich", "refund", "x9", "ok", "naïve"]))
        elif kind == "email":
            pieces.append(f"{rng.choice(['bo', 'a.b', 'c_d', 'e-f'])}{rng.randint(1, 999)}@{rng.choice(['ex', 'mail-1'])}."
                          f"{rng.choice(['com', 'co.uk', 'io'])}")
        elif kind in ("card", "badcard", "plus16"):
            length = rng.choice([13, 15, 16, 16, 19])
            number = _with_check_digit(rng.choice("3456") + "".join(rng.choice("0123456789") for _ in range(length - 2)))
            if kind == "badcard":
                number = number[:-1] + str((int(number[-1]) + rng.randint(1, 9)) % 10)
            sep = rng.choice(["", " ", "-"])
            text = sep.join(number[i:i + 4] for i in range(0, len(number), 4))
            pieces.append("+" + text if kind == "plus16" else text)
        elif kind == "phone":
            digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(7, 16)))
            sep = rng.choice([" ", "-", ""])
            pieces.append(rng.choice(["+", "", ""]) + sep.join(digits[i:i + 3] for i in range(0, len(digits), 3)))
        elif kind == "id":
            pieces.append(str(rng.randint(10**3, 10**16)))
        elif kind == "date":
            pieces.append(f"20{rng.randint(10, 29)}-0{rng.randint(1, 9)}-{rng.randint(10, 28)}")
        else:
            pieces.append(f"{rng.randint(1, 9999)}.{rng.randint(10, 99)}")
    return rng.choice([" ", ", ", " and ", "; "]).join(pieces) + rng.choice(["", ".", "!", "?"])


def trace_chain(learner, check):
    redact, chain, first_bad = (learner.function(n) for n in ("redact_pii", "chain_records", "first_bad_line"))
    rng = random.Random(9090)
    texts = list(REDACT_CASES) + [(f"random text {case}", _random_text(rng)) for case in range(40)]
    for label, text in texts:
        replay = Once((lambda t: lambda: redact(t))(text))
        # Text with nothing to redact comes back as it went in: a do-nothing answer passes that.
        check.equal(f"redact_pii: {label}", replay, _redact(text), edge=_redact(text) == text)
        check.that(f"redact_pii leaves no email, card or phone the rules name ({label})", replay,
                   lambda out: isinstance(out, str) and not _leaks(out),
                   "every EMAIL_RE match and every card or phone run must be replaced", edge=True)
    records = _records()
    expected = _chain(records)
    replay = Once(lambda: chain(_records()))
    check.equal("chain_records: one line (a str) per record", lambda: [type(x).__name__ for x in replay()],
                ["str"] * len(records))
    check.equal("chain_records: each line is canonical JSON of {hash, prev, record}",
                lambda: [_canon(json.loads(x)).decode("utf-8") == x for x in replay()], [True] * len(records))
    check.equal("chain_records: the first line's prev is GENESIS (64 zeros)", lambda: json.loads(replay()[0])["prev"],
                _GENESIS)
    check.equal("chain_records: every string in a record is redacted, at any depth (dicts and lists)",
                lambda: [json.loads(x)["record"] for x in replay()], [json.loads(x)["record"] for x in expected])
    check.equal("chain_records: hash = sha256 of canonical {prev, redacted record}, hex",
                lambda: [hashlib.sha256(_canon({"prev": e["prev"], "record": e["record"]})).hexdigest() == e["hash"]
                         for e in map(json.loads, replay())], [True] * len(records))
    check.equal("chain_records: each line's prev is the previous line's hash",
                lambda: [json.loads(b)["prev"] == json.loads(a)["hash"] for a, b in zip(replay(), replay()[1:])],
                [True] * (len(records) - 1))
    check.equal("chain_records: every line equals the chain recomputed here", replay, expected)
    check.equal("chain_records: no records, no lines", lambda: chain([]), [])
    single = [{"text": "only one: +1 202 555 0188", "n": 1}]
    check.equal("chain_records: a single record", lambda: chain(single), _chain(single))
    keeps = learner.script(_KEEPS_INPUT, "_chain_keeps_input")
    check.that("chain_records does not change the caller's records", lambda: keeps(_records()), lambda v: v is True,
               "redact into new dicts and lists; leave the records you were given as they were", edge=True)
    check.equal("first_bad_line: an intact log is None", lambda: first_bad(list(expected)), None)
    check.equal("first_bad_line: an empty log is None", lambda: first_bad([]), None)
    long_log = _chain([{"request_id": f"r-{i}", "note": _random_text(rng)} for i in range(9)])
    check.equal("first_bad_line: a long intact log is None", lambda: first_bad(list(long_log)), None)
    for how, rule in TAMPER_RULES.items():
        for log in (expected, long_log):
            bad = _tampered(log, how, rng)
            check.equal(f"first_bad_line: {rule} (1-based line numbers, {len(log)}-line log)",
                        (lambda b: lambda: first_bad(b))(bad), _first_bad(bad))
