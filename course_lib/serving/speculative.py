"""Speculative decoding's verify step, and a draft that needs no second model (prompt lookup).

A cheap draft proposes k tokens x_0..x_{k-1}, sampled from its distributions q_0..q_{k-1}; the
target scores all of them in one forward pass, giving p_0..p_k (one more than drafted). The
rule of Leviathan et al. 2023 / Chen et al. 2023 keeps x_i with probability
min(1, p_i(x_i) / q_i(x_i)); at the first rejection it draws a replacement from
normalize(max(0, p_i - q_i)) and stops; when all k survive it draws a bonus token from p_k.
Every emitted token then follows the target's distribution exactly, whatever the draft.

>>> g = torch.Generator().manual_seed(0)
>>> q = torch.tensor([[0.5, 0.5, 0.0]])                     # the draft sampled x_0 = 1 from q_0
>>> p = torch.tensor([[0.25, 0.75, 0.0], [0.0, 0.0, 1.0]])  # p_0(1) / q_0(1) = 1.5: always kept
>>> accept_or_resample([1], q, p, g)                        # then the bonus token from p_1
SpeculativeResult(accepted=[1], next_token=2, num_accepted=1)
>>> accept_greedy([4, 7, 7], [4, 7, 2, 9])                  # the target's argmax disagrees at x_2
SpeculativeResult(accepted=[4, 7], next_token=2, num_accepted=2)
>>> ngram_propose([5, 6, 7, 9, 5, 6], k=2)                  # "5 6" was seen before, then "7 9"
[7, 9]

Random numbers, in this order, from the caller's ``torch.Generator``: k uniforms for the
acceptance tests (one ``torch.rand(k)`` call, all drawn even when an early token is rejected,
so a round always consumes k + 1 numbers), then one uniform for the emitted token
(``course_lib.sampling.sample_from_probs``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from course_lib.sampling.sampler import sample_from_probs
from course_lib.validation import positive_int

__all__ = ["SpeculativeResult", "accept_or_resample", "accept_greedy", "ngram_propose",
           "acceptance_rate", "expected_tokens_per_round"]


class SpeculativeResult(NamedTuple):
    """One verify round: the kept draft tokens, the token the target adds, and how many were kept."""

    accepted: list[int]   # x_0..x_{n-1}, the draft's prefix that survived
    next_token: int       # the replacement at the first rejection, or the bonus token
    num_accepted: int     # n, 0..k

    @property
    def tokens(self) -> list[int]:
        """Everything this round appends to the sequence: accepted + [next_token] (1..k+1 tokens)."""
        return [*self.accepted, self.next_token]


def _as_token_list(name: str, tokens) -> list[int]:
    if isinstance(tokens, torch.Tensor):
        if tokens.dim() != 1 or tokens.is_floating_point() or tokens.dtype == torch.bool:
            raise ValueError(f"{name} must be a 1-D integer tensor or a list of ints, got {tokens.dtype} "
                             f"of shape {tuple(tokens.shape)}")
        return [int(t) for t in tokens.tolist()]
    values = list(tokens)
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in values):
        raise ValueError(f"{name} must be a list of ints (or a 1-D integer tensor)")
    return values


def _check_probs(name: str, probs, rows: int, what: str, why: str) -> None:
    if not isinstance(probs, torch.Tensor) or not probs.is_floating_point() or probs.dim() != 2:
        got = tuple(probs.shape) if isinstance(probs, torch.Tensor) else type(probs).__name__
        raise ValueError(f"{name} must be a float tensor of shape ({what}, V), got {got}")
    if probs.shape[0] != rows:
        raise ValueError(f"{name} must have {what} = {rows} rows ({why}), got shape {tuple(probs.shape)}")
    if not torch.isfinite(probs).all() or (probs < 0).any():
        raise ValueError(f"{name} must be finite and non-negative; pass probabilities (softmax), not logits")


def _check_inputs(draft_tokens, draft_probs, target_probs, generator) -> list[int]:
    if not isinstance(generator, torch.Generator):
        raise TypeError("accept_or_resample needs an explicit torch.Generator, e.g. "
                        f"torch.Generator().manual_seed(0); got {type(generator).__name__}")
    tokens = _as_token_list("draft_tokens", draft_tokens)
    k = len(tokens)
    if k < 1:
        raise ValueError("draft_tokens is empty; speculative decoding needs k >= 1 drafted tokens "
                         "(with nothing drafted, sample from the target as usual)")
    _check_probs("draft_probs", draft_probs, k, "k", "one per drafted token")
    _check_probs("target_probs", target_probs, k + 1, "k + 1", "one per drafted token plus the bonus position")
    if draft_probs.shape[1] != target_probs.shape[1]:
        raise ValueError(f"draft and target vocabularies differ: draft_probs has V = {draft_probs.shape[1]}, "
                         f"target_probs has V = {target_probs.shape[1]}; the two models must share a tokenizer")
    if draft_probs.device != target_probs.device:
        raise ValueError(f"draft_probs is on {draft_probs.device} but target_probs on {target_probs.device}; "
                         "move them to one device")
    vocab = draft_probs.shape[1]
    if any(t < 0 or t >= vocab for t in tokens):
        raise ValueError(f"draft_tokens must lie in [0, {vocab}), got {tokens}")
    return tokens


@torch.no_grad()
def accept_or_resample(draft_tokens: Sequence[int] | torch.Tensor, draft_probs: torch.Tensor,
                       target_probs: torch.Tensor, generator: torch.Generator) -> SpeculativeResult:
    """Verify one sequence's k drafted tokens against the target (the exact rejection-sampling rule).

    draft_tokens (k,), draft_probs q (k, V): the distributions the draft sampled them from;
    target_probs p (k + 1, V): the target's distributions at each drafted position plus one more.

    Greedy decoding needs no special case: with one-hot p and q the ratio p(x)/q(x) is 1 when the
    draft chose the target's argmax and 0 otherwise, and the residual max(0, p - q) is p itself,
    so this returns exactly what ``accept_greedy`` returns (which skips building one-hot rows).

    Raises ValueError when a drafted token has q(x) = 0 (the draft could not have sampled it: the
    wrong rows were passed) and for shapes that do not fit (k, V) / (k + 1, V); TypeError without
    an explicit generator (the global RNG is never used, so rounds can be replayed).
    """
    tokens = _check_inputs(draft_tokens, draft_probs, target_probs, generator)
    k = len(tokens)
    rows = torch.arange(k, device=draft_probs.device)  # (k,)
    index = torch.tensor(tokens, device=draft_probs.device)  # (k,)
    q_x = draft_probs[rows, index].double()  # (k,)
    p_x = target_probs[rows, index].double()  # (k,)
    if (q_x <= 0).any():
        bad = [tokens[i] for i in (q_x <= 0).nonzero().flatten().tolist()]
        raise ValueError(f"draft token(s) {bad} have probability 0 under draft_probs, so the draft cannot "
                         "have sampled them; pass the distributions the tokens were actually drawn from")
    u = torch.rand(k, generator=generator, dtype=torch.float64,
                   device=generator.device).to(q_x.device)  # (k,)
    # u < p/q happens with probability min(1, p/q) because u lies in [0, 1).
    kept = u < p_x / q_x  # (k,)
    num_accepted = int(kept.long().cumprod(dim=0).sum())  # length of the all-kept prefix; the one sync
    if num_accepted == k:
        final = target_probs[k].double()  # (V,) the bonus position
    else:
        p, q = target_probs[num_accepted].double(), draft_probs[num_accepted].double()  # (V,) each
        residual = (p - q).clamp_min(0)  # (V,)
        # After a rejection p(x) < q(x), so some other token has p > q and the residual is positive.
        # Only rounding (p and q equal to the last bit, or rows not summing to 1) can leave it empty;
        # then p itself is the honest fallback: it is what the target would have sampled anyway.
        final = torch.where(residual.sum() > 0, residual, p)  # (V,)
    next_token = int(sample_from_probs(final, generator))  # normalised inside: u is scaled by the row's total
    return SpeculativeResult(tokens[:num_accepted], next_token, num_accepted)


def accept_greedy(draft_tokens: Sequence[int] | torch.Tensor,
                  target_tokens: Sequence[int] | torch.Tensor) -> SpeculativeResult:
    """Greedy verify: keep drafted tokens while they equal the target's argmax, then take the target's.

    target_tokens (k + 1,) are the target's argmax at each drafted position plus one more, so the
    output is token for token what greedy decoding with the target alone would produce.
    """
    drafted = _as_token_list("draft_tokens", draft_tokens)
    target = _as_token_list("target_tokens", target_tokens)
    if not drafted:
        raise ValueError("draft_tokens is empty; speculative decoding needs k >= 1 drafted tokens")
    if len(target) != len(drafted) + 1:
        raise ValueError(f"target_tokens must hold k + 1 = {len(drafted) + 1} argmax tokens (one per drafted "
                         f"position plus the bonus position), got {len(target)}")
    n = 0
    while n < len(drafted) and drafted[n] == target[n]:
        n += 1
    return SpeculativeResult(drafted[:n], target[n], n)


def ngram_propose(token_ids: Sequence[int] | torch.Tensor, k: int, *, max_ngram: int = 3,
                  min_ngram: int = 1) -> list[int]:
    """Prompt lookup decoding: propose up to k tokens by copying what followed the sequence's tail before.

    For n = max_ngram down to min_ngram, find the most recent earlier occurrence of the last n
    tokens and return the (up to k) tokens that followed it; a longer match wins because it is
    better evidence. Returns [] when no tail n-gram occurred before (the caller then decodes
    normally). Chat replies that quote the prompt (JSON fields, tool arguments) are where this
    pays off.

    >>> ngram_propose([1, 2, 3, 4, 1, 2, 9, 1, 2], k=3)   # the latest "1 2" was followed by 9, 1, 2
    [9, 1, 2]
    >>> ngram_propose([1, 2, 3], k=2)
    []
    """
    positive_int("k", k)
    positive_int("min_ngram", min_ngram)
    positive_int("max_ngram", max_ngram)
    if max_ngram < min_ngram:
        raise ValueError(f"max_ngram ({max_ngram}) must be >= min_ngram ({min_ngram})")
    ids = torch.tensor(_as_token_list("token_ids", token_ids), dtype=torch.long)  # (L,)
    length = ids.shape[0]
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        windows = ids.unfold(0, n, 1)[:-1]  # (L - n, n): every n-gram that has a token after it
        hits = (windows == ids[-n:]).all(dim=1).nonzero().flatten()  # starts of earlier matches
        if hits.numel():
            start = int(hits[-1]) + n  # the most recent match: the freshest context
            return ids[start:start + k].tolist()
    return []


def acceptance_rate(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> float:
    """alpha = sum_x min(p(x), q(x)): the chance one drafted token is kept, for distributions (V,).

    >>> acceptance_rate(torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.25, 0.25, 0.5]))
    0.5
    """
    if target_probs.shape != draft_probs.shape or target_probs.dim() != 1:
        raise ValueError(f"acceptance_rate takes two distributions of shape (V,), got "
                         f"{tuple(target_probs.shape)} and {tuple(draft_probs.shape)}")
    return float(torch.minimum(target_probs.double(), draft_probs.double()).sum())


def expected_tokens_per_round(alpha: float, k: int) -> float:
    """(1 - alpha^(k+1)) / (1 - alpha): tokens emitted per target pass when each draft token is
    kept with probability alpha independently (Leviathan et al. 2023, eq. 1).

    >>> expected_tokens_per_round(0.0, 4), expected_tokens_per_round(1.0, 4), expected_tokens_per_round(0.5, 2)
    (1.0, 5.0, 1.75)
    """
    positive_int("k", k)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha is a probability in [0, 1], got {alpha}")
    return float(k + 1) if alpha == 1.0 else (1 - alpha ** (k + 1)) / (1 - alpha)
