"""What a decode loop accepts as a prompt: token IDs, chat messages, or rendered template text."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from course_lib.tokenization.chat_template import encode_chat

__all__ = ["encode_prompt"]


def encode_prompt(tokenizer, prompt) -> list[int]:
    """A rendered chat string, a list of chat messages, or token IDs -> token IDs.

    A string is taken as already-rendered template text, so its role markers become special
    IDs. Render user content with the chat template first (which is where untrusted text must
    be kept from smuggling in markers), never paste it raw into a prompt string. Token IDs
    need no tokenizer (``tokenizer`` may be None).

    >>> encode_prompt(None, [5, 6, 7])
    [5, 6, 7]
    """
    if isinstance(prompt, str) or (isinstance(prompt, Sequence) and prompt
                                   and all(isinstance(m, Mapping) for m in prompt)):
        if tokenizer is None:
            raise TypeError("a text or chat prompt needs a tokenizer; pass token IDs instead")
        if isinstance(prompt, str):
            ids = tokenizer.encode(prompt, allowed_special="all")
        else:
            ids = encode_chat(tokenizer, prompt)  # content stays text: no forged turns
    elif isinstance(prompt, torch.Tensor):
        if prompt.is_floating_point() or prompt.dtype == torch.bool:
            raise TypeError(f"prompt token IDs must be integers, got a {prompt.dtype} tensor")
        ids = prompt.flatten().tolist()
    elif isinstance(prompt, Sequence) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        ids = list(prompt)
    else:
        raise TypeError("prompt must be a str, a list of chat messages or a sequence of token IDs, "
                        f"got {type(prompt).__name__}")
    if not ids:
        raise ValueError("the prompt encodes to zero tokens; give at least one token")
    return ids
