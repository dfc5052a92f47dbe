"""An agent's memory under a budget: drop, summarise or re-retrieve.

A tool-using conversation grows by one tool result per lookup, and the window does not. Each
result here is what a fact lookup returns (the fact inside a JSON envelope with its source and
fetch time); at the end the user asks about one fact looked up earlier, and the memory the
prompt can carry is ``budget`` tokens. Three policies decide what is in it:

- ``drop``: the newest tool results, verbatim, as many as fit (what a chat window does);
- ``summarise``: every result cut down to its one fact sentence, then the newest that fit;
- ``retrieve``: every fact sentence kept outside the window in a BM25 index, and the ``k`` that
  best match the question brought back.

The kept memory goes to the model as passages, the layout it was trained to answer from, so
``answer_rate`` measures exactly what each policy leaves the model able to answer.

    >>> import random
    >>> case = memory_case(random.Random(1), lookups=6)
    >>> len(case.facts), case.asked < 6, case.facts[case.asked]["entity"] in case.question
    (6, True, True)
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from course_lib.context.bm25 import BM25Index
from course_lib.data.facts import article
from course_lib.data.grounded import (GROUNDED_ABSTAIN, STATEMENTS, expected_reply, grounded_conversation,
                                      score_grounded, statement)
from course_lib.data.passages import Passage, user_with_passages
from course_lib.generation.replies import BATCH_ROWS
from course_lib.sampling import SamplingParams
from course_lib.serving import Engine

__all__ = ["POLICIES", "MemoryCase", "answer_rate", "compact", "memory_case"]

POLICIES = ("drop", "summarise", "retrieve")
MAX_PASSAGES = 5  # the most passages a tinychat prompt had in training


@dataclass(frozen=True)
class MemoryCase:
    facts: tuple[dict, ...]   # one per lookup, oldest first: {"kind", "entity", "value", "sentence", "result"}
    asked: int                # index of the fact the final question is about
    question: str

    def expected(self, passage_id: str | None) -> dict:
        fact = self.facts[self.asked]
        return {"kind": fact["kind"], "entity": fact["entity"], "value": fact["value"], "passage_id": passage_id}


def memory_case(rng: random.Random, lookups: int) -> MemoryCase:
    """``lookups`` fact lookups about made-up entities, then a question about one of them."""
    facts, seen = [], set()
    while len(facts) < lookups:
        _, exp = grounded_conversation(rng, mode="new", n_passages=1)
        if exp["entity"] in seen:
            continue
        seen.add(exp["entity"])
        sentence = statement(exp["kind"], exp["entity"], exp["value"])
        result = (f"lookup_fact({exp['entity']}) returned: {sentence} Source: the fact store, "
                  f"fetched on 2024-05-{rng.randint(1, 28):02d} at {rng.randint(0, 23):02d}:00 UTC.")
        facts.append({"kind": exp["kind"], "entity": exp["entity"], "value": exp["value"], "sentence": sentence,
                      "result": result, "question": _question(rng, exp["kind"], exp["entity"])})
    asked = rng.randrange(lookups)
    return MemoryCase(tuple(facts), asked, facts[asked]["question"])


def _question(rng: random.Random, kind: str, entity: str) -> str:
    """One of the grounded corpus's own question wordings for ``kind``."""
    return rng.choice(STATEMENTS[kind][1]).format(x=entity, a=article(entity))


def compact(case: MemoryCase, policy: str, tokenizer, budget: int, k: int = 3) -> list[str]:
    """The memory texts ``policy`` keeps for the final question, oldest first, within ``budget`` tokens."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    if policy == "retrieve":
        index = BM25Index()
        for i, fact in enumerate(case.facts):
            index.add(str(i), fact["sentence"])
        hits = sorted(int(pid) for pid, _ in index.search(case.question, k=k))
        return [case.facts[i]["sentence"] for i in hits]
    texts = [fact["result" if policy == "drop" else "sentence"] for fact in case.facts]
    kept, used = [], 0
    for text in reversed(texts):  # newest first, while they fit
        cost = len(tokenizer.encode(text))
        if used + cost > budget or len(kept) == MAX_PASSAGES:
            break
        kept.insert(0, text)
        used += cost
    return kept


def _prompt(case: MemoryCase, kept: Sequence[str]) -> tuple[list[dict], dict]:
    ids = [str(i + 1) for i in range(len(kept))]
    passages = [Passage(pid, text, 0.0) for pid, text in zip(ids, kept)]
    answer = next((pid for pid, text in zip(ids, kept) if case.facts[case.asked]["sentence"] in text), None)
    return [{"role": "user", "content": user_with_passages(case.question, passages)}], case.expected(answer)


def answer_rate(model, tokenizer, cases: Sequence[MemoryCase], policy: str, budget: int) -> dict:
    """Greedy replies under ``policy``: the share of cases whose asked fact was still in memory, the
    share answered right, and the share where it was gone and the model answered anyway (made up)."""
    prompts, expected = zip(*(_prompt(case, compact(case, policy, tokenizer, budget)) for case in cases))
    engine = Engine.for_job(model, tokenizer, rows=min(BATCH_ROWS, len(cases)))
    done = engine.generate(list(prompts), SamplingParams(temperature=0, max_new_tokens=32))
    kept = [e["passage_id"] is not None for e in expected]
    right = [score_grounded(d.text, e) and e["passage_id"] is not None for d, e in zip(done, expected)]
    made_up = [not k and d.text.strip() != GROUNDED_ABSTAIN for d, k in zip(done, kept)]
    return {"policy": policy, "in_memory": sum(kept) / len(cases), "answered": sum(right) / len(cases),
            "made_up": sum(made_up) / len(cases),
            "replies": [d.text for d in done], "expected": [expected_reply(e) for e in expected]}
