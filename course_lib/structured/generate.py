"""Constrained generation: the model samples, the grammar's mask decides what it may sample.

    >>> from course_lib.model import load_model, load_tokenizer
    >>> model, tokenizer = load_model("tinychat"), load_tokenizer("tinychat")
    >>> schema = {"type": "object", "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 999}},
    ...           "required": ["answer"], "additionalProperties": False}
    >>> result = generate_structured(model, tokenizer, [{"role": "user", "content": "What is 2 + 3?"}],
    ...                              schema=schema, params=SamplingParams(temperature=0, max_new_tokens=24))
    >>> result.finish_reason, result.text      # unconstrained, tinychat says "The answer is 5."
    ('stop', '{"answer": 32}')

The mask is one more logits processor (``course_lib.sampling.process_logits``): after the
penalties, before temperature and the top-k / top-p / min-p filters, so those filters choose
among legal tokens only. The end token is legal exactly where the grammar may stop, so the
output ends when the grammar says, never earlier. A grammar that has not finished when
``max_new_tokens`` runs out ends with finish reason ``"length"``, ``value`` None and an
``error`` that says so: a truncated object is never handed back as if it were valid.

Syntax is guaranteed; meaning is not. Above, the schema forced ``{"answer": <integer>}`` on a
model that was trained to answer arithmetic in a sentence, in digits or in words, never in
JSON, and the integer it produced is valid and wrong. Checking values is the application's job (see ``course_lib.tools``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from course_lib.sampling import SamplingParams
from course_lib.generation.generate import generate, generate_many
from course_lib.structured.guide import JSONGuide, RegexGuide


@dataclass(frozen=True)
class StructuredResult:
    text: str                    # the output, end token removed
    value: Any                   # the parsed JSON for a schema; the text for a pattern; None if unfinished
    token_ids: tuple[int, ...]   # every sampled token, the end token included
    finish_reason: str           # "stop": the grammar finished; "length": max_new_tokens ran out first
    error: str | None = None     # why there is no value

    @property
    def ok(self) -> bool:
        return self.error is None


def build_guide(tokenizer, *, schema: dict | None = None, pattern: str | None = None,
                guide: RegexGuide | None = None) -> RegexGuide:
    """Exactly one of ``schema``, ``pattern`` or a ready ``guide`` (reuse one across calls:
    building the index is the expensive part)."""
    given = [name for name, value in (("schema", schema), ("pattern", pattern), ("guide", guide)) if value is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of schema=, pattern= or guide=, got {given or 'none'}")
    if guide is not None:
        if not isinstance(guide, RegexGuide):
            raise TypeError(f"guide must be a RegexGuide or JSONGuide, got {type(guide).__name__}")
        return guide
    if schema is not None:
        return JSONGuide(schema, tokenizer)
    return RegexGuide(pattern, tokenizer)


def _check_params(params: SamplingParams) -> SamplingParams:
    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
    if params.stop or params.stop_token_ids:
        raise ValueError("stop strings and stop tokens would cut structured output short; the grammar decides "
                         "where it ends, so leave stop and stop_token_ids empty")
    return params


def _finish(guide: RegexGuide, generated) -> StructuredResult:
    if generated.finish_reason != "stop":
        error = (f"the token budget ran out after {len(generated.token_ids)} tokens, before the grammar could "
                 f"finish; the partial output {generated.text[:60]!r} is not valid. Raise max_new_tokens or "
                 "bound the schema (maxLength, maxItems, integer maximum)")
        return StructuredResult(generated.text, None, generated.token_ids, "length", error)
    value: Any = generated.text
    if isinstance(guide, JSONGuide):
        try:
            value = guide.parse(generated.text)
        except (json.JSONDecodeError, ValueError) as exc:  # would mean a bug in the guide: say so
            return StructuredResult(generated.text, None, generated.token_ids, "stop",
                                    f"the output failed validation despite the mask: {exc}")
    return StructuredResult(generated.text, value, generated.token_ids, "stop")


def generate_structured(model, tokenizer, prompt_or_messages, *, schema: dict | None = None,
                        pattern: str | None = None, guide: RegexGuide | None = None,
                        params: SamplingParams | None = None, generator=None) -> StructuredResult:
    """Generate one output that the schema (or regex) accepts, or say why there is none."""
    params = _check_params(SamplingParams(max_new_tokens=128) if params is None else params)
    guide = build_guide(tokenizer, schema=schema, pattern=pattern, guide=guide)
    generated = generate(model, tokenizer, prompt_or_messages, params, generator=generator, guide=guide)
    return _finish(guide, generated)


def generate_structured_many(model, tokenizer, prompt_or_messages, n: int, *, schema: dict | None = None,
                             pattern: str | None = None, guide: RegexGuide | None = None,
                             params: SamplingParams | None = None, generator=None) -> list[StructuredResult]:
    """``n`` constrained samples of one prompt, decoded as one batch (each row has its own state)."""
    params = _check_params(SamplingParams(max_new_tokens=128) if params is None else params)
    guide = build_guide(tokenizer, schema=schema, pattern=pattern, guide=guide)
    rows = generate_many(model, tokenizer, prompt_or_messages, params, n, generator=generator, guide=guide)
    return [_finish(guide, row) for row in rows]
