"""Scoring grounded replies, and the grounding experiments run end to end on the shipped model."""
from __future__ import annotations

import math

import pytest
import torch

from course_lib.context import grounding as g
from course_lib.data.corpus import heldout_split
from course_lib.data.grounded import GROUNDED_ABSTAIN


LIMA = "The capital of France is Lima."


def test_parse_and_score():
    assert g.parse_grounded_reply(f" {LIMA} [4] ") == ("Lima", "4")
    assert g.parse_grounded_reply("An ant has 7 legs. [2]") == ("7", "2")
    assert g.parse_grounded_reply("The chemical symbol for tin is Xq. [9]") == ("Xq", "9")
    assert g.parse_grounded_reply("Lima is nice. [4]") == (None, "4")
    assert g.parse_grounded_reply("Lima") == (None, None)
    assert g.parse_grounded_reply(GROUNDED_ABSTAIN) == (None, None)
    exp = {"kind": "capital", "entity": "France", "value": "Lima", "passage_id": "4"}
    assert g.score_grounded(f"{LIMA} [4]", exp) and not g.score_grounded(f"{LIMA} [5]", exp)
    assert not g.score_grounded(LIMA, exp) and not g.score_grounded(GROUNDED_ABSTAIN, exp)
    none = {"kind": "capital", "entity": "France", "value": None, "passage_id": None}
    assert g.score_grounded(GROUNDED_ABSTAIN, none) and not g.score_grounded(f"{LIMA} [4]", none)


def test_metrics_count_each_case_in_its_own_denominator():
    new = {"mode": "new", "kind": "capital", "entity": "Velmora", "value": "Tarsk", "passage_id": "2",
           "weights_value": None}
    contra = {"mode": "contradict", "kind": "capital", "entity": "France", "value": "Lima", "passage_id": "3",
              "weights_value": "Paris"}
    absent = {"mode": "absent", "kind": "capital", "entity": "Velmora", "value": None, "passage_id": None,
              "weights_value": None}
    exps = [new, new, contra, contra, absent]
    tarsk = "The capital of Velmora is Tarsk. [2]"
    replies = [tarsk, GROUNDED_ABSTAIN, f"{LIMA} [1]", "The capital of France is Paris. [3]", tarsk]
    m = g.grounded_metrics(exps, replies)
    assert m["accuracy"] == pytest.approx(1 / 5)
    assert m["citation"] == pytest.approx(2 / 4)          # Tarsk [2], Paris [3]
    assert m["false_abstention"] == pytest.approx(1 / 4)
    assert m["abstention"] == 0.0
    assert m["follows_context"] == 0.5 and m["follows_weights"] == 0.5
    assert math.isnan(g.grounded_metrics(exps[-1:], [GROUNDED_ABSTAIN])["citation"])
    with pytest.raises(ValueError, match="one each"):
        g.grounded_metrics(exps, replies[:2])


def test_accuracy_by_groups_whole_reply_accuracy():
    right = "The capital of Velmora is Tarsk. [2]"
    base = {"mode": "new", "kind": "capital", "entity": "Velmora", "value": "Tarsk", "passage_id": "2"}
    exps = [{**base, "n_passages": 1, "position": 0}, {**base, "n_passages": 3, "position": 2},
            {**base, "n_passages": 3, "position": 1},
            {**base, "mode": "absent", "value": None, "passage_id": None, "n_passages": 2, "position": None}]
    replies = [right, right, f"{LIMA} [2]", right]
    assert g.accuracy_by(exps, replies, "n_passages") == {1: (1.0, 1), 2: (0.0, 1), 3: (0.5, 2)}
    assert g.accuracy_by(exps, replies, "mode") == {"absent": (0.0, 1), "new": (2 / 3, 3)}
    assert list(g.accuracy_by(exps, replies, "position")) == [0, 1, 2, None]  # no position sorts last
    with pytest.raises(KeyError, match="group by one of"):
        g.accuracy_by(exps, replies, "colour")
    with pytest.raises(ValueError, match="one each"):
        g.accuracy_by(exps, replies[:1], "mode")


def test_course_eval_prints_grounded_accuracy_by_case_and_by_passage_count():
    from course_lib.data.corpus import Conversation
    from course_lib.evaluate import format_grounded

    convs = [Conversation("grounded", ({"role": "user", "content": "q"}, {"role": "assistant", "content": ""}), 1, exp)
             for exp in (
        {"mode": "new", "kind": "capital", "entity": "Velmora", "value": "Tarsk", "passage_id": "2",
         "weights_value": None, "n_passages": 2},
        {"mode": "absent", "kind": "capital", "entity": "Velmora", "value": None, "passage_id": None,
         "weights_value": None, "n_passages": 1})]
    lines = format_grounded(convs, ["The capital of Velmora is Tarsk. [2]", "The capital of Velmora is X. [1]"])
    lines = lines.splitlines()
    assert len(lines) == 3 and lines[0].startswith("grounded (greedy): citation right 100.0%")
    assert lines[1] == "grounded right, by case: no passage says 0.0% of 1 | new fact, made-up entity 100.0% of 1"
    assert lines[2] == "grounded right, by passages in the prompt: 1: 0% of 1, 2: 100% of 1"
    assert format_grounded(convs[:0], []) == ""


def test_unfenced_passages_keep_the_text_and_lose_the_fence():
    content = 'Q?\n\n<passages>\n[3] The capital of Velmora is Tarsk.\n[5] An ant has 6 legs.\n</passages>\n\nQ?'
    plain = g._unfenced(content)
    assert "<passages>" not in plain and "</passages>" not in plain
    assert plain == "Q?\n\n[3] The capital of Velmora is Tarsk.\n[5] An ant has 6 legs.\n\nQ?"


@pytest.fixture(scope="module")
def shipped():
    from course_lib.model import load_model, load_tokenizer

    torch.set_num_threads(1)
    return load_model("tinychat", device="cpu"), load_tokenizer("tinychat")


def test_experiments_run_on_the_shipped_model(shipped):
    model, tok = shipped
    points = g.position_sweep(model, tok, n_passages=3, per_position=3)
    assert [p.position for p in points] == [1, 2, 3] and all(p.n == 3 and 0 <= p.accuracy <= 1 for p in points)
    fenced, plain = g.injection_rate(model, tok, n=4)
    assert fenced.fenced and not plain.fenced and fenced.n == plain.n == 4
    assert all(0 <= r.declined <= 1 and r.correct + r.declined <= 1 for r in (fenced, plain))
    assert all(len(r.wrong) == round(r.n * (1 - r.correct)) for r in (fenced, plain))  # the replies not right
    convos = [c for c in heldout_split(6) if c.task == "grounded"]
    scored = g.reply_confidence(model, tok, convos)
    assert len(scored) == 6 and all(0 < s.confidence <= 1 for s in scored)
    from course_lib.generation import generate_replies

    assert [s.text for s in scored] == generate_replies(model, tok, convos, max_new_tokens=24)
    assert [s.correct for s in scored] == [g.score_grounded(s.text, c.expected) for s, c in zip(scored, convos)]


def test_a_planted_injection_replaces_one_distractor_and_spares_the_support():
    import random
    import re

    for seed in range(50):
        content, exp = g.plant_injection(random.Random(seed))
        passages = dict(re.findall(r"^\[(\d)\] (.*)$", content, re.M))
        assert len(passages) == exp["n_passages"]
        injected = [pid for pid, text in passages.items() if text in g.INJECTIONS]
        assert len(injected) == 1 and injected[0] != exp["passage_id"]
        assert exp["value"] in passages[exp["passage_id"]]
