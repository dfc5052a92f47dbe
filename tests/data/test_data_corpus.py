"""The course corpus: deterministic, well-formed, and its answers are right.

Answers are checked against independent oracles: Python's own arithmetic on the operands
parsed back out of the question, ``json.loads`` for records and tool calls, and the fixed
fact tables.
"""
from __future__ import annotations

import json
import re

import pytest

from course_lib.data import ABSTAIN, HELDOUT_SEED, TASKS, TRAIN_SEED, generate_corpus, heldout_split
from course_lib.data import facts
from course_lib.data.facts import made_up_name
from course_lib.tokenization.chat_template import ROLES, TOOL_CALL, render_chat

WORDS = {0: "zero", 7: "seven", 13: "thirteen", 20: "twenty", 21: "twenty-one", 40: "forty",
         58: "fifty-eight", 99: "ninety-nine", 100: "one hundred"}


@pytest.fixture(scope="module")
def corpus():
    return generate_corpus(3000, TRAIN_SEED)


def test_same_seed_same_corpus_other_seed_other_corpus():
    first, again, other = generate_corpus(300, 11), generate_corpus(300, 11), generate_corpus(300, 12)
    assert first == again
    assert [c.messages for c in first] != [c.messages for c in other]


def test_prefix_stability(corpus):
    # Asking for fewer conversations gives a prefix of the longer corpus (one stream per seed).
    assert generate_corpus(100, TRAIN_SEED) == corpus[:100]


def test_every_task_appears_and_renders(corpus):
    assert {c.task for c in corpus} == set(TASKS)
    for convo in corpus:
        assert all(m["role"] in ROLES for m in convo.messages)
        assert convo.messages[convo.reply_index]["role"] == "assistant"
        assert convo.messages[convo.reply_index - 1]["role"] == "user"
        text = render_chat(convo.messages, add_generation_prompt=False)
        assert text.count("<|end|>") == len(convo.messages)


def test_heldout_is_another_draw(corpus):
    held = heldout_split(40)
    assert HELDOUT_SEED != TRAIN_SEED
    assert [sum(c.task == t for c in held) for t in TASKS] == [40] * len(TASKS)
    # Records carry random order ids and amounts: held-out extraction prompts are new text.
    train = {c.messages[c.reply_index - 1]["content"] for c in corpus if c.task == "extraction"}
    held_prompts = [c.messages[c.reply_index - 1]["content"] for c in held if c.task == "extraction"]
    assert sum(p in train for p in held_prompts) <= 1
    with pytest.raises(ValueError, match="TRAIN_SEED"):
        heldout_split(5, seed=TRAIN_SEED)


def test_two_plus_two_is_in_the_training_distribution(corpus):
    full = generate_corpus(30_000, TRAIN_SEED)
    asked = [c for c in full if c.messages[c.reply_index - 1]["content"] == "What is 2 + 2?"]
    assert asked, "the notebooks trace 'What is 2 + 2?'; the training corpus must contain it"
    assert all(c.expected["value"] == 4 and c.reply in c.expected["accepted"] for c in asked)


_EXPR = re.compile(r"(\d+) (\+|-|\*|plus|minus|times) (\d+)")


def test_arithmetic_answers_are_right(corpus):
    ops = {"+": int.__add__, "plus": int.__add__, "-": int.__sub__, "minus": int.__sub__,
           "*": int.__mul__, "times": int.__mul__}
    seen_forms = set()
    for convo in (c for c in corpus if c.task == "arithmetic"):
        a, op, b = _EXPR.search(convo.messages[convo.reply_index - 1]["content"]).groups()
        value = ops[op](int(a), int(b))
        assert convo.expected["value"] == value >= 0
        assert convo.reply in convo.expected["accepted"]
        for accepted in convo.expected["accepted"]:
            numbers = re.findall(r"\d+", accepted)
            if accepted == facts.number_to_words(value):
                seen_forms.add("words")
            elif accepted == str(value):
                seen_forms.add("digits")
            else:
                assert accepted.endswith(f"{value}.") and int(numbers[-1]) == value
                seen_forms.add("sentence")
    assert seen_forms == {"digits", "words", "sentence"}


def test_number_words():
    assert {n: facts.number_to_words(n) for n in WORDS} == WORDS
    with pytest.raises(ValueError, match="0..100"):
        facts.number_to_words(101)
    with pytest.raises(TypeError):
        facts.number_to_words(3.0)


def test_facts_and_abstention(corpus):
    known = {**facts.CAPITALS, **facts.SYMBOLS, **{k: str(v) for k, v in facts.LEGS.items()}}
    for convo in corpus:
        question = convo.messages[convo.reply_index - 1]["content"]
        if convo.task == "fact":
            subject = next(name for name in known if re.search(rf"\b{name}\b", question))
            assert convo.expected["value"] == known[subject] and known[subject] in convo.reply
        elif convo.task == "unknown":
            assert convo.reply == ABSTAIN and not any(re.search(rf"\b{n}\b", question) for n in known)


def test_made_up_names_are_never_known():
    import random

    rng = random.Random(0)
    known = {n.lower() for table in (facts.CAPITALS, facts.SYMBOLS, facts.LEGS) for n in table}
    names = [made_up_name(rng, kind) for kind in ("capital", "symbol", "legs") for _ in range(300)]
    assert not known & {n.lower() for n in names}


def test_extraction_replies_are_the_records(corpus):
    for convo in (c for c in corpus if c.task == "extraction"):
        record = json.loads(convo.reply)
        assert record == convo.expected
        text = convo.messages[convo.reply_index - 1]["content"]
        for key, value in record.items():
            if key == "reason":
                assert any(p in text for p in facts.REFUND_REASONS[value])
            elif key == "amount":
                assert f"${value:.2f}" in text
            else:
                assert str(value) in text


def test_tool_calls_are_json_then_result_then_answer(corpus):
    tools = set()
    for convo in (c for c in corpus if c.task == "tool"):
        call, result, final = convo.messages[convo.reply_index:]
        assert call["content"].startswith(TOOL_CALL)
        payload = json.loads(call["content"][len(TOOL_CALL):])
        assert payload == {"name": convo.expected["name"], "arguments": convo.expected["arguments"]}
        assert result["role"] == "tool" and isinstance(json.loads(result["content"]), dict)
        assert final["role"] == "assistant" and TOOL_CALL not in final["content"]
        tools.add(payload["name"])
    assert tools == {"get_weather", "get_time", "lookup_order", "convert_currency"}


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="non-negative"):
        generate_corpus(-1, 0)
    with pytest.raises(ValueError, match="subset"):
        generate_corpus(3, 0, tasks=("poetry",))
