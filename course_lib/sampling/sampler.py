"""Turning processed logits into a token: argmax, or one seeded draw from the distribution.

The draw uses inverse-CDF sampling: one uniform number u per row, taken from an explicit
``torch.Generator``, picks the first token whose cumulative probability exceeds u. The
uniforms are drawn on the generator's device and then moved, so a CPU generator gives the
same stream whether the logits live on the CPU or a GPU.

>>> g = torch.Generator().manual_seed(0)
>>> probs = torch.tensor([0.1, 0.6, 0.3])
>>> sample_from_probs(probs, g)           # u = 0.9701 falls in token 2's slice [0.7, 1.0)
tensor(2)
>>> sample_next_token(torch.tensor([0.0, 3.0, 1.0]), SamplingParams(temperature=0))
tensor(1)
"""
from __future__ import annotations

import torch

from course_lib.sampling.batch import check_rows_alive, filter_rows
from course_lib.sampling.params import SamplingParams
from course_lib.sampling.batch import process_logits
from course_lib.sampling.processors import check_logits_shape


def _check_generator(generator: object) -> torch.Generator:
    if not isinstance(generator, torch.Generator):
        raise TypeError(
            "sampling needs an explicit torch.Generator, e.g. torch.Generator().manual_seed(0); "
            f"got {type(generator).__name__} (the global RNG is never used, so runs can be replayed)"
        )
    return generator


def sample_from_probs(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One draw per row from probabilities (V,) -> () or (B, V) -> (B,), by inverse CDF.

    Rows need not sum exactly to 1: the uniform is scaled by each row's total, so rounding can
    never push the draw past the last token, and a token with probability 0 is never chosen.
    """
    _check_generator(generator)
    if not isinstance(probs, torch.Tensor) or probs.dim() not in (1, 2) or not probs.is_floating_point():
        raise ValueError("probs must be a float tensor of shape (V,) or (B, V)")
    if (probs < 0).any() or not torch.isfinite(probs).all():
        raise ValueError("probs must be finite and non-negative")
    rows = probs.reshape(-1, probs.shape[-1]).double()  # (B, V)
    cdf = rows.cumsum(dim=-1)  # (B, V)
    total = cdf[:, -1:]  # (B, 1)
    if (total <= 0).any():
        raise ValueError("a row of probs sums to 0; there is nothing to sample")
    u = torch.rand(rows.shape[0], 1, generator=generator, dtype=torch.float64,
                   device=generator.device).to(rows.device)  # (B, 1)
    picks = torch.searchsorted(cdf, u * total, right=True).clamp_max(rows.shape[-1] - 1)  # (B, 1)
    picks = picks.squeeze(-1)  # (B,)
    return picks[0] if probs.dim() == 1 else picks


def next_token_probs(
    logits: torch.Tensor,
    params: SamplingParams,
    *,
    output_counts: torch.Tensor | None = None,
    seen_counts: torch.Tensor | None = None,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """The exact distribution the sampler draws from (float32, rows sum to 1)."""
    processed = process_logits(logits, params, output_counts=output_counts, seen_counts=seen_counts,
                               allowed=allowed)
    check_rows_alive(processed)
    return torch.softmax(processed.float(), dim=-1)


def sample_next_token(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None = None,
    *,
    output_counts: torch.Tensor | None = None,
    seen_counts: torch.Tensor | None = None,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logits (V,) -> token () or (B, V) -> tokens (B,), following ``params``.

    Greedy (temperature 0) takes the argmax of the penalised logits and draws nothing, so it
    needs no generator; every other setting draws exactly one uniform per row. ``allowed``
    is a grammar's token mask (see ``process_logits`` for where it applies). This is
    ``sample_batch`` with every row under ``params`` and all uniforms from one generator.
    """
    check_logits_shape(logits)
    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
    if not params.greedy:
        _check_generator(generator)
    rows = logits.reshape(-1, logits.shape[-1])  # (B, V)
    filtered = filter_rows(rows, [params] * rows.shape[0], output_counts=output_counts,
                           seen_counts=seen_counts, allowed=allowed)
    filtered.check_alive()  # before the draw: a failed call takes nothing from the generator
    uniforms = None
    if not params.greedy:
        uniforms = torch.rand(rows.shape[0], 1, generator=generator, dtype=torch.float64,
                              device=generator.device)  # (B, 1), on the generator's device
    tokens = filtered.sample(uniforms)  # (B,)
    return tokens[0] if logits.dim() == 1 else tokens


class Sampler:
    """A decoding rule bound to its random stream: ``Sampler(params, generator)(logits)``.

    >>> sampler = Sampler(SamplingParams(temperature=0.8, top_k=2), torch.Generator().manual_seed(1))
    >>> sampler(torch.tensor([[1.0, 2.0, 0.5], [0.0, 0.0, 5.0]])).shape
    torch.Size([2])
    """

    def __init__(self, params: SamplingParams, generator: torch.Generator | None = None):
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
        if not params.greedy:
            _check_generator(generator)
        self.params = params
        self.generator = generator

    def __call__(self, logits: torch.Tensor, *, output_counts: torch.Tensor | None = None,
                 seen_counts: torch.Tensor | None = None) -> torch.Tensor:
        return sample_next_token(logits, self.params, self.generator,
                                 output_counts=output_counts, seen_counts=seen_counts)
