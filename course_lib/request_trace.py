"""One chat request through the course model, every stage timed: the trace a product keeps.

    trace = trace_request(model, tokenizer, [{"role": "user", "content": "What is 2 + 2?"}])
    print(trace.table())            # stage, milliseconds, what happened
    trace.text, trace.prompt_tokens, trace.completion_tokens

Stages, in the order notebook 00 lists them: template, tokenize, prefill (the whole prompt
in one forward pass; sets time to first token), decode (one token per step over the KV
cache, greedy), detokenize, validate (a caller-supplied check on the final text). Prefill and
decode are the serving engine's steps (``course_lib.serving.Engine``), one request alone.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from course_lib.sampling.params import SamplingParams
from course_lib.serving.engine import Engine
from course_lib.tokenization.chat_template import encode_chat, render_chat


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

    device = model.device
    engine = Engine.for_job(model, tokenizer, rows=1, tokens=len(ids) + max_new_tokens, prefix_caching=False)
    engine.add_request(ids, SamplingParams(temperature=0, max_new_tokens=max_new_tokens))
    start = clock()
    (first,) = engine.step()  # the whole prompt in one pass, then the first token
    _sync(device)
    stages.append(StageTiming("prefill", clock() - start, f"{len(ids)} tokens in one pass -> first token"))

    start = clock()
    new_ids, last = list(first.token_ids), first
    while not last.finished:
        (last,) = engine.step()  # one token per pass, reading the KV cache
        new_ids += last.token_ids
    finish = last.finish_reason
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
