"""Operations drills (notebook 08): is an eval drop outside the noise, how big a canary must be,
and what a routed mix with fallback costs per successful task.

    paired delta:  d_i in {-1, 0, +1}, half-width = 1.96 x stdev(d) / sqrt(n)
    canary size:   n_c = (z_alpha + z_beta)^2 x (p_c(1 - p_c) + p_s(1 - p_s) / k) / (p_c - p_s)^2
    routed mix:    cost per success = cost per request / successes per request

>>> from random import Random
>>> print(draw_paired_delta_interval(Random(0)).solution.splitlines()[0])
d = +1 (wrong to right), -1 (right to wrong), 0 (agree); half-width = 1.96 x stdev(d) / sqrt(n)

The rules come from ``problem_formulas`` (``paired_delta_half_width``, ``canary_requests_needed``,
``cost_per_successful_task``): the course states them in notebook 08.
"""
from __future__ import annotations

import math
import random

from course_lib.drills.problem_formulas import (canary_requests_needed, cost_per_successful_task, paired_delta,
                                                paired_delta_half_width)
from course_lib.drills.problem_model import Draft, Generator, answer_line, num, sig

EVAL_SIZES = (100, 200, 250, 400, 500, 1_000, 2_000)
Z_ALPHA = {0.05: 1.645, 0.025: 1.96}   # one-sided level -> z
Z_BETA = {0.8: 0.8416, 0.9: 1.2816}    # power -> z


def draw_paired_delta_interval(rng: random.Random) -> Draft:
    for _ in range(1000):
        n = rng.choice(EVAL_SIZES)
        discordant = rng.randint(max(2, n // 50), n // 4)     # items the stacks disagree on
        net = rng.randint(1, max(1, round(3 * math.sqrt(discordant))))  # lost - gained: around the noise
        if net > discordant or (discordant - net) % 2:
            continue
        lost, gained = (discordant + net) // 2, (discordant - net) // 2   # right -> wrong, wrong -> right
        drop = -paired_delta(n, lost, gained) * 100             # percentage points
        half = paired_delta_half_width(n, lost, gained) * 100
        if half > 0 and abs(drop - half) / half >= 0.1:        # a clear verdict, not a coin toss at the edge
            break
    else:
        raise RuntimeError("no paired-delta case with a clear verdict in 1,000 draws")
    mean = -drop / 100
    variance = (lost + gained - n * mean**2) / (n - 1)
    stdev = math.sqrt(variance)
    se = stdev / math.sqrt(n)
    outside = drop > half
    question = (f"An old and a new serving stack answer the same {num(n)} eval items with pinned greedy decoding. "
                f"Item by item, {num(lost)} items go from right to wrong and {num(gained)} from wrong to right; "
                f"the rest agree. So the new stack scores {sig(drop)} percentage points lower.\n"
                f"Give each item d = +1 (wrong to right), -1 (right to wrong) or 0, and use the sample standard "
                f"deviation of d (divide by n - 1).\nWhat is the half-width of the 95% confidence interval of the "
                f"accuracy delta (1.96 standard errors)? Is the drop outside it?\nAnswer the half-width in "
                f"percentage points.")
    answer = half
    verdict = (f"the drop of {sig(drop)} points is outside ±{sig(answer)}: more than noise, a real regression"
               if outside else
               f"the drop of {sig(drop)} points is inside ±{sig(answer)}: it could be noise; more items would tell")
    steps = [
        "d = +1 (wrong to right), -1 (right to wrong), 0 (agree); half-width = 1.96 x stdev(d) / sqrt(n)",
        f"mean d = ({num(gained)} - {num(lost)}) / {num(n)} = {sig(mean)}",
        f"sum d^2 = {num(lost)} + {num(gained)} = {num(lost + gained)}",
        f"sample variance = (sum d^2 - n x mean^2) / (n - 1) = ({num(lost + gained)} - {num(n)} x ({sig(mean)})^2) / "
        f"{num(n - 1)} = {sig(variance)}",
        f"stdev = sqrt({sig(variance)}) = {sig(stdev)}; standard error = {sig(stdev)} / sqrt({num(n)}) = {sig(se)}",
        f"half-width = 1.96 x {sig(se)} = {sig(answer / 100)} = {sig(answer)} percentage points",
        verdict,
        answer_line(answer, "percentage points"),
    ]
    params = {"n_items": n, "right_to_wrong": lost, "wrong_to_right": gained}
    return Draft(question, answer, "percentage points", "\n".join(steps), params)


def draw_canary_sample_size(rng: random.Random) -> Draft:
    for _ in range(1000):
        stable = rng.choice((0.5, 1, 2, 3, 5))                                    # %
        increase = round(stable * rng.choice((0.2, 0.25, 0.5, 1.0)), 4)           # percentage points
        canary = round(stable + increase, 4)
        k = rng.choice((1, 3, 4, 9, 19))
        alpha, power = rng.choice(tuple(Z_ALPHA)), rng.choice(tuple(Z_BETA))
        z_alpha, z_beta = Z_ALPHA[alpha], Z_BETA[power]
        exact = canary_requests_needed(stable / 100, canary / 100, k, z_alpha=z_alpha, z_beta=z_beta)
        if abs(exact - round(exact)) > 1e-6:   # rounding up is never a float coin toss
            break
    else:
        raise RuntimeError("no canary case off a whole number in 1,000 draws")
    asked = rng.choice(("canary", "total"))
    n_canary = math.ceil(exact)
    p_c, p_s = canary / 100, stable / 100
    spread = p_c * (1 - p_c) + p_s * (1 - p_s) / k
    arms = (f"{num(k)} times as many requests as the canary" if k > 1 else "as many requests as the canary")
    question = (f"A canary takes a new model version; the stable arm gets {arms} (k = {num(k)}; users assigned by "
                f"a salted hash of their id). The stable arm's error rate is "
                f"{num(stable)}%; you want to detect the canary's rising to {num(canary)}%.\n"
                f"Use a one-sided two-proportion z-test at alpha = {num(alpha)} (z = {num(z_alpha)}) with "
                f"{num(power * 100)}% power (z = {num(z_beta)}), with the variance of the difference "
                f"p_c(1 - p_c)/n_c + p_s(1 - p_s)/n_s.\n")
    if asked == "canary":
        answer, unit = n_canary, "requests"
        question += "How many requests must the canary arm serve?\nAnswer in requests (round up)."
    else:
        answer, unit = n_canary * (k + 1), "requests"
        question += ("How many requests must both arms serve together before the test can decide?\n"
                     "Answer in requests (round the canary arm up first).")
    steps = [
        "n_s = k x n_c, so variance = (p_c(1 - p_c) + p_s(1 - p_s) / k) / n_c; "
        "detect when (p_c - p_s) = (z_alpha + z_beta) x sqrt(variance)",
        "n_c = (z_alpha + z_beta)^2 x (p_c(1 - p_c) + p_s(1 - p_s) / k) / (p_c - p_s)^2",
        f"(z_alpha + z_beta)^2 = ({num(z_alpha)} + {num(z_beta)})^2 = {sig((z_alpha + z_beta) ** 2)}",
        f"p_c(1 - p_c) + p_s(1 - p_s) / k = {num(p_c)} x {num(1 - p_c)} + {num(p_s)} x {num(1 - p_s)} / {num(k)} "
        f"= {sig(spread)}",
        f"(p_c - p_s)^2 = ({num(p_c)} - {num(p_s)})^2 = {sig((p_c - p_s) ** 2)}",
        f"n_c = {sig((z_alpha + z_beta) ** 2)} x {sig(spread)} / {sig((p_c - p_s) ** 2)} = {sig(exact, 7)}, "
        f"rounded up: {num(n_canary)} requests",
    ]
    if asked == "total":
        steps.append(f"both arms = n_c x (1 + k) = {num(n_canary)} x {num(k + 1)} = {num(answer)} requests")
    params = {"stable_error_pct": stable, "canary_error_pct": canary, "stable_to_canary": k, "alpha": alpha,
              "z_alpha": z_alpha, "power_pct": round(power * 100), "z_beta": z_beta, "asked": asked}
    return Draft(question, answer, unit, "\n".join([*steps, answer_line(answer, unit)]), params)


def draw_routed_cost_per_success(rng: random.Random) -> Draft:
    for _ in range(1000):
        share = rng.choice((50, 60, 70, 75, 80, 90))                    # % of requests to the small model
        small = rng.choice((0.1, 0.2, 0.3, 0.5, 0.8, 1.0))              # USD per 1,000 requests
        large = round(small * rng.choice((5, 8, 10, 15, 20)), 4)
        fallback = rng.choice((2, 5, 8, 10, 15, 20))                    # % of the small model's requests
        small_ok, large_ok = rng.randint(80, 97), rng.randint(88, 99)   # %
        asked = rng.choice(("routed", "saving"))
        routed = cost_per_successful_task(share / 100, small, small_ok / 100, fallback / 100, large, large_ok / 100)
        large_only = cost_per_successful_task(0.0, small, small_ok / 100, fallback / 100, large, large_ok / 100)
        if asked == "routed" or large_only - routed >= 0.05 * large_only:
            break
    else:
        raise RuntimeError("no routed mix that saves 5% in 1,000 draws")
    s, f, qs, ql = share / 100, fallback / 100, small_ok / 100, large_ok / 100
    cost = s * (small + f * large) + (1 - s) * large
    successes = s * ((1 - f) * qs + f * ql) + (1 - s) * ql
    question = (f"Requests are routed by task: {num(share)}% (extraction, classification, tool calls) go to a small "
                f"model at ${num(small)} per 1,000 requests; the rest (grounded questions) go to a large model at "
                f"${num(large)} per 1,000 requests.\n{num(fallback)}% of the small model's requests time out or "
                f"return a reply that fails its schema; each falls back to the large model, and both calls are paid.\n"
                f"{num(small_ok)}% of the small model's valid replies solve the task; {num(large_ok)}% of the large "
                f"model's replies do, fallbacks included.\n")
    unit = "USD per 1,000 successful tasks"
    steps = [
        "cost per request = s (c_small + f c_large) + (1 - s) c_large",
        "successes per request = s ((1 - f) q_small + f q_large) + (1 - s) q_large",
        f"cost = {num(s)} x ({num(small)} + {num(f)} x {num(large)}) + {num(1 - s)} x {num(large)} "
        f"= ${sig(cost)} per 1,000 requests",
        f"successes = {num(s)} x ({num(1 - f)} x {num(qs)} + {num(f)} x {num(ql)}) + {num(1 - s)} x {num(ql)} "
        f"= {sig(successes)} per request",
        f"routed: {sig(cost)} / {sig(successes)} = ${sig(routed)} per 1,000 successful tasks",
    ]
    if asked == "routed":
        answer = routed
        question += f"What does this mix cost per 1,000 successful tasks?\nAnswer in {unit}."
    else:
        answer = large_only - routed
        question += (f"How much less per 1,000 successful tasks does this mix cost than sending every request to "
                     f"the large model?\nAnswer in {unit}.")
        steps += [f"large model only: {num(large)} / {num(ql)} = ${sig(large_only)} per 1,000 successful tasks",
                  f"saving = {sig(large_only)} - {sig(routed)} = ${sig(answer)} per 1,000 successful tasks"]
    params = {"small_share_pct": share, "small_usd_per_1k": small, "large_usd_per_1k": large,
              "fallback_pct": fallback, "small_success_pct": small_ok, "large_success_pct": large_ok, "asked": asked}
    return Draft(question, answer, unit, "\n".join([*steps, answer_line(answer, unit)]), params)


GENERATORS = (
    Generator("paired_delta_interval", "operations",
              "A paired eval delta's 95% half-width, and whether a drop is outside it", draw_paired_delta_interval),
    Generator("canary_sample_size", "operations",
              "Canary requests to detect an error-rate increase, stable arm k times larger", draw_canary_sample_size),
    Generator("routed_cost_per_success", "operations",
              "Cost per successful task of a routed mix whose fallback pays both calls", draw_routed_cost_per_success),
)
