"""Hidden tests for 08_operations, run in the grader's process (see course_lib/pipeline/hidden.py).

Where each exercise's expectations come from (none of them is the solution's code):

- paired_comparison: the counts of the two kinds of flip (b inputs right -> wrong, c wrong ->
  right); the mean difference is (c - b) / n and the sample variance of the differences
  (b + c - n * mean^2) / (n - 1), the textbook paired-proportion algebra, not a loop over the
  differences.
- serve_with_fallback: backends whose behaviour is set by construction (a plan of outcomes), run
  in the learner's kernel by a helper script that counts each backend's calls and names any
  exception that escapes; the expected attempts are worked from the plan by hand.
- slice_report: a count table keyed by (slice value, flag name) built with ``collections.Counter``
  in one pass, then divided; rows ordered by ``str``.
- canary: the bucket from the digest's hex form (the first 16 hex digits read base 16), and the
  stop rule's bounds from ``statistics.NormalDist`` quantities written out as the two one-sided
  limits of the difference.
- filter_stream: a brute force over prefixes: after chunk i, the released position is the
  earliest cut at which the rest of the text so far is the beginning of a phrase, recomputed from
  scratch for every prefix (never carried over).
"""
import hashlib
import math
import random
from collections import Counter

from course_lib.pipeline.hidden import Once
from course_lib.pipeline.hidden import item as _item

REFERENCES = (
    "course_lib.operations.drift.compare_paired",
    "course_lib.operations.routing.serve_with_fallback",
    "course_lib.operations.monitoring.slice_report",
    "course_lib.operations.rollout.canary_arm",
    "course_lib.operations.rollout.canary_decision",
    "course_lib.operations.rollout.Rollout",
    "course_lib.operations.stream_filter.StreamFilter",
    "course_lib.operations.stream_filter.filter_stream",
)


# -- exercise 1 -----------------------------------------------------------------------------------
def _scores(n, right_to_wrong, wrong_to_right, both_wrong, rng):
    kinds = ["rw"] * right_to_wrong + ["wr"] * wrong_to_right + ["ww"] * both_wrong
    kinds += ["rr"] * (n - len(kinds))
    rng.shuffle(kinds)
    return [k[0] == "r" for k in kinds], [k[1] == "r" for k in kinds]


def _paired(n, b, c, z):
    mean = (c - b) / n
    se = math.sqrt((b + c - n * mean * mean) / (n - 1) / n)
    low, high = mean - z * se, mean + z * se
    return {"delta": mean, "se": se, "low": low, "high": high,
            "verdict": "worse" if high < 0 else "better" if low > 0 else "noise", "right_to_wrong": b,
            "wrong_to_right": c}


def paired_comparison(learner, check):
    f = learner.function("paired_comparison")
    rng = random.Random(808)
    cases = [(100, 2, 0, 2, 1.96), (500, 10, 0, 10, 1.96), (500, 0, 10, 10, 1.96), (200, 15, 15, 5, 1.96),
             (300, 6, 0, 7, 1.96), (300, 7, 2, 4, 1.96), (40, 3, 1, 0, 1.0), (1000, 30, 12, 40, 2.576),
             (50, 0, 0, 5, 1.96), (2, 1, 0, 0, 1.96), (6, 6, 0, 0, 1.96), (80, 20, 5, 3, 1.645)]
    for _ in range(10):
        n = rng.randint(2, 600)
        b, c = rng.randint(0, n // 4), rng.randint(0, n // 8)
        cases.append((n, b, min(c, n - b), rng.randint(0, n - b - min(c, n - b)), rng.choice([1.0, 1.96, 2.576])))
    for case, (n, b, c, ww, z) in enumerate(cases):
        before, after = _scores(n, b, c, ww, rng)
        want = _paired(n, b, c, z)
        replay = Once((lambda x, y, zz: lambda: f(x, y, z=zz))(before, after, z))
        shown = f"case {case}: {n} inputs, {b} right->wrong, {c} wrong->right, z={z}"
        check.that(f"returns the seven keys ({shown})", replay,
                   lambda out: isinstance(out, dict) and set(out) == set(want), "return the dict the exercise names")
        check.close(f"delta is the mean of after - before ({shown})", _item("delta", replay), want["delta"], atol=1e-12)
        check.close(f"se is the sample stdev of the differences over sqrt(n) ({shown})", _item("se", replay),
                    want["se"], atol=1e-12, rtol=1e-9)
        check.close(f"low and high are delta -/+ z * se ({shown})",
                    lambda r=replay: [r()["low"], r()["high"]], [want["low"], want["high"]], atol=1e-12, rtol=1e-9)
        check.equal(f"the verdict reads the interval, boundaries included in noise ({shown})",
                    _item("verdict", replay), want["verdict"])
        check.equal(f"right_to_wrong and wrong_to_right count the flips ({shown})",
                    lambda r=replay: [r()["right_to_wrong"], r()["wrong_to_right"]], [b, c])
    check.close("z defaults to 1.96", lambda: f([True] * 60 + [False] * 3, [True] * 57 + [False] * 6)["high"],
                _paired(63, 3, 0, 1.96)["high"], atol=1e-12, rtol=1e-9)
    for label, args in (("lists of different lengths", ([True, False, True], [True, False])),
                        ("a single input", ([True], [True])), ("no inputs", ([], [])),
                        ("ints instead of bools", ([1, 1, 0], [1, 0, 0])),
                        ("None among the scores", ([True, None], [True, True])),
                        ("z = 0", ([True, False], [False, False], 0.0)), ("a negative z", ([True, True], [True, False], -1)),
                        ("z that is not a number", ([True, True], [True, False], "1.96"))):
        check.raises(f"invalid input raises ValueError ({label})", lambda a=args: f(*a), "ValueError")


# -- exercise 2 -----------------------------------------------------------------------------------
FALLBACK_SCRIPT = """
def _run_fallback(plan, request="the request"):
    import builtins as _builtins  # the exception classes themselves, whatever the notebook named them

    calls = {}
    errors = {name: getattr(_builtins, cls) for name, cls in (
        ("timeout", "TimeoutError"), ("connection", "ConnectionError"), ("refused", "ConnectionRefusedError"),
        ("reset", "ConnectionResetError"), ("keyerror", "KeyError"), ("typeerror", "TypeError"),
        ("valueerror", "ValueError"), ("runtime", "RuntimeError"))}

    def make(name, behaviour):
        def call(req):
            calls[name] = calls.get(name, 0) + 1
            if behaviour in errors:
                raise errors[behaviour]("injected")
            return behaviour
        return call

    backends = [(name, make(name, behaviour)) for name, behaviour in plan]
    try:
        out = serve_with_fallback(request, backends, lambda reply: not reply.startswith("bad"))
    except _builtins.Exception as exc:
        return {"raised": _builtins.type(exc).__name__, "calls": calls}
    return {"out": out, "calls": calls}
"""
_OUTAGES = ("timeout", "connection", "refused", "reset")


def _expected_chain(plan):
    """The attempts, the served backend and the calls a plan must produce, worked by the rules."""
    attempts, calls = [], {}
    for name, behaviour in plan:
        calls[name] = 1
        if behaviour in _OUTAGES:
            attempts.append([name, "unavailable"])
        elif behaviour in ("keyerror", "typeerror", "valueerror", "runtime"):
            return {"raised": {"keyerror": "KeyError", "typeerror": "TypeError", "valueerror": "ValueError",
                               "runtime": "RuntimeError"}[behaviour], "calls": calls}
        elif behaviour.startswith("bad"):
            attempts.append([name, "invalid"])
        else:
            attempts.append([name, "ok"])
            return {"out": {"reply": behaviour, "served_by": name, "attempts": attempts,
                            "fell_back": len(attempts) > 1}, "calls": calls}
    return {"out": {"reply": None, "served_by": None, "attempts": attempts, "fell_back": len(attempts) > 1},
            "calls": calls}


def serve_with_fallback(learner, check):
    run = learner.script(FALLBACK_SCRIPT, "_run_fallback")
    plans = {
        "the first backend answers": [("large", "ok-large"), ("small", "ok-small")],
        "a timeout moves to the next backend": [("large", "timeout"), ("small", "ok-small")],
        "a ConnectionError moves to the next backend": [("large", "connection"), ("small", "ok-small")],
        "a ConnectionRefusedError (a subclass) is an outage too": [("large", "refused"), ("small", "ok-small")],
        "a ConnectionResetError (a subclass) is an outage too": [("a", "reset"), ("b", "timeout"), ("c", "ok-c")],
        "an invalid reply moves to the next backend": [("large", "bad json"), ("small", "ok-small")],
        "outage, then invalid, then served by the third": [("a", "timeout"), ("b", "bad"), ("c", "ok-c"), ("d", "ok-d")],
        "every backend fails: nothing served": [("a", "timeout"), ("b", "bad reply"), ("c", "connection")],
        "a single backend that fails: fell_back stays False": [("only", "timeout")],
        "a single invalid backend: nothing served, fell_back False": [("only", "bad")],
        "a single backend that answers": [("only", "ok")],
        "a KeyError is a bug: it propagates, no fallback": [("large", "keyerror"), ("small", "ok-small")],
        "a TypeError is a bug: it propagates, no fallback": [("large", "typeerror"), ("small", "ok-small")],
        "a ValueError after an outage still propagates": [("a", "timeout"), ("b", "valueerror"), ("c", "ok-c")],
        "a RuntimeError after an invalid reply propagates": [("a", "bad"), ("b", "runtime"), ("c", "ok-c")],
        "a bug after a success is never reached": [("a", "ok-a"), ("b", "keyerror")],
    }
    for label, plan in plans.items():
        want = _expected_chain(plan)
        replay = Once((lambda p: lambda: run([list(step) for step in p]))(plan))
        if "raised" in want:
            check.equal(f"{label}: the exception escapes unchanged", _item("raised", replay), want["raised"], edge=True)
        else:
            check.equal(f"{label}: reply and served_by", lambda r=replay: [r()["out"]["reply"], r()["out"]["served_by"]],
                        [want["out"]["reply"], want["out"]["served_by"]])
            check.equal(f"{label}: attempts lists every call in order, with its outcome",
                        lambda r=replay: r()["out"]["attempts"], want["out"]["attempts"])
            check.equal(f"{label}: fell_back is True when more than one backend was called",
                        lambda r=replay: r()["out"]["fell_back"], want["out"]["fell_back"])
        check.equal(f"{label}: each backend called at most once, none after the chain ends",
                    _item("calls", replay), want["calls"])
    for label, plan in (("no backends", []), ("two backends named alike", [("x", "ok-1"), ("x", "ok-2")]),
                        ("a repeated name after others", [("a", "timeout"), ("b", "ok-b"), ("a", "ok-a")])):
        replay = Once((lambda p: lambda: run([list(step) for step in p]))(plan))
        check.equal(f"invalid backends raise ValueError ({label})", _item("raised", replay), "ValueError", edge=True)
        check.equal(f"... before any backend is called ({label})", _item("calls", replay), {}, edge=True)


# -- exercise 3 -----------------------------------------------------------------------------------
def _table(events, by, thresholds, min_count):
    sizes, hits = Counter(e[by] for e in events), Counter()
    for e in events:
        hits.update((e[by], name) for name in thresholds if e[name])
    rows = []
    for value in sorted(sizes, key=str):
        n = sizes[value]
        rates = {name: hits[value, name] / n for name in thresholds}
        alerts = [name for name in thresholds if n >= min_count and hits[value, name] > thresholds[name] * n]
        rows.append({"slice": value, "count": n, "rates": rates, "alerts": alerts, "enough": n >= min_count})
    return rows


def _load(rng, n, slices, flags):
    return [{"task": rng.choice(slices), "length": rng.choice(["short", "medium", "long"]), "shard": rng.randint(1, 12),
             **{name: rng.random() < p for name, p in flags.items()}, "note": "extra fields are ignored"}
            for _ in range(n)]


def slice_report(learner, check):
    f = learner.function("slice_report")
    rng = random.Random(8080)
    flags = {"error": 0.03, "truncated": 0.15, "invalid_schema": 0.05, "refusal": 0.3, "safety": 0.01}
    cases = [
        ("two slices, one too small", [{"task": "a", "error": True}] * 3 + [{"task": "a", "error": False}] * 7
         + [{"task": "b", "error": True}] * 2, "task", {"error": 0.2}, 5),
        ("a rate exactly at its threshold", [{"task": "a", "error": True}] + [{"task": "a", "error": False}] * 3,
         "task", {"error": 0.25}, 1),
        ("a slice of exactly min_count events", [{"task": "a", "error": True}] * 4, "task", {"error": 0.5}, 4),
        ("thresholds in an unsorted order", [{"task": "a", "z": True, "a": True, "m": True}] * 3, "task",
         {"z": 0.1, "a": 0.1, "m": 0.5}, 1),
        ("numbered slices sort by str", [{"shard": s, "error": s % 2 == 0} for s in (9, 10, 2, 11, 9, 10)], "shard",
         {"error": 0.4}, 1),
        ("truthy and falsy flags", [{"task": "x", "f": v} for v in (1, 0, "yes", "", [1], None)], "task", {"f": 0.4}, 1),
        ("only the thresholds' names get a rate", [{"task": "a", "error": True, "refusal": True}] * 2, "task",
         {"error": 0.0}, 1),
        ("a threshold of 0 alerts on any event", [{"task": "a", "safety": False}] * 9 + [{"task": "a", "safety": True}],
         "task", {"safety": 0.0}, 10),
        ("a threshold of 1 never alerts", [{"task": "a", "error": True}] * 5, "task", {"error": 1.0}, 1),
        ("no events", [], "task", {"error": 0.1}, 3),
    ]
    for case in range(6):
        events = _load(rng, rng.randint(30, 300), list("abcde")[:rng.randint(1, 5)], flags)
        thresholds = dict(rng.sample([("error", 0.02), ("truncated", 0.1), ("invalid_schema", 0.05), ("refusal", 0.3),
                                      ("safety", 0.0)], rng.randint(1, 5)))
        cases.append((f"a random load {case}", events, rng.choice(["task", "length", "shard"]), thresholds,
                      rng.choice([1, 5, 20, 60])))
    for label, events, by, thresholds, min_count in cases:
        want = _table(events, by, thresholds, min_count)
        replay = Once((lambda *a: lambda: f(*a))(events, by, thresholds, min_count))
        check.equal(f"one row per slice value, sorted by str(value) ({label})",
                    lambda r=replay: [row["slice"] for row in r()], [row["slice"] for row in want])
        check.equal(f"count is the slice's number of events, enough is count >= min_count ({label})",
                    lambda r=replay: [[row["count"], row["enough"]] for row in r()],
                    [[row["count"], row["enough"]] for row in want])
        check.close(f"each rate is the share of the slice's events whose flag is true ({label})",
                    lambda r=replay: [[row["rates"][name] for name in thresholds] for row in r()],
                    [[row["rates"][name] for name in thresholds] for row in want], atol=1e-12)
        check.equal(f"rates has exactly the thresholds' names ({label})",
                    lambda r=replay: [sorted(row["rates"]) for row in r()], [sorted(row["rates"]) for row in want])
        check.equal(f"alerts: strictly above the threshold, only when enough, in the thresholds' order ({label})",
                    lambda r=replay: [list(row["alerts"]) for row in r()], [row["alerts"] for row in want])
    events = [{"task": "a", "error": False}]
    for label, args in (("min_count 0", (events, "task", {"error": 0.1}, 0)),
                        ("a negative min_count", (events, "task", {"error": 0.1}, -3)),
                        ("min_count a float", (events, "task", {"error": 0.1}, 3.0)),
                        ("min_count True", (events, "task", {"error": 0.1}, True)),
                        ("a threshold above 1", (events, "task", {"error": 1.01}, 1)),
                        ("a negative threshold", (events, "task", {"error": -0.5}, 1)),
                        ("an event without the slice field", ([{"error": True}], "task", {"error": 0.1}, 1)),
                        ("an event without a flag, after good ones",
                         ([{"task": "a", "error": True}, {"task": "b"}], "task", {"error": 0.1}, 1))):
        check.raises(f"invalid input raises ValueError ({label})", lambda a=args: f(*a), "ValueError")


# -- exercise 4 -----------------------------------------------------------------------------------
def _arm(user_id, salt, percent):
    bucket = int(hashlib.sha256((salt + ":" + user_id).encode("utf-8")).hexdigest()[:16], 16) % 10_000
    return "canary" if bucket * 100 < percent * 10_000 else "stable"


def _bucket(user_id, salt):
    return int(hashlib.sha256((salt + ":" + user_id).encode("utf-8")).hexdigest()[:16], 16) % 10_000


def _decision(stable, canary, tolerance, min_per_arm, z=1.96):
    (e_s, n_s), (e_c, n_c) = stable, canary
    if n_s < min_per_arm or n_c < min_per_arm or not n_s or not n_c:
        return "wait"
    p_s, p_c = e_s / n_s, e_c / n_c
    variance = p_s * (1 - p_s) / n_s + p_c * (1 - p_c) / n_c
    lower, upper = (p_c - p_s) - z * variance ** 0.5, (p_c - p_s) + z * variance ** 0.5
    return "rollback" if lower > 0 else "promote" if upper <= tolerance else "wait"


def canary(learner, check):
    arm, decide = learner.function("canary_arm"), learner.function("canary_decision")
    users = [f"u{i:05d}" for i in range(300)] + ["ann@example.com", "Ünïcode user", "", "42"]
    for salt, percent in (("rollout-1", 5.0), ("rollout-2", 5.0), ("x", 50.0), ("", 12.34), ("rollout-1", 0.0),
                          ("rollout-1", 100.0)):
        check.equal(f"each user's arm follows the bucket of sha256(salt:user) (salt {salt!r}, {percent}%)",
                    (lambda s, p: lambda: [arm(u, s, p) for u in users])(salt, percent),
                    [_arm(u, salt, percent) for u in users])
    edges = [next(f"e{i}" for i in range(10**6) if _bucket(f"e{i}", "edge") == b) for b in (0, 499, 500, 1234)]
    check.equal("a bucket equal to percent x 100 is stable; one below is canary (strictly below)",
                lambda: [arm(edges[0], "edge", 0.0), arm(edges[1], "edge", 5.0), arm(edges[2], "edge", 5.0),
                         arm(edges[3], "edge", 12.34), arm(edges[3], "edge", 12.35)],
                ["stable", "canary", "stable", "stable", "canary"])
    for label, percent in (("-0.01%", -0.01), ("100.01%", 100.01), ("-50%", -50.0)):
        check.raises(f"a canary_percent outside [0, 100] raises ValueError ({label})",
                     lambda p=percent: arm("u", "s", p), "ValueError")
    rng = random.Random(4242)
    cases = [((10, 1000), (9, 99), 0.01, 100), ((10, 99), (90, 1000), 0.01, 100), ((0, 60), (40, 1000), 0.01, 100), ((0, 0), (0, 0), 0.01, 0),
             ((0, 100), (50, 100), 0.01, 100), ((10, 1000), (100, 1000), 0.02, 100), ((200, 20_000), (20, 2000), 0.02, 100),
             ((200, 20_000), (2, 150), 0.02, 100), ((0, 200), (0, 200), 0.0, 100), ((0, 100_000), (20, 1000), 0.05, 100),
             ((950, 19_000), (50, 1000), 0.02, 100), ((950, 19_000), (61, 1000), 0.0, 1000), ((0, 5), (0, 0), 0.1, 0),
             ((3, 3), (0, 3), 0.0, 1), ((0, 50), (50, 50), 0.5, 1)]
    for _ in range(25):
        n_s, n_c = rng.randint(20, 50_000), rng.randint(20, 3000)
        p = rng.uniform(0, 0.2)
        cases.append(((round(p * n_s), n_s), (min(n_c, round(rng.uniform(0.5, 2.5) * p * n_c)), n_c),
                      rng.choice([0.0, 0.005, 0.01, 0.02, 0.05]), rng.choice([0, 50, 200, 1000])))
    for case, args in enumerate(cases):
        check.equal(f"the stop rule: wait, rollback or promote (case {case})", (lambda a: lambda: decide(*a))(args),
                    _decision(*args))
    for z in (1.0, 2.576):
        args = ((200, 20_000), (2, 150), 0.02, 100)
        check.equal(f"z sets the width of the interval (z = {z})", lambda a=args, zz=z: decide(*a, z=zz),
                    _decision(*args, z=z))
    for label, args in (("more errors than requests in stable", ((11, 10), (5, 10), 0.01, 1)),
                        ("more errors than requests in the canary", ((5, 10), (21, 20), 0.01, 1)),
                        ("negative errors", ((0, 10), (-1, 10), 0.01, 1)),
                        ("negative requests", ((0, -10), (0, 10), 0.01, 1)),
                        ("a float count", ((0, 10), (1, 10.0), 0.01, 1)),
                        ("a negative tolerance", ((1, 100), (1, 100), -0.001, 1))):
        check.raises(f"invalid input raises ValueError ({label})", lambda a=args: decide(*a), "ValueError")


# -- exercise 5 -----------------------------------------------------------------------------------
def _brute_filter(chunks, banned):
    phrases = [p.lower() for p in banned]
    released, out, held_max, text = 0, [], 0, ""
    for chunk in chunks:
        text += chunk
        low = text.lower()
        if any(low[i:i + len(p)] == p for p in phrases for i in range(len(low) - len(p) + 1)):
            out.append("")
            return {"released": out, "blocked": True, "held_max": held_max}
        cut = min([i for i in range(len(low) + 1) if any(p[:len(low) - i] == low[i:] and len(low) - i < len(p)
                                                         for p in phrases)] or [len(low)])
        cut = max(cut, released)
        out.append(text[released:cut])
        released = cut
        held_max = max(held_max, len(text) - cut)
    out.append(text[released:])
    return {"released": out, "blocked": False, "held_max": held_max}


def _chunked(rng, text, pieces):
    if len(text) < 2:
        return [text] if text else []
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, pieces)))
    return [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)])]


def filter_stream(learner, check):
    f = learner.function("filter_stream")
    rng = random.Random(5150)
    cases = [
        ("a phrase split over chunks", ["The ", "pass", "word", " is hunter2"], ["password"]),
        ("a near miss is held, then released", ["Your ", "pass", "port is ready"], ["password"]),
        ("the longest possible start is held", ["xaa", "c"], ["aab"]),
        ("overlapping starts", ["aaa", "a", "b"], ["aaab"]),
        ("case is ignored", ["My PASS", "WORD"], ["password"]),
        ("mixed case in the phrase list", ["it is ", "secret"], ["SeCrEt"]),
        ("a phrase inside a single chunk stops at once", ["a secret here", " and more"], ["secret"]),
        ("later phrases count too", ["one ", "two ", "three"], ["zebra", "tw", "thr"]),
        ("a phrase at the very start", ["nightjar", " rises"], ["nightjar"]),
        ("a phrase of one character", ["ab", "xc"], ["x"]),
        ("held text at the end is flushed", ["we ", "say pa"], ["password"]),
        ("the block discards what was held", ["ab", "c", "d"], ["abx", "bcd"]),
        ("nothing can start a phrase", ["nothing ", "to ", "see"], ["zzz"]),
        ("empty chunks", ["", "pa", "", "ss", ""], ["pass"]),
        ("no chunks", [], ["x"]),
        ("text with accents keeps its length", ["Café ", "Ñandú", " ok"], ["ñandú"]),
    ]
    for case in range(20):
        text = "".join(rng.choice("ab c") for _ in range(rng.randint(0, 50)))
        banned = ["".join(rng.choice("abc") for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 4))]
        cases.append((f"random stream {case}", _chunked(rng, text, rng.randint(0, 15)), banned))
    for label, chunks, banned in cases:
        want = _brute_filter(chunks, banned)
        replay = Once((lambda c, b: lambda: f(list(c), list(b)))(chunks, banned))
        check.equal(f"what each chunk releases, then the flush ({label})", lambda r=replay: list(r()["released"]),
                    want["released"])
        check.equal(f"blocked once a phrase appears in the text so far ({label})", _item("blocked", replay),
                    want["blocked"])
        check.equal(f"held_max is the most characters held back after any chunk ({label})", _item("held_max", replay),
                    want["held_max"])
    for label, banned in (("no phrases", []), ("an empty phrase", ["ok", ""]), ("only an empty phrase", [""])):
        check.raises(f"invalid phrases raise ValueError ({label})", lambda b=banned: f(["text"], b), "ValueError")
