"""Conversations -> token IDs with a loss mask -> padded training batches.

Only the assistant's own tokens are learned: the reply text and the ``<|end|>`` that closes it
(its stop signal). User, system and tool text is context the model reads but never has to
predict, so a loss there would spend capacity on guessing questions.

    >>> from course_lib.data.batching import assistant_mask_demo
    >>> assistant_mask_demo()
    [('<|user|>', 0), ('Hi', 0), ('<|end|>', 0), ('<|assistant|>', 0), ('Hello', 1), ('<|end|>', 1)]

Each training row holds one conversation starting at position 0, exactly as a prompt is laid
out at inference time; rows are grouped by length so padding stays small.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from course_lib.tokenization.chat_template import END, TOOL_CALL, role_marker

IGNORE_INDEX = -100  # cross_entropy's default ignore_index: padded and non-assistant targets


def encode_conversation(tokenizer, messages: Sequence[Mapping[str, str]]) -> tuple[list[int], list[int]]:
    """Messages -> (token IDs, mask) with mask 1 on assistant content and its closing ``<|end|>``.

    Encoding message by message gives the same IDs as encoding ``render_chat(messages,
    add_generation_prompt=False)`` whole, because special tokens always cut the text into
    separate pieces before BPE runs. Only an assistant message may carry ``<|tool_call|>``.
    """
    specials = tokenizer.special_tokens
    missing = [s for s in ("<|user|>", END, TOOL_CALL) if s not in specials]
    if missing:
        raise ValueError(f"the tokenizer lacks the chat special tokens {missing}; train it with "
                         "special_tokens=chat_template.SPECIAL_TOKENS")
    ids: list[int] = []
    mask: list[int] = []
    for i, message in enumerate(messages):
        role, content = message["role"], message["content"]
        allowed = {TOOL_CALL} if role == "assistant" else set()
        body = tokenizer.encode(content, allowed_special=allowed)
        learn = 1 if role == "assistant" else 0
        ids += [specials[role_marker(role)], *body, specials[END]]
        mask += [0] + [learn] * (len(body) + 1)
    return ids, mask


def assistant_mask_demo() -> list[tuple[str, int]]:
    """The mask on a two-message chat, with a toy whole-word tokenizer (for the docstring)."""

    class _Words:
        special_tokens = {"<|user|>": 0, "<|assistant|>": 1, END: 2, TOOL_CALL: 3}
        words = {"Hi": 4, "Hello": 5}

        def encode(self, text, allowed_special=()):
            return [self.words[text]]

    tok = _Words()
    names = {v: k for k, v in {**tok.special_tokens, **tok.words}.items()}
    ids, mask = encode_conversation(tok, [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}])
    return [(names[i], m) for i, m in zip(ids, mask)]


class LengthBatches:
    """Endless padded (inputs, targets) batches of encoded conversations, grouped by length.

    ``targets[b, t]`` is the token after ``inputs[b, t]`` where that token is learned, else
    ``IGNORE_INDEX``. A mask may weigh its learned tokens (any value > 0, e.g. 3 on the tokens
    where a reply decides between answering and declining); then each batch is (inputs,
    targets, weights), ``weights`` (B, T) float holding each target's weight, 0 where ignored.
    Each pass shuffles the conversations, sorts them by length inside pools of ``pool`` batches
    (so a batch's rows have similar lengths) and shuffles the batches; the whole stream comes
    from one ``torch.Generator``, so a seed fixes it.

    >>> data = LengthBatches([([5, 6, 7], [0, 1, 1]), ([5, 6], [0, 1])], batch_size=2, pad_id=0)
    >>> x, y = next(data.stream(torch.Generator().manual_seed(0)))
    >>> x.shape, y.tolist()
    (torch.Size([2, 2]), [[6, -100], [6, 7]])
    """

    def __init__(self, encoded: Sequence[tuple[list[int], list[int]]], *, batch_size: int, pad_id: int,
                 max_len: int | None = None, pool: int = 32):
        if batch_size < 1 or pool < 1:
            raise ValueError(f"batch_size and pool must be >= 1, got {batch_size} and {pool}")
        if not encoded:
            raise ValueError("no conversations to batch; generate a corpus first")
        too_long = [len(ids) for ids, _ in encoded if max_len is not None and len(ids) > max_len]
        if too_long:
            raise ValueError(f"{len(too_long)} conversations exceed max_len={max_len} tokens (longest "
                             f"{max(too_long)}); raise the model's context or shorten the corpus")
        self.encoded, self.batch_size, self.pad_id, self.pool = list(encoded), batch_size, pad_id, pool
        self.weighted = any(m not in (0, 1) for _, mask in self.encoded for m in mask)

    def __len__(self) -> int:
        """Batches per pass over the data."""
        return -(-len(self.encoded) // self.batch_size)

    def _collate(self, group: list[tuple[list[int], list[float]]]) -> tuple[torch.Tensor, ...]:
        width = max(len(ids) for ids, _ in group) - 1
        inputs = torch.full((len(group), width), self.pad_id, dtype=torch.long)  # (B, T)
        targets = torch.full((len(group), width), IGNORE_INDEX, dtype=torch.long)  # (B, T)
        weights = torch.zeros((len(group), width)) if self.weighted else None  # (B, T)
        for row, (ids, mask) in enumerate(group):
            n = len(ids) - 1
            inputs[row, :n] = torch.tensor(ids[:-1])
            learned = torch.tensor(mask[1:]) > 0
            targets[row, :n] = torch.where(learned, torch.tensor(ids[1:]), IGNORE_INDEX)
            if weights is not None:
                weights[row, :n] = torch.tensor(mask[1:], dtype=torch.float32)
        return (inputs, targets) if weights is None else (inputs, targets, weights)

    def stream(self, generator: torch.Generator):
        """Yield (inputs, targets), both (B, T) int64, forever (and weights when the masks weigh tokens)."""
        size, pool_rows = self.batch_size, self.batch_size * self.pool
        while True:
            order = torch.randperm(len(self.encoded), generator=generator).tolist()
            groups = []
            for start in range(0, len(order), pool_rows):
                chunk = sorted(order[start:start + pool_rows], key=lambda i: len(self.encoded[i][0]))
                groups += [chunk[s:s + size] for s in range(0, len(chunk), size)]
            for g in torch.randperm(len(groups), generator=generator).tolist():
                yield self._collate([self.encoded[i] for i in groups[g]])
