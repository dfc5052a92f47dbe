"""One chat request through the course model, every stage timed: the trace a product keeps.

    trace = trace_request(model, tokenizer, [{"role": "user", "content": "What is 2 + 2?"}])
    print(trace.table())            # stage, milliseconds, what happened
    trace.text, trace.prompt_tokens, trace.completion_tokens

Stages, in the order notebook 00 lists them: template, tokenize, prefill (the whole prompt
in one forward pass; sets time to first token), decode (one token per step over the KV
cache, greedy), detokenize, validate (a caller-supplied check on the final text).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from course_lib.model.generate import decode_step, prefill
from course_lib.tokenization.chat_template import END, END_OF_TEXT, encode_chat, render_chat


@dataclass(frozen=True)
class StageTiming:
    stage: str
    seconds: float
    detail: str


@dataclass
class RequestTrace:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" (end token) or "length" (max_new_tokens reached)
    valid: bool | None  # the validator's verdict; None when no validator was given
    stages: list[StageTiming] = field(default_factory=list)

    @property
    def total_seconds(self) -> float:
        return sum(s.seconds for s in self.stages)

    def seconds(self, stage: str) -> float:
        return next(s.seconds for s in self.stages if s.stage == stage)

    def table(self) -> str:
        lines = [f"{'stage':<11} {'ms':>9}  detail"]
        lines += [f"{s.stage:<11} {s.seconds * 1e3:>9.2f}  {s.detail}" for s in self.stages]
        lines.append(f"{'total':<11} {self.total_seconds * 1e3:>9.2f}")
        return "\n".join(lines)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":  # GPU work is asynchronous: wait for it before reading the clock
        torch.cuda.synchronize(device)


@torch.no_grad()
def trace_request(model, tokenizer, messages: Sequence[Mapping[str, str]], *, max_new_tokens: int = 32,
                  validate: Callable[[str], bool] | None = None) -> RequestTrace:
    """Answer ``messages`` greedily with ``model``, timing each stage."""
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    stages: list[StageTiming] = []
    clock = time.perf_counter

    start = clock()
    rendered = render_chat(messages)
    stages.append(StageTiming("template", clock() - start, f"{len(messages)} messages -> {len(rendered)} characters"))

    start = clock()
    ids = encode_chat(tokenizer, messages)
    stages.append(StageTiming("tokenize", clock() - start, f"{len(ids)} prompt tokens"))
    limit = model.config.max_seq_len
    if len(ids) + max_new_tokens > limit:
        raise ValueError(f"{len(ids)} prompt tokens + max_new_tokens={max_new_tokens} exceed the context "
                         f"window of {limit}; shorten the conversation or ask for fewer tokens")

    stop_ids = {tokenizer.encode(t, allowed_special={t})[0] for t in (END, END_OF_TEXT)}
    device = model.device
    start = clock()
    cache = model.new_cache(1, len(ids) + max_new_tokens)
    logits = prefill(model, torch.tensor([ids], device=device), cache)  # (1, V)
    next_id = int(logits.argmax(-1))
    _sync(device)
    stages.append(StageTiming("prefill", clock() - start, f"{len(ids)} tokens in one pass -> first token"))

    start = clock()
    new_ids, finish = [next_id], "length"
    while True:
        if new_ids[-1] in stop_ids:
            finish = "stop"
            break
        if len(new_ids) >= max_new_tokens:
            break
        logits = decode_step(model, torch.tensor([[new_ids[-1]]], device=device), cache)  # (1, V)
        new_ids.append(int(logits.argmax(-1)))
    _sync(device)
    stages.append(StageTiming("decode", clock() - start, f"{len(new_ids) - 1} more tokens, one per step"))

    start = clock()
    answer_ids = new_ids[:-1] if finish == "stop" else new_ids
    text = tokenizer.decode(answer_ids)
    stages.append(StageTiming("detokenize", clock() - start, f"{len(answer_ids)} tokens -> {len(text)} characters"))

    verdict = None
    if validate is not None:
        start = clock()
        verdict = bool(validate(text))
        stages.append(StageTiming("validate", clock() - start, "passed" if verdict else "FAILED"))
    return RequestTrace(text=text, prompt_tokens=len(ids), completion_tokens=len(new_ids),
                        finish_reason=finish, valid=verdict, stages=stages)
