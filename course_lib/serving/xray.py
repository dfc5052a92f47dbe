"""The request X-ray: what the engine did for one request, written down while it did it.

A request added with ``Engine.add_request(..., xray=RequestXray())`` carries the recorder,
and the engine writes to it at four points, nowhere else:

- admission: the prompt ids, the sampling params, how many prompt tokens the prefix cache
  served (``num_cached_tokens`` at the latest admission);
- every pass it joins: which positions it computed, beside how many other requests and
  tokens, and how many KV blocks it held while the pool had how many in use;
- every token it samples: the distribution it was drawn from at three stages (the model's
  raw softmax; after penalties, the grammar mask and temperature; after top-k, top-p and
  min-p, which is what the draw used), the raw top tokens the grammar mask removed, and the
  uniform number the draw took from the request's own generator;
- the end: the finish reason, and what decided it (an end token, a stop string or token, the
  grammar, ``max_tokens``, the context window, an abort), and the blocks it still held.

The distributions come from the sampler's own pipeline (``process_logits``, which the batched
sampler is tested equal to, row for row) on the very logits row the engine sampled from; the
uniform is read from a copy of the generator's state taken just before the draw, so it is
the number the draw used. Only requests that ask for an X-ray pay for it.

>>> from course_lib.model import Transformer, get_config
>>> from course_lib.sampling import SamplingParams
>>> from course_lib.serving.engine import Engine
>>> engine = Engine.for_job(Transformer(get_config("test-mha")), rows=1, tokens=16)
>>> xray = RequestXray()
>>> params = SamplingParams(temperature=0.8, top_k=3, seed=7, max_new_tokens=3)
>>> rid = engine.add_request([1, 2, 3], params, xray=xray)
>>> while engine.has_unfinished():
...     _ = engine.step()
>>> [s.positions for s in xray.steps], [len(xray.tokens)], xray.finish.cause
([(0, 3), (3, 4), (4, 5)], [3], 'max_tokens')
>>> t = xray.tokens[0]                      # top-k 3: the draw chose among three tokens
>>> len(t.final), round(sum(p for _, p in t.final), 6), dict(t.final)[t.token_id] == t.probability
(3, 1.0, True)
>>> 0 <= t.uniform < 1, len(t.raw)          # the raw softmax keeps its eight best
(True, 8)
>>> xray.finish.blocks_held, xray.steps[0].blocks_held
(0, 1)
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch

from course_lib.sampling.batch import process_logits
from course_lib.sampling.params import SamplingParams

__all__ = ["FinishRecord", "RequestXray", "StepRecord", "TokenRecord", "TOP_ALTERNATIVES"]

TOP_ALTERNATIVES = 8  # tokens kept per stage of a distribution


@dataclass(frozen=True)
class StepRecord:
    """One forward pass this request took part in."""

    step: int                 # the engine's pass number
    seconds: float            # when the pass ended, since the request arrived
    positions: tuple[int, int]  # (start, stop): the positions whose KV this pass wrote
    samples: bool             # whether the pass sampled a token for this request
    batch_requests: int       # requests in the pass, this one included
    batch_tokens: int         # tokens the pass computed, over all of them
    blocks_held: int          # KV blocks this request held during the pass
    pool_used: int            # blocks in use across the whole pool during the pass
    guesses: int = 0          # speculative guesses it carried for verification


@dataclass(frozen=True)
class TokenRecord:
    """One generated token and the distribution it came from; each stage lists its
    ``TOP_ALTERNATIVES`` most likely tokens as (token id, probability), most likely first."""

    token_id: int
    step: int
    seconds: float                  # when the engine emitted it, since the request arrived
    probability: float              # under ``final``, the distribution the draw used
    raw: tuple[tuple[int, float], ...]       # the model's softmax at temperature 1
    tempered: tuple[tuple[int, float], ...]  # after penalties, the grammar mask and temperature
    final: tuple[tuple[int, float], ...]     # after top-k, top-p and min-p: what was drawn from
    masked: tuple[tuple[int, float], ...]    # tokens of ``raw`` the grammar mask removed
    uniform: float | None           # the draw's uniform; None for argmax (temperature 0)
    speculative: bool = False       # verified from a guess round (the draw is the accept test's)


@dataclass(frozen=True)
class FinishRecord:
    reason: str          # "stop", "length" or "abort", as the engine reports it
    cause: str           # "end token", "stop string", "stop token", "grammar", "max_tokens",
                         # "context window" or "abort"
    detail: str          # the end token's id, the stop string, ...
    seconds: float
    blocks_held: int     # blocks the request still held after its end (0: all returned)
    pool_used: int


@dataclass
class RequestXray:
    """The record of one request (see the module docstring); the engine fills it in."""

    request_id: object = None
    prompt_ids: tuple[int, ...] = ()
    params: SamplingParams | None = None
    num_cached_tokens: int = 0
    max_tokens: int = 0
    seed: int | None = None
    structured: bool = False
    steps: list[StepRecord] = field(default_factory=list)
    tokens: list[TokenRecord] = field(default_factory=list)
    finish: FinishRecord | None = None
    arrived: float = 0.0
    _pending: list = field(default_factory=list, repr=False)  # distributions awaiting their token

    # --- written by the engine ---------------------------------------------------------------

    def admit(self, request) -> None:
        self.request_id, self.prompt_ids, self.params = request.request_id, tuple(request.prompt_ids), request.params
        self.max_tokens, self.seed, self.structured = request.max_tokens, request.params.seed, request.guide is not None
        self.arrived = time.perf_counter()

    def pass_done(self, step: int, entry, batch_requests: int, batch_tokens: int, pool_used: int) -> None:
        seq = entry.seq
        self.num_cached_tokens = seq.num_cached_tokens
        self.steps.append(StepRecord(step, self._now(), (entry.start, entry.stop), entry.samples, batch_requests,
                                     batch_tokens, len(seq.block_table), pool_used, len(entry.draft_token_ids)))

    def before_draw(self, request, logits: torch.Tensor, *, speculative: bool = False) -> None:
        """Logits (n, V): the rows the engine is about to sample this request's tokens from.
        Call before the draw (it copies the generator's state) and before the grammar state
        moves on."""
        allowed = request.allowed()  # (1, V) or None; the state before this step's token
        uniform = None
        if request.generator is not None and not request.params.greedy and not speculative:
            twin = torch.Generator(device=request.generator.device)
            twin.set_state(request.generator.get_state())
            uniform = torch.rand(1, 1, generator=twin, dtype=torch.float64, device=twin.device).item()
        for row in logits.float():
            self._pending.append(_distributions(row[None], request, allowed) + (uniform, speculative))

    def emitted(self, token_ids, step: int) -> None:
        """The tokens the engine kept this step, in order, paired with the rows drawn for them."""
        now = self._now()
        for token, pending in zip(token_ids, self._pending):
            raw, tempered, final, masked, probs, uniform, speculative = pending
            self.tokens.append(TokenRecord(int(token), step, now, float(probs[token].item()), raw, tempered, final,
                                           masked, uniform, speculative))
        self._pending.clear()

    def finished(self, request, reason: str, *, pool_used: int, end_ids=frozenset(), window: int | None = None) -> None:
        cause, detail = _cause(request, reason, end_ids, window)
        self.finish = FinishRecord(reason, cause, detail, self._now(), len(request.block_table), pool_used)

    def _now(self) -> float:
        return time.perf_counter() - self.arrived


def _top(probs: torch.Tensor, k: int = TOP_ALTERNATIVES) -> tuple[tuple[int, float], ...]:
    values, indices = probs.topk(min(k, probs.shape[-1]))
    return tuple((i, v) for i, v in zip(indices.tolist(), values.tolist()) if v > 0)


def _distributions(row: torch.Tensor, request, allowed: torch.Tensor | None):
    """(raw, tempered, final, masked, the final probabilities (V,)) for one logits row (1, V)."""
    params = request.params
    counts = {"output_counts": request.output_counts, "seen_counts": request.seen_counts,
              "allowed": None if allowed is None else allowed.to(row.device)}
    raw = torch.softmax(row[0], dim=-1)
    if params.greedy:
        tempered_logits = process_logits(row, replace(params, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
                                         **counts)
    else:
        tempered_logits = process_logits(row, replace(params, top_k=0, top_p=1.0, min_p=0.0), **counts)
    final = torch.softmax(process_logits(row, params, **counts)[0], dim=-1)
    masked = ()
    if allowed is not None:
        top = _top(raw)
        ok = allowed[0].tolist() if allowed.shape[-1] else []
        masked = tuple((i, p) for i, p in top if i < len(ok) and not ok[i])
    return _top(raw), _top(torch.softmax(tempered_logits[0], dim=-1)), _top(final), masked, final


def _cause(request, reason: str, end_ids, window: int | None) -> tuple[str, str]:
    if reason == "abort":
        return "abort", "the client went away or the request was aborted"
    last = request.output_token_ids[-1] if request.output_token_ids else None
    if reason == "stop":
        if request.stopped:
            return "stop string", repr(request.matcher.matched)
        if request.guide is not None and last == request.guide.eos_id:
            return "grammar", "the grammar reached an accepting state and the end token was drawn"
        if last in end_ids:
            return "end token", f"token {last}"
        return "stop token", f"token {last}"
    prompt = len(request.prompt_ids)
    if request.max_tokens < request.params.max_new_tokens or (window is not None and prompt + request.max_tokens >= window):
        return "context window", f"{prompt} prompt tokens left room for {request.max_tokens} of {window or '?'}"
    return "max_tokens", f"max_tokens={request.max_tokens}"
