"""The engine's verify step: which of a request's guesses the target keeps, under its own params.

For a greedy request the guesses survive while they equal the target's argmax
(``accept_greedy``), so the output is token for token what plain greedy decoding gives. For a
sampling request the target's distribution at each guessed position is built exactly as the
sampler builds it (penalties counting the guesses before it, temperature, filters), and the
rejection rule of Leviathan et al. (``accept_or_resample``) keeps the output distributed as
the target's. A deterministic guess (prompt lookup) has q = one-hot, so it is kept with
probability p(x) and a rejection resamples from p with x removed.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from course_lib.sampling.sampler import next_token_probs
from course_lib.serving.drafting import Draft
from course_lib.serving.request import Request
from course_lib.serving.speculative import accept_greedy, accept_or_resample

__all__ = ["SpeculativeStats", "verify"]


@dataclass
class SpeculativeStats:
    """Running totals over verify rounds (one round: one request's guesses in one target pass)."""

    num_rounds: int = 0
    num_drafted: int = 0
    num_accepted: int = 0

    def record(self, drafted: int, accepted: int) -> None:
        self.num_rounds += 1
        self.num_drafted += drafted
        self.num_accepted += accepted

    @property
    def acceptance_rate(self) -> float:
        """Share of guesses the target kept."""
        return self.num_accepted / self.num_drafted if self.num_drafted else 0.0

    @property
    def tokens_per_round(self) -> float:
        """Tokens a request gains per verify pass: its accepted guesses plus the target's own."""
        return (self.num_accepted + self.num_rounds) / self.num_rounds if self.num_rounds else 0.0


@torch.no_grad()
def verify(req: Request, logits: torch.Tensor, guesses: tuple[int, ...], draft: Draft) -> list[int]:
    """Logits (1 + j, V) of the newest token and the j guesses -> the tokens this round appends
    (the kept guesses, then one token from the target)."""
    guesses = list(guesses)
    j = len(guesses)
    if req.simple_greedy:
        return accept_greedy(guesses, logits.argmax(dim=-1).tolist()).tokens
    p = _target_probs(req, logits.float(), guesses)  # (1 + j, V)
    if req.params.greedy:  # greedy with penalties: p is one-hot at the penalised argmax
        return accept_greedy(guesses, p.argmax(dim=-1).tolist()).tokens
    if draft.probs is None:  # a deterministic guess: q is one-hot at it
        q = torch.zeros(j, p.shape[-1], dtype=p.dtype, device=p.device)
        q[torch.arange(j), torch.tensor(guesses)] = 1.0
    else:
        q = draft.probs[:j].to(p.device)
    return accept_or_resample(guesses, q, p, req.generator).tokens


def _target_probs(req: Request, logits: torch.Tensor, guesses: list[int]) -> torch.Tensor:
    """The sampler's distribution at each position, as if the guesses before it were sampled."""
    out_counts, seen_counts = req.output_counts, req.seen_counts
    if out_counts is None:
        return next_token_probs(logits, req.params)  # (1 + j, V): no penalties, rows independent
    out_counts, seen_counts = out_counts.clone(), seen_counts.clone()
    rows = []
    for i in range(len(guesses) + 1):
        rows.append(next_token_probs(logits[i:i + 1], req.params, output_counts=out_counts,
                                     seen_counts=seen_counts))
        if i < len(guesses):
            out_counts[0, guesses[i]] += 1
            seen_counts[0, guesses[i]] += 1
    return torch.cat(rows)  # (1 + j, V)
