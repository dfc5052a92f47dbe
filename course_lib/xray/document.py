"""One request's X-ray as plain JSON: what the chat page and the notebook panel both draw.

``xray_document(xray, tokenizer)`` turns the engine's ``RequestXray`` (course_lib.serving.xray)
into lists and numbers, token ids joined with their text. Nothing in it is recomputed: every
number was written by the engine while it served the request; only the text of each token
and the totals (time to first token, tokens per second) are derived here.

>>> from course_lib.model import load_model, load_tokenizer
>>> from course_lib.sampling import SamplingParams
>>> from course_lib.serving import Engine, RequestXray
>>> tokenizer = load_tokenizer("tinychat")
>>> engine = Engine.for_job(load_model("tinychat", device="cpu"), tokenizer, rows=1, tokens=96)
>>> xray = RequestXray()
>>> _ = engine.add_request([{"role": "user", "content": "Hi"}], SamplingParams(temperature=0, max_new_tokens=24), xray=xray)
>>> while engine.has_unfinished():
...     _ = engine.step()
>>> doc = xray_document(xray, tokenizer, num_blocks=engine.block_manager.num_blocks)
>>> [t["text"] for t in doc["prompt"]["tokens"]], doc["prompt"]["tokens"][0]["special"]
(['<|user|>', 'H', 'i', '<|end|>', '<|assistant|>'], True)
>>> doc["finish"]["cause"], doc["finish"]["blocks_held"], doc["steps"][0]["kind"]
('end token', 0, 'prefill')
"""
from __future__ import annotations

import dataclasses
import json

from course_lib.serving.xray import RequestXray
from course_lib.tokenization.display import visible_token

__all__ = ["TokenNames", "xray_document"]


def xray_document(xray: RequestXray, tokenizer, *, num_blocks: int | None = None, schema: dict | None = None,
                  extra: dict | None = None, tokens_from: int = 0, steps_from: int = 0) -> dict:
    """The X-ray as JSON-ready data (see the module docstring). ``num_blocks``: the pool's size;
    ``schema``: the reply's JSON Schema, to validate a finished reply against; ``extra``: more
    keys to add (the server adds the tool call it parsed). ``tokens_from`` / ``steps_from``: list
    only the tokens and steps from those indices on (both lists only ever grow, so a reader
    polling a streaming reply asks for what is new; every other field is always whole)."""
    if not isinstance(xray, RequestXray):
        raise TypeError(f"xray must be a RequestXray, got {type(xray).__name__}")
    for name, value in (("tokens_from", tokens_from), ("steps_from", steps_from)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative int (the index to list from), got {value!r}")
    names = TokenNames(tokenizer)
    prompt = list(xray.prompt_ids)
    steps, tokens, finish = list(xray.steps), list(xray.tokens), xray.finish  # copies: the engine may append
    reply = [t.token_id for t in tokens]
    text = tokenizer.decode([t for t in reply if t not in names.special]) if tokenizer is not None else ""
    first = tokens[0].seconds if tokens else None
    decode_time = tokens[-1].seconds - first if len(tokens) > 1 else None
    doc = {
        "request_id": str(xray.request_id),
        "prompt": {"tokens": [names.token(t) for t in prompt], "count": len(prompt),
                   "cached": xray.num_cached_tokens},
        "params": _params(xray),
        "timing": {
            "ttft_ms": None if first is None else 1000 * first,
            "decode_tokens_per_s": (len(tokens) - 1) / decode_time if decode_time else None,
            "elapsed_ms": 1000 * (finish.seconds if finish else (tokens[-1].seconds if tokens else 0.0)),
        },
        "steps": [_step(s, len(prompt)) for s in steps[steps_from:]], "steps_from": steps_from,
        "tokens": [_token(t, names) for t in tokens[tokens_from:]], "tokens_from": tokens_from,
        "num_tokens": len(tokens),
        "text": text,
        "finish": None if finish is None else {
            **dataclasses.asdict(finish),
            # the token that ended it, by name, when one did (an end token, a stop token, the grammar's)
            "token": names.token(reply[-1]) if reply and finish.cause in ("end token", "stop token", "grammar") else None},
        "pool": {"num_blocks": num_blocks},
        "validation": None,
    }
    if finish is not None and schema is not None:
        doc["validation"] = _validate(text, schema)
    doc.update(extra or {})
    return doc


class TokenNames:
    """Token ids -> their visible text, marking the tokenizer's special tokens."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.special: dict[int, str] = {}
        for marker in getattr(tokenizer, "special_tokens_set", ()):
            (token,) = tokenizer.encode(marker, allowed_special={marker})
            self.special[token] = marker
        self._cache: dict[int, str] = {}

    def shown(self, token: int) -> str:
        if token in self.special:
            return self.special[token]
        if token not in self._cache:
            self._cache[token] = visible_token(self.tokenizer.decode_bytes([token])) if self.tokenizer else str(token)
        return self._cache[token]

    def token(self, token: int) -> dict:
        return {"id": token, "text": self.shown(token), "special": token in self.special}

    def alternatives(self, pairs) -> list[dict]:
        return [{"id": t, "text": self.shown(t), "p": p} for t, p in pairs]


def _params(xray: RequestXray) -> dict:
    params = {} if xray.params is None else dataclasses.asdict(xray.params)
    params["max_tokens"] = xray.max_tokens
    params["structured"] = xray.structured
    return params


def _step(step, prompt_len: int) -> dict:
    kind = "verify" if step.guesses else ("prefill" if step.positions[1] - step.positions[0] > 1
                                          or step.positions[0] < prompt_len else "decode")
    return {"step": step.step, "ms": 1000 * step.seconds, "start": step.positions[0], "stop": step.positions[1],
            "kind": kind, "samples": step.samples, "batch_requests": step.batch_requests,
            "batch_tokens": step.batch_tokens, "blocks_held": step.blocks_held, "pool_used": step.pool_used,
            "guesses": step.guesses}


def _token(t, names: TokenNames) -> dict:
    return {**names.token(t.token_id), "step": t.step, "ms": 1000 * t.seconds, "p": t.probability,
            "raw": names.alternatives(t.raw), "tempered": names.alternatives(t.tempered),
            "final": names.alternatives(t.final), "masked": names.alternatives(t.masked),
            "uniform": t.uniform, "speculative": t.speculative}


def _validate(text: str, schema: dict) -> dict:
    """Does the reply parse as JSON and fit the schema? (jsonschema, the oracle the course uses)"""
    import jsonschema

    try:
        value = json.loads(text)
    except ValueError as error:
        return {"ok": False, "message": f"not JSON: {error}"}
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.path))
    if errors:
        return {"ok": False, "message": f"{'/'.join(map(str, errors[0].path)) or 'the value'}: {errors[0].message}"}
    return {"ok": True, "message": "parses and fits the schema"}
