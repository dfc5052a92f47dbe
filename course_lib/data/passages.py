"""Retrieved passages and the one layout a grounded prompt gives them.

The context packer (``course_lib.context.budget``), the training corpus's grounded task
(``course_lib.data.grounded``) and the notebooks all build the user message with
``user_with_passages``, so the model is trained on exactly the layout it is served.

    >>> print(user_with_passages("Who?", [Passage("4", "Ada wrote it.", 1.0), Passage("7", "Bo read it.", 0.5)]))
    Who?
    <BLANKLINE>
    <passages>
    [4] Ada wrote it.
    [7] Bo read it.
    </passages>
    <BLANKLINE>
    Who?

Inside the fence each passage is one line: its id in brackets, then its text. An earlier layout
gave each passage its own ``<passage id="4">`` ... ``</passage>`` tags, 8 tokens a passage
where its text takes about 10; with one tag pair for the whole block, a grounded prompt is
about 18% shorter, and a training step over grounded prompts about a third cheaper (the README
measures both, and what the saved time buys).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PASSAGES_CLOSE", "PASSAGES_OPEN", "Passage", "render_passage", "render_passages", "user_with_passages"]

PASSAGES_OPEN = "<passages>"  # short on purpose: every fence token comes out of a 512-token window
PASSAGES_CLOSE = "</passages>"


@dataclass(frozen=True)
class Passage:
    id: str      # the retriever's id, shown in the fence so an answer can cite it
    text: str    # kept whole or dropped whole, never cut
    score: float  # higher is better; ties keep the input order


def render_passage(passage: Passage) -> str:
    """One passage inside the fence: its id in brackets, then its text whole, on one line
    (a text that holds line breaks keeps them: the next bracketed id starts the next passage)."""
    return f"[{passage.id}] {passage.text}"


def render_passages(passages: Sequence[Passage]) -> str:
    """Passages (already in rank order) -> one fenced data block; '' for none."""
    if not passages:
        return ""
    blocks = [render_passage(p) for p in passages]
    return "\n".join([PASSAGES_OPEN, *blocks, PASSAGES_CLOSE])


def user_with_passages(question: str, passages: Sequence[Passage]) -> str:
    """The current user message with its passages: the question, the fenced block, the question again.

    The one layout the packer, the training corpus's grounded task and the notebooks share.
    Why the question comes twice: a causal model reads the passages before it reaches a question
    that comes last, so nothing it computes over the passages can depend on which entity is
    asked about; put first as well, every passage token can attend to it (query-aware
    contextualization, Liu et al. 2023, "Lost in the Middle"). Trained from scratch on grounded
    questions alone, 3,000 steps, tinychat's size: passages then question 39.5% right on 200
    held-out questions, question first only 32.5%, question before and after 99.5%."""
    block = render_passages(passages)
    return f"{question}\n\n{block}\n\n{question}" if block else question
