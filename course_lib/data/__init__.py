"""The course model's data: a deterministic chat corpus and the shipped tokenizer and weights.

    >>> from course_lib.data import generate_corpus, TRAIN_SEED
    >>> len(generate_corpus(5, seed=TRAIN_SEED))
    5
"""
from course_lib.data.corpus import (
    ABSTAIN,
    HELDOUT_SEED,
    TASKS,
    TRAIN_SEED,
    Conversation,
    corpus_fingerprint,
    generate_conversation,
    generate_corpus,
    heldout_split,
)

__all__ = [
    "ABSTAIN", "HELDOUT_SEED", "TASKS", "TRAIN_SEED", "Conversation", "corpus_fingerprint",
    "generate_conversation", "generate_corpus", "heldout_split",
]
