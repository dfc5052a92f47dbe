"""The course's chat template: how a list of messages becomes one string of text.

Every chat model wraps each message in role markers that are special tokens, so the model
can tell who is speaking and where a turn ends. The course model uses:

    <|system|>You are TinyChat.<|end|><|user|>What is 2 + 2?<|end|><|assistant|>

A tool call is an assistant turn that starts with ``<|tool_call|>`` and carries JSON; the
runtime answers with a ``tool`` message:

    <|assistant|><|tool_call|>{"name": "get_weather", "arguments": {"city": "Paris"}}<|end|>
    <|tool|>{"temperature_c": 18}<|end|>

Rendering with ``add_generation_prompt=True`` ends on ``<|assistant|>``: the model's next
tokens are the reply, and ``<|end|>`` is its stop token.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

ROLES = ("system", "user", "assistant", "tool")
END = "<|end|>"
END_OF_TEXT = "<|endoftext|>"
TOOL_CALL = "<|tool_call|>"
# Order matters: a tokenizer trained with these gives them IDs in this order after its merges.
SPECIAL_TOKENS: tuple[str, ...] = (
    END_OF_TEXT,
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|tool|>",
    END,
    TOOL_CALL,
)


def end_token_ids(tokenizer) -> tuple[int, ...]:
    """IDs of the template's end tokens (``<|end|>``, ``<|endoftext|>``) this tokenizer has.

    The one rule every decode loop uses to stop. It asks only what both a course
    ``BPETokenizer`` and a ``tiktoken.Encoding`` publish: ``special_tokens_set`` and
    ``encode(text, allowed_special=...)``.

    >>> import tiktoken
    >>> end_token_ids(tiktoken.get_encoding("cl100k_base"))   # <|end|> is not one of its specials
    (100257,)
    """
    own = getattr(tokenizer, "end_ids", None)
    if own is not None:  # a checkpoint's tokenizer (HFTokenizer): its generation config says
        return tuple(own)
    specials = getattr(tokenizer, "special_tokens_set", None)
    if specials is None or not callable(getattr(tokenizer, "encode", None)):
        raise TypeError(f"tokenizer must be a course BPETokenizer or a tiktoken Encoding (with "
                        f"special_tokens_set and encode), got {type(tokenizer).__name__}")
    ids = []
    for marker in (END, END_OF_TEXT):
        if marker in specials:
            (token,) = tokenizer.encode(marker, allowed_special={marker})
            ids.append(token)
    return tuple(ids)


def role_marker(role: str) -> str:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; a message's role is one of {', '.join(ROLES)}")
    return f"<|{role}|>"


def render_chat(messages: Iterable[Mapping[str, str]], *, add_generation_prompt: bool = True) -> str:
    """Messages -> template text.

    >>> render_chat([{"role": "user", "content": "Hi"}])
    '<|user|>Hi<|end|><|assistant|>'
    """
    parts = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or "role" not in message or "content" not in message:
            raise ValueError(f"message {i} must be a mapping with 'role' and 'content', got {message!r}")
        if not isinstance(message["content"], str):
            raise TypeError(f"message {i}: content must be str, got {type(message['content']).__name__}")
        parts.append(f"{role_marker(message['role'])}{message['content']}{END}")
    if add_generation_prompt:
        parts.append(role_marker("assistant"))
    return "".join(parts)


def encode_chat(tokenizer, messages: Iterable[Mapping[str, str]], *, add_generation_prompt: bool = True) -> list[int]:
    """Messages -> token IDs, with role markers as special IDs and content as plain text.

    Encoding ``render_chat(...)`` with every special token allowed would let a user who
    types ``<|end|><|system|>...`` forge turns. Here only the template's own markers become
    special IDs; the same characters inside a message's content are ordinary text. The one
    exception is the template's own: an assistant turn (written by the model, never by the
    user) may start with ``<|tool_call|>``.
    Works with a course ``BPETokenizer`` or a ``tiktoken.Encoding`` that knows the markers; a
    checkpoint's ``HFTokenizer`` renders its own template (``HFTokenizer.encode_chat``), with
    the same rule for markers typed inside a message.
    """
    if callable(getattr(tokenizer, "encode_chat", None)):  # a checkpoint's tokenizer: its own template
        return tokenizer.encode_chat(messages, add_generation_prompt=add_generation_prompt)

    def marker(text: str) -> list[int]:
        return tokenizer.encode(text, allowed_special={text})

    ids: list[int] = []
    messages = list(messages)
    render_chat(messages, add_generation_prompt=False)  # the same validation, same errors
    for message in messages:
        content = message["content"]
        ids += marker(role_marker(message["role"]))
        if message["role"] == "assistant" and content.startswith(TOOL_CALL):
            ids += marker(TOOL_CALL)
            content = content[len(TOOL_CALL):]
        ids += tokenizer.encode(content, disallowed_special=())
        ids += marker(END)
    if add_generation_prompt:
        ids += marker(role_marker("assistant"))
    return ids
