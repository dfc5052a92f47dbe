"""One request, one object: the scheduler's ``Sequence`` (its tokens, how many have KV, where it
stands) extended with what sampling and streaming need (its params and random stream, penalty
counts, grammar state, and the text it has shown so far). The scheduler schedules it, the
engine samples for it and the model runner reads its block table from the block manager.

>>> from course_lib.sampling import SamplingParams
>>> req = Request("r", [1, 2], SamplingParams(temperature=0, stop=("!",)), vocab_size=8)
>>> req.add_token(0, lambda t: "hi!"[t:t + 1].encode())    # "h" is safe to show
'h'
>>> req.add_token(2, lambda t: b"!")                       # completes the stop string
''
>>> req.stopped, req.matcher.text
(True, 'h')

Text is decoded incrementally: a token may end inside a UTF-8 character, and the decoder
holds those bytes until the character completes; the stop matcher holds back any tail that
could still grow into a stop string. So the deltas concatenate to exactly the final text.
"""
from __future__ import annotations

import codecs
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass

import torch

from course_lib.sampling.params import SamplingParams
from course_lib.sampling.result import Completion
from course_lib.sampling.processors import token_counts
from course_lib.sampling.batch import sample_batch
from course_lib.sampling.stops import StopSequenceMatcher
from course_lib.serving.sequence import FinishReason, Sequence

__all__ = ["Completion", "Request", "RequestOutput", "TokenLogprob", "sample_rows"]

MAX_TOP_LOGPROBS = 20  # OpenAI's cap on top_logprobs


@dataclass(frozen=True)
class TokenLogprob:
    """A generated token's log-probability under the model (raw logits, before any sampling
    rule), and the ``top`` most likely alternatives at that position, most likely first."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def token_logprobs(logits: torch.Tensor, token_ids: list[int], top: int) -> tuple[TokenLogprob, ...]:
    """Logits (n, V) and the n tokens chosen from them -> their log-probabilities."""
    logp = torch.log_softmax(logits[:len(token_ids)].float(), dim=-1)  # (n, V)
    chosen = logp.gather(1, torch.tensor(token_ids, device=logp.device)[:, None])[:, 0].tolist()
    if top:
        values, indices = logp.topk(top, dim=-1)  # (n, top)
        alternatives = [tuple(zip(i, v)) for i, v in zip(indices.tolist(), values.tolist())]
    else:
        alternatives = [()] * len(token_ids)
    return tuple(TokenLogprob(t, lp, alt) for t, lp, alt in zip(token_ids, chosen, alternatives))


@dataclass(frozen=True)
class RequestOutput:
    """What one ``Engine.step()`` added to one request."""

    request_id: Hashable
    token_ids: tuple[int, ...]          # tokens sampled this step (empty for an abort)
    text: str                           # new text that is safe to show (stop strings never appear)
    finished: bool
    finish_reason: FinishReason | None  # "stop", "length" or "abort" once finished
    logprobs: tuple[TokenLogprob, ...] | None = None  # one per token, when the request asked


class Request(Sequence):
    """A ``Sequence`` plus its sampling stream, penalty counts, grammar state, incremental decoder
    and stop matcher. ``max_tokens`` defaults to ``params.max_new_tokens``; ``stop_token_ids``
    end it with "stop" (the engine passes its end tokens and the request's stop tokens)."""

    __slots__ = ("params", "logprobs", "step_logits", "guide", "guide_state", "vocab_size", "generator",
                 "output_counts", "seen_counts", "decoder", "matcher", "xray")

    def __init__(self, request_id: Hashable, prompt_ids: list[int], params: SamplingParams, *,
                 vocab_size: int, device=None, guide=None, generator: torch.Generator | None = None,
                 logprobs: int | None = None, max_tokens: int | None = None,
                 stop_token_ids: Collection[int] = (), xray=None):
        if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)
                                     or not 0 <= logprobs <= MAX_TOP_LOGPROBS):
            raise ValueError(f"logprobs must be an int in 0..{MAX_TOP_LOGPROBS} (how many alternatives to "
                             f"report per token; 0: only the chosen token's), got {logprobs!r}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        super().__init__(request_id, prompt_ids, params.max_new_tokens if max_tokens is None else max_tokens,
                         stop_token_ids=stop_token_ids)
        self.params = params
        self.logprobs = logprobs   # None: not asked for
        self.step_logits: torch.Tensor | None = None  # this step's logits rows, kept only when asked
        # A structured-output guide (course_lib.structured) and this request's state in it.
        self.guide, self.guide_state = guide, (None if guide is None else guide.initial_state)
        self.vocab_size = vocab_size
        # One generator per request, so its draws never depend on who shares the batch. A
        # caller may pass its own (several requests sharing one draw from it in batch order).
        self.generator: torch.Generator | None = generator
        if generator is None and not params.greedy:
            self.generator = torch.Generator()
            if params.seed is None:
                self.generator.seed()  # unseeded sampling is meant to vary
            else:
                self.generator.manual_seed(params.seed)
        self.output_counts = self.seen_counts = None
        if params.uses_penalties:
            self.output_counts = torch.zeros(1, vocab_size, dtype=torch.long, device=device)  # (1, V)
            self.seen_counts = token_counts([self.prompt_token_ids], vocab_size, device=device)  # (1, V)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.matcher = StopSequenceMatcher(params.stop)
        self.xray = xray  # a serving.xray.RequestXray the engine writes to, or None

    @property
    def prompt_ids(self) -> list[int]:
        return self.prompt_token_ids

    @property
    def simple_greedy(self) -> bool:
        """Argmax of the raw logits: temperature 0, no penalty and no grammar to apply first."""
        return self.params.greedy and not self.params.uses_penalties and self.guide is None

    def allowed(self) -> torch.Tensor | None:
        """(1, V) bool: the grammar's mask for the next token, padded to the model's vocabulary."""
        if self.guide is None:
            return None
        mask = self.guide.masks([self.guide_state])  # (1, V_tokenizer)
        return torch.nn.functional.pad(mask, (0, self.vocab_size - mask.shape[-1]), value=False)  # (1, V)

    @property
    def stopped(self) -> bool:
        return self.matcher.stopped

    def add_token(self, token: int, token_bytes: Callable[[int], bytes], *, is_end: bool = False) -> str:
        """Record a sampled token (the scheduler has appended it to ``output_token_ids``); return
        the text it makes safe to show. End tokens (``is_end``) add no text, as in ``generate()``."""
        if self.guide is not None:
            self.guide_state = self.guide.next_state(self.guide_state, token)
        if self.output_counts is not None:
            self.output_counts[0, token] += 1
            self.seen_counts[0, token] += 1
        if is_end:
            return ""
        return self.matcher.feed(self.decoder.decode(token_bytes(token)))

    def finish_text(self, reason: FinishReason) -> str:
        """The held-back text released at the end. A cut (length, abort) decodes the bytes of an
        unfinished character as U+FFFD, as ``generate()`` does; an end token drops them."""
        if self.stopped:
            return ""
        out = ""
        if reason != "stop":
            tail = self.decoder.decode(b"", final=True)
            if tail:
                out = self.matcher.feed(tail)
                if self.stopped:
                    return out
        return out + self.matcher.flush()


def sample_rows(logits: torch.Tensor, requests: list[Request]) -> list[int]:
    """One token per row of logits (M, V), row i under ``requests[i]``'s params and generator.

    Plain greedy rows share one argmax; the others go through ``sample_batch`` together, each
    with its own params, penalty counts, grammar mask and random stream (its tokens are what
    it would draw alone). One read-back at the end.
    """
    logits = logits.float()  # (M, V)
    tokens = logits.argmax(dim=-1)  # (M,): the answer for every plain greedy row
    rows = [i for i, req in enumerate(requests) if not req.simple_greedy]
    if rows:
        chosen = [requests[i] for i in rows]
        vocab, device = logits.shape[-1], logits.device
        output_counts = seen_counts = allowed = None
        if any(r.output_counts is not None for r in chosen):
            zeros = torch.zeros(1, vocab, dtype=torch.long, device=device)
            output_counts = torch.cat([zeros if r.output_counts is None else r.output_counts for r in chosen])
            seen_counts = torch.cat([zeros if r.seen_counts is None else r.seen_counts for r in chosen])
        if any(r.guide is not None for r in chosen):
            everything = torch.ones(1, vocab, dtype=torch.bool, device=device)
            allowed = torch.cat([everything if r.guide is None else r.allowed().to(device) for r in chosen])
        picked = logits if len(rows) == len(requests) else logits[rows]
        tokens[rows] = sample_batch(picked, [r.params for r in chosen], [r.generator for r in chosen],
                                    output_counts=output_counts, seen_counts=seen_counts, allowed=allowed)
    return tokens.tolist()
