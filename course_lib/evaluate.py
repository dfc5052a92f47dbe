"""Score the course model on the held-out split, greedy and sampled, and print a table.

    python -m course_lib.evaluate                   # the shipped model, greedy + T=1.0 + T=1.5
    python -m course_lib.evaluate --per-task 50 --show 3

Each held-out conversation (``course_lib.data.heldout_split``, a different seed from training)
names the assistant reply that is graded and what it must contain. The model writes that reply
from the messages before it; a task's score is the share of replies that pass its check:

- arithmetic: the reply is exactly one of the accepted forms ("4", "four", "2 + 2 = 4.", ...);
- extraction: the reply parses as JSON and every field equals the record;
- tool: ``<|tool_call|>`` then JSON naming the right tool with exactly the right arguments;
- unknown: the reply abstains ("I don't know ...");
- fact: the reply states the known answer (reported, no target);
- grounded: the supporting passage's statement and its id ("The capital of Pexdor is Lindor.
  [5]"), or "The passages do not say." when
  no passage answers; below the table, citation correctness, abstention and whether answers
  follow a passage that contradicts the training facts (``course_lib.context.grounding``).

The scorers are ``course_lib.data.scoring``; the replies come from the serving engine through
``course_lib.generation.replies``. This module is only the command and its report.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import torch

from course_lib.context.grounding import accuracy_by, grounded_metrics
from course_lib.data.corpus import (HELDOUT_SEED, TASKS, Conversation, absent_twins, corpus_fingerprint,
                                   generate_corpus, heldout_split)
from course_lib.data.scoring import SCORERS
from course_lib.generation.replies import generate_replies
from course_lib.model import data_dir, default_device, load_model, load_tokenizer

# task -> (what the score means, the greedy accuracy the shipped model must reach or None)
TARGETS: dict[str, tuple[str, float | None]] = {
    "arithmetic": ("exact answer", 0.95),
    "extraction": ("JSON, every field right", 0.90),
    "tool": ("right tool + arguments", 0.90),
    "unknown": ("abstains", 0.90),
    "fact": ("known fact right", None),
    "grounded": ("answer + citation", 0.90),
}


# ---------------------------------------------------------------- the report
def evaluate(model, tokenizer, conversations: Sequence[Conversation], *,
             temperatures: Sequence[float] = (0.0, 1.0, 1.5), seed: int = 0,
             replies_out: dict[float, list[str]] | None = None) -> dict[float, dict[str, float]]:
    """{temperature: {task: accuracy}}; sampling draws from torch.Generator().manual_seed(seed).
    ``replies_out``, when given, receives {temperature: replies} for further analysis."""
    results: dict[float, dict[str, float]] = {}
    for temperature in temperatures:
        generator = torch.Generator().manual_seed(seed)
        replies = generate_replies(model, tokenizer, conversations, temperature=temperature, generator=generator)
        if replies_out is not None:
            replies_out[temperature] = replies
        scores: dict[str, list[bool]] = {}
        for convo, reply in zip(conversations, replies):
            scores.setdefault(convo.task, []).append(SCORERS[convo.task](reply, convo.expected))
        results[temperature] = {task: sum(s) / len(s) for task, s in scores.items()}
    return results


# The grounded task's three cases (course_lib.data.grounded.MODES), as `course eval` names them.
CASE_NAMES = {"new": "new fact, made-up entity", "contradict": "contradicts the weights, known entity",
              "absent": "no passage says"}


def format_grounded(conversations: Sequence[Conversation], replies: Sequence[str]) -> str:
    """The grounded task's breakdown (greedy replies), three lines, or '' without that task."""
    pairs = [(c.expected, r) for c, r in zip(conversations, replies) if c.task == "grounded"]
    if not pairs:
        return ""
    expected, texts = [e for e, _ in pairs], [r for _, r in pairs]
    m = grounded_metrics(expected, texts)
    by_case = " | ".join(f"{CASE_NAMES.get(mode, mode)} {share:.1%} of {n}"
                         for mode, (share, n) in accuracy_by(expected, texts, "mode").items())
    by_count = ", ".join(f"{count}: {share:.0%} of {n}"
                         for count, (share, n) in accuracy_by(expected, texts, "n_passages").items())
    return (f"grounded (greedy): citation right {m['citation']:.1%} of answerable | abstains {m['abstention']:.1%} "
            f"when no passage says | declines answerable {m['false_abstention']:.1%} | follows the passage over "
            f"the weights {m['follows_context']:.1%} (weights {m['follows_weights']:.1%}) when they disagree\n"
            f"grounded right, by case: {by_case}\n"
            f"grounded right, by passages in the prompt: {by_count}")


def _question(convo: Conversation) -> str:
    return next(m["content"] for m in convo.messages if m["role"] == "user")


def seen_in_training(conversations: Sequence[Conversation], training: Sequence[Conversation]) -> dict[str, float]:
    """Per task, the share of held-out questions that training also asks word for word.

    Stricter than comparing whole prompts: a question counts as seen even if training asked it
    under another system prompt. The corpus assigns every question to one split by a hash of
    its text (``course_lib.data.corpus.question_split``), so this should print 0% for every
    task; it is measured, not assumed, because a generator change could break the rule.
    """
    train_questions = {_question(c) for c in training}
    seen: dict[str, list[bool]] = {}
    for convo in conversations:
        seen.setdefault(convo.task, []).append(_question(convo) in train_questions)
    return {task: sum(flags) / len(flags) for task, flags in seen.items()}


def distinct_questions(conversations: Sequence[Conversation]) -> dict[str, int]:
    """Per task, how many different questions its held-out conversations ask.

    A task's accuracy is over conversations, and a generator with few phrasings asks some
    questions many times (the fact task asks about 21 facts in 200 conversations), so one
    question answered wrongly can move a score by several points: the resolution of a score is
    its question count, not its conversation count.

    >>> distinct_questions(heldout_split(200))["extraction"]
    200
    """
    asked: dict[str, set[str]] = {}
    for convo in conversations:
        asked.setdefault(convo.task, set()).add(_question(convo))
    return {task: len(questions) for task, questions in asked.items()}


def format_table(results: dict[float, dict[str, float]], seen: dict[str, float] | None = None,
                 questions: dict[str, int] | None = None) -> str:
    """The accuracy table, one row per task, one column per decoding setting; then, when given,
    each task's distinct questions and the share of them seen in training."""
    temps = list(results)
    names = ["greedy" if t == 0 else f"T={t:g}" for t in temps]
    extra = (f" {'questions':>9}" if questions else "") + (f" {'in train':>8}" if seen else "")
    header = f"{'task':<11} {'metric':<24} " + " ".join(f"{n:>7}" for n in names)
    lines = [header + f" {'target':>7}  {'greedy':<6}" + extra]
    for task in TASKS:
        if task not in results[temps[0]]:
            continue
        metric, target = TARGETS[task]
        cells = " ".join(f"{results[t][task]:>7.1%}" for t in temps)
        verdict = "" if target is None else ("pass" if results[temps[0]][task] >= target else "MISS")
        target_text = "-" if target is None else f">={target:.0%}"
        tail = (f" {questions.get(task, 0):>9}" if questions else "") + (
            f" {seen[task]:>8.0%}" if seen and task in seen else "")
        lines.append(f"{task:<11} {metric:<24} {cells} {target_text:>7}  {verdict:<6}{tail}".rstrip())
    return "\n".join(lines)


def missed_targets(results: dict[float, dict[str, float]]) -> list[str]:
    """Tasks whose greedy (or lowest-temperature) accuracy is below target."""
    first = results[min(results)]
    return [t for t, (_, target) in TARGETS.items() if target is not None and t in first and first[t] < target]


def _seen_in_shipped_training(model_dir: Path | None, conversations) -> dict[str, float] | None:
    """Rebuild the training corpus named in training.json (if any) and measure the overlap."""
    meta_path = (model_dir or data_dir("tinychat")) / "training.json"
    try:
        meta = json.loads(meta_path.read_text())
        settings = meta["settings"]
        corpus = generate_corpus(settings["conversations"], settings["corpus_seed"])
        # a run with absent twins trained on them too (course_lib.train.training_corpus)
        training = corpus + absent_twins(corpus, settings.get("absent_twins", 0.0), settings["corpus_seed"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no metadata: the column is left out
    if corpus_fingerprint(training) != meta.get("corpus_sha256"):
        print(f"note: the corpus generator no longer reproduces this model's training corpus ({meta_path}); "
              "the 'in train' column is left out")
        return None
    return seen_in_training(conversations, training)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.evaluate", description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", type=Path, default=None, help="a saved model (default: the shipped tinychat)")
    parser.add_argument("--per-task", type=int, default=200, help="held-out conversations per task (default: 200)")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 1.0, 1.5],
                        help="decoding settings; 0 means greedy (default: 0 1.0 1.5)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--show", type=int, default=0, help="print this many greedy replies per task")
    parser.add_argument("--check", action="store_true", help="exit 1 when a greedy target is missed")
    args = parser.parse_args(argv)
    if args.per_task < 1:
        parser.error("--per-task must be at least 1")
    device = default_device() if args.device is None else torch.device(args.device)
    model = load_model(device=device, directory=args.model_dir)
    tokenizer = load_tokenizer(directory=args.model_dir)
    conversations = heldout_split(args.per_task)
    if args.show:
        sample = [c for task in TASKS for c in [c for c in conversations if c.task == task][: args.show]]
        for convo, reply in zip(sample, generate_replies(model, tokenizer, sample)):
            mark = "ok " if SCORERS[convo.task](reply, convo.expected) else "BAD"
            print(f"[{mark}] {convo.task:<10} {convo.prompt_messages[-1]['content']!r} -> {reply!r}")
    replies: dict[float, list[str]] = {}
    results = evaluate(model, tokenizer, conversations, temperatures=args.temperatures, seed=args.seed,
                       replies_out=replies)
    seen = _seen_in_shipped_training(args.model_dir, conversations)
    print(f"held-out split: seed {HELDOUT_SEED}, {args.per_task} conversations per task; "
          f"sampling seed {args.seed}; device {device}")
    print(format_table(results, seen, distinct_questions(conversations)))
    grounded = format_grounded(conversations, replies[min(replies)])
    if grounded:
        print(grounded)
    print("questions: the distinct questions among a task's conversations (one missed question asked n times "
          "costs n of them)")
    if seen:
        print("in train: share of held-out questions that the training corpus also asks, word for word")
    missed = missed_targets(results)
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
