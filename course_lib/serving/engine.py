"""The serving engine: requests in, tokens and text out, one scheduled forward pass per step.

>>> from course_lib.model import load_model, load_tokenizer
>>> from course_lib.sampling import SamplingParams
>>> engine = Engine(load_model("tinychat", device="cpu"), load_tokenizer("tinychat"))
>>> chat = [{"role": "user", "content": "What is 2 + 2?"}]
>>> [c.finish_reason for c in engine.generate([chat, chat], SamplingParams(temperature=0))]
['stop', 'stop']
>>> engine.stats().num_used_blocks                     # every block came back
0

Each ``step()``: with ``speculative`` on, the proposer guesses the next k tokens of every
decoding request (``drafting.py``) -> the scheduler picks this pass's tokens (decodes with
their guesses, prefill chunks, admissions; see ``scheduler.py``) -> the model runner computes
them over the paged KV pool -> each sampling request draws its token with its own params and
generator, or keeps the guesses the target agrees with (``speculative.py``) -> the scheduler
records the tokens (end tokens and max_tokens finish requests) -> stop strings are matched in
the decoded text -> one ``RequestOutput`` per request that gained tokens. Speculation enters
the step through one hook (``drafting.Speculation``): guesses before the pass, what to forget
after it; with ``speculative=None`` its calls do nothing.

The end of a reply is decided in one place: the tokenizer's end tokens
(``end_token_ids``), the request's ``stop_token_ids`` and ``max_tokens`` in the scheduler, stop
strings here. Without a tokenizer the engine works on token ids alone (no text, no end tokens
unless a request names them).

Memory is derived, not guessed: by default the pool holds ``max_num_seqs`` full context
windows, ``max_num_seqs * ceil(max_seq_len / block_size)`` blocks (tinychat: 32 * 32 = 1024
blocks of 16 tokens, 16 MiB in float32). A smaller pool works too: the scheduler preempts.
"""
from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterator, Sequence

import torch

from course_lib.kv_memory.paging import blocks_needed
from course_lib.sampling.params import SamplingParams
from course_lib.sampling.prompt import encode_prompt
from course_lib.serving.block_manager import BlockManager, BlockManagerStats
from course_lib.serving.drafting import Speculation, make_proposer
from course_lib.serving.model_runner import Chunk, ModelRunner
from course_lib.serving.request import Completion, Request, RequestOutput, sample_rows, token_logprobs
from course_lib.serving.scheduler import Scheduler
from course_lib.serving.verify import SpeculativeStats, verify
from course_lib.serving.xray import RequestXray
from course_lib.tokenization.chat_template import end_token_ids
from course_lib.validation import positive_int

DEFAULT_BLOCK_SIZE = 16  # tokens per KV block, as vLLM's default

__all__ = ["Engine", "SpeculativeStats"]


def _check_model(model) -> None:
    for attribute in ("config", "embed_tokens", "layers", "rotary"):
        if not hasattr(model, attribute):
            raise TypeError(f"model must be a course Transformer (it has no .{attribute}); "
                            "load one with load_model('tinychat')")


class Engine:
    """Continuous batching over one model: ``add_request`` / ``step`` / ``abort``, and the
    conveniences ``generate`` (run prompts to completion) and ``stream`` (one request's outputs).
    ``batch_invariant`` and ``fused_attention`` are the model runner's (``ModelRunner``)."""

    def __init__(self, model, tokenizer=None, *, block_size: int = DEFAULT_BLOCK_SIZE,
                 num_blocks: int | None = None,
                 max_num_seqs: int = 32, max_batched_tokens: int = 2048, prefix_caching: bool = True,
                 speculative=None, batch_invariant: bool = False, fused_attention: bool = True, device=None):
        _check_model(model)
        if device is not None and torch.device(device) != model.device:
            raise ValueError(f"the model is on {model.device} but device={device!r}; move the model "
                             "first (model.to(device)) so the KV pool and the weights share a device")
        block_size = positive_int("block_size", block_size)
        max_num_seqs = positive_int("max_num_seqs", max_num_seqs)
        self.window = model.config.max_seq_len
        if num_blocks is None:
            num_blocks = max_num_seqs * blocks_needed(self.window, block_size)
        self.model, self.tokenizer = model, tokenizer
        self.block_manager = BlockManager(num_blocks, block_size, prefix_caching=prefix_caching)
        self.scheduler = Scheduler(self.block_manager, max_num_seqs=max_num_seqs,
                                   max_batched_tokens=max_batched_tokens)
        self.runner = ModelRunner(model, num_blocks=num_blocks, block_size=block_size,
                                  batch_invariant=batch_invariant, fused_attention=fused_attention)
        self.speculation = Speculation(make_proposer(speculative, vocab_size=model.config.vocab_size,
                                                     num_blocks=num_blocks, block_size=block_size,
                                                     device=model.device))
        self.speculative_stats = SpeculativeStats()
        self.eos_ids = frozenset() if tokenizer is None else frozenset(end_token_ids(tokenizer))
        self._requests: dict[Hashable, Request] = {}
        self._ids = itertools.count()
        self._token_bytes: dict[int, bytes] = {}
        self.num_steps = self.num_preemptions = 0

    @classmethod
    def for_job(cls, model, tokenizer=None, *, rows: int = 1, tokens: int | None = None,
                prefix_caching: bool = True) -> "Engine":
        """An engine sized for one job: ``rows`` sequences of up to ``tokens`` tokens each
        (prompt plus reply; the context window when None), all resident at once.

        The pool holds every row's whole sequence, so the job never preempts, and a pass may
        batch every row. This is the one place a caller sizes an engine for a known job.

        >>> from course_lib.model import Transformer, get_config
        >>> engine = Engine.for_job(Transformer(get_config("test-mha")), rows=3, tokens=40)
        >>> engine.block_manager.num_blocks, engine.scheduler.max_num_seqs
        (9, 3)
        """
        _check_model(model)
        rows = positive_int("rows", rows)
        window = model.config.max_seq_len
        tokens = window if tokens is None else min(positive_int("tokens", tokens), window)
        return cls(model, tokenizer, max_num_seqs=rows, max_batched_tokens=max(2048, rows),
                   num_blocks=rows * blocks_needed(tokens, DEFAULT_BLOCK_SIZE), prefix_caching=prefix_caching)

    # --- requests ----------------------------------------------------------------------------

    def add_request(self, prompt, params: SamplingParams, *, request_id: Hashable | None = None,
                    guide=None, generator: torch.Generator | None = None,
                    eos_ids: Sequence[int] | None = None, logprobs: int | None = None,
                    xray: RequestXray | None = None) -> Hashable:
        """Queue a prompt (token ids, a rendered chat string or chat messages); return its id.

        The context window caps the reply: at most ``max_seq_len - len(prompt)`` tokens, then
        "length". ``guide`` (a ``course_lib.structured`` RegexGuide or JSONGuide) masks every
        token of this request to its grammar, after the penalties and before temperature and
        the filters. ``generator`` replaces the request's own stream (seeded from
        ``params.seed``); requests given the same one draw from it in turn. ``eos_ids``
        replaces the tokenizer's end tokens for this request (``()``: none). ``logprobs``
        (0..20) puts each token's log-probability, and that many alternatives, in its outputs.
        ``xray`` (a fresh ``serving.xray.RequestXray``) records what every stage did for this
        request: its passes, blocks, distributions and draws, and what ended it.
        """
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
        if self.tokenizer is None:
            if isinstance(prompt, str) or (prompt and isinstance(prompt[0], dict)):
                raise TypeError("this engine has no tokenizer: pass the prompt as token ids, or build "
                                "the Engine with one")
            if params.stop:
                raise ValueError("stop strings need text, and this engine has no tokenizer; use "
                                 "stop_token_ids, or build the Engine with a tokenizer")
        if xray is not None and (not isinstance(xray, RequestXray) or xray.request_id is not None):
            raise TypeError("xray must be a fresh RequestXray() (one per request), got "
                            f"{type(xray).__name__}{'' if not isinstance(xray, RequestXray) else ' already in use'}")
        if guide is not None:
            if not all(hasattr(guide, a) for a in ("masks", "next_state", "initial_state", "eos_id")):
                raise TypeError(f"guide must be a course_lib.structured RegexGuide or JSONGuide, got "
                                f"{type(guide).__name__}")
            if guide.vocab_size > self.model.config.vocab_size:
                raise ValueError(f"the guide covers {guide.vocab_size} token IDs but the model has only "
                                 f"{self.model.config.vocab_size}; build it over the model's own tokenizer")
            if params.stop or params.stop_token_ids:
                raise ValueError("stop strings and stop tokens would cut structured output short; the "
                                 "grammar decides where it ends, so leave stop and stop_token_ids empty")
        prompt_ids = encode_prompt(self.tokenizer, prompt)  # raises on an empty or odd prompt
        ends = self.eos_ids if eos_ids is None else frozenset(_token_ids("eos_ids", eos_ids))
        vocab = self.model.config.vocab_size
        bad = [t for t in prompt_ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"prompt token ids {bad[:5]} are outside the model's vocabulary 0..{vocab - 1}")
        if len(prompt_ids) >= self.window:
            raise ValueError(f"the prompt has {len(prompt_ids)} tokens and fills the context window "
                             f"({self.window}); shorten it to leave room for an answer")
        if request_id is None:
            request_id = f"req-{next(self._ids)}"
            while request_id in self._requests:
                request_id = f"req-{next(self._ids)}"
        elif request_id in self._requests:
            raise ValueError(f"request id {request_id!r} is already in flight; give each request a unique id")
        max_tokens = min(params.max_new_tokens, self.window - len(prompt_ids))
        stops = ends | set(params.stop_token_ids) if guide is None else {guide.eos_id}
        request = Request(request_id, prompt_ids, params, vocab_size=vocab, device=self.model.device,
                          guide=guide, generator=generator, logprobs=logprobs, max_tokens=max_tokens,
                          stop_token_ids=stops, xray=xray)
        # add() checks the request fits the pool; nothing is recorded before it succeeds.
        self.scheduler.add(request)
        self._requests[request_id] = request
        if xray is not None:
            xray.admit(request)
        return request_id

    def abort(self, request_id: Hashable) -> RequestOutput:
        """Stop a waiting or running request now and free its blocks; returns its final output
        (finish_reason "abort", with any text that was held back)."""
        req = self._requests.get(request_id)
        if req is None:
            raise ValueError(f"unknown request id {request_id!r}: it was never added or has already "
                             "finished")
        self.scheduler.abort(request_id)
        del self._requests[request_id]
        if req.xray is not None:
            req.xray.finished(req, "abort", pool_used=self.block_manager.num_used_blocks)
        self.speculation.release(request_id)
        return RequestOutput(request_id, (), req.finish_text("abort"), True, "abort")

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def stats(self) -> BlockManagerStats:
        """Block usage and prefix-cache hits (``hit_rate``)."""
        return self.block_manager.stats()

    # --- the loop ----------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Run one forward pass; return an output for every request that gained tokens."""
        drafts = self.speculation.drafts(self.scheduler.running)
        out = self.scheduler.schedule({rid: d.tokens for rid, d in drafts.items()})
        while out.is_empty and self.scheduler.has_unfinished():
            # A lone request preempted itself; the next schedule readmits it (see scheduler.py).
            self.num_preemptions += len(out.preempted)
            self.speculation.settle(out.preempted, (), ())
            out = self.scheduler.schedule()
        self.num_preemptions += len(out.preempted)
        if out.is_empty:
            self.speculation.settle(out.preempted, (), ())
            return []
        chunks = [Chunk(e.token_ids, e.start, e.seq.block_table, e.samples, 1 + len(e.draft_token_ids))
                  for e in out.scheduled]
        logits = self.runner.run(chunks)  # (M, V): one row per sampling chunk, 1 + k per verify
        self.num_steps += 1
        self._xray_pass(out)
        samplers = [e for e in out.scheduled if e.samples]
        sampled = self._sample(samplers, logits, drafts)
        sizes = {e.seq.request_id: len(e.seq.output_token_ids) for e in samplers}
        finished = self.scheduler.update(out, sampled)  # each sequence carries its own end tokens
        self.speculation.settle(out.preempted, finished, [e.seq for e in samplers if e.seq.request_id in drafts])
        return [self._emit(e.seq, e.seq.output_token_ids[sizes[e.seq.request_id]:]) for e in samplers]

    def _xray_pass(self, out) -> None:
        """Tell the X-rayed requests of this pass what it computed, beside whom, in which blocks."""
        used = None
        for e in out.scheduled:
            if e.seq.xray is not None:
                used = self.block_manager.num_used_blocks if used is None else used
                e.seq.xray.pass_done(self.num_steps, e, len(out.scheduled), out.num_batched_tokens, used)

    def _sample(self, samplers, logits: torch.Tensor, drafts: dict) -> dict:
        """{request id: token} for plain rows (one batched sampling call), {request id: [tokens]}
        for verify rows (the accepted guesses and the target's own token)."""
        plain_rows, plain, sampled = [], [], {}
        row = 0
        for e in samplers:
            req: Request = e.seq
            n = 1 + len(e.draft_token_ids)
            if req.logprobs is not None:
                req.step_logits = logits[row:row + n]
            if req.xray is not None:  # before the draw moves the generator on
                req.xray.before_draw(req, logits[row:row + n], speculative=bool(e.draft_token_ids))
            if e.draft_token_ids:
                tokens = verify(req, logits[row:row + n], e.draft_token_ids, drafts[req.request_id])
                self.speculative_stats.record(len(e.draft_token_ids), len(tokens) - 1)
                sampled[req.request_id] = tokens
            else:
                plain_rows.append(row)
                plain.append(req)
            row += n
        if plain:
            rows = logits if len(plain_rows) == logits.shape[0] else logits[plain_rows]
            sampled.update((req.request_id, t) for req, t in zip(plain, sample_rows(rows, plain)))
        return sampled

    def _emit(self, req: Request, tokens: list[int]) -> RequestOutput:
        """Record the tokens the scheduler kept: text, stop strings, then the finish reason."""
        rid = req.request_id
        text, kept = "", []
        for token in tokens:
            kept.append(token)
            text += req.add_token(token, self._bytes, is_end=token in req.stop_token_ids)
            if req.stopped:
                break  # a stop string: whatever followed it is dropped
        logprobs = None
        if req.logprobs is not None:
            logprobs = token_logprobs(req.step_logits, kept, req.logprobs)
            req.step_logits = None
        if req.xray is not None:
            req.xray.emitted(kept, self.num_steps)
        reason = None
        if req.stopped and not req.is_finished:
            self.scheduler.finish(rid, "stop")
            self.speculation.release(rid)
        if req.is_finished:
            reason = "stop" if req.stopped else req.finish_reason
            text += req.finish_text(reason)
            reason = "stop" if req.stopped else reason  # the cut's last bytes may complete a stop string
            del self._requests[rid]
            if req.xray is not None:
                req.xray.finished(req, reason, pool_used=self.block_manager.num_used_blocks, end_ids=self.eos_ids,
                                  window=self.window)
        return RequestOutput(rid, tuple(kept), text, reason is not None, reason, logprobs)

    def _bytes(self, token: int) -> bytes:
        if self.tokenizer is None:
            return b""
        cached = self._token_bytes.get(token)
        if cached is None:
            cached = self._token_bytes[token] = self.tokenizer.decode_bytes([token])
        return cached

    # --- conveniences built on step() --------------------------------------------------------

    def generate(self, prompts: Sequence, params: SamplingParams | Sequence[SamplingParams], *,
                 guide=None, generator: torch.Generator | None = None,
                 eos_ids: Sequence[int] | None = None) -> list[Completion]:
        """Run every prompt to completion, batched; completions in the prompts' order (each
        under ``guide``'s grammar when one is given; ``generator`` and ``eos_ids`` as in
        ``add_request``, shared by all of them)."""
        self._check_idle("generate")
        if isinstance(prompts, (str, torch.Tensor)) or (prompts and isinstance(prompts[0], (int, dict))):
            raise TypeError("generate takes a list of prompts; wrap a single prompt in a list")
        params_list = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        if len(params_list) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(params_list)} SamplingParams; "
                             "pass one SamplingParams for all or one per prompt")
        ids = []
        try:
            for prompt, p in zip(prompts, params_list):
                ids.append(self.add_request(prompt, p, guide=guide, generator=generator, eos_ids=eos_ids))
        except Exception:
            for rid in ids:
                self.abort(rid)
            raise
        requests = {rid: self._requests[rid] for rid in ids}
        tokens = {rid: [] for rid in ids}
        texts = {rid: [] for rid in ids}
        reasons = {}
        while self.has_unfinished():
            for o in self.step():
                tokens[o.request_id].extend(o.token_ids)
                texts[o.request_id].append(o.text)
                if o.finished:
                    reasons[o.request_id] = o.finish_reason
        return [Completion("".join(texts[r]), tuple(tokens[r]), reasons[r], tuple(requests[r].prompt_ids),
                           requests[r].matcher.matched) for r in ids]

    def stream(self, prompt, params: SamplingParams) -> Iterator[RequestOutput]:
        """Yield one request's outputs as they come; closing the generator early aborts it."""
        self._check_idle("stream")
        rid = self.add_request(prompt, params)
        finished = False
        try:
            while not finished:
                for o in self.step():
                    finished = o.finished
                    yield o
        finally:
            if not finished and rid in self._requests:
                self.abort(rid)

    def _check_idle(self, name: str) -> None:
        if self.has_unfinished():
            raise RuntimeError(f"{name}() drives the engine itself, and {len(self._requests)} other "
                               "request(s) are in flight whose outputs it would swallow; finish or "
                               "abort them, or use add_request() and step()")

    def __repr__(self) -> str:
        bm = self.block_manager
        return (f"Engine(blocks={bm.num_blocks}x{bm.block_size}, free={bm.num_free_blocks}, "
                f"{self.scheduler!r})")


def _token_ids(name: str, ids) -> list[int]:
    ids = list(ids)
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise ValueError(f"{name} must be non-negative token ids, got {ids[:5]}")
    return ids
