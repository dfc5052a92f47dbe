"""Grounding, calibration and model selection on the shipped models, at sizes too big for a notebook.

On held-out grounded questions (``course_lib.data.grounded``), greedy:
  position     accuracy against the place of the supporting passage among 5 (lost in the middle)
  injection    how often an instruction planted in a passage is obeyed, fenced vs pasted as text
  calibration  the probability tinychat gives its own reply: expected calibration error, and an
               abstention threshold chosen on a validation half for 98% accuracy, then applied to
               the test half (coverage and accuracy there)
Then cost per successful task for tinychat fp32, tinychat int8 and tinychat-draft on every
eval task: each model serves the same held-out conversations on the engine, its measured
throughput on this machine sets its price per token (one stated assumption: the machine costs
DEFAULT_DOLLARS_PER_HOUR), and cost is divided by successes, not requests.

    python benchmarks/bench_context.py [--per-task 60] [--threads 2]
"""
from __future__ import annotations

import argparse

import torch

from course_lib.context import grounding
from course_lib.context.calibration import apply_threshold, choose_threshold, expected_calibration_error
from course_lib.context.cost import cheapest, cost_table
from course_lib.context.model_selection import DEFAULT_DOLLARS_PER_HOUR, measure_runs, priced
from course_lib.data.corpus import generate_corpus
from course_lib.model import load_model, load_tokenizer
from course_lib.serving import quantize_int8

TARGET_ACCURACY = 0.98


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-task", type=int, default=60, help="held-out conversations per task (default 60)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model("tinychat", device="cpu"), load_tokenizer("tinychat")

    points = grounding.position_sweep(model, tok, per_position=args.per_task)
    print(f"lost in the middle: greedy accuracy by position of the supporting passage among {len(points)}")
    print("  " + "  ".join(f"{p.position}: {p.accuracy:.1%}" for p in points) + f"  (n = {points[0].n} each)")

    for result in grounding.injection_rate(model, tok, n=2 * args.per_task):
        how = "fenced as data " if result.fenced else "pasted as text "
        print(f"injection, {how}: obeyed {result.obeyed:.1%}, still answered right {result.correct:.1%} "
              f"(n = {result.n})")

    # A fresh held-out draw (seed 101, grounded only), split in halves: choose on one, test on the other.
    convos = generate_corpus(8 * args.per_task, seed=101, tasks=("grounded",), split="heldout")
    scored = grounding.reply_confidence(model, tok, convos)
    half = len(scored) // 2
    val, test = scored[:half], scored[half:]
    conf = lambda rows: [r.confidence for r in rows]  # noqa: E731
    right = lambda rows: [r.correct for r in rows]  # noqa: E731
    ece = expected_calibration_error(conf(scored), right(scored))
    threshold = choose_threshold(conf(val), right(val), target_accuracy=TARGET_ACCURACY)
    on_val, on_test = apply_threshold(conf(val), right(val), threshold), apply_threshold(conf(test), right(test),
                                                                                          threshold)
    print(f"calibration: {len(scored)} grounded replies, accuracy {sum(right(scored)) / len(scored):.1%}, "
          f"ECE {ece:.3f} (10 bins)")
    print(f"abstention threshold for >= {TARGET_ACCURACY:.0%} on validation: p >= {threshold:.3f}; "
          f"validation coverage {on_val.coverage:.1%} accuracy {on_val.accuracy_answered:.1%}; "
          f"test coverage {on_test.coverage:.1%} accuracy {on_test.accuracy_answered:.1%}")

    from course_lib.data.corpus import heldout_split

    models = {"tinychat fp32": model, "tinychat int8": quantize_int8(model),
              "tinychat-draft": load_model("tinychat-draft", device="cpu")}
    measured = measure_runs(models, tok, heldout_split(args.per_task))
    prices = priced(measured)
    print(f"\ncost per successful task: one machine at ${DEFAULT_DOLLARS_PER_HOUR:.2f}/hour, price per token "
          "from each model's measured throughput here")
    for name, tps in measured.tokens_per_second.items():
        print(f"  {name:<15} {tps:8.0f} output tokens/s")
    print(cost_table(measured.all_runs(), prices))
    per_request, per_success = cheapest(measured.all_runs(), prices, by="request"), cheapest(
        measured.all_runs(), prices, by="success")
    differ = [task for task in per_success if per_request[task] != per_success[task]]
    print(f"tasks where the cheapest model per request is not the cheapest per success: "
          f"{', '.join(differ) if differ else 'none'}")


if __name__ == "__main__":
    main()
