"""Hidden tests for 04_sampling, run in the grader's process (see course_lib/pipeline/hidden.py).

Where each exercise's expectations come from (none of them is the solution's code):

- apply_temperature, top_k_filter, top_p_filter, min_p_filter, apply_penalties, stop_at and
  sample_token: plain Python (math, random.Random, loops over the exact float32 values sent to
  the learner), with torch only as the oracle of the uniform stream a seeded
  ``torch.Generator`` yields; the sampler's draws are also checked by a chi-square test.
- generate_text: the course's own decode loop (``course_lib.generation.generate``, the serving
  engine with its KV cache and batched sampler), run by ``course_lib.checks.sampling`` here in
  the grader's process on its own copy of the shipped model.

The learner's functions are reached only through ``learner.function`` and ``learner.script``
(for a generator built in the learner's kernel from a seed we send, for iterating pieces as a
stream, and for running the generate loop on tinychat loaded in the learner's kernel), which
send and return plain data.
"""
import functools
import math
import random

import torch

from course_lib.pipeline.hidden import item as _item
from course_lib.pipeline.learner import LearnerRaised, LearnerRefused, LearnerUnavailable

REFERENCES = (
    "course_lib.sampling.processors.apply_temperature",
    "course_lib.sampling.processors.apply_top_k",
    "course_lib.sampling.processors.apply_top_p",
    "course_lib.sampling.processors.apply_min_p",
    "course_lib.sampling.processors.apply_frequency_presence_penalties",
    "course_lib.sampling.processors.apply_repetition_penalty",
    "course_lib.sampling.sampler.sample_from_probs",
    "course_lib.sampling.stops.find_stop",
    "course_lib.sampling.stops.trim_at_stop",
    "course_lib.sampling.stops.StopSequenceMatcher",
    "course_lib.sampling.stops.stream_until_stop",
    "course_lib.sampling.sampler.sample_next_token",
    "course_lib.generation.generate.generate",
    "course_lib.generation.generate.generate_many",
    # The pipeline the processors are assembled into answers them too (processed logits or
    # probabilities for any params), and so does the engine's per-row sampler.
    "course_lib.sampling.batch.process_logits",
    "course_lib.sampling.sampler.next_token_probs",
    "course_lib.sampling.batch.filter_rows",
    "course_lib.sampling.batch.sample_batch",
    "course_lib.serving.request.sample_rows",
)
NEG_INF = float("-inf")


# -- helpers ----------------------------------------------------------------------------------
def _f32(rows):
    """The float32 tensor sent to the learner, and its exact values as Python floats."""
    tensor = torch.tensor(rows, dtype=torch.float32)
    return tensor, tensor.tolist()


def _probs(row):
    """Softmax of one row in plain Python (a -inf logit gets probability exactly 0)."""
    top = max(row)
    weights = [0.0 if x == NEG_INF else math.exp(x - top) for x in row]
    total = sum(weights)
    return [w / total for w in weights]


def _shape(rows, batched):
    return f"({len(rows)}, {len(rows[0])})" if batched else f"({len(rows[0])},)"


def _n(count, word):
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _once(call):
    """Call the learner once; a zero-argument callable that replays its value or exception."""
    try:
        value = call()
    except (LearnerRaised, LearnerRefused, LearnerUnavailable) as exc:
        failure = exc  # `exc` itself is unbound when the except block ends

        def again():
            raise failure
        return again
    return lambda: value


# The input tensor is built in the learner's kernel, so we can look at it after the call.
UNCHANGED_SCRIPT = """
import torch as _torch

def _input_unchanged(name, rows, *args, **kwargs):
    logits = _torch.tensor(rows, dtype=_torch.float32)
    before = logits.clone()
    result = globals()[name](logits, *args, **kwargs)
    return bool(_torch.equal(logits, before)) and result is not logits
"""


# -- exercise 1 -------------------------------------------------------------------------------
def apply_temperature(learner, check):
    f = learner.function("apply_temperature")
    rng = random.Random(404)
    for _ in range(40):
        V, B = rng.randint(1, 12), rng.choice([None, 1, 3])
        rows = [[NEG_INF if rng.random() < 0.15 else rng.uniform(-10, 10) for _ in range(V)]
                for _ in range(B or 1)]
        for r in rows:
            if all(x == NEG_INF for x in r):
                r[0] = 1.0
        T = rng.choice([0.0, 0.0, 0.1, 0.5, 0.7, 1.0, 1.3, 2.0, 10.0])
        z, rows = _f32(rows if B else rows[0])
        rows = rows if B else [rows]
        if T == 0:
            rule = "T = 0 keeps only the first maximal logit of each row, the rest become -inf"
            expected = []
            for r in rows:
                first = max(range(len(r)), key=lambda i: (r[i], -i))
                expected.append([r[i] if i == first else NEG_INF for i in range(len(r))])
        else:
            rule = "T > 0 divides every logit by T (a -inf logit stays -inf)"
            expected = [[x / T for x in r] for r in rows]
        check.close(f"{rule} (shape {_shape(rows, B)}, T={T:g})", lambda: f(z.clone(), T),
                    expected if B else expected[0], atol=1e-4, rtol=1e-6)
    for rows, rule in [([3.0, 1.0, 3.0], "T = 0 with a tie keeps only the first maximal logit (as argmax)"),
                       ([[0.0, 2.0, 2.0], [5.0, 5.0, 5.0]], "T = 0 on (B, V) rows: each row keeps its own first maximum"),
                       ([NEG_INF, -4.0, NEG_INF, -4.0], "T = 0 skips -inf logits and keeps the first maximal one")]:
        z, values = _f32(rows)
        grid = values if isinstance(values[0], list) else [values]
        expected = []
        for r in grid:
            first = max(range(len(r)), key=lambda i: (r[i], -i))
            expected.append([r[i] if i == first else NEG_INF for i in range(len(r))])
        check.close(rule, lambda: f(z.clone(), 0.0), expected if isinstance(values[0], list) else expected[0])
    unchanged = learner.script(UNCHANGED_SCRIPT, "_input_unchanged")
    for T in (0.7, 0.0):
        check.that(f"returns a new tensor and leaves the input logits unchanged (T={T:g})",
                   lambda: unchanged("apply_temperature", [[1.0, 3.0, 2.0], [0.5, -1.0, 4.0]], T),
                   lambda ok: ok is True, "build a new tensor; do not modify the logits you were given", edge=True)
    for bad in (-0.5, -1e-6):
        check.raises(f"a negative temperature raises ValueError (T={bad:g})", lambda: f(torch.zeros(3), bad),
                     "ValueError")


# -- exercise 2 -------------------------------------------------------------------------------
def top_k_filter(learner, check):
    f = learner.function("top_k_filter")
    rng = random.Random(4242)
    for _ in range(40):
        V, B = rng.randint(1, 15), rng.choice([None, 2])
        ties = rng.random() < 0.5  # small integers make ties likely
        rows = [[float(rng.randint(-3, 3)) if ties else rng.uniform(-5, 5) for _ in range(V)] for _ in range(B or 1)]
        k = rng.randint(0, V + 3)
        z, values = _f32(rows if B else rows[0])
        values = values if B else [values]
        expected, tied = [], False
        for r in values:
            if k == 0 or k >= len(r):
                expected.append(list(r))
            else:
                kth = sorted(r, reverse=True)[k - 1]
                tied |= sum(x >= kth for x in r) > k
                expected.append([x if x >= kth else NEG_INF for x in r])
        if k == 0:
            rule = "k = 0 keeps every logit"
        elif k >= V:
            rule = "k >= V keeps every logit"
        elif tied:
            rule = "keeps the k largest logits of each row, and every logit tied with the k-th"
        else:
            rule = "keeps the k largest logits of each row unchanged, the rest become -inf"
        check.close(f"{rule} (shape {_shape(values, B)}, k={k})", lambda: f(z.clone(), k),
                    expected if B else expected[0], atol=1e-6)
    z, _ = _f32([[3.0, 1.0, 1.0, 0.0], [2.0, 2.0, 2.0, -1.0]])
    check.close("ties with the k-th largest are kept, per row (k=2)", lambda: f(z.clone(), 2),
                [[3.0, 1.0, 1.0, NEG_INF], [2.0, 2.0, 2.0, NEG_INF]])
    for bad in (-1, -2):
        check.raises(f"a negative k raises ValueError (k={bad})", lambda: f(torch.zeros(4), bad), "ValueError")


# -- exercise 3 -------------------------------------------------------------------------------
def _nucleus(row, p):
    """The rule in plain Python; None when a cumulative sum sits too close to p to call."""
    if p == 1:
        return list(row)
    probs = _probs(row)
    order = sorted(range(len(row)), key=lambda i: -probs[i])
    kept, before = [], 0.0
    for i in order:
        if abs(before - p) < 1e-5:
            return None
        if before < p and probs[i] > 0:
            kept.append(i)
        before += probs[i]
    smallest = min(probs[i] for i in kept)
    return [row[i] if (probs[i] >= smallest and probs[i] > 0) else NEG_INF for i in range(len(row))]


def top_p_filter(learner, check):
    f = learner.function("top_p_filter")
    rng = random.Random(8080)
    checked = 0
    while checked < 40:
        V, B = rng.randint(1, 14), rng.choice([None, 3])
        rows = [[NEG_INF if rng.random() < 0.1 else rng.uniform(-4, 4) for _ in range(V)] for _ in range(B or 1)]
        for r in rows:
            if all(x == NEG_INF for x in r):
                r[-1] = 0.0
        p = rng.choice([0.1, 0.3, 0.5, 0.75, 0.9, 0.95, 1.0])
        z, values = _f32(rows if B else rows[0])
        values = values if B else [values]
        expected = [_nucleus(r, p) for r in values]
        if any(e is None for e in expected):
            continue
        if p == 1:
            rule = "p = 1 keeps every token"
        elif any(x == NEG_INF for r in values for x in r):
            rule = "keeps the smallest most-likely set reaching p; a -inf logit stays -inf"
        else:
            rule = "keeps a token while the mass ranked above it is below p, the rest become -inf"
        check.close(f"{rule} (shape {_shape(values, B)}, p={p:g})", lambda: f(z.clone(), p),
                    expected if B else expected[0], atol=1e-6)
        checked += 1
    for row, p in (([1.0, 1.0, 1.0, 0.0], 0.5), ([2.0, 0.5, 0.5, 0.5, -1.0], 0.7), ([0.0, 0.0], 0.3),
                   ([3.0, NEG_INF, 3.0], 0.4)):
        z, values = _f32(row)
        check.close(f"tokens tied in probability with the least likely kept one are kept ({_n(len(row), 'logit')}, p={p:g})",
                    lambda: f(z.clone(), p), _nucleus(values, p), atol=1e-6)
    z, values = _f32([5.0])
    check.close("a single token is always kept (p=0.2)", lambda: f(z.clone(), 0.2), _nucleus(values, 0.2))
    z, values = _f32([[0.0, 3.0, 0.5, 2.9], [1.0, 1.0, 1.0, 1.0]])
    check.close("each row of a (B, V) batch gets its own nucleus (p=0.6)", lambda: f(z.clone(), 0.6),
                [_nucleus(r, 0.6) for r in values], atol=1e-6)
    for bad, rule in ((0.0, "p = 0"), (-0.2, "a negative p"), (1.5, "p > 1")):
        check.raises(f"{rule} raises ValueError (p={bad:g})", lambda: f(torch.zeros(3), bad), "ValueError")


# -- exercise 4 -------------------------------------------------------------------------------
def min_p_filter(learner, check):
    f = learner.function("min_p_filter")
    rng = random.Random(77)
    checked = 0
    while checked < 30:
        V, B = rng.randint(1, 12), rng.choice([None, 2])
        rows = [[rng.uniform(-5, 5) for _ in range(V)] for _ in range(B or 1)]
        m = rng.choice([0.0, 0.05, 0.1, 0.3, 0.6, 1.0])
        z, values = _f32(rows if B else rows[0])
        values = values if B else [values]
        expected, close_call = [], False
        for r in values:
            top = max(r)
            ratios = [math.exp(x - top) for x in r]  # p_i / p_max
            close_call |= any(abs(q - m) < 1e-6 for q in ratios) and m not in (0.0, 1.0)
            expected.append([x if q >= m or x == top else NEG_INF for x, q in zip(r, ratios)])
        if close_call:
            continue
        if m == 0:
            rule = "min_p = 0 keeps every token"
        elif m == 1:
            rule = "min_p = 1 keeps only the tokens as likely as the top one"
        else:
            rule = "keeps tokens with probability >= min_p x the row's top probability"
        check.close(f"{rule} (shape {_shape(values, B)}, min_p={m:g})", lambda: f(z.clone(), m),
                    expected if B else expected[0], atol=1e-6)
        checked += 1
    z, _ = _f32([2.0, 0.0, 2.0, -1.0])
    check.close("min_p = 1 keeps every token tied with the top one", lambda: f(z.clone(), 1.0),
                [2.0, NEG_INF, 2.0, NEG_INF])
    z, _ = _f32([1.0, NEG_INF, 0.5])
    check.close("a -inf logit stays -inf (min_p=0.1)", lambda: f(z.clone(), 0.1), [1.0, NEG_INF, 0.5])
    z, values = _f32([[0.0, math.log(0.2), math.log(0.05), math.log(0.01)],
                      [math.log(0.4), math.log(0.3), math.log(0.24), math.log(0.06)]])
    check.close("each row of a (B, V) batch is cut against its own top probability (min_p=0.1)",
                lambda: f(z.clone(), 0.1), [[values[0][0], values[0][1], NEG_INF, NEG_INF], values[1]], atol=1e-6)
    for bad in (-0.1, 1.1):
        check.raises(f"min_p outside [0, 1] raises ValueError (min_p={bad:g})", lambda: f(torch.zeros(3), bad),
                     "ValueError")


# -- exercise 5 -------------------------------------------------------------------------------
def _penalised(z, ids, frequency, presence, repetition):
    out = []
    for token, x in enumerate(z):
        count = ids.count(token)
        if count:
            x = x * repetition if x < 0 else x / repetition
        out.append(x - count * frequency - (1 if count else 0) * presence)
    return out


def apply_penalties(learner, check):
    f = learner.function("apply_penalties")
    named = [
        ([2.0, -1.0, 0.5, 1.0, -3.0], [0, 0, 0, 1], 0.5, 0.0, 1.0,
         "the frequency penalty is subtracted once per occurrence"),
        ([2.0, -1.0, 0.5, 1.0, -3.0], [0, 0, 0, 1], 0.0, 0.7, 1.0,
         "the presence penalty is subtracted once per token that occurred, whatever its count"),
        ([2.0, -1.0, 0.5, 1.0, -3.0], [0, 1, 1, 4], 0.0, 0.0, 2.0,
         "the repetition penalty divides a positive logit and multiplies a negative one"),
        ([2.0, -1.0, 0.5, 1.0, -3.0], [0, 1, 4], 0.0, 0.0, 0.8,
         "a repetition penalty below 1 follows the same two branches"),
        ([2.0, -1.0, 0.5, 1.0, -3.0], [0, 0, 1, 4], 0.5, 0.4, 2.0,
         "the repetition penalty is applied before the frequency and presence penalties"),
        ([2.0, -1.0, 0.5, 1.0], [], 1.0, 1.0, 1.5, "no generated tokens leaves every logit unchanged"),
        ([2.0, -1.0, 0.5, 1.0], [3, 3], 0.5, 0.5, 2.0, "tokens that never occurred are unchanged"),
        ([1.0, -2.0, 3.0], [2, 0], -0.5, 0.0, 1.0, "a negative frequency penalty raises the logit"),
    ]
    for z, ids, fr, pr, rep, rule in named:
        tensor, values = _f32(z)
        check.close(f"{rule} (frequency={fr:g}, presence={pr:g}, repetition={rep:g})",
                    lambda: f(tensor.clone(), list(ids), frequency_penalty=fr, presence_penalty=pr,
                              repetition_penalty=rep),
                    _penalised(values, ids, fr, pr, rep), atol=1e-4)
    rng = random.Random(99)
    for case in range(40):
        V = rng.randint(1, 15)
        z = [rng.uniform(-6, 6) for _ in range(V)]
        ids = [rng.randrange(V) for _ in range(rng.randint(0, 12))]
        fr, pr, rep = rng.choice([0.0, 0.3, 1.0, -0.5]), rng.choice([0.0, 0.6, 2.0]), rng.choice([1.0, 1.2, 2.0, 0.8])
        tensor, values = _f32(z)
        check.close(f"repetition, then frequency and presence penalties ({_n(V, 'logit')}, {_n(len(ids), 'generated id')}, "
                    f"frequency={fr:g}, presence={pr:g}, repetition={rep:g})",
                    lambda: f(tensor.clone(), list(ids), frequency_penalty=fr, presence_penalty=pr,
                              repetition_penalty=rep),
                    _penalised(values, ids, fr, pr, rep), atol=1e-4)
    unchanged = learner.script(UNCHANGED_SCRIPT, "_input_unchanged")
    check.that("returns a new tensor and leaves the input logits unchanged",
               lambda: unchanged("apply_penalties", [2.0, -1.0, 0.5, 1.0], [0, 0, 1], frequency_penalty=0.5,
                                 presence_penalty=0.4, repetition_penalty=2.0),
               lambda ok: ok is True, "build a new tensor; do not modify the logits you were given", edge=True)
    for bad in (0.0, -1.0):
        check.raises(f"repetition_penalty <= 0 raises ValueError (repetition={bad:g})",
                     lambda: f(torch.zeros(3), [0], repetition_penalty=bad), "ValueError")


# -- exercise 6 -------------------------------------------------------------------------------
# The pieces reach the learner as a generator, as from a model: it can be iterated once, and
# we count how many pieces it handed out.
STREAM_SCRIPT = """
def _stop_at_stream(pieces, stops):
    consumed = [0]

    def stream():
        for piece in pieces:
            consumed[0] += 1
            yield piece

    return stop_at(stream(), list(stops)), consumed[0]
"""


def _stop_at(pieces, stops):
    """(text, stopped) and how many pieces were read, in plain Python."""
    text = ""
    for read, piece in enumerate(pieces, start=1):
        text += piece
        starts = [text.find(s) for s in stops if s in text]
        if starts:
            return (text[:min(starts)], True), read
    return (text, False), len(pieces)


def _stop_rule(pieces, stops):
    (text, stopped), read = _stop_at(pieces, stops)
    if not stopped:
        return "no stop string completes: the whole text and False"
    full = "".join(pieces[:read])
    hits = [full.find(s) for s in stops if s in full]
    if sum(1 for s in stops if s in full) > 1 and len(set(hits)) > 1:
        return "several stops present: cut before the earliest one"
    # Every stop present completed with the last piece read, so one that starts before
    # that piece straddles a boundary.
    if min(hits) < len("".join(pieces[:read - 1])):
        return "a stop string split across pieces is found in the joined text"
    return "the text before the stop string and True"


def stop_at(learner, check):
    stream = learner.script(STREAM_SCRIPT, "_stop_at_stream")
    named = [
        (["The answer is 4.", "\nUs", "er: more"], ["\nUser:"], "a stop string split across three pieces is found"),
        (["abcXYZ"], ["XYZ", "bc"], "several stops in one piece: cut before the earliest start, not the first listed"),
        (["ab", "c", "d!"], ["abcd", "c"], "the first stop to complete ends the stream, even one starting later"),
        (["4 E", "N", "D and more"], ["END"], "a stop string arriving one letter at a time"),
        (["hello", "", " world"], ["\n\n"], "no stop string: the whole text and False"),
        ([], ["x"], "no pieces at all: the empty text and False"),
        (["STOP now"], ["STOP"], "a stop at the very start leaves the empty text and True"),
        (["a", "", "b"], ["ab"], "an empty piece in between changes nothing"),
    ]
    rng = random.Random(1234)
    alphabet = "ab\nXY:"
    cases = [(pieces, stops, rule) for pieces, stops, rule in named]
    for _ in range(80):
        stops = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
        pieces = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(0, 8))]
        cases.append((pieces, stops, _stop_rule(pieces, stops)))
    read_checks = 0
    for pieces, stops, rule in cases:
        expected, read = _stop_at(pieces, stops)
        replay = _once(lambda: stream(list(pieces), list(stops)))
        check.equal(f"{rule} ({_n(len(pieces), 'piece')} given as a stream, {_n(len(stops), 'stop')})", _item(0, replay), expected)
        if expected[1] and read < len(pieces) and read_checks < 12:
            read_checks += 1
            check.equal(f"stops reading pieces as soon as a stop string completes ({len(pieces)} pieces, "
                        f"a stop completes with piece {read})", _item(1, replay), read)


# -- exercise 7 -------------------------------------------------------------------------------
# The generator is built in the learner's kernel from a seed we send; the same seed here
# gives the oracle the same stream of uniforms.
SAMPLER_SCRIPT = """
import torch as _torch

def _seeded_draws(probs, seed, n):
    generator = _torch.Generator().manual_seed(seed)
    draws = [sample_token(probs, generator) for _ in range(n)]
    following = _torch.rand((), generator=generator, dtype=_torch.float64).item()
    return draws, all(type(d) is int for d in draws), following

def _seeded_counts(probs, seed, n):
    generator = _torch.Generator().manual_seed(seed)
    counts = [0] * len(probs)
    for _ in range(n):
        counts[int(sample_token(probs, generator))] += 1
    return counts
"""


def _uniforms(seed, n):
    twin = torch.Generator().manual_seed(seed)
    return [torch.rand((), generator=twin, dtype=torch.float64).item() for _ in range(n + 1)]


def _inverse_cdf(probs, uniforms):
    """Tokens for each uniform until one lands too close to a boundary to call."""
    cumulative, total = [], 0.0
    for q in probs:
        total += q
        cumulative.append(total)
    tokens = []
    for u in uniforms:
        target = u * cumulative[-1]
        if any(abs(c - target) < 1e-9 for c in cumulative):
            break
        tokens.append(next(i for i, c in enumerate(cumulative) if c > target))
    return tokens


def sample_token(learner, check):
    draws = learner.script(SAMPLER_SCRIPT, "_seeded_draws")
    counts = learner.script(SAMPLER_SCRIPT, "_seeded_counts")
    rng = random.Random(5)
    cases = []
    for case in range(10):
        V = rng.randint(1, 10)
        weights = [0.0 if rng.random() < 0.2 else rng.random() for _ in range(V)]
        if sum(weights) == 0:
            weights[0] = 1.0
        # Half the cases pass raw weights that do not sum to 1: the rule scales u by the total.
        if case % 2:
            probs, rule = [w / sum(weights) for w in weights], "probabilities summing to 1"
        else:
            probs, rule = [3.0 * w for w in weights], "weights that do not sum to 1, u scaled by their total"
        cases.append((probs, rng.randint(0, 10**6), rule))
    cases += [([0.0, 0.5, 0.0, 0.5, 0.0], 11, "zero-probability tokens, which are never drawn"),
              ([1.0], 12, "a single token")]
    for index, (probs, seed, rule) in enumerate(cases):
        tensor = torch.tensor(probs, dtype=torch.float64)
        exact = tensor.tolist()
        uniforms = _uniforms(seed, 25)
        tokens = _inverse_cdf(exact, uniforms[:25])
        n = len(tokens)
        replay = _once(lambda: draws(tensor.clone(), seed, n))
        check.equal(f"each draw is the first index whose cumulative sum exceeds u x total, for {rule} "
                    f"({_n(len(probs), 'token')}, {_n(n, 'seeded draw')})", _item(0, replay), tokens)
        if index in (0, 1, len(cases) - 1):
            check.that(f"each draw is returned as a Python int ({rule})", _item(1, replay),
                       lambda ok: ok is True, "return int(...), not a tensor or a NumPy number", edge=True)
            check.equal(f"each call draws exactly one uniform from the generator ({rule})", _item(2, replay),
                        uniforms[n])
    float32 = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float32)
    tokens = _inverse_cdf(float32.double().tolist(), _uniforms(2024, 25)[:25])
    check.equal(f"float32 probabilities work the same way ({_n(len(tokens), 'seeded draw')})",
                _item(0, _once(lambda: draws(float32.clone(), 2024, len(tokens)))), tokens)
    # Distribution: 4,000 draws from [0.1, 0.2, 0.3, 0.4] against a chi-square bound (dof 3, 1e-4 level).
    target = [0.1, 0.2, 0.3, 0.4]

    def chi_square(observed):
        return sum((c - 4000 * q) ** 2 / (4000 * q) for c, q in zip(observed, target))

    check.that("4,000 draws follow the given probabilities (chi-square test)",
               lambda: counts(torch.tensor(target), 321, 4000),
               lambda observed: len(observed) == 4 and sum(observed) == 4000 and chi_square(observed) <= 21.108,
               "the draws' frequencies do not match the probabilities")


# -- exercise 8 -------------------------------------------------------------------------------
# The learner's loop runs in their kernel on tinychat loaded there; the expected run is the
# course's own decode loop (the serving engine, through ``course_lib.checks.sampling``), here in
# the grader's process on its own copy of the shipped model.
GENERATE_SCRIPT = """
def _generate_on_tinychat(question, knobs):
    if "_TINYCHAT_FOR_GRADING" not in globals():
        from course_lib.model import load_model as _load_model, load_tokenizer as _load_tokenizer
        globals()["_TINYCHAT_FOR_GRADING"] = (_load_model("tinychat", device="cpu"), _load_tokenizer("tinychat"))
    from course_lib.tokenization.chat_template import render_chat as _render_chat
    model, tokenizer = globals()["_TINYCHAT_FOR_GRADING"]
    prompt = tokenizer.encode(_render_chat([{"role": "user", "content": question}]), allowed_special="all")
    ids, text, reason = generate_text(model, list(prompt), tokenizer=tokenizer, **knobs)
    return [int(t) for t in ids], str(text), str(reason)
"""


@functools.lru_cache(maxsize=None)
def _expected_run(question, knob_items):
    """The course's own decode of ``question`` with ``dict(knob_items)`` on the grader's copy of
    the shipped tinychat: a pure function of the two, so it is computed once per grader process
    (the suite's attack grades this test hundreds of times)."""
    from course_lib.checks.sampling import _reference_loop as course_loop
    from course_lib.tokenization.chat_template import render_chat

    model, tokenizer = _tinychat()
    prompt = tokenizer.encode(render_chat([{"role": "user", "content": question}]), allowed_special="all")
    return course_loop(model, tokenizer, prompt, **dict(knob_items))


@functools.lru_cache(maxsize=None)
def _tinychat():
    from course_lib.model import load_model, load_tokenizer

    return load_model("tinychat", device="cpu"), load_tokenizer("tinychat")


def generate_text(learner, check):
    run = learner.script(GENERATE_SCRIPT, "_generate_on_tinychat")
    cases = [
        ("What is 7 + 7?", dict(max_new_tokens=16, temperature=0),
         "greedy (T = 0) takes the argmax each step; <|end|> ends it with finish reason 'stop', left out of the text"),
        ("What is 7 + 7?", dict(max_new_tokens=3, temperature=0),
         "max_new_tokens reached without a stop: the whole text and finish reason 'length'"),
        # Greedy says "The answer is 5.": both stops arrive with " answer", and "ans" starts first.
        ("What is 2 + 3?", dict(max_new_tokens=16, temperature=0, stop=("swer", "ans")),
         "a stop string cuts the text before the earliest one, finish reason 'stop'"),
        # Greedy says "fourteen" ("four" holds 60% of the first step); at T = 2 the nucleus holds
        # more than that first token, and with seed 1 a loop that cuts the nucleus before scaling
        # (leaving "four" alone) writes another reply.
        ("What is 7 + 7?", dict(max_new_tokens=10, temperature=2.0, top_p=0.5, seed=1),
         "seeded sampling: temperature, then top-p, softmax, one uniform per step by inverse CDF"),
        ("What is 2 + 2?", dict(max_new_tokens=10, temperature=1.0, seed=0),
         "seeded sampling: one uniform per step by inverse CDF"),
        # A prompt the model is unsure about at this temperature, so a loop that reseeds its
        # generator every step (the same uniform each time) writes other tokens.
        ("Write a poem.", dict(max_new_tokens=10, temperature=1.5, top_k=20, seed=0),
         "seeded sampling: one generator per call, temperature, then top-k, one uniform per step by inverse CDF"),
        ("Tell me about cats.", dict(max_new_tokens=10, temperature=0.8, top_k=40, top_p=0.9, seed=11),
         "seeded sampling with top-k and top-p together, applied in that order"),
    ]
    for question, knobs, rule in cases:
        ids, text, reason = _expected_run(question, tuple(sorted(knobs.items())))
        replay = _once(lambda: run(question, knobs))
        shown = ", ".join(f"{k}={v!r}" for k, v in knobs.items())
        check.equal(f"{rule}: the token ids ({shown})", _item(0, replay), ids)
        check.equal(f"{rule}: the text ({shown})", _item(1, replay), text)
        check.equal(f"{rule}: the finish reason ({shown})", _item(2, replay), reason)
