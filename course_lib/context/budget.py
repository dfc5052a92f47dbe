"""The context budget: what goes into the model's window, counted in exact tokens.

    >>> from course_lib.model import load_tokenizer
    >>> from course_lib.tokenization.chat_template import encode_chat
    >>> tokenizer = load_tokenizer("tinychat")
    >>> history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
    ...            {"role": "user", "content": "How warm is Paris?"}]
    >>> packed = pack_context("You are TinyChat.", [], history, [("doc-1", "Paris is mild in May.", 0.9)],
    ...                       tokenizer=tokenizer, window=512, reserve_output=128)
    >>> print(packed.messages[-1]["content"])
    How warm is Paris?
    <BLANKLINE>
    <passages>
    [doc-1] Paris is mild in May.
    </passages>
    <BLANKLINE>
    How warm is Paris?
    >>> packed.prompt_tokens == len(encode_chat(tokenizer, packed.messages)) <= packed.budget.available
    True
    >>> squeezed = pack_context("You are TinyChat.", [], history, [("doc-1", "Paris is mild in May.", 0.9)],
    ...                         tokenizer=tokenizer, window=packed.prompt_tokens + 128 - 1, reserve_output=128)
    >>> [(d.kind, d.ref) for d in squeezed.dropped], len(squeezed.messages)   # drop-oldest: passages go first
    ([('passage', 'doc-1')], 4)

The prompt is laid out as:

    system     system text, then (if any tools) a blank line, TOOLS_HEADER and one line per
               tool: its OpenAI spec as JSON with sorted keys and compact separators, in the
               order given (``render_tools``)
    history    the kept earlier turns, oldest first, exactly as given
    user       the current user message, a blank line, the kept passages (``render_passages``:
               a fenced block, highest score first), a blank line, and the user message again
               (``user_with_passages`` says why); with no passages kept, the user message is
               unchanged

Token counts are exact, not estimated: ``encode_chat`` encodes each message on its own (role
marker, content, ``<|end|>``), so a message costs the same wherever it sits, and only the
current user message (which grows with passages) is re-encoded as passages are added.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from course_lib.data.passages import Passage, user_with_passages
from course_lib.tokenization.chat_template import TOOL_CALL, encode_chat, render_chat

POLICIES = ("drop-oldest", "passages-first")
TOOLS_HEADER = "You can call these tools (one JSON spec per line):"


class ContextOverflow(ValueError):
    """The parts that are always kept (system + tools, current user turn) exceed the budget."""

    def __init__(self, message: str, *, over: int):
        super().__init__(message)
        self.over = over  # tokens above budget.available


@dataclass(frozen=True)
class ContextBudget:
    window: int          # the model's context length (tinychat: config.max_seq_len = 512)
    reserve_output: int  # tokens kept free for the reply; prompt + reply must fit the window
    margin: int = 0      # extra slack, e.g. for a template that a server may add around ours

    def __post_init__(self) -> None:
        for name in ("window", "reserve_output", "margin"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int number of tokens, got {value!r}")
            if value < 0:
                raise ValueError(f"{name} must be >= 0 tokens, got {value}")
        if self.reserve_output >= self.window:
            raise ValueError(f"reserve_output ({self.reserve_output}) must be smaller than the window "
                             f"({self.window}): no room would be left for the prompt; lower reserve_output")
        if self.available < 1:
            raise ValueError(f"window {self.window} - reserve_output {self.reserve_output} - margin {self.margin} "
                             f"leaves {self.available} tokens for the prompt; lower reserve_output or margin")

    @property
    def available(self) -> int:
        """Tokens the prompt may use, template tokens and generation prompt included."""
        return self.window - self.reserve_output - self.margin


class Dropped(NamedTuple):
    kind: str      # "passage" or "turn"
    ref: Any       # passage id, or the history index of the turn's first message
    tokens: int    # what it would have cost (a passage: its marginal tokens at that point)
    reason: str


@dataclass(frozen=True)
class PackedContext:
    messages: list[dict[str, str]]  # ready for encode_chat(..., add_generation_prompt=True)
    prompt_tokens: int              # == len(encode_chat(tokenizer, messages))
    budget: ContextBudget
    system_tokens: int              # content of the system message (system text + tools)
    history_tokens: int             # content of the kept earlier messages
    passages_tokens: int            # what the passages added to the user message (block and repeated question)
    current_turn_tokens: int        # content of the current user message alone
    template_tokens: int            # role markers, <|end|>s, <|tool_call|>s, generation prompt
    kept_passages: tuple[str, ...]  # ids, in the order they appear (rank order)
    kept_turns: int
    total_turns: int
    dropped: list[Dropped] = field(default_factory=list)

    def report(self) -> str:
        """A table of where the tokens went and what was dropped, and why."""
        n_passages = len(self.kept_passages) + sum(d.kind == "passage" for d in self.dropped)
        rows = [("system + tools", self.system_tokens),
                (f"history ({self.kept_turns} of {self.total_turns} turns)", self.history_tokens),
                (f"passages ({len(self.kept_passages)} of {n_passages})", self.passages_tokens),
                ("current turn", self.current_turn_tokens),
                ("template", self.template_tokens)]
        width = max(len(name) for name, _ in rows) + 2
        b = self.budget
        lines = [f"{'part':<{width}}{'tokens':>7}"]
        lines += [f"{name:<{width}}{tokens:>7}" for name, tokens in rows]
        lines.append(f"{'prompt':<{width}}{self.prompt_tokens:>7}  of {b.available} available "
                     f"(window {b.window} - reserve {b.reserve_output} - margin {b.margin})")
        if self.dropped:
            lines.append("dropped:")
            lines += [f"  {d.kind:<8}{d.ref!s:<12}{d.tokens:>7}  {d.reason}" for d in self.dropped]
        return "\n".join(lines)


def render_tools(tools: Sequence[Any]) -> str:
    """Tool definitions -> text for the system message, one compact sorted-key JSON spec a line.

    Accepts course ``Tool`` objects (anything with ``openai_spec()``), OpenAI entries
    ``{"type": "function", "function": {...}}``, or bare function dicts ``{"name": ...}``.

    >>> render_tools([{"name": "get_time", "parameters": {"type": "object"}}])
    'You can call these tools (one JSON spec per line):\\n{"function":{"name":"get_time","parameters":{"type":"object"}},"type":"function"}'
    """
    lines = []
    for i, tool in enumerate(tools):
        if callable(getattr(tool, "openai_spec", None)):
            spec = tool.openai_spec()
        elif isinstance(tool, Mapping) and isinstance(tool.get("function"), Mapping):
            spec = dict(tool)
        elif isinstance(tool, Mapping) and "name" in tool:
            spec = {"type": "function", "function": dict(tool)}
        else:
            raise TypeError(f"tools[{i}] must be a Tool, an OpenAI tool dict {{'type': 'function', 'function': "
                            f"{{...}}}} or a function dict with a 'name'; got {tool!r}")
        # Sorted keys and fixed separators: the same tools always cost the same tokens.
        lines.append(json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
    return "\n".join([TOOLS_HEADER, *lines]) if lines else ""


def _as_passage(i: int, item: Any) -> Passage:
    if isinstance(item, Passage):
        passage = item
    elif isinstance(item, (tuple, list)) and len(item) == 3:
        passage = Passage(*item)
    else:
        raise TypeError(f"passages[{i}] must be a Passage or a (passage_id, text, score) tuple, got {item!r}")
    if not isinstance(passage.text, str):
        raise TypeError(f"passages[{i}] text must be str, got {type(passage.text).__name__}")
    if isinstance(passage.score, bool) or not isinstance(passage.score, (int, float)):
        raise TypeError(f"passages[{i}] score must be a number, got {passage.score!r}")
    return Passage(str(passage.id), passage.text, float(passage.score))


def _split_turns(earlier: Sequence[Mapping[str, str]]) -> list[tuple[int, int]]:
    """(start, stop) index ranges: each turn is a user message and all that follows it up to
    the next user message (assistant replies, tool calls and tool results), so a dropped turn
    never leaves half a pair or a tool result without its call. Messages before the first user
    message form a turn of their own."""
    starts = [i for i, m in enumerate(earlier) if m["role"] == "user"]
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    return [(start, stop) for start, stop in zip(starts, starts[1:] + [len(earlier)]) if stop > start]


def _check_history(history: Sequence[Mapping[str, str]]) -> None:
    if not history:
        raise ValueError("history is empty; it must end with the current user turn, "
                         "e.g. [{'role': 'user', 'content': 'question'}]")
    render_chat(history)  # the template's own checks: mapping, role, str content
    if history[-1]["role"] != "user":
        raise ValueError(f"the last history message is the current turn and must have role 'user', got "
                         f"{history[-1]['role']!r}; append the user's question or drop the trailing message")
    for i, message in enumerate(history):
        if message["role"] == "system":
            raise ValueError(f"history[{i}] is a system message; pass the system prompt as `system` "
                             "so it is always kept")


def pack_context(system: str, tools: Sequence[Any], history: Sequence[Mapping[str, str]],
                 passages: Sequence[Any], *, tokenizer, window: int, reserve_output: int, margin: int = 0,
                 policy: str = "drop-oldest") -> PackedContext:
    """Choose what fits in ``window - reserve_output - margin`` tokens and build the messages.

    Always kept: the system message (with tools) and the current user turn (the last message
    of ``history``). If those alone exceed the budget, ``ContextOverflow`` says by how much.

    Passages are ranked by score, highest first (ties: input order), and kept as a prefix of
    that ranking: they fill in rank order until the next does not fit, and it and every
    lower-ranked one are dropped (a later, shorter one never jumps the queue). Earlier turns
    are kept newest-first, whole turns at a time (see ``_split_turns``), until the next older
    turn does not fit; it and every older turn are dropped, so the kept history has no gaps.

    policy="drop-oldest": history first, then passages. The budget goes to the newest turns;
        passages take what is left, so passages are dropped before any turn is.
    policy="passages-first": passages first, then history. Retrieved passages take the budget;
        turns take what is left, oldest dropped first.

    The result is a pure function of the inputs: same inputs, same messages.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    budget = ContextBudget(window, reserve_output, margin)
    if not isinstance(system, str):
        raise TypeError(f"system must be a str, got {type(system).__name__}")
    history = [dict(m) for m in history]
    _check_history(history)
    ranked = sorted((_as_passage(i, p) for i, p in enumerate(passages)), key=lambda p: -p.score)  # stable

    def cost(messages: list[dict[str, str]]) -> int:
        return len(encode_chat(tokenizer, messages, add_generation_prompt=False))

    def content_cost(text: str) -> int:
        return len(tokenizer.encode(text, disallowed_special=()))

    tools_text = render_tools(tools)
    system_message = {"role": "system", "content": f"{system}\n\n{tools_text}" if system and tools_text
                      else system or tools_text}
    question = history[-1]["content"]
    earlier = history[:-1]
    generation_prompt = len(encode_chat(tokenizer, []))  # just <|assistant|>
    fixed = cost([system_message]) + cost([history[-1]]) + generation_prompt
    if fixed > budget.available:
        over = fixed - budget.available
        raise ContextOverflow(
            f"the system message (with tools) and the current user turn need {fixed} tokens, but the budget "
            f"allows {budget.available} (window {budget.window} - reserve_output {budget.reserve_output} - "
            f"margin {budget.margin}): over by {over} tokens. Shorten the system prompt, tools or user "
            f"message, or lower reserve_output.", over=over)

    left = budget.available - fixed
    dropped: list[Dropped] = []
    kept: list[Passage] = []
    kept_turns: list[tuple[int, int]] = []

    def fill_passages() -> None:
        nonlocal left
        blocked = False
        for passage in ranked:
            extra = _marginal(passage)
            if blocked:
                dropped.append(Dropped("passage", passage.id, extra, "ranked below a passage that did not fit"))
            elif extra <= left:
                kept.append(passage)
                left -= extra
            else:
                blocked = True
                dropped.append(Dropped("passage", passage.id, extra, f"did not fit: needs {extra}, {left} left"))

    def _marginal(passage: Passage) -> int:
        with_it = {"role": "user", "content": user_with_passages(question, [*kept, passage])}
        without = {"role": "user", "content": user_with_passages(question, kept)}
        return cost([with_it]) - cost([without])

    def fill_history() -> None:
        nonlocal left
        blocked = False
        for start, stop in reversed(_split_turns(earlier)):
            turn_cost = cost(earlier[start:stop])
            if blocked:
                dropped.append(Dropped("turn", start, turn_cost, "older than a turn that did not fit"))
            elif turn_cost <= left:
                kept_turns.append((start, stop))
                left -= turn_cost
            else:
                blocked = True
                dropped.append(Dropped("turn", start, turn_cost, f"did not fit: needs {turn_cost}, {left} left"))

    for fill in ((fill_history, fill_passages) if policy == "drop-oldest" else (fill_passages, fill_history)):
        fill()

    kept_history = [m for start, stop in sorted(kept_turns) for m in earlier[start:stop]]
    user_message = {"role": "user", "content": user_with_passages(question, kept)}
    messages = [system_message, *kept_history, user_message]
    prompt_tokens = len(encode_chat(tokenizer, messages))

    system_tokens = content_cost(system_message["content"])
    history_tokens = sum(content_cost(m["content"].removeprefix(TOOL_CALL)
                                      if m["role"] == "assistant" else m["content"]) for m in kept_history)
    current_turn_tokens = content_cost(question)
    passages_tokens = content_cost(user_message["content"]) - current_turn_tokens
    template_tokens = prompt_tokens - system_tokens - history_tokens - current_turn_tokens - passages_tokens
    # The greedy fill counted each piece on its own; this is the whole prompt encoded at once.
    assert prompt_tokens == budget.available - left, (prompt_tokens, budget.available - left)
    return PackedContext(messages=messages, prompt_tokens=prompt_tokens, budget=budget,
                         system_tokens=system_tokens, history_tokens=history_tokens,
                         passages_tokens=passages_tokens, current_turn_tokens=current_turn_tokens,
                         template_tokens=template_tokens, kept_passages=tuple(p.id for p in kept),
                         kept_turns=len(kept_turns), total_turns=len(_split_turns(earlier)), dropped=dropped)
