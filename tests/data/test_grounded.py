"""The grounded question-answering task and the question-level train/held-out split."""
from __future__ import annotations

import random
import re

import pytest

from course_lib.data.passages import PASSAGES_CLOSE, PASSAGES_OPEN
from course_lib.data import facts
from course_lib.data.corpus import (TASKS, TRAIN_SEED, generate_conversation, generate_corpus, heldout_split,
                                    question_split)
from course_lib.data.grounded import GROUNDED_ABSTAIN, MAX_PASSAGES, MODES, grounded_conversation, statement

_PASSAGE = re.compile(r"^\[(\d)\] (.*)$", re.M)  # one line a passage: [id] text
_KNOWN = {**facts.CAPITALS, **facts.SYMBOLS, **{k: str(v) for k, v in facts.LEGS.items()}}


def _parts(messages):
    """The user message is the question, the fenced block, the question again."""
    content = messages[0]["content"]
    first, _, rest = content.partition("\n\n")
    block, _, question = rest.rpartition("\n\n")
    assert first == question, "the question comes before and after the passages"
    return dict(_PASSAGE.findall(block)), question, block


@pytest.mark.parametrize("seed", range(200))
def test_a_grounded_conversation_says_what_its_record_says(seed):
    messages, exp = grounded_conversation(random.Random(seed))
    passages, question, block = _parts(messages)
    assert block.startswith(PASSAGES_OPEN) and block.endswith(PASSAGES_CLOSE)
    assert len(passages) == exp["n_passages"] <= MAX_PASSAGES
    assert all(pid in "123456789" for pid in passages)
    assert exp["entity"] in question
    mentioning = [pid for pid, text in passages.items() if re.search(rf"\b{re.escape(exp['entity'])}\b", text)]
    if exp["mode"] == "absent":
        assert mentioning == [] and messages[1]["content"] == GROUNDED_ABSTAIN and exp["passage_id"] is None
    else:
        # exactly one passage is about the entity: the one the answer cites, stating the value
        assert mentioning == [exp["passage_id"]]
        assert re.search(rf"\b{re.escape(exp['value'])}\b", passages[exp["passage_id"]])
        said = statement(exp["kind"], exp["entity"], exp["value"])
        assert passages[exp["passage_id"]] == said
        assert messages[1]["content"] == f"{said} [{exp['passage_id']}]"
        assert list(passages).index(exp["passage_id"]) == exp["position"]
    if exp["mode"] == "contradict":
        assert exp["weights_value"] == _KNOWN[exp["entity"]] != exp["value"]
    if exp["mode"] == "new":
        assert exp["weights_value"] is None and exp["entity"] not in _KNOWN


def test_modes_positions_and_sizes_are_all_drawn():
    rng = random.Random(0)
    draws = [grounded_conversation(rng)[1] for _ in range(2000)]
    assert {d["mode"] for d in draws} == set(MODES)
    assert {d["n_passages"] for d in draws} == set(range(1, MAX_PASSAGES + 1))
    assert {d["position"] for d in draws if d["position"] is not None} == set(range(MAX_PASSAGES))
    share = sum(d["mode"] == "absent" for d in draws) / len(draws)
    assert abs(share - MODES["absent"]) < 0.05


def test_most_distractors_share_the_kind_asked_about():
    rng = random.Random(2)
    same = total = 0
    for _ in range(300):
        messages, exp = grounded_conversation(rng, mode="absent", n_passages=MAX_PASSAGES)
        passages, _, _ = _parts(messages)
        starts = {"capital": "The capital of ", "symbol": "The chemical symbol for ", "legs": " legs."}
        same += sum(starts[exp["kind"]] in text for text in passages.values())
        total += len(passages)
    assert 0.6 < same / total < 0.85  # 60% drawn from the asked kind, plus a third of the rest


def test_fixed_draws_and_bad_arguments():
    messages, exp = grounded_conversation(random.Random(1), mode="contradict", n_passages=4, position=3)
    assert (exp["mode"], exp["n_passages"], exp["position"]) == ("contradict", 4, 3)
    assert grounded_conversation(random.Random(1))[0] == grounded_conversation(random.Random(1))[0]
    with pytest.raises(ValueError, match="mode"):
        grounded_conversation(random.Random(0), mode="maybe")
    with pytest.raises(ValueError, match="position"):
        grounded_conversation(random.Random(0), mode="new", n_passages=2, position=2)
    with pytest.raises(ValueError, match="n_passages"):
        grounded_conversation(random.Random(0), n_passages=10)


def test_every_prompt_fits_the_window_with_room_to_answer():
    from course_lib.model import load_tokenizer
    from course_lib.tokenization.chat_template import encode_chat

    tok = load_tokenizer("tinychat")
    rng = random.Random(5)
    longest = max(len(encode_chat(tok, grounded_conversation(rng, n_passages=MAX_PASSAGES)[0][:1]))
                  for _ in range(200))
    assert longest + 64 <= 512


# ---------------------------------------------------------------- the split
def test_question_split_is_fixed_by_the_text():
    questions = [f"What is {a} + {b}?" for a in range(30) for b in range(30)]
    splits = [question_split(q) for q in questions]
    assert splits == [question_split(q) for q in questions]
    share = splits.count("heldout") / len(splits)
    assert 0.07 < share < 0.19  # one bucket in eight
    with pytest.raises(ValueError, match="split"):
        generate_conversation(random.Random(0), "fact", split="test")


def test_heldout_questions_never_occur_in_training():
    train = {next(m["content"] for m in c.messages if m["role"] == "user") for c in generate_corpus(20_000, TRAIN_SEED)}
    held = heldout_split(50)
    assert {c.task for c in held} == set(TASKS)
    for convo in held:
        question = next(m["content"] for m in convo.messages if m["role"] == "user")
        assert question_split(question) == "heldout" and question not in train
    assert all(question_split(next(m["content"] for m in c.messages if m["role"] == "user")) == "train"
               for c in generate_corpus(500, 3))


# ---------------------------------------------------------------- absent twins (training only)
@pytest.mark.parametrize("seed", range(100))
def test_an_absent_twin_differs_from_its_original_in_the_one_passage_that_answered(seed):
    from course_lib.data.grounded import absent_twin

    messages, exp = grounded_conversation(random.Random(seed), mode=("new", "contradict")[seed % 2])
    twin, twin_exp = absent_twin(random.Random(seed), messages, exp)
    passages, question, _ = _parts(messages)
    twin_passages, twin_question, _ = _parts(twin)
    assert twin_question == question and list(twin_passages) == list(passages)  # same ids, same order
    changed = [pid for pid in passages if passages[pid] != twin_passages[pid]]
    assert changed == [exp["passage_id"]]
    swapped = twin_passages[exp["passage_id"]]
    assert not re.search(rf"\b{re.escape(exp['entity'])}\b", swapped)
    assert statement(exp["kind"], "X", "Y").split("X")[0] in swapped or exp["kind"] == "legs"
    assert swapped.endswith(" legs.") == (exp["kind"] == "legs")  # the same kind of statement
    assert twin[-1]["content"] == GROUNDED_ABSTAIN
    assert twin_exp == {**exp, "mode": "absent", "value": None, "passage_id": None, "position": None}
    assert messages[1]["content"] != GROUNDED_ABSTAIN  # the original is left as it was


def test_absent_twins_are_training_data_and_leave_the_corpus_alone():
    from course_lib.data.corpus import absent_twins

    base = generate_corpus(400, TRAIN_SEED)
    snapshot = list(base)
    twins = absent_twins(base, 0.5, TRAIN_SEED)
    assert base == snapshot
    answered = sum(c.task == "grounded" and c.expected["passage_id"] is not None for c in base)
    assert 0.35 * answered < len(twins) < 0.65 * answered
    assert twins == absent_twins(base, 0.5, TRAIN_SEED) and absent_twins(base, 0.0, TRAIN_SEED) == []
    assert all(question_split(t.messages[t.reply_index - 1]["content"]) == "train" for t in twins)
    assert all(t.reply == GROUNDED_ABSTAIN and t.expected["mode"] == "absent" for t in twins)
    with pytest.raises(ValueError, match="fraction"):
        absent_twins(base, 1.5, TRAIN_SEED)


def test_an_absent_twin_needs_a_passage_that_answers():
    from course_lib.data.grounded import absent_twin

    messages, exp = grounded_conversation(random.Random(0), mode="absent")
    with pytest.raises(ValueError, match="only a conversation that a passage answers"):
        absent_twin(random.Random(0), messages, exp)
    messages, exp = grounded_conversation(random.Random(0), mode="new")
    with pytest.raises(ValueError, match="not in the user message"):
        absent_twin(random.Random(0), [messages[0] | {"content": "What?"}, messages[1]], exp)
