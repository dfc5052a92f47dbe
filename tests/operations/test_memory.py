"""Memory under a token budget: the cases, what each policy keeps, and the rates on the real model."""
from __future__ import annotations

import random

import pytest

from course_lib.data.grounded import GROUNDED_ABSTAIN
from course_lib.operations.memory import MAX_PASSAGES, POLICIES, compact, memory_case


@pytest.fixture
def tok(tinychat_tokenizer):
    return tinychat_tokenizer


def test_a_case_is_determined_by_its_seed():
    assert memory_case(random.Random(5), lookups=7) == memory_case(random.Random(5), lookups=7)
    assert memory_case(random.Random(5), lookups=7) != memory_case(random.Random(6), lookups=7)


def test_a_case_has_distinct_entities_and_asks_about_one_of_them():
    for seed in range(20):
        case = memory_case(random.Random(seed), lookups=6)
        entities = [fact["entity"] for fact in case.facts]
        assert len(entities) == len(set(entities)) == 6 and 0 <= case.asked < 6
        assert case.facts[case.asked]["entity"] in case.question
        for fact in case.facts:
            assert fact["result"].startswith(f"lookup_fact({fact['entity']}) returned: {fact['sentence']} ")
            assert fact["value"] in fact["sentence"]
        assert case.expected("2") == {key: case.facts[case.asked][key] for key in ("kind", "entity", "value")} \
            | {"passage_id": "2"}


def test_drop_and_summarise_keep_the_newest_texts_that_fit_the_budget(tok):
    for seed in range(12):
        case = memory_case(random.Random(seed), lookups=8)
        for policy, field in (("drop", "result"), ("summarise", "sentence")):
            texts = [fact[field] for fact in case.facts]
            for budget in (0, 9, 40, 75, 150, 400, 10_000):
                kept = compact(case, policy, tok, budget)
                cost = sum(len(tok.encode(text)) for text in kept)
                assert cost <= budget and len(kept) <= MAX_PASSAGES
                assert kept == texts[len(texts) - len(kept):]   # the newest, oldest first
                if len(kept) < min(MAX_PASSAGES, len(texts)):    # ... and the next older one did not fit
                    assert cost + len(tok.encode(texts[-len(kept) - 1])) > budget, (policy, budget)
    assert compact(case, "summarise", tok, 10_000) == [fact["sentence"] for fact in case.facts[-MAX_PASSAGES:]]


def test_summarise_keeps_more_lookups_than_drop_on_the_same_budget(tok):
    case = memory_case(random.Random(2), lookups=8)
    assert len(compact(case, "summarise", tok, 150)) > len(compact(case, "drop", tok, 150))


def test_retrieve_brings_back_k_sentences_with_the_asked_fact(tok):
    for seed in range(15):
        case = memory_case(random.Random(seed), lookups=10)
        sentences = [fact["sentence"] for fact in case.facts]
        for k in (1, 2, 3):
            kept = compact(case, "retrieve", tok, budget=0, k=k)
            assert len(kept) == k and len(set(kept)) == k
            assert kept == [s for s in sentences if s in kept]   # oldest first
            assert case.facts[case.asked]["sentence"] in kept     # its entity names it
    assert len(compact(case, "retrieve", tok, 0, k=50)) == 10


def test_an_unknown_policy_raises(tok):
    case = memory_case(random.Random(0), lookups=3)
    with pytest.raises(ValueError, match="policy must be one of"):
        compact(case, "forget", tok, 100)
    assert POLICIES == ("drop", "summarise", "retrieve")


def test_answer_rate_on_eight_cases(tinychat):
    from course_lib.operations.memory import answer_rate

    model, tok = tinychat
    cases = [memory_case(random.Random(100 + seed), lookups=8) for seed in range(8)]
    for policy in ("retrieve", "drop"):
        result = answer_rate(model, tok, cases, policy, budget=150)
        assert set(result) == {"policy", "in_memory", "answered", "made_up", "replies", "expected"}
        assert result["policy"] == policy and len(result["replies"]) == len(result["expected"]) == 8
        assert all(0.0 <= result[name] <= 1.0 for name in ("in_memory", "answered", "made_up"))
        held = [case.facts[case.asked]["sentence"] in " ".join(compact(case, policy, tok, 150)) for case in cases]
        assert result["in_memory"] == sum(held) / 8
        assert result["answered"] <= result["in_memory"] and result["made_up"] <= 1 - result["in_memory"]
        for case, expected, kept in zip(cases, result["expected"], held):
            assert (expected == GROUNDED_ABSTAIN) is (not kept)
            assert kept is False or case.facts[case.asked]["value"] in expected
        if policy == "retrieve":
            assert result["in_memory"] == 1.0  # BM25 finds each asked entity
