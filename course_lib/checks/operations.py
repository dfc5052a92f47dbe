"""Visible checks for notebook 08 (running the model in production).

One case per rule each exercise states. The course's own code serves as the oracle where it has
the same rule: ``operations.drift.compare_paired`` for the paired comparison,
``operations.monitoring.slice_report`` for the rates by slice, ``operations.rollout`` for the
canary and ``operations.stream_filter`` for the streaming filter; the fallback chain is checked on
backends whose behaviour is known by construction (they count their calls). The hidden tests
(grading/hidden/08_operations.py) use independent sources.
"""
from __future__ import annotations

import hashlib
import math
import random

from course_lib.checks.report import CheckFailed, expect_close, expect_equal, expect_raises

PAIRED_KEYS = ["delta", "high", "low", "right_to_wrong", "se", "verdict", "wrong_to_right"]
FALLBACK_KEYS = ["attempts", "fell_back", "reply", "served_by"]
ROW_KEYS = ["alerts", "count", "enough", "rates", "slice"]


def _keys(label, got, keys, hint):
    expect_equal(label, sorted(got) if isinstance(got, dict) else got, keys, hint=hint)


# -- exercise 1: the paired comparison -------------------------------------------------------------
def paired_comparison(fn) -> None:
    from course_lib.operations.drift import compare_paired

    before, after = [True] * 98 + [False] * 2, [True] * 96 + [False] * 4
    got = fn(before, after)
    _keys("returns a dict with delta, se, low, high, verdict, right_to_wrong, wrong_to_right", got, PAIRED_KEYS,
          "return {'delta': ..., 'se': ..., 'low': ..., 'high': ..., 'verdict': ..., 'right_to_wrong': ..., "
          "'wrong_to_right': ...}")
    expect_close("delta = mean of int(after) - int(before): 2 inputs flipped to wrong out of 100", got["delta"], -0.02,
                 hint="after minus before, so a drop is negative")
    expect_equal("right_to_wrong counts d == -1, wrong_to_right counts d == +1", [got["right_to_wrong"],
                                                                                  got["wrong_to_right"]], [2, 0])
    sd = math.sqrt((2 - 100 * 0.02 ** 2) / 99)
    expect_close("se = the SAMPLE stdev of the differences (n - 1) / sqrt(n)", got["se"], sd / 10, rtol=1e-9,
                 hint="statistics.stdev(diffs) / math.sqrt(len(diffs)), the differences, not the two accuracies")
    expect_close("low and high = delta -/+ z * se", [got["low"], got["high"]], [-0.02 - 1.96 * sd / 10,
                                                                              -0.02 + 1.96 * sd / 10], rtol=1e-9)
    expect_equal("2 points down on 100 inputs: the interval contains 0 -> noise", got["verdict"], "noise")
    expect_equal("the same flips on 500 inputs: the interval lies below 0 -> worse", fn(before * 5, after * 5)["verdict"],
                 "worse")
    expect_equal("... and the other way round -> better", fn(after * 5, before * 5)["verdict"], "better")
    mixed_before = [True] * 10 + [False] * 10 + [True] * 80
    mixed_after = [False] * 10 + [True] * 10 + [True] * 80
    got = fn(mixed_before, mixed_after)
    expect_close("flips both ways cancel in delta but not in se (10 each way)", [got["delta"], got["se"]],
                 [0.0, math.sqrt(20 / 99) / 10], rtol=1e-9, atol=1e-12,
                 hint="the paired se comes from the differences: 20 of them are +-1")
    expect_equal("... and they are counted separately", [got["right_to_wrong"], got["wrong_to_right"]], [10, 10])
    got = fn(mixed_before, mixed_after, z=1.0)
    expect_close("z sets the width: z = 1 gives delta -/+ 1 * se", got["high"] - got["low"], 2 * math.sqrt(20 / 99) / 10,
                 rtol=1e-9, hint="use the z argument, not a fixed 1.96")
    got = fn([True, False, True], [True, False, True])
    expect_equal("identical scores: delta 0, se 0, low = high = 0, and the boundary counts as noise",
                 [got["delta"], got["se"], got["low"], got["high"], got["verdict"]], [0.0, 0.0, 0.0, 0.0, "noise"],
                 hint="'worse' needs high < 0 and 'better' low > 0, strictly")
    got = fn([True, True], [False, False])
    expect_equal("every input flipped to wrong: se 0 and high = -1 < 0 -> worse", [got["se"], got["verdict"]],
                 [0.0, "worse"])
    rng = random.Random(8)
    for case in range(6):
        n = rng.randint(2, 400)
        b = [rng.random() < 0.9 for _ in range(n)]
        a = [flag if rng.random() < 0.9 else not flag for flag in b]
        z = rng.choice([1.0, 1.645, 1.96, 2.576])
        got, want = fn(b, a, z=z), compare_paired(b, a, z=z)
        expect_close(f"random case {case} ({n} inputs, z={z}): delta, se, low, high as the course's compare_paired",
                     [got["delta"], got["se"], got["low"], got["high"]],
                     [want["delta"], want["se"], want["low"], want["high"]], rtol=1e-9, atol=1e-12)
        expect_equal(f"random case {case}: verdict and flips", [got["verdict"], got["right_to_wrong"],
                                                               got["wrong_to_right"]],
                     [want["verdict"], want["right_to_wrong"], want["wrong_to_right"]])
    for label, args in (("lists of different lengths", ([True, False, True], [True, False])),
                        ("fewer than 2 inputs", ([True], [False])), ("no inputs", ([], [])),
                        ("ints instead of bools", ([1, 0, 1], [1, 1, 1])),
                        ("strings instead of bools", (["yes", "no"], ["yes", "yes"])),
                        ("z = 0", ([True, False], [True, True], 0)), ("a negative z", ([True, False], [True, True], -1.96))):
        expect_raises(f"{label} raises ValueError", lambda: fn(*args), ValueError)


# -- exercise 2: the fallback chain ----------------------------------------------------------------
class _Backend:
    """A backend whose behaviour is set by construction, counting its calls."""

    def __init__(self, behaviour, reply="fine"):
        self.behaviour, self.reply, self.calls = behaviour, reply, 0

    def __call__(self, request):
        self.calls += 1
        if isinstance(self.behaviour, type) and issubclass(self.behaviour, BaseException):
            raise self.behaviour(f"injected for {request!r}")
        return self.reply


def _valid(reply):
    return reply != "garbage"


def serve_with_fallback(fn) -> None:
    first, second = _Backend("ok", "from first"), _Backend("ok", "from second")
    got = fn("q", [("first", first), ("second", second)], _valid)
    _keys("returns a dict with reply, served_by, attempts, fell_back", got, FALLBACK_KEYS,
          "return {'reply': ..., 'served_by': ..., 'attempts': [[name, outcome], ...], 'fell_back': ...}")
    expect_equal("a first backend that answers well serves the request", [got["reply"], got["served_by"]],
                 ["from first", "first"])
    expect_equal("... and the others are never called", [first.calls, second.calls], [1, 0],
                 hint="stop at the first reply that validate accepts")
    expect_equal("... attempts lists that one call, fell_back is False", [got["attempts"], got["fell_back"]],
                 [[["first", "ok"]], False])
    for error in (TimeoutError, ConnectionError, ConnectionRefusedError):
        down, up = _Backend(error), _Backend("ok", "from second")
        got = fn("q", [("large", down), ("small", up)], _valid)
        expect_equal(f"a {error.__name__} is an outage: 'unavailable', then the next backend serves",
                     [got["attempts"], got["served_by"], got["fell_back"]],
                     [[["large", "unavailable"], ["small", "ok"]], "small", True],
                     hint="except (TimeoutError, ConnectionError): catches their subclasses too")
        expect_equal(f"... the backend that raised {error.__name__} was called once, not retried", down.calls, 1,
                     hint="each backend at most once: move on, do not call it again")
    bad, good = _Backend("ok", "garbage"), _Backend("ok", "from second")
    got = fn("q", [("large", bad), ("small", good)], _valid)
    expect_equal("a reply validate rejects is 'invalid' and the next backend is tried",
                 [got["attempts"], got["reply"]], [[["large", "invalid"], ["small", "ok"]], "from second"],
                 hint="call validate(reply); only a True result ends the chain")
    for error in (KeyError, TypeError, ValueError):
        broken, spare = _Backend(error), _Backend("ok")
        try:
            fn("q", [("large", broken), ("small", spare)], _valid)
        except error:
            outcome = error.__name__
        except Exception as exc:  # the wrong exception is a failure, with its name
            outcome = type(exc).__name__
        else:
            outcome = "returned"
        expect_equal(f"a {error.__name__} from a backend is a bug: it propagates unchanged", outcome, error.__name__,
                     hint="catch only TimeoutError and ConnectionError; let everything else raise")
        expect_equal(f"... and no further backend is called after the {error.__name__}", spare.calls, 0)
    chain = [("a", _Backend(TimeoutError)), ("b", _Backend("ok", "garbage")), ("c", _Backend(ConnectionError))]
    got = fn("q", chain, _valid)
    expect_equal("every backend fails: reply and served_by are None, every call is in attempts",
                 [got["reply"], got["served_by"], got["attempts"], got["fell_back"]],
                 [None, None, [["a", "unavailable"], ["b", "invalid"], ["c", "unavailable"]], True])
    lone = fn("q", [("only", _Backend(TimeoutError))], _valid)
    expect_equal("a single backend that fails: nothing served, and fell_back is False (only one was called)",
                 [lone["served_by"], lone["fell_back"]], [None, False],
                 hint="fell_back means more than one backend was called")
    expect_raises("no backends raises ValueError", lambda: fn("q", [], _valid), ValueError)
    twice = _Backend("ok")
    expect_raises("two backends with the same name raise ValueError", lambda: fn("q", [("x", twice), ("x", twice)],
                                                                                    _valid), ValueError)
    expect_equal("... before any backend is called", twice.calls, 0, hint="check the names before the loop")


# -- exercise 3: rates by slice ----------------------------------------------------------------------
def _rows(rows):
    return [dict(row, rates=dict(row["rates"]), alerts=list(row["alerts"])) if isinstance(row, dict) else row
            for row in rows] if isinstance(rows, list) else rows


def slice_report(fn) -> None:
    from course_lib.operations.monitoring import slice_report as course_report

    events = ([{"task": "a", "error": False, "truncated": True}] * 8 + [{"task": "a", "error": True, "truncated": False}]
              * 2 + [{"task": "b", "error": False, "truncated": False}] * 3)
    rows = fn(events, "task", {"error": 0.1, "truncated": 0.5}, 5)
    expect_equal("one row per slice value", len(rows) if isinstance(rows, list) else rows, 2)
    _keys("each row has slice, count, rates, alerts, enough", rows[0], ROW_KEYS,
          "{'slice': value, 'count': n, 'rates': {...}, 'alerts': [...], 'enough': bool}")
    expect_equal("slice a: 10 events, error rate 2/10, truncated 8/10",
                 [rows[0]["slice"], rows[0]["count"], rows[0]["rates"]], ["a", 10, {"error": 0.2, "truncated": 0.8}],
                 hint="a rate is the share of the GROUP's events whose flag is true")
    expect_equal("slice a: both rates above their thresholds alert, in the thresholds' order", rows[0]["alerts"],
                 ["error", "truncated"])
    expect_equal("slice b has 3 events, fewer than min_count 5: enough is False and nothing alerts",
                 [rows[1]["count"], rows[1]["enough"], rows[1]["alerts"]], [3, False, []])
    rows = fn(events, "task", {"truncated": 0.5, "error": 0.1}, 5)
    expect_equal("alerts follow the order of thresholds, not alphabetical order", rows[0]["alerts"],
                 ["truncated", "error"])
    rows = fn(events, "task", {"error": 0.2}, 5)
    expect_equal("a rate equal to its threshold does not alert (strictly above)", rows[0]["alerts"], [],
                 hint="rate > threshold, not >=")
    rows = fn(events, "task", {"error": 0.1}, 10)
    expect_equal("a slice with exactly min_count events is enough", [rows[0]["enough"], rows[0]["alerts"]],
                 [True, ["error"]], hint="enough = count >= min_count")
    rows = fn(events, "task", {"error": 0.1}, 5)
    expect_equal("only the names in thresholds get a rate", sorted(rows[0]["rates"]), ["error"])
    numbered = [{"shard": 9, "error": True}] * 2 + [{"shard": 10, "error": False}] * 2 + [{"shard": 2, "error": False}]
    expect_equal("rows are sorted by str(slice value): 10 before 2 before 9",
                 [row["slice"] for row in fn(numbered, "shard", {"error": 0.5}, 1)], [10, 2, 9],
                 hint="sorted(groups, key=str)")
    expect_equal("a flag counts when it is true (1 and 'yes' too, 0 and '' not)",
                 fn([{"s": "x", "f": 1}, {"s": "x", "f": 0}, {"s": "x", "f": "yes"}, {"s": "x", "f": ""}], "s", {"f": 0.9},
                    1)[0]["rates"], {"f": 0.5})
    expect_equal("no events: no rows", fn([], "task", {"error": 0.1}, 1), [])
    rng = random.Random(3)
    for case in range(4):
        events = [{"task": rng.choice("abcd"), "length": rng.choice(["short", "long"]),
                   **{name: rng.random() < p for name, p in (("error", 0.05), ("truncated", 0.2), ("refusal", 0.3))}}
                  for _ in range(rng.randint(20, 120))]
        thresholds = {"truncated": 0.2, "error": 0.04, "refusal": 0.3}
        by, min_count = rng.choice(["task", "length"]), rng.choice([1, 10, 25])
        expect_equal(f"random load {case} ({len(events)} events by {by}, min_count {min_count}): every row as the "
                     "course's slice_report", _rows(fn(events, by, thresholds, min_count)),
                     _rows(course_report(events, by, thresholds, min_count)))
    for label, args in (("min_count 0", (events, "task", {"error": 0.1}, 0)),
                        ("min_count not an int", (events, "task", {"error": 0.1}, 2.5)),
                        ("a threshold above 1", (events, "task", {"error": 1.5}, 1)),
                        ("a negative threshold", (events, "task", {"error": -0.1}, 1)),
                        ("an event without the slice field", ([{"error": True}], "task", {"error": 0.1}, 1)),
                        ("an event without a threshold's flag", ([{"task": "a"}], "task", {"error": 0.1}, 1))):
        expect_raises(f"{label} raises ValueError", lambda: fn(*args), ValueError)


# -- exercise 4: canary arms and the stop rule -------------------------------------------------------
def _bucket(user_id, salt):
    return int.from_bytes(hashlib.sha256(f"{salt}:{user_id}".encode()).digest()[:8], "big") % 10_000


def _user_in_bucket(salt, wanted):
    return next(f"user-{i}" for i in range(10**6) if _bucket(f"user-{i}", salt) == wanted)


def canary(arm_fn, decision_fn) -> None:
    from course_lib.operations.rollout import canary_arm as course_arm
    from course_lib.operations.rollout import canary_decision as course_decision

    users = [f"user-{i}" for i in range(400)]
    got = [arm_fn(u, "s1", 25.0) for u in users]
    expect_equal("every user is 'canary' or 'stable', exactly as the bucket rule says",
                 got, [course_arm(u, "s1", 25.0) for u in users],
                 hint="int.from_bytes(hashlib.sha256(f'{salt}:{user_id}'.encode()).digest()[:8], 'big') % 10_000")
    expect_equal("sticky: asking again gives every user the same arm", [arm_fn(u, "s1", 25.0) for u in users], got)
    expect_equal("the salt is part of the hash: another salt gives other users", [arm_fn(u, "s2", 25.0) for u in users],
                 [course_arm(u, "s2", 25.0) for u in users])
    edge = _user_in_bucket("edge", 500)
    expect_equal("bucket 500 at 5%: 500 < 500 is false -> stable (strictly below)", arm_fn(edge, "edge", 5.0), "stable",
                 hint="canary when bucket < canary_percent * 100")
    expect_equal("... and at 5.01% it is in the canary", arm_fn(edge, "edge", 5.01), "canary")
    expect_equal("0% puts nobody in the canary, 100% everybody",
                 [sum(arm_fn(u, "s1", 0.0) == "canary" for u in users), sum(arm_fn(u, "s1", 100.0) == "canary"
                                                                           for u in users)], [0, len(users)])
    for label, percent in (("a negative percent", -1.0), ("a percent above 100", 100.5)):
        expect_raises(f"{label} raises ValueError", lambda: arm_fn("u", "s", percent), ValueError)

    def decide(*args, **kw):
        return decision_fn(*args, **kw)

    expect_equal("fewer than min_per_arm requests in the canary -> wait", decide((10, 1000), (9, 99), 0.01, 100), "wait")
    expect_equal("fewer than min_per_arm requests in stable -> wait (even with a canary clearly worse)",
                 decide((0, 60), (40, 1000), 0.01, 100), "wait", hint="both arms need min_per_arm requests")
    expect_equal("no requests at all (min_per_arm 0) -> wait", decide((0, 0), (0, 0), 0.01, 0), "wait",
                 hint="an arm with no requests has no rate: wait")
    expect_equal("exactly min_per_arm requests in each arm is enough to decide", decide((0, 100), (50, 100), 0.01, 100),
                 "rollback")
    expect_equal("canary 10% errors vs stable 1%, 1,000 requests each: worse beyond doubt -> rollback",
                 decide((10, 1000), (100, 1000), 0.02, 100), "rollback")
    expect_equal("equal 1% error rates, 20,000 and 2,000 requests, tolerance 2 points -> promote",
                 decide((200, 20_000), (20, 2000), 0.02, 100), "promote")
    expect_equal("similar rates (1% and 1.3%) but only 150 canary requests: the interval is too wide -> wait",
                 decide((200, 20_000), (2, 150), 0.02, 100), "wait")
    half = 1.96 * math.sqrt(0.05 * 0.95 / 19_000 + 0.05 * 0.95 / 1000)
    expect_equal("the half-width uses each arm's own size (19,000 stable, 1,000 canary)",
                 [decide((950, 19_000), (50, 1000), half + 1e-9, 100), decide((950, 19_000), (50, 1000), half - 1e-6, 100)],
                 ["promote", "wait"], hint="z * sqrt(p_s(1-p_s)/n_s + p_c(1-p_c)/n_c), not one n for both")
    expect_equal("promote when diff + half equals the tolerance (<=)", decide((0, 200), (0, 200), 0.0, 100), "promote")
    expect_equal("rollback is checked before promote: worse beyond doubt but within a loose tolerance -> rollback",
                 decide((0, 100_000), (20, 1000), 0.05, 100), "rollback")
    expect_equal("z sets the width: at z = 1 the same counts already promote",
                 [decide((200, 20_000), (2, 150), 0.02, 100, z=1.0), decide((200, 20_000), (2, 150), 0.02, 100)],
                 ["promote", "wait"], hint="use the z argument")
    rng = random.Random(5)
    for case in range(8):
        n_s, n_c = rng.randint(50, 20_000), rng.randint(50, 2000)
        args = ((rng.randint(0, n_s // 10), n_s), (rng.randint(0, n_c // 5), n_c), rng.choice([0.0, 0.01, 0.03]),
                rng.choice([0, 100, 500]))
        expect_equal(f"random case {case}: as the course's canary_decision", decide(*args), course_decision(*args))
    for label, args in (("errors above requests in stable", ((11, 10), (5, 10), 0.01, 1)),
                        ("errors above requests in the canary", ((5, 10), (21, 20), 0.01, 1)),
                        ("negative errors", ((-1, 10), (0, 10), 0.01, 1)),
                        ("a float count", ((1.0, 10), (0, 10), 0.01, 1)),
                        ("a negative tolerance", ((1, 10), (1, 10), -0.01, 1))):
        expect_raises(f"{label} raises ValueError", lambda: decide(*args), ValueError)


# -- exercise 5: a streaming filter -------------------------------------------------------------------
def _plain_stream(result):
    return dict(result, released=list(result["released"])) if isinstance(result, dict) else result


def filter_stream(fn) -> None:
    from course_lib.operations.stream_filter import filter_stream as course_filter

    got = fn(["The ", "pass", "word", " is hunter2"], ["password"])
    if not isinstance(got, dict) or sorted(got) != ["blocked", "held_max", "released"]:
        raise CheckFailed(f"filter_stream: expected a dict with released, blocked, held_max, got {got!r}")
    expect_equal("a phrase split over two chunks blocks the stream; nothing of it was released",
                 [got["released"], got["blocked"]], [["The ", "", ""], True],
                 hint="check the text so far, not each chunk alone; a block releases '' and stops reading")
    expect_equal("... and the most held back was 'pass', 4 characters", got["held_max"], 4)
    got = fn(["Your ", "pass", "port is ready"], ["password"])
    expect_equal("'pass' is held back until 'port' shows it is not the phrase, then released; a final flush entry",
                 [got["released"], got["blocked"]], [["Your ", "", "passport is ready", ""], False],
                 hint="after the last chunk, append what is still held (here '')")
    got = fn(["we ", "say pa"], ["password"])
    expect_equal("what is still held at the end is released as one more entry", got["released"], ["we ", "say ", "pa"])
    got = fn(["xaa", "c"], ["aab"])
    expect_equal("the LONGEST tail that starts a phrase is held: 'aa' of 'xaa', not just 'a'", got["released"],
                 ["x", "aac", ""], hint="look for the earliest start whose tail is the beginning of a phrase")
    got = fn(["Project ", "NIGHT", "jar"], ["project nightjar"])
    expect_equal("matching ignores case", [got["blocked"], got["released"]], [True, ["", "", ""]])
    got = fn(["a secret", " and more", " text"], ["secret"])
    expect_equal("a phrase inside one chunk blocks at once; later chunks are not read", [got["released"], got["blocked"]],
                 [[""], True])
    got = fn(["one ", "two ", "three"], ["zebra", "tw", "thr"])
    expect_equal("every phrase counts, not only the first", [got["released"], got["blocked"]], [["one ", ""], True])
    got = fn(["nothing ", "to ", "see"], ["zzz"])
    expect_equal("text that cannot start a phrase is released at once", [got["released"], got["held_max"]],
                 [["nothing ", "to ", "see", ""], 0])
    expect_equal("no chunks: just the (empty) flush", _plain_stream(fn([], ["x"])),
                 {"released": [""], "blocked": False, "held_max": 0})
    got = fn(["ab", "c", "d"], ["abx", "bcd"])
    expect_equal("held_max is the largest hold after any chunk: 'ab' (2), then 'bc' (2), then a block",
                 [got["released"], got["held_max"], got["blocked"]], [["", "a", ""], 2, True])
    rng = random.Random(21)
    for case in range(12):
        alphabet = "abc "
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 12)))) if len(text) > 1 else []
        chunks = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)])] if text else []
        banned = ["".join(rng.choice("abc") for _ in range(rng.randint(2, 5))) for _ in range(rng.randint(1, 3))]
        expect_equal(f"random stream {case} ({len(chunks)} chunks, banned {banned}): as the course's filter_stream",
                     _plain_stream(fn(chunks, banned)), course_filter(chunks, banned))
    expect_raises("no banned phrases raises ValueError", lambda: fn(["a"], []), ValueError)
    expect_raises("an empty banned phrase raises ValueError", lambda: fn(["a"], ["ok", ""]), ValueError)


HINTS = {
    "paired_comparison": [
        "Validate first: same length, at least 2, every score a bool (type(x) is bool), z a positive number.",
        "diffs = [int(a) - int(b) for b, a in zip(before, after)]; delta = sum(diffs) / len(diffs).",
        "se = statistics.stdev(diffs) / math.sqrt(len(diffs)); low, high = delta - z * se, delta + z * se; "
        "verdict 'worse' if high < 0, 'better' if low > 0, else 'noise'; count diffs.count(-1) and diffs.count(1).",
    ],
    "serve_with_fallback": [
        "Check the list first: not empty, names distinct (len(set(names)) == len(names)), before any call.",
        "for name, call in backends: try: reply = call(request) except (TimeoutError, ConnectionError): record "
        "[name, 'unavailable'] and continue. Do not catch anything else.",
        "If validate(reply): record [name, 'ok'] and return at once; else record [name, 'invalid']. After the "
        "loop: reply and served_by None. fell_back = len(attempts) > 1.",
    ],
    "slice_report": [
        "Validate min_count (an int >= 1, not a bool) and each threshold (0 <= t <= 1); an event missing by or a "
        "threshold name raises ValueError.",
        "groups = {}; groups.setdefault(event[by], []).append(event); then for value in sorted(groups, key=str).",
        "rates = {name: sum(1 for e in group if e[name]) / len(group) for name in thresholds}; enough = len(group) "
        ">= min_count; alerts = [name for name in thresholds if enough and rates[name] > thresholds[name]].",
    ],
    "canary": [
        "bucket = int.from_bytes(hashlib.sha256(f'{salt}:{user_id}'.encode()).digest()[:8], 'big') % 10_000; "
        "'canary' if bucket < canary_percent * 100 else 'stable'.",
        "canary_decision: validate the counts (ints >= 0, errors <= requests) and tolerance >= 0; wait while "
        "min(n_s, n_c) < max(min_per_arm, 1).",
        "half = z * math.sqrt(p_s * (1 - p_s) / n_s + p_c * (1 - p_c) / n_c); rollback if p_c - p_s - half > 0, "
        "then promote if p_c - p_s + half <= tolerance, else wait.",
    ],
    "filter_stream": [
        "Keep text (all chunks so far) and released (how many characters went out). Lowercase both text and "
        "phrases for matching.",
        "After adding a chunk: if any phrase in text.lower(): append '' and return blocked. Else find the "
        "smallest start >= released such that some phrase startswith(text.lower()[start:]); cut there.",
        "Append text[released:cut], set released = cut, update held_max = max(held_max, len(text) - released). "
        "After the loop append text[released:] (the flush).",
    ],
}
