"""The tool loop: the model proposes, code disposes, the model reads the result and answers.

    >>> from course_lib.model import load_model, load_tokenizer
    >>> from course_lib.tools import tinychat_registry
    >>> transcript = run_tool_loop(load_model("tinychat", device="cpu"), load_tokenizer("tinychat"),
    ...                            [{"role": "user", "content": "What's the weather in Paris?"}],
    ...                            tinychat_registry())
    >>> print(transcript.render())
    step 1: <|tool_call|>{"name": "get_weather", "arguments": {"city": "Paris"}}
            -> ok {"city": "Paris", "temperature_c": 16, "condition": "snowy"}
    step 2: It is 16 degrees and snowy in Paris.
    stopped: answer

Each step: ``propose(messages) -> text``. Plain text ends the loop ("answer"). A tool call is
parsed and dispatched, the call and its result (or its bounded error) are appended, and the
model is asked again. Three caps keep a confused model from running forever: ``max_steps``
model calls ("max_steps"); ``max_retries`` retries after failed calls, i.e. the
``max_retries + 1``-th failure ends the loop ("retries_exhausted"); the same failing call twice
ends it at once ("loop_detected": greedy decoding would only repeat it). A call proposed at
the last allowed step still runs (it was proposed and passed the checks); the loop then stops
without an answer.

``tool_loop`` takes any ``propose`` function (the unit tests script one); ``run_tool_loop``
builds it from the course model with ``model_proposer``.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from course_lib.generation.generate import generate
from course_lib.sampling.params import SamplingParams
from course_lib.structured.retry import bounded_text
from course_lib.tokenization.chat_template import TOOL_CALL
from course_lib.tools.dispatch import Dispatcher, ToolResult, check_permissions
from course_lib.tools.registry import ToolRegistry
from course_lib.tools.wire import ToolCall, call_fingerprint, parse_tinychat_tool_call, to_openai_messages
from course_lib.validation import non_negative_int, positive_int

STOP_REASONS = ("answer", "max_steps", "retries_exhausted", "loop_detected")
DEFAULT_PARAMS = SamplingParams(temperature=0, max_new_tokens=96)  # greedy; a call fits in 96 tokens

Propose = Callable[[list[dict[str, str]]], str]


@dataclass(frozen=True)
class ToolStep:
    proposal: str                 # the model's reply, verbatim
    call: ToolCall | None         # the parsed call; None for an answer or an unparsable call
    parse_error: str | None       # why the reply looked like a call but did not parse
    result: ToolResult | None     # the dispatcher's verdict; None for an answer or a parse error

    @property
    def failed(self) -> bool:
        return self.parse_error is not None or (self.result is not None and not self.result.ok)


@dataclass(frozen=True)
class ToolTranscript:
    steps: tuple[ToolStep, ...]
    messages: list[dict[str, str]]   # the whole conversation, tool turns included (tinychat format)
    answer: str | None               # the final plain reply; None when a cap stopped the loop
    stop_reason: str                 # one of STOP_REASONS

    def openai_messages(self) -> list[dict]:
        return to_openai_messages(self.messages)

    def render(self) -> str:
        """One line per proposal and per result, then why the loop stopped."""
        lines = []
        for n, step in enumerate(self.steps, 1):
            lines.append(f"step {n}: {step.proposal}")
            if step.parse_error is not None:
                lines.append(f"        -> unparsable call: {step.parse_error}")
            elif step.result is not None:
                lines.append(f"        -> {'ok' if step.result.ok else step.result.error_kind} {step.result.content}")
        lines.append(f"stopped: {self.stop_reason}")
        return "\n".join(lines)


def model_proposer(model, tokenizer, params: SamplingParams | None = None) -> Propose:
    """``propose(messages) -> text`` with the course model (greedy, 96 tokens by default)."""
    params = DEFAULT_PARAMS if params is None else params
    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")

    def propose(messages: list[dict[str, str]]) -> str:
        return generate(model, tokenizer, messages, params).text

    return propose


def run_tool_loop(model, tokenizer, messages: Sequence[Mapping[str, str]], registry: ToolRegistry, *,
                  max_steps: int = 4, max_retries: int = 2, params: SamplingParams | None = None,
                  permissions: Collection[str] = frozenset(), dispatcher: Dispatcher | None = None,
                  idempotency_key_for: Callable[[ToolCall], str | None] | None = None) -> ToolTranscript:
    """The tool loop driven by the course model; see ``tool_loop`` for the rules."""
    return tool_loop(model_proposer(model, tokenizer, params), messages, registry, max_steps=max_steps,
                     max_retries=max_retries, permissions=permissions, dispatcher=dispatcher,
                     idempotency_key_for=idempotency_key_for)


def tool_loop(propose: Propose, messages: Sequence[Mapping[str, str]], registry: ToolRegistry, *,
              max_steps: int = 4, max_retries: int = 2, permissions: Collection[str] = frozenset(),
              dispatcher: Dispatcher | None = None,
              idempotency_key_for: Callable[[ToolCall], str | None] | None = None) -> ToolTranscript:
    """Run propose -> parse -> dispatch -> append until an answer or a cap.

    ``dispatcher`` defaults to a fresh ``Dispatcher(registry)``; pass one to share its
    idempotency store across loops. ``idempotency_key_for(call)`` supplies the key for each call
    (side-effecting tools are refused without one). The caller's ``messages`` are not modified.
    """
    if not callable(propose):
        raise TypeError(f"propose must be a callable propose(messages) -> str, got {type(propose).__name__}")
    if not isinstance(registry, ToolRegistry):
        raise TypeError(f"registry must be a ToolRegistry, got {type(registry).__name__}")
    positive_int("max_steps", max_steps)
    non_negative_int("max_retries", max_retries)
    if dispatcher is None:
        dispatcher = Dispatcher(registry)
    elif not isinstance(dispatcher, Dispatcher):
        raise TypeError(f"dispatcher must be a Dispatcher, got {type(dispatcher).__name__}")
    elif dispatcher.registry is not registry:
        raise ValueError("the dispatcher was built on another registry; build it on the registry the loop is given")
    check_permissions(permissions)  # fail before the first model call, not at the first tool call
    if idempotency_key_for is not None and not callable(idempotency_key_for):
        raise TypeError("idempotency_key_for must be a callable call -> key (or None)")
    conversation = [dict(m) for m in messages]
    if not conversation:
        raise ValueError("messages is empty; give the loop at least the user's request")

    steps: list[ToolStep] = []
    failed_calls: set[str] = set()
    failures = 0
    for _ in range(max_steps):
        text = propose([dict(m) for m in conversation])
        if not isinstance(text, str):
            raise TypeError(f"propose must return the reply as a str, got {type(text).__name__}")
        conversation.append({"role": "assistant", "content": text})
        if not text.lstrip().startswith(TOOL_CALL):
            steps.append(ToolStep(text, None, None, None))
            return ToolTranscript(tuple(steps), conversation, text, "answer")

        try:
            call = parse_tinychat_tool_call(text, index=len(conversation) - 1)
        except ValueError as error:
            step = ToolStep(text, None, str(error), None)
            feedback = bounded_text(f"error (unparsable_call): {error}", dispatcher.max_error_chars)
            signature = "unparsable:" + text.strip()
        else:
            key = idempotency_key_for(call) if idempotency_key_for is not None else None
            result = dispatcher.dispatch(call, permissions=permissions, idempotency_key=key)
            step = ToolStep(text, call, None, result)
            feedback = result.content
            signature = call_fingerprint(call.name, call.arguments)
        steps.append(step)
        conversation.append({"role": "tool", "content": feedback})
        if step.failed:
            if signature in failed_calls:
                return ToolTranscript(tuple(steps), conversation, None, "loop_detected")
            failed_calls.add(signature)
            failures += 1
            if failures > max_retries:
                return ToolTranscript(tuple(steps), conversation, None, "retries_exhausted")
    return ToolTranscript(tuple(steps), conversation, None, "max_steps")
