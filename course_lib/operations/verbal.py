"""Verbal confidence: do a reply's words say how likely it is to be right?

A reply can say how sure it is ("I'm certain", "I think", "I don't know"), and users read those
words as a confidence. Whether they carry any information is an empirical question about one
model on one kind of data: ``verbal_certainty`` sorts replies by their words, and
``by_certainty`` shows the accuracy of each class beside their count. The other signal is the
reply's probability under the model (notebook 07's reliability diagram); ``auroc`` says how well
a score ranks right replies above wrong ones (0.5: no better than chance, 1.0: perfectly).

    >>> [verbal_certainty(t) for t in ("I think it is 4.", "It is 4.", "I don't know.", "Definitely 4.")]
    ['hedged', 'plain', 'declined', 'certain']
    >>> auroc([0.9, 0.8, 0.3, 0.2], [True, True, False, False]), auroc([0.5, 0.5], [True, False])
    (1.0, 0.5)
"""
from __future__ import annotations

import re
from collections.abc import Sequence

from course_lib.data.corpus import ABSTAIN
from course_lib.data.grounded import GROUNDED_ABSTAIN

__all__ = ["CERTAINTY_CLASSES", "auroc", "by_certainty", "verbal_certainty"]

CERTAINTY_CLASSES = ("certain", "plain", "hedged", "declined")
_DECLINED = (ABSTAIN, GROUNDED_ABSTAIN)
_HEDGED = re.compile(r"\b(i think|i believe|probably|possibly|maybe|perhaps|might|not sure|likely)\b", re.I)
_CERTAIN = re.compile(r"\b(certainly|definitely|i'm certain|i am certain|i'm sure|i am sure|without doubt)\b", re.I)


def verbal_certainty(reply: str) -> str:
    """ "declined" (the course's abstentions), "hedged", "certain" (by their phrases), or "plain"."""
    text = reply.strip()
    if text in _DECLINED or "don't know" in text.lower():
        return "declined"
    if _HEDGED.search(text):
        return "hedged"
    if _CERTAIN.search(text):
        return "certain"
    return "plain"


def by_certainty(replies: Sequence[str], correct: Sequence[bool]) -> dict[str, tuple[int, float | None]]:
    """certainty class -> (how many replies, their accuracy; None when there are none)."""
    if len(replies) != len(correct):
        raise ValueError("one correct flag per reply")
    out = {}
    for name in CERTAINTY_CLASSES:
        flags = [ok for reply, ok in zip(replies, correct) if verbal_certainty(reply) == name]
        out[name] = (len(flags), sum(flags) / len(flags) if flags else None)
    return out


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """The chance that a random right reply scores above a random wrong one (ties count half);
    None when there are no right or no wrong replies to compare."""
    right = [s for s, ok in zip(scores, labels) if ok]
    wrong = [s for s, ok in zip(scores, labels) if not ok]
    if not right or not wrong:
        return None
    wins = sum((r > w) + 0.5 * (r == w) for r in right for w in wrong)
    return wins / (len(right) * len(wrong))
