"""Logit processors: each takes logits (V,) or (B, V) and returns a new tensor of the same shape.

Filters never renormalise; they set rejected tokens to -inf, so the softmax that follows
spreads the remaining mass over the survivors. Rows of a batch are processed independently.

>>> z = torch.tensor([2.0, 1.0, 0.0, -1.0])
>>> apply_top_k(z, 2)
tensor([2., 1., -inf, -inf])
>>> apply_top_p(z, 0.7)            # p = [0.64, 0.24, 0.09, 0.03]: 0.64 < 0.7, so add the next
tensor([2., 1., -inf, -inf])
>>> apply_min_p(z, 0.2)            # keep p >= 0.2 x 0.64 = 0.128
tensor([2., 1., -inf, -inf])
>>> apply_temperature(z, 0)        # temperature 0: only the argmax survives
tensor([2., -inf, -inf, -inf])

Edge-case rules (tested):
- temperature 0 keeps only the first maximal logit, which is exactly what argmax picks.
- top_k ties: every token whose logit equals the k-th largest is kept (as in Hugging Face's
  TopKLogitsWarper), so k = 2 over [3, 1, 1] keeps three tokens. k >= V (or 0) keeps all.
- top_p keeps the smallest high-probability set whose mass reaches p (a token is kept when
  the mass of the tokens ranked above it is still below p), then also keeps every token tied
  in probability with the least likely member, so the result never depends on how a sort
  orders equal values. top_p = 1.0 keeps every token.
- min_p keeps tokens with probability >= min_p x (top probability); ties with the bound stay.
- -inf logits mean "impossible": they stay -inf through every processor and never count
  toward probability mass. A row that ends up all -inf is rejected by the sampler.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from course_lib.sampling.params import (
    SamplingParams,
    _number,
    check_min_p,
    check_repetition_penalty,
    check_temperature,
    check_top_k,
    check_top_p,
)

NEG_INF = float("-inf")


def check_logits_shape(logits: object) -> torch.Tensor:
    """Logits must be a float tensor (V,) or (B, V): checked on the host, without reading data."""
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if not logits.is_floating_point():
        raise TypeError(f"logits must be floating point, got {logits.dtype}; call .float() first")
    if logits.dim() not in (1, 2) or logits.shape[-1] == 0:
        raise ValueError(f"logits must have shape (V,) or (B, V) with V >= 1, got {tuple(logits.shape)}")
    return logits


def check_logits(logits: object) -> torch.Tensor:
    """Logits must be a float tensor (V,) or (B, V) with no NaN and no +inf."""
    check_logits_shape(logits)
    if torch.isnan(logits).any():
        raise ValueError("logits contain NaN; the model output is broken (check inputs and weights)")
    if torch.isposinf(logits).any():
        raise ValueError("logits contain +inf; use a large finite value to force a token, -inf to ban one")
    return logits


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Divide logits by T (T < 1 sharpens, T > 1 flattens); T = 0 keeps only the argmax."""
    check_logits(logits)
    temperature = check_temperature(temperature)
    if temperature == 0:
        top = logits.argmax(dim=-1, keepdim=True)  # (..., 1): first maximal index, as argmax
        return torch.full_like(logits, NEG_INF).scatter(-1, top, logits.gather(-1, top))
    scaled = logits / temperature
    if torch.isposinf(scaled).any():
        # A tiny T overflowed: shift by the row max first (softmax is shift-invariant), which
        # sends every non-maximal logit to -inf, the exact T -> 0 limit.
        top = logits.amax(dim=-1, keepdim=True)  # (..., 1)
        scaled = (logits - top) / temperature
    return scaled


def apply_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k largest logits (and ties with the k-th); k = 0 or k >= V keeps all."""
    check_logits(logits)
    k = check_top_k(k)
    if k == 0 or k >= logits.shape[-1]:
        return logits.clone()
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1): the k-th largest per row
    return logits.masked_fill(logits < kth, NEG_INF)


def apply_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filter: keep the smallest most-likely set whose probability reaches p."""
    check_logits(logits)
    p = check_top_p(p)
    if p == 1.0:
        return logits.clone()
    # float64 so that cumulative sums land on the right side of p for ordinary inputs.
    probs = torch.softmax(logits.double(), dim=-1)                       # (..., V)
    sorted_probs, _ = probs.sort(dim=-1, descending=True)                # (..., V)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs             # mass ranked above each
    in_nucleus = (mass_before < p) & (sorted_probs > 0)                  # the top token always is
    smallest_kept = sorted_probs.masked_fill(~in_nucleus, float("inf")).amin(dim=-1, keepdim=True)
    return logits.masked_fill(probs < smallest_kept, NEG_INF)           # ties with it are kept


def apply_min_p(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Keep tokens whose probability is at least min_p times the top token's; 0 keeps all."""
    check_logits(logits)
    min_p = check_min_p(min_p)
    if min_p == 0:
        return logits.clone()
    probs = torch.softmax(logits.double(), dim=-1)  # (..., V)
    bound = min_p * probs.amax(dim=-1, keepdim=True)  # (..., 1)
    return logits.masked_fill(probs < bound, NEG_INF)


def token_counts(token_ids, vocab_size: int, *, device=None) -> torch.Tensor:
    """How often each token ID occurs: ids (L,) -> counts (V,); (B, L) or a list of lists -> (B, V).

    >>> token_counts([3, 1, 3], 5)
    tensor([0, 1, 0, 2, 0])
    """
    if isinstance(token_ids, torch.Tensor):
        rows = token_ids.tolist() if token_ids.dim() == 2 else [token_ids.tolist()]
        one_dim = token_ids.dim() == 1
    else:
        token_ids = list(token_ids)
        one_dim = not token_ids or not isinstance(token_ids[0], (Sequence, torch.Tensor))
        rows = [token_ids] if one_dim else [list(r) for r in token_ids]
    counts = torch.zeros(len(rows), vocab_size, dtype=torch.long, device=device)  # (B, V)
    for b, row in enumerate(rows):
        bad = [t for t in row if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size]
        if bad:
            raise ValueError(f"token IDs {bad[:5]} are outside the vocabulary 0..{vocab_size - 1}")
        if row:
            counts[b] = torch.bincount(torch.tensor(row, device=device), minlength=vocab_size)
    return counts[0] if one_dim else counts


def _check_counts(logits: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    if not isinstance(counts, torch.Tensor) or counts.shape[-1] != logits.shape[-1]:
        got = tuple(counts.shape) if isinstance(counts, torch.Tensor) else type(counts).__name__
        raise ValueError(f"counts must be a tensor shaped like the logits {tuple(logits.shape)} "
                         f"(use token_counts(ids, vocab_size)), got {got}")
    return counts.to(logits.device)


def apply_frequency_presence_penalties(
    logits: torch.Tensor, counts: torch.Tensor, frequency_penalty: float, presence_penalty: float
) -> torch.Tensor:
    """OpenAI's rule: logit -= count x frequency_penalty + (count > 0) x presence_penalty.

    >>> apply_frequency_presence_penalties(torch.zeros(3), torch.tensor([0, 1, 3]), 0.5, 1.0)
    tensor([ 0.0000, -1.5000, -2.5000])
    """
    check_logits(logits)
    counts = _check_counts(logits, counts)
    frequency_penalty = _number("frequency_penalty", frequency_penalty)
    presence_penalty = _number("presence_penalty", presence_penalty)
    counts = counts.to(logits.dtype)
    return logits - counts * frequency_penalty - (counts > 0).to(logits.dtype) * presence_penalty


def apply_repetition_penalty(logits: torch.Tensor, counts: torch.Tensor, penalty: float) -> torch.Tensor:
    """Hugging Face's multiplicative rule for tokens already present (count > 0):
    positive logits are divided by ``penalty``, negative ones multiplied by it.

    >>> apply_repetition_penalty(torch.tensor([2.0, -2.0, 2.0]), torch.tensor([1, 1, 0]), 2.0)
    tensor([ 1., -4.,  2.])
    """
    check_logits(logits)
    counts = _check_counts(logits, counts)
    penalty = check_repetition_penalty(penalty)
    penalised = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(counts > 0, penalised, logits)


def apply_token_mask(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Ban every token whose ``allowed`` entry is False (a grammar's mask, shaped like the logits).

    >>> apply_token_mask(torch.tensor([2.0, 1.0, 0.0]), torch.tensor([False, True, True]))
    tensor([-inf, 1., 0.])
    """
    check_logits(logits)
    if not isinstance(allowed, torch.Tensor) or allowed.dtype != torch.bool or allowed.shape != logits.shape:
        got = (allowed.dtype, tuple(allowed.shape)) if isinstance(allowed, torch.Tensor) else type(allowed).__name__
        raise ValueError(f"allowed must be a bool tensor shaped like the logits {tuple(logits.shape)}, got {got}")
    return logits.masked_fill(~allowed.to(logits.device), NEG_INF)
