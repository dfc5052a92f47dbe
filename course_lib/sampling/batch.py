"""One sampling step for a batch whose rows each have their own SamplingParams and generator.

>>> logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 1.0]])
>>> params = [SamplingParams(temperature=0), SamplingParams(temperature=0.8, top_k=2)]
>>> sample_batch(logits, params, [None, torch.Generator().manual_seed(0)])
tensor([1, 2])

The contract: row i's token is exactly ``sample_next_token(logits[i:i+1], params[i],
generators[i], ...)[0]``, and row i takes exactly what that call takes from its generator
(one float64 uniform; nothing when greedy). So a request's tokens never depend on what else
shares its batch. ``sample_next_token`` and ``process_logits`` are this same pipeline with one
params for every row, so the sampler is written once; the single processors in processors.py
(checked against Hugging Face's warpers) are its reference, and the tests hold the two equal.

Why it is fast:
- Per-row parameters become (B, 1) columns once per call (a plain number when every row shares
  it). A processor no row uses is skipped; for a row that does not use it, it is an exact no-op
  (penalty 1 or 0, p = 1, min_p = 0). Penalties, the mask and the shortlists are the only
  passes over all V tokens.
- Shortlists. Top-k keeps a row's k best logits (and ties with the k-th), and every later
  step only removes tokens, so one ``torch.topk`` of k + 1 columns holds every token that can
  still be drawn: temperature, top-p, min-p and the draw then cost O(k), not O(V). Top-p
  without top-k sorts the row once. Rows with neither work on the whole row, unsorted.
- One small read-back per call, because correctness needs it: a row with NaN, +inf or nothing
  left cannot be sampled (it raises rather than return a meaningless token), and a shortlist
  cut inside a run of ties with the k-th logit must be widened. Nothing else waits for the
  device, except that rare widening (exact ties) or a T so small that x / T overflows.

How a row finds its candidates depends on its own params only, never on its batch, and every
rule works row by row, so a row computes the same floats alone or batched: padding a
best-first row with rejected (-inf) columns, as a wider shortlist does, changes neither its
softmax nor its cumulative sums (PyTorch's CPU kernels, where the tests check it).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from course_lib.sampling.params import SamplingParams
from course_lib.sampling.processors import NEG_INF, check_logits, check_logits_shape

# How a row finds the tokens it may draw (its candidates), decided by its own params.
GREEDY = "greedy"        # temperature 0: the argmax, nothing to rank
TOP_K = "top-k"          # its k best logits: a torch.topk shortlist, best first
SORTED = "sorted"        # top-p without top-k: the whole row, sorted best first
WHOLE = "whole"          # temperature / min-p only: the whole row in vocabulary order
WIDEN = 4                # a top-k shortlist cut inside a run of ties grows by this factor


def shortlist_kind(params: SamplingParams, vocab_size: int) -> str:
    """GREEDY, TOP_K, SORTED or WHOLE: how a row under ``params`` finds its candidates."""
    if params.greedy:
        return GREEDY
    if 0 < params.top_k < vocab_size:
        return TOP_K
    if params.top_p < 1:
        return SORTED
    return WHOLE


@dataclass(frozen=True)
class _Group:
    """Rows of the batch that share a shortlist kind."""

    kind: str
    rows: list[int]             # their row numbers in the batch
    params: list[SamplingParams]
    index: torch.Tensor | None  # (b,) the row numbers on the logits' device; None = every row


@dataclass(frozen=True)
class _Shortlist:
    """A group's candidates after temperature, top-k, top-p and min-p."""

    values: torch.Tensor             # (b, w) processed logits in float64 (exact copies); -inf = rejected
    indices: torch.Tensor | None     # (b, w) their token IDs; None = all V tokens in vocabulary order
    top: torch.Tensor                # (b, 1) best scaled logit: +inf if x / T overflowed, -inf if none left
    last: torch.Tensor | None        # (b, 1) a top-k list's last scaled logit and ...
    kth: torch.Tensor | None         # (b, 1) ... its k-th: last >= k-th, ties may run past the list

    def checks(self) -> list[torch.Tensor]:
        """What the read-back needs to judge this list, (b, 1) each: top, then last and k-th."""
        return [c for c in (self.top, self.last, self.kth) if c is not None]

    def verdict(self, numbers: list[float]) -> tuple[bool, bool, list[int]]:
        """From the read-back of checks(): did x / T overflow, is the list too narrow, and
        which of its rows have no logit left (all -inf; see _apply_temperature)?"""
        rows = self.values.shape[0]
        overflowed = math.inf in numbers[:rows]
        too_narrow = self.kth is not None and any(
            last >= kth and last > -math.inf  # the last column survives top-k: ties may run on
            for last, kth in zip(numbers[rows:2 * rows], numbers[2 * rows:]))
        return overflowed, too_narrow, [row for row, top in enumerate(numbers[:rows]) if top == -math.inf]


def sample_batch(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    generators: Sequence[torch.Generator | None],
    *,
    output_counts: torch.Tensor | None = None,
    seen_counts: torch.Tensor | None = None,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logits (B, V) -> tokens (B,), row i under ``params[i]`` and ``generators[i]``.

    ``output_counts`` / ``seen_counts`` (B, V) are needed when some row uses the frequency /
    presence or the repetition penalty (other rows' counts are ignored); ``allowed`` (B, V)
    bool is a grammar mask (all True for rows without one). Greedy rows may pass None as
    their generator; every other row needs its own.
    """
    check_logits_shape(logits)
    if logits.dim() != 2:
        raise ValueError(f"logits must be (B, V), one row per request, got {tuple(logits.shape)}; "
                         "use logits[None] for a single row")
    params, generators = list(params), list(generators)
    batch, vocab_size = logits.shape
    for name, given in (("params", params), ("generators", generators)):
        if len(given) != batch:
            raise ValueError(f"got {len(given)} {name} for {batch} rows of logits; pass one per row")
    for row, (p, generator) in enumerate(zip(params, generators)):
        if not isinstance(p, SamplingParams):
            raise TypeError(f"params[{row}] must be a SamplingParams, got {type(p).__name__}")
        if not p.greedy and not isinstance(generator, torch.Generator):
            raise TypeError(f"row {row} samples (temperature {p.temperature}) and needs its own "
                            f"torch.Generator, got {type(generator).__name__}; only greedy rows "
                            "(temperature 0) may pass None")
    for name, tensor in (("output_counts", output_counts), ("seen_counts", seen_counts), ("allowed", allowed)):
        if tensor is not None and (not isinstance(tensor, torch.Tensor) or tensor.shape != logits.shape):
            got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ValueError(f"{name} must be a tensor shaped like the logits {(batch, vocab_size)}, "
                             f"one row per request, got {got}")
    filtered = filter_rows(logits, params, output_counts=output_counts, seen_counts=seen_counts,
                           allowed=allowed)
    filtered.check_alive()  # before any draw: a failed call takes nothing from the generators
    return filtered.sample(_draw_uniforms(params, generators, logits.device))


def _draw_uniforms(params: list[SamplingParams], generators: list, device: torch.device) -> torch.Tensor | None:
    """(B, 1) float64: each sampling row's uniform from its own generator, drawn exactly as
    ``sample_next_token`` draws it; greedy rows draw nothing (0 stands in). None if all greedy."""
    if all(p.greedy for p in params):
        return None
    draws = [None if p.greedy else
             torch.rand(1, 1, generator=g, dtype=torch.float64, device=g.device)  # (1, 1)
             for p, g in zip(params, generators)]
    if len(draws) == 1:
        return draws[0]
    devices = {d.device for d in draws if d is not None}
    home = devices.pop() if len(devices) == 1 else device  # one copy to the logits, not one per row
    return torch.cat([torch.zeros(1, 1, dtype=torch.float64, device=home) if d is None else d.to(home)
                      for d in draws])  # (B, 1)


class FilteredRows:
    """Rows after penalties, mask and their filters, ready to draw from (see ``filter_rows``)."""

    def __init__(self, x: torch.Tensor, parts: list[tuple[_Group, _Shortlist | None]], *,
                 empty_rows: list[int]):
        self.x = x  # (B, V) penalised and masked logits
        self.parts = parts  # [(group, its shortlist, or None for greedy rows)]
        self.empty_rows = empty_rows  # rows with no logit left, which cannot be sampled

    def check_alive(self) -> None:
        """Raise if a row has nothing left to sample (every logit -inf)."""
        if self.empty_rows:
            raise _filtered_out(self.empty_rows)

    def sample(self, uniforms: torch.Tensor | None) -> torch.Tensor:
        """Uniforms (B, 1) float64, on any device (greedy rows ignore theirs; None when every
        row is greedy) -> tokens (B,)."""
        self.check_alive()
        x = self.x
        if uniforms is None and any(g.kind != GREEDY for g, _ in self.parts):
            raise ValueError("rows that sample need uniforms (B, 1): one float64 draw per row")
        uniforms = None if uniforms is None else _send(uniforms, x.device)
        tokens = x.argmax(dim=-1) if any(g.kind == GREEDY for g, _ in self.parts) else None  # (B,)
        for group, shortlist in self.parts:
            if group.kind == GREEDY:
                continue
            drawn = _draw(shortlist, _select(uniforms, group), x.shape[-1])  # (b,)
            if group.index is None:
                tokens = drawn
            else:
                tokens = torch.empty(x.shape[0], dtype=torch.long, device=x.device) if tokens is None else tokens
                tokens.index_copy_(0, group.index, drawn)
        return torch.empty(0, dtype=torch.long, device=x.device) if tokens is None else tokens  # None: no rows

    def processed_logits(self) -> torch.Tensor:
        """The processed logits (B, V) the draw uses; -inf = rejected."""
        x, out = self.x, None
        for group, shortlist in self.parts:
            if group.kind == GREEDY:  # only the first maximal logit survives, as argmax picks it
                rows = _select(x, group)  # (b, V)
                top = rows.argmax(dim=-1, keepdim=True)  # (b, 1)
                processed = torch.full_like(rows, NEG_INF).scatter(-1, top, rows.gather(-1, top))
            else:
                processed = _in_vocabulary(shortlist, x)  # (b, V)
            if group.index is None:
                out = processed
            else:
                out = torch.empty_like(x) if out is None else out
                out.index_copy_(0, group.index, processed)
        return x.clone() if out is None else out  # None: no rows


def filter_rows(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    *,
    output_counts: torch.Tensor | None = None,
    seen_counts: torch.Tensor | None = None,
    allowed: torch.Tensor | None = None,
) -> FilteredRows:
    """The pipeline up to the draw, for logits (B, V) with one params per row. Counts and
    ``allowed`` are (B, V), or (V,) / (1, V) shared by every row.

    Penalties and the mask run on every row, then each group of rows builds its shortlist; one
    read-back then checks everything (NaN or +inf raise here; rows with nothing left raise
    when sampled).
    """
    check_logits_shape(logits)
    if logits.dim() != 2 or len(params) != logits.shape[0]:
        raise ValueError(f"need logits (B, V) and one params per row, got {tuple(logits.shape)} "
                         f"and {len(params)} params")
    x = _penalise_and_mask(logits, params, output_counts, seen_counts, allowed)  # (B, V)
    parts = [(g, None if g.kind == GREEDY else _shortlist(_select(x, g), g.params, g.kind, _width(g, x)))
             for g in _group_rows(params, x.shape[-1], x.device)]

    top = x.amax(dim=-1, keepdim=True)  # (B, 1): NaN if a NaN in the row, +inf if a +inf, -inf if all -inf
    checks = [top, *(c for _, s in parts if s is not None for c in s.checks())]
    read = [v for (v,) in torch.cat(checks).tolist()]  # the one read-back of the call
    tops, start = read[:len(params)], len(params)
    if any(t != t or t == math.inf for t in tops):
        check_logits(x)  # raises, naming NaN or +inf
    empty = {row for row, t in enumerate(tops) if t == -math.inf}  # masked or banned entirely
    for i, (group, shortlist) in enumerate(parts):
        if shortlist is None:
            continue
        size = sum(c.numel() for c in shortlist.checks())
        overflowed, too_narrow, empty_here = shortlist.verdict(read[start:start + size])
        empty.update(group.rows[r] for r in empty_here)
        if overflowed or too_narrow:  # rare: a tiny T, or exact ties with the k-th logit
            parts[i] = (group, _redone(_select(x, group), group, shortlist, too_narrow))
        start += size
    return FilteredRows(x, parts, empty_rows=sorted(empty))


# --- the pipeline ------------------------------------------------------------------------------

def process_logits(
    logits: torch.Tensor,
    params: SamplingParams,
    *,
    output_counts: torch.Tensor | None = None,
    seen_counts: torch.Tensor | None = None,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """The whole pipeline, in the order serving engines apply it:
    repetition penalty -> frequency/presence penalties -> grammar mask -> temperature ->
    top-k -> top-p -> min-p.

    ``allowed`` (bool, shaped like the logits) is a structured-output grammar's mask. It comes
    before the filters on purpose: top-k, top-p and min-p rank tokens by probability, and
    ranked over the whole vocabulary they could keep only tokens the grammar forbids (then
    the mask would leave nothing) or size the nucleus by mass the grammar throws away.
    Masked first, the filters choose among legal tokens only. (Temperature commutes with the
    mask: -inf / T is still -inf.)

    ``output_counts`` counts the generated tokens (frequency and presence penalties, as in
    OpenAI's API); ``seen_counts`` counts prompt and generated tokens (repetition penalty, as
    in Hugging Face). Each is needed only when its penalty is on.

    The pipeline is written once, vectorised over rows that may each have their own params
    (``filter_rows`` below); here every row follows ``params``. It applies the same rules as
    the single processors of ``processors.py`` (tested against them and against Hugging
    Face's warpers).
    """
    check_logits_shape(logits)
    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
    rows = logits.reshape(-1, logits.shape[-1])  # (B, V)
    filtered = filter_rows(rows, [params] * rows.shape[0], output_counts=output_counts,
                           seen_counts=seen_counts, allowed=allowed)
    return filtered.processed_logits().to(logits.dtype).reshape(logits.shape)


def _penalise_and_mask(logits, params, output_counts, seen_counts, allowed) -> torch.Tensor:
    """Repetition penalty -> frequency/presence penalties -> grammar mask, on every row (B, V).

    These are the passes over the whole vocabulary, so they are plain arithmetic (torch.where
    and sign tests are several times slower over (B, V) on the CPU), and they work in place in
    (B, V) buffers of their own rather than allocate a fresh tensor per step.
    """
    # float32 or float64 arithmetic; half-precision logits are widened first.
    x = logits if logits.dtype in (torch.float32, torch.float64) else logits.float()
    counts = spare = None  # (B, V) buffers of our own, reused below
    repetition = [p.repetition_penalty for p in params]
    if any(r != 1 for r in repetition):
        if seen_counts is None:
            raise ValueError("repetition_penalty is on: pass seen_counts (prompt + generated tokens)")
        seen = counts = _as_float(_per_row("seen_counts", seen_counts, x), x).clamp_(0, 1)  # (B, V): 1 = seen
        # From 1 to r by seen: exactly 1 (weight 0) or exactly r (weight 1), as torch.lerp rounds.
        one = torch.ones(1, 1, dtype=x.dtype, device=x.device)
        penalty = spare = torch.lerp(one, _column(repetition, x.dtype, x.device), seen)  # (B, V)
        # Hugging Face's rule divides a positive logit by r and multiplies a negative one: for
        # r >= 1 that is the smaller of x * r and x / r, for r < 1 the larger; r = 1 keeps x.
        up, down = x * penalty, torch.div(x, penalty, out=penalty)  # (B, V) each
        below_one = [row for row, r in enumerate(repetition) if r < 1]
        larger = torch.maximum(up, down) if below_one else None
        x = torch.minimum(up, down, out=up)  # ours from here on
        if below_one:
            rows = _send(torch.tensor(below_one), x.device)
            x.index_copy_(0, rows, larger.index_select(0, rows))
    frequency = [p.frequency_penalty for p in params]
    presence = [p.presence_penalty for p in params]
    if any(f != 0 or q != 0 for f, q in zip(frequency, presence)):
        if output_counts is None:
            raise ValueError("frequency/presence penalties are on: pass output_counts (generated tokens)")
        generated = _as_float(_per_row("output_counts", output_counts, x), x, into=counts)  # (B, V)
        by_frequency = torch.mul(generated, _factor(frequency, x), out=spare)  # (B, V)
        x = x.sub_(by_frequency) if x is not logits else x - by_frequency  # ours from here on
        x -= generated.clamp_(0, 1).mul_(_factor(presence, x))  # presence once if generated
    if allowed is not None:
        allowed = _per_row("allowed", allowed, x)
        if allowed.dtype != torch.bool:
            raise ValueError(f"allowed must be a bool tensor shaped like the logits, got {allowed.dtype}")
        x = x.masked_fill(~allowed, NEG_INF)
    return x


def _shortlist(x: torch.Tensor, params: list[SamplingParams], kind: str, width: int, *,
               shift_overflow: bool = False) -> _Shortlist:
    """Temperature, top-k, top-p and min-p for one group's sampling rows x (b, V)."""
    vocab_size = x.shape[-1]
    if kind == WHOLE:
        values, indices = x, None
    elif width < vocab_size:
        values, indices = x.topk(width, dim=-1)  # (b, w), best first
    else:
        values, indices = x.sort(dim=-1, descending=True)  # (b, V), best first
    # Dividing by T > 0 keeps the order, so the shortlist is also the best of the scaled logits.
    values = _apply_temperature(values, params, shift_overflow=shift_overflow)
    top = values[:, :1] if kind != WHOLE else values.amax(dim=-1, keepdim=True)  # (b, 1)
    edge = None  # (last column, k-th): if the last one survives, more ties may lie past the list
    if kind == TOP_K:
        ks = [p.top_k for p in params]
        if all(k == ks[0] for k in ks):  # one k: a slice, not a gather
            kth = values[:, ks[0] - 1:ks[0]]  # (b, 1)
        else:
            kth = values.gather(-1, _column([k - 1 for k in ks], torch.long, x.device))  # (b, 1)
        if width < vocab_size:  # (with all V columns nothing lies beyond)
            edge = (values[:, -1:], kth)
        values = values.masked_fill(values < kth, NEG_INF)  # ties with the k-th are kept
    values = values.double()  # exact copies, as the softmaxes below need float64
    if any(p.top_p < 1 for p in params):
        values = _apply_top_p(values, params)
    if any(p.min_p > 0 for p in params):
        values = _apply_min_p(values, params, best_first=kind != WHOLE)
    return _Shortlist(values, indices, top, *(edge or (None, None)))


def _width(group: _Group, x: torch.Tensor) -> int:
    """Shortlist columns: k + 1 for the largest k (one spare column shows whether ties run on)."""
    vocab_size = x.shape[-1]
    if group.kind == TOP_K:
        return min(vocab_size, max(p.top_k for p in group.params) + 1)
    return vocab_size


def _redone(x: torch.Tensor, group: _Group, shortlist: _Shortlist, too_narrow: bool) -> _Shortlist:
    """The shortlist again, overflowing rows shifted (see _apply_temperature), and WIDEN times
    wider for as long as ties with the k-th logit may reach past it (one read-back each)."""
    width = shortlist.values.shape[-1]
    while True:
        if too_narrow:
            width = min(x.shape[-1], width * WIDEN)
        shortlist = _shortlist(x, group.params, group.kind, width, shift_overflow=True)
        _, too_narrow, _ = shortlist.verdict([v for (v,) in torch.cat(shortlist.checks()).tolist()])
        if not too_narrow:
            return shortlist


def _apply_temperature(values: torch.Tensor, params: list[SamplingParams], *,
                       shift_overflow: bool) -> torch.Tensor:
    """values / T for every row (T > 0: greedy rows are elsewhere).

    Where a tiny T overflows (x / T = +inf, seen in the read-back), the row is redone with
    ``shift_overflow``: shifted by its max first (softmax is shift-invariant), which sends every
    non-maximal logit to -inf, the exact T -> 0 limit. Other rows shift by 0: x - 0 is x.
    As in processors.apply_temperature, only +inf is caught: a row of negative logits whose
    x / T all reach -inf is left with nothing, and sampling it raises.
    """
    temperatures = [p.temperature for p in params]
    if all(t == 1 for t in temperatures):
        return values
    temperature = _column(temperatures, values.dtype, values.device)  # (b, 1)
    if not shift_overflow:
        return values / temperature
    top = values.amax(dim=-1, keepdim=True)  # (b, 1)
    shift = torch.where(torch.isposinf(top / temperature), top, 0.0)  # (b, 1)
    return (values - shift) / temperature


def _apply_top_p(values: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Nucleus filter on best-first rows (b, w), with the tie rule of processors.apply_top_p."""
    top_p = _factor([p.top_p for p in params], values)  # a number or (b, 1)
    probs = torch.softmax(values, dim=-1)  # (b, w), best first
    mass_before = probs.cumsum(dim=-1) - probs  # mass ranked above each
    in_nucleus = (mass_before < top_p) & (probs > 0)  # the top token always is
    smallest_kept = torch.where(in_nucleus, probs, math.inf).amin(dim=-1, keepdim=True)  # (b, 1)
    if any(p.top_p == 1 for p in params):  # p = 1 keeps every token, whatever the rounding
        smallest_kept = torch.where(top_p < 1, smallest_kept, 0.0)
    return values.masked_fill(probs < smallest_kept, NEG_INF)  # ties with the smallest are kept


def _apply_min_p(values: torch.Tensor, params: list[SamplingParams], *, best_first: bool) -> torch.Tensor:
    """Keep probability >= min_p x the row's top one (ties stay); min_p = 0 keeps all."""
    min_p = _factor([p.min_p for p in params], values)  # a number or (b, 1)
    probs = torch.softmax(values, dim=-1)  # (b, w)
    top = probs[:, :1] if best_first else probs.amax(dim=-1, keepdim=True)  # (b, 1)
    return values.masked_fill(probs < min_p * top, NEG_INF)


def _draw(shortlist: _Shortlist, uniforms: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Inverse CDF, one uniform per row (b, 1) -> tokens (b,), exactly as sample_from_probs."""
    probs = torch.softmax(shortlist.values, dim=-1)  # (b, w)
    indices = shortlist.indices
    # The CDF runs in vocabulary order, as in sample_from_probs, so a uniform picks the same token.
    if indices is not None and probs.shape[-1] == vocab_size:  # a sorted whole row: put it back
        probs, indices = torch.zeros_like(probs).scatter_(-1, indices, probs), None
    elif indices is not None:  # a shortlist: sort its few columns by token ID
        indices, order = indices.sort(dim=-1)  # (b, w)
        probs = probs.gather(-1, order)
    cdf = probs.cumsum(dim=-1)  # (b, w)
    # The uniform is scaled by the row's total, so rounding never pushes the draw past the end.
    picks = torch.searchsorted(cdf, uniforms * cdf[:, -1:], right=True)  # (b, 1)
    picks = picks.clamp_max(cdf.shape[-1] - 1)
    return (picks if indices is None else indices.gather(-1, picks)).squeeze(-1)


def _in_vocabulary(shortlist: _Shortlist, x: torch.Tensor) -> torch.Tensor:
    """A shortlist's processed logits back in place (b, V) in x's dtype; off the list is -inf."""
    values = shortlist.values.to(x.dtype)  # exact: they are x's values, scaled in x's dtype
    if shortlist.indices is None:
        return values
    return torch.full((values.shape[0], x.shape[-1]), NEG_INF, dtype=x.dtype,
                      device=x.device).scatter(-1, shortlist.indices, values)


# --- small helpers -----------------------------------------------------------------------------

def check_rows_alive(logits: torch.Tensor) -> None:
    """Raise if a row of logits (V,) or (B, V) is all -inf: it has no distribution to sample."""
    dead = torch.isneginf(logits).all(dim=-1).reshape(-1)  # (B,)
    if dead.any():
        raise _filtered_out(dead.nonzero().flatten().tolist())


def _filtered_out(rows: list[int]) -> ValueError:
    return ValueError(f"every token of row(s) {rows[:8]} was filtered out (all logits -inf); "
                      "loosen top_k/top_p/min_p or check the mask that banned them")


def _group_rows(params: list[SamplingParams], vocab_size: int, device: torch.device) -> list[_Group]:
    rows_of: dict[str, list[int]] = {}
    for row, p in enumerate(params):
        rows_of.setdefault(shortlist_kind(p, vocab_size), []).append(row)
    return [_Group(kind, rows, [params[r] for r in rows],
                   None if len(rows) == len(params) else _send(torch.tensor(rows), device))
            for kind, rows in rows_of.items()]


def _select(tensor: torch.Tensor, group: _Group) -> torch.Tensor:
    """A group's rows of a (B, ...) tensor (no copy when the group is the whole batch)."""
    return tensor if group.index is None else tensor.index_select(0, group.index)


def _factor(values: list[float], like: torch.Tensor) -> float | torch.Tensor:
    """A per-row parameter to multiply or compare ``like`` with: a Python number when every row
    shares it (no tensor to build; it is cast to like's dtype first, so results are the same),
    else a (b, 1) column. Not for division: CUDA divides by a number as x * (1 / n)."""
    if all(v == values[0] for v in values):
        return values[0]
    return _column(values, like.dtype, like.device)


def _column(values: list, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A per-row parameter as a (b, 1) column."""
    return _send(torch.tensor([[v] for v in values], dtype=dtype), device)


def _send(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Host tensor -> device without waiting for the device (pinned, so the copy is truly async)."""
    if tensor.device == device:
        return tensor
    if tensor.device.type == "cpu" and device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def _as_float(counts: torch.Tensor, x: torch.Tensor, into: torch.Tensor | None = None) -> torch.Tensor:
    """Counts (B, V) or (1, V) as a (B, V) float tensor of our own (``into``, if given)."""
    return (torch.empty_like(x) if into is None else into).copy_(counts)


def _per_row(name: str, tensor: object, x: torch.Tensor) -> torch.Tensor:
    """Counts or a mask for the rows of x (B, V): (B, V), or (V,) / (1, V) shared by every row."""
    batch, vocab_size = x.shape
    ok = isinstance(tensor, torch.Tensor) and tensor.dim() in (1, 2) and tensor.shape[-1] == vocab_size
    if ok and tensor.dim() == 2 and tensor.shape[0] not in (1, batch):
        ok = False
    if not ok:
        got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        fix = " (use token_counts(ids, vocab_size))" if name.endswith("counts") else ""
        raise ValueError(f"{name} must be a tensor shaped like the logits {(batch, vocab_size)}{fix}, got {got}")
    if tensor.dim() == 1 or tensor.device != x.device:
        tensor = tensor.reshape(-1, vocab_size).to(x.device)
    return tensor  # (B, V) or (1, V)
