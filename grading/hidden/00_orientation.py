"""Hidden tests for 00_orientation, run in the grader's process (see course_lib/pipeline/hidden.py).

Expectations are computed here in plain Python; the learner's functions are reached only
through ``learner.function``, which sends and returns plain data.
"""
import math
import random

REFERENCES = ("course_lib.orientation.softmax_with_temperature", "course_lib.orientation.request_cost")
NEG_INF = float("-inf")


def _softmax(z, T):
    top = max(x for x in z if x != NEG_INF)
    if T == 0:
        weights = [1.0 if x == top else 0.0 for x in z]
    else:
        weights = [0.0 if x == NEG_INF else math.exp((x - top) / T) for x in z]
    total = sum(weights)
    return [w / total for w in weights]


def softmax_with_temperature(learner, check):
    f = learner.function("softmax_with_temperature")
    rng = random.Random(20261129)
    cases = [([2.0, 1.0, 0.0], 0.7, "the worked example"),
             ([5.0, 5.0, 1.0], 0.0, "T = 0 with a tie for the top: the mass is shared equally"),
             ([7.0], 0.0, "T = 0 with a single logit"),
             ([3.0, -1.0, 3.0, 0.5], 1e-12, "a tiny T does not overflow (subtract the largest logit)"),
             ([800.0, 790.0, -800.0], 0.5, "large logits do not overflow"),
             ([-1000.0, -1001.0], 2.0, "very negative logits do not underflow to 0/0"),
             ([0.0, NEG_INF, 1.0], 1.3, "a -inf logit gets probability exactly 0"),
             ([1.0, 2.0, 3.0], 1e6, "a huge T gives a near-uniform distribution")]
    cases += [([rng.uniform(-40, 40) for _ in range(rng.randint(1, 12))],
               rng.choice([0.05, 0.5, 1.0, 3.0, 25.0]), "random logits") for _ in range(20)]
    for z, T, rule in cases:
        check.close(f"{rule} ({len(z)} logits, T={T:g})", lambda: f(list(z), T), _softmax(z, T), atol=1e-6)
    check.that("the result is a float array summing to 1", lambda: f([0.5, 0.25], 1.0),
               lambda p: abs(sum(p) - 1) < 1e-9 and all(isinstance(x, float) for x in list(p)),
               "return probabilities (floats) that sum to 1")
    check.raises("a negative temperature raises ValueError", lambda: f([1.0, 2.0], -0.5), "ValueError")


def request_cost(learner, check):
    f = learner.function("request_cost")
    for p, c, i, o in [(1000, 500, 3.0, 15.0), (0, 0, 1.0, 1.0), (123456, 7890, 0.15, 0.6),
                       (10**7, 10**6, 2.5, 10.0), (1, 1, 0.0, 0.0)]:
        check.close(f"the price of {p} prompt + {c} completion tokens at ${i}/${o} per million",
                    lambda: f(p, c, input_usd_per_mtok=i, output_usd_per_mtok=o), (p * i + c * o) / 1e6, atol=1e-12)
    for p, c, rule in [(-1, 0, "a negative prompt count"), (0, -5, "a negative completion count"),
                       (2.5, 1, "a fractional token count"), ("10", 1, "a count given as text")]:
        check.raises(f"{rule} raises ValueError", lambda: f(p, c, input_usd_per_mtok=1.0, output_usd_per_mtok=1.0),
                     "ValueError")
