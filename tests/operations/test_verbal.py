"""Certainty words on hand-written replies, accuracy by class, and AUROC against a pair count."""
from __future__ import annotations

import itertools
import random

import pytest

from course_lib.operations.verbal import CERTAINTY_CLASSES, auroc, by_certainty, verbal_certainty


def test_certainty_classes_of_hand_written_replies():
    cases = {
        "I don't know.": "declined", "  The passages do not say.\n": "declined",
        "Honestly, I don't know the answer.": "declined",
        "I think the capital is Oslo.": "hedged", "It is probably 4.": "hedged", "Maybe 12.": "hedged",
        "I'm not sure, 6?": "hedged", "It might be Lima.": "hedged",
        "I think it is definitely 4.": "hedged",            # a hedge outweighs a certainty word
        "Definitely 4.": "certain", "I am sure it is Oslo.": "certain", "Certainly: Nr.": "certain",
        "I'm certain it has 6 legs.": "certain", "Without doubt, Paris.": "certain",
        "The capital is Oslo.": "plain", "4": "plain", "": "plain",
        "Mightily strong.": "plain", "Unlikely to rain.": "plain",   # whole words only
    }
    assert {reply: verbal_certainty(reply) for reply in cases} == cases
    assert set(cases.values()) == set(CERTAINTY_CLASSES)


def test_by_certainty_counts_and_accuracy_by_hand():
    replies = ["I think 4.", "Maybe 5.", "Definitely 4.", "4", "5", "6", "I don't know."]
    correct = [True, False, True, True, True, False, False]
    assert by_certainty(replies, correct) == {"certain": (1, 1.0), "plain": (3, 2 / 3), "hedged": (2, 0.5),
                                              "declined": (1, 0.0)}
    assert by_certainty(["4"], [True]) == {"certain": (0, None), "plain": (1, 1.0), "hedged": (0, None),
                                           "declined": (0, None)}
    with pytest.raises(ValueError, match="one correct flag per reply"):
        by_certainty(["4", "5"], [True])


def _pairs(scores, labels):
    """The share of (right, wrong) pairs the score orders correctly, a tie counting half."""
    total = wins = 0
    for (s1, l1), (s2, l2) in itertools.product(zip(scores, labels), repeat=2):
        if l1 and not l2:
            total += 1
            wins += 1 if s1 > s2 else 0.5 if s1 == s2 else 0
    return wins / total


def test_auroc_against_a_brute_force_pair_count():
    rng = random.Random(4)
    for _ in range(300):
        n = rng.randint(2, 30)
        scores = [rng.choice([0.1, 0.5, 0.9]) if rng.random() < 0.3 else rng.random() for _ in range(n)]
        labels = [rng.random() < 0.5 for _ in range(n)]
        if all(labels) or not any(labels):
            assert auroc(scores, labels) is None
            continue
        assert auroc(scores, labels) == pytest.approx(_pairs(scores, labels))


def test_auroc_by_hand():
    assert auroc([0.9, 0.8, 0.3, 0.2], [True, True, False, False]) == 1.0
    assert auroc([0.9, 0.8, 0.3, 0.2], [False, False, True, True]) == 0.0
    # right 0.6 and 0.2 against wrong 0.4: one win, one loss
    assert auroc([0.6, 0.4, 0.2], [True, False, True]) == 0.5
    # right 0.7 against wrong 0.7 (tie) and 0.1 (win): 1.5 / 2
    assert auroc([0.7, 0.7, 0.1], [True, False, False]) == 0.75


def test_auroc_is_none_without_both_kinds_of_reply():
    assert auroc([0.1, 0.2], [True, True]) is None
    assert auroc([0.1, 0.2], [False, False]) is None
    assert auroc([], []) is None
