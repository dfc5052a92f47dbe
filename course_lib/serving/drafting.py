"""Where speculative tokens come from: prompt lookup (no model) or a small draft model.

A proposer gets the requests about to decode and returns, for each, up to k guesses of the
tokens that follow, with the distributions q they were drawn from (``None`` when the guess is
deterministic: prompt lookup, or a greedy request). The engine verifies all of them in its
next target pass (``speculative.accept_or_resample`` / ``accept_greedy``), then tells the
proposer how many were kept, so a draft model can forget the KV of the rejected ones.

The draft model keeps its own paged KV (a ``BlockManager`` and ``ModelRunner`` of its own, no
prefix cache) and is run batched across requests: one pass catches each request up with the
tokens it has not seen (the whole prompt the first time, later the target's latest one or two
tokens) and proposes the first guess; k - 1 one-token passes propose the rest.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import torch

from course_lib.sampling.params import SamplingParams
from course_lib.sampling.sampler import next_token_probs, sample_from_probs
from course_lib.serving.block_manager import BlockManager
from course_lib.serving.model_runner import Chunk, ModelRunner
from course_lib.serving.speculative import ngram_propose
from course_lib.validation import positive_int

__all__ = ["Draft", "DraftModelProposer", "NgramProposer", "Speculation", "make_proposer"]


@dataclass(frozen=True)
class Draft:
    tokens: list[int]                 # the guesses, 1..k of them
    probs: torch.Tensor | None        # (len(tokens), V) the draft's distributions; None if deterministic


@dataclass(frozen=True)
class DraftInput:
    request_id: Hashable
    token_ids: list[int]              # prompt + output so far (the newest sample last)
    params: SamplingParams
    generator: torch.Generator | None  # the request's own stream (None for greedy requests)


class NgramProposer:
    """Prompt lookup: copy what followed the latest earlier occurrence of the sequence's tail."""

    method = "ngram"

    def __init__(self, k: int):
        self.k = positive_int("speculative k", k)

    def propose(self, inputs: Sequence[DraftInput]) -> dict[Hashable, Draft]:
        out = {}
        for x in inputs:
            guesses = ngram_propose(x.token_ids, self.k)
            if guesses:
                out[x.request_id] = Draft(guesses, None)
        return out

    def verified(self, request_id: Hashable, num_valid: int) -> None:
        """Nothing to forget: prompt lookup keeps no state."""

    def release(self, request_id: Hashable) -> None:
        """Nothing to free."""


class DraftModelProposer:
    """A small model with the target's tokenizer guesses k tokens per request, batched."""

    method = "draft"

    def __init__(self, model, k: int, *, vocab_size: int, num_blocks: int, block_size: int, device):
        for attribute in ("config", "embed_tokens", "layers", "rotary"):
            if not hasattr(model, attribute):
                raise TypeError(f"the draft model must be a course Transformer (it has no .{attribute}); "
                                "load one with load_model('tinychat-draft')")
        if model.config.vocab_size != vocab_size:
            raise ValueError(f"the draft model has {model.config.vocab_size} token ids but the target has "
                             f"{vocab_size}; draft and target must share one tokenizer")
        if model.device != torch.device(device):
            raise ValueError(f"the draft model is on {model.device} but the target on {device}; put both "
                             "on one device")
        self.k = positive_int("speculative k", k)
        self.model = model
        self.window = model.config.max_seq_len
        self.blocks = BlockManager(num_blocks, block_size, prefix_caching=False)
        self.runner = ModelRunner(model, num_blocks=num_blocks, block_size=block_size)
        self._computed: dict[Hashable, int] = {}  # leading tokens whose draft KV is in the pool

    def propose(self, inputs: Sequence[DraftInput]) -> dict[Hashable, Draft]:
        ready = [x for x in inputs if self._reserve(x)]
        if not ready:
            return {}
        bm = self.blocks
        chunks = []
        for x in ready:
            done = self._computed.get(x.request_id, 0)
            chunks.append(Chunk(x.token_ids[done:], done, bm.block_table(x.request_id), True))
        guesses: list[list[int]] = [[] for _ in ready]
        dists: list[list[torch.Tensor]] = [[] for _ in ready]
        positions = [len(x.token_ids) for x in ready]  # where each next guess goes
        for step in range(self.k):
            if step:
                chunks = [Chunk([g[-1]], p - 1, bm.block_table(x.request_id), True)
                          for x, g, p in zip(ready, guesses, positions)]
            logits = self.runner.run(chunks).float()  # (B, V)
            for i, x in enumerate(ready):
                token, probs = _draw(logits[i:i + 1], x)
                guesses[i].append(token)
                if probs is not None:
                    dists[i].append(probs)
                positions[i] += 1
        for x in ready:
            self._computed[x.request_id] = len(x.token_ids) + self.k - 1  # the last guess has no KV
        return {x.request_id: Draft(g, torch.cat(d) if d else None)
                for x, g, d in zip(ready, guesses, dists)}

    def verified(self, request_id: Hashable, num_valid: int) -> None:
        """The request's first ``num_valid`` tokens are settled; draft KV past them is stale."""
        if request_id in self._computed:
            self._computed[request_id] = min(self._computed[request_id], num_valid)
            self.blocks.truncate(request_id, self._computed[request_id])

    def release(self, request_id: Hashable) -> None:
        """The request finished or was preempted: free its draft blocks."""
        if self._computed.pop(request_id, None) is not None:
            self.blocks.free(request_id)

    def _reserve(self, x: DraftInput) -> bool:
        """Slots for the tokens to catch up on and the k - 1 guesses that get KV; False (no
        speculation this step) when the draft's pool or window has no room."""
        rid, bm = x.request_id, self.blocks
        if len(x.token_ids) + self.k > self.window:
            return False
        if rid not in self._computed:
            if not bm.can_allocate(len(x.token_ids) + self.k - 1):
                return False
            bm.allocate(rid, x.token_ids)
            self._computed[rid] = 0
            new = []
        else:
            new = x.token_ids[bm.num_tokens(rid):]
        room = len(new) + self.k - 1
        if not bm.can_append(rid, room):
            return False
        bm.append_lookahead(rid, new + [0] * (self.k - 1))  # guesses unknown yet: placeholders
        return True


def _draw(logits: torch.Tensor, x: DraftInput) -> tuple[int, torch.Tensor | None]:
    """One guess from the draft's logits (1, V): the argmax for a greedy request, else a sample
    from q (the request's temperature and filters; penalties left to the target) with the
    request's own generator."""
    if x.params.greedy:
        return int(logits.argmax()), None
    params = dataclasses.replace(x.params, frequency_penalty=0.0, presence_penalty=0.0,
                                 repetition_penalty=1.0)
    probs = next_token_probs(logits, params)  # (1, V)
    return int(sample_from_probs(probs.double(), x.generator)[0]), probs


class Speculation:
    """The engine's one hook into speculative decoding, around each step:

    - ``drafts(running)`` before the pass: the proposer's guesses for every running
      request whose next pass is a decode (grammar-guided requests decode plainly);
    - ``settle(preempted, finished, proposed)`` after it: preempted and finished requests free
      their draft state, and the others that were proposed for let the proposer forget what
      the target did not keep (rejected guesses, or all of them when the pass had no room);
    - ``release(request_id)`` when the engine ends a request itself (a stop string, an abort).

    Without a proposer (``speculative=None``) each call does nothing, so the engine's step reads
    the same with speculation on or off.
    """

    def __init__(self, proposer=None):
        self.proposer = proposer

    @property
    def enabled(self) -> bool:
        return self.proposer is not None

    def drafts(self, running) -> dict[Hashable, Draft]:
        if self.proposer is None:
            return {}
        return self.proposer.propose([DraftInput(req.request_id, req.token_ids, req.params, req.generator)
                                      for req in running if not req.is_prefill and req.guide is None])

    def settle(self, preempted, finished, proposed) -> None:
        if self.proposer is None:
            return
        for seq in (*preempted, *finished):
            self.proposer.release(seq.request_id)
        for seq in proposed:
            if not seq.is_finished:
                self.proposer.verified(seq.request_id, seq.num_tokens - 1)  # all but the newest token

    def release(self, request_id: Hashable) -> None:
        if self.proposer is not None:
            self.proposer.release(request_id)


def make_proposer(speculative: Mapping | None, *, vocab_size: int, num_blocks: int, block_size: int,
                  device):
    """``{"method": "ngram", "k": 4}`` or ``{"method": "draft", "model": draft, "k": 4}`` -> a proposer."""
    if speculative is None:
        return None
    if not isinstance(speculative, Mapping):
        raise TypeError(f"speculative must be a dict such as {{'method': 'ngram', 'k': 4}}, got "
                        f"{type(speculative).__name__}")
    method = speculative.get("method")
    k = speculative.get("k", 4)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"speculative k must be an int >= 1 (tokens guessed per step), got {k!r}")
    allowed = {"ngram": {"method", "k"}, "draft": {"method", "k", "model"}}
    if method not in allowed:
        raise ValueError(f"speculative method must be 'ngram' or 'draft', got {method!r}")
    unknown = set(speculative) - allowed[method]
    if unknown:
        raise ValueError(f"unknown speculative option(s) {sorted(unknown)} for method {method!r}; "
                         f"known: {sorted(allowed[method])}")
    if method == "ngram":
        return NgramProposer(k)
    if "model" not in speculative:
        raise ValueError("speculative method 'draft' needs a draft model: "
                         "{'method': 'draft', 'model': load_model('tinychat-draft'), 'k': 4}")
    return DraftModelProposer(speculative["model"], k, vocab_size=vocab_size, num_blocks=num_blocks,
                              block_size=block_size, device=device)
