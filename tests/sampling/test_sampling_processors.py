"""Logit processors against Hugging Face's warpers, the OpenAI penalty formula and properties."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.sampling import (
    SamplingParams,
    apply_frequency_presence_penalties,
    apply_min_p,
    apply_repetition_penalty,
    apply_temperature,
    apply_top_k,
    apply_top_p,
    process_logits,
    token_counts,
)

transformers = pytest.importorskip("transformers")
INF = float("inf")


def seeded_logits(seed: int, batch: int = 4, vocab: int = 50, scale: float = 3.0) -> torch.Tensor:
    return torch.randn(batch, vocab, generator=torch.Generator().manual_seed(seed)) * scale  # (B, V)


def same(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal -inf masks and equal finite values."""
    assert torch.equal(torch.isneginf(a), torch.isneginf(b))
    finite = torch.isfinite(a)
    torch.testing.assert_close(a[finite], b[finite])


def hf(warper, logits, input_ids=None):
    input_ids = torch.zeros(logits.shape[0], 1, dtype=torch.long) if input_ids is None else input_ids
    return warper(input_ids, logits.clone())


# --- Hugging Face oracles ----------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("t", [0.3, 0.7, 1.0, 1.5, 4.0])
def test_temperature_matches_hf(seed, t):
    z = seeded_logits(seed)
    same(apply_temperature(z, t), hf(transformers.TemperatureLogitsWarper(t), z))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("k", [1, 2, 5, 17, 49, 50])
def test_top_k_matches_hf(seed, k):
    z = seeded_logits(seed)
    same(apply_top_k(z, k), hf(transformers.TopKLogitsWarper(k), z))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.8, 0.9, 0.95, 0.999])
def test_top_p_matches_hf(seed, p):
    z = seeded_logits(seed)
    same(apply_top_p(z, p), hf(transformers.TopPLogitsWarper(p), z))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("m", [0.01, 0.05, 0.1, 0.3, 0.9])
def test_min_p_matches_hf(seed, m):
    z = seeded_logits(seed)
    same(apply_min_p(z, m), hf(transformers.MinPLogitsWarper(m), z))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("penalty", [0.5, 1.2, 2.0])
def test_repetition_penalty_matches_hf(seed, penalty):
    z = seeded_logits(seed)
    ids = torch.randint(0, z.shape[-1], (z.shape[0], 12), generator=torch.Generator().manual_seed(seed + 100))
    ours = apply_repetition_penalty(z, token_counts(ids, z.shape[-1]), penalty)
    same(ours, hf(transformers.RepetitionPenaltyLogitsProcessor(penalty), z, ids))


def test_pipeline_matches_hf_chain():
    """Temperature -> top-k -> top-p -> min-p, as Hugging Face's generate orders its warpers."""
    z = seeded_logits(7, vocab=200)
    ids = torch.randint(0, 200, (4, 20), generator=torch.Generator().manual_seed(8))
    chain = transformers.LogitsProcessorList([
        transformers.RepetitionPenaltyLogitsProcessor(1.3), transformers.TemperatureLogitsWarper(0.8),
        transformers.TopKLogitsWarper(40), transformers.TopPLogitsWarper(0.9), transformers.MinPLogitsWarper(0.05),
    ])
    params = SamplingParams(temperature=0.8, top_k=40, top_p=0.9, min_p=0.05, repetition_penalty=1.3)
    same(process_logits(z, params, seen_counts=token_counts(ids, 200)), chain(ids, z.clone()))


# --- the OpenAI penalty formula ----------------------------------------------------------------

def test_frequency_presence_against_the_formula_token_by_token():
    z = seeded_logits(3, batch=2, vocab=10)
    generated = [[1, 1, 1, 4, 9], [0, 0, 2]]
    out = apply_frequency_presence_penalties(z, token_counts(generated, 10), 0.7, 0.4)
    for b, row in enumerate(generated):
        for token in range(10):
            count = row.count(token)
            expected = float(z[b, token]) - count * 0.7 - (count > 0) * 0.4
            assert math.isclose(float(out[b, token]), expected, rel_tol=1e-6, abs_tol=1e-6)


def test_negative_penalties_encourage_repeats():
    z = torch.zeros(3)
    out = apply_frequency_presence_penalties(z, torch.tensor([2, 0, 0]), -0.5, -1.0)
    assert out.tolist() == [2.0, 0.0, 0.0]


# --- edge cases (documented in processors.py) --------------------------------------------------

def test_temperature_zero_is_argmax_and_first_on_ties():
    z = torch.tensor([[1.0, 3.0, 3.0, -2.0], [0.0, -INF, 5.0, 4.9]])
    out = apply_temperature(z, 0)
    assert out.argmax(-1).tolist() == z.argmax(-1).tolist() == [1, 2]
    assert torch.isfinite(out).sum(-1).tolist() == [1, 1]


def test_tiny_temperature_does_not_overflow():
    z = torch.tensor([10.0, 9.0, -INF])
    out = apply_temperature(z, 1e-40)
    probs = torch.softmax(out, -1)
    assert not torch.isnan(probs).any() and probs.tolist() == [1.0, 0.0, 0.0]


def test_top_k_edge_cases():
    z = torch.tensor([3.0, 1.0, 1.0, 0.0])
    assert torch.isfinite(apply_top_k(z, 2)).tolist() == [True, True, True, False]  # ties kept
    assert torch.equal(apply_top_k(z, 1000), z) and torch.equal(apply_top_k(z, 0), z)  # k > V, off
    with_inf = torch.tensor([2.0, -INF, -INF, 1.0])
    assert torch.equal(apply_top_k(with_inf, 3), with_inf)  # the third "best" is -inf: nothing new


def test_top_p_edge_cases():
    z = torch.log(torch.tensor([0.5, 0.25, 0.25]))
    assert torch.equal(apply_top_p(z, 1.0), z)
    # 0.5 < 0.6, so the next token joins; its twin has the same probability and joins too.
    assert torch.isfinite(apply_top_p(z, 0.6)).tolist() == [True, True, True]
    assert torch.isfinite(apply_top_p(z, 0.5)).tolist() == [True, False, False]  # 0.5 reaches 0.5
    assert torch.isfinite(apply_top_p(z, 1e-9)).tolist() == [True, False, False]  # top always kept
    with_inf = torch.tensor([0.0, -INF, 0.0])
    assert torch.isfinite(apply_top_p(with_inf, 0.99)).tolist() == [True, False, True]


def test_min_p_edge_cases():
    z = torch.log(torch.tensor([0.4, 0.4, 0.2]))
    assert torch.isfinite(apply_min_p(z, 1.0)).tolist() == [True, True, False]  # ties with the top
    assert torch.equal(apply_min_p(z, 0.0), z)


def test_batched_rows_are_independent():
    z = seeded_logits(11, batch=6)
    params = SamplingParams(temperature=0.9, top_k=20, top_p=0.8, min_p=0.02)
    batched = process_logits(z, params)
    for b in range(z.shape[0]):
        same(batched[b], process_logits(z[b], params))


def test_processors_do_not_modify_their_input():
    z = seeded_logits(1)
    before = z.clone()
    for fn, arg in ((apply_temperature, 0.5), (apply_top_k, 3), (apply_top_p, 0.5), (apply_min_p, 0.2)):
        fn(z, arg)
    apply_repetition_penalty(z, torch.ones_like(z, dtype=torch.long), 2.0)
    assert torch.equal(z, before)


@pytest.mark.parametrize("call, message", [
    (lambda z: apply_temperature(z, -0.1), "temperature must be >= 0"),
    (lambda z: apply_top_k(z, -1), "top_k must be >= 0"),
    (lambda z: apply_top_p(z, 0.0), r"top_p must be in \(0, 1\]"),
    (lambda z: apply_top_p(z, 1.01), r"top_p must be in \(0, 1\]"),
    (lambda z: apply_min_p(z, -0.5), r"min_p must be in \[0, 1\]"),
    (lambda z: apply_repetition_penalty(z, torch.zeros(5, dtype=torch.long), 0.0), "repetition_penalty must be > 0"),
    (lambda z: apply_repetition_penalty(z, torch.zeros(3, dtype=torch.long), 1.2), "counts must be a tensor shaped"),
    (lambda z: apply_top_k(z.long(), 2), "logits must be floating point"),
    (lambda z: apply_top_k(z[None, None], 2), r"shape \(V,\) or \(B, V\)"),
    (lambda z: apply_top_k(torch.tensor([1.0, float("nan")]), 1), "NaN"),
    (lambda z: apply_top_p(torch.tensor([1.0, INF]), 0.5), r"\+inf"),
])
def test_bad_input_is_rejected_clearly(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call(torch.zeros(5))


def test_penalties_need_their_counts():
    with pytest.raises(ValueError, match="pass seen_counts"):
        process_logits(torch.zeros(5), SamplingParams(repetition_penalty=1.1))
    with pytest.raises(ValueError, match="pass output_counts"):
        process_logits(torch.zeros(5), SamplingParams(presence_penalty=0.5))


def test_token_counts_checks_ids():
    assert token_counts([[0, 0], [2]], 3).tolist() == [[2, 0, 0], [0, 0, 1]]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        token_counts([5], 3)


# --- properties --------------------------------------------------------------------------------

logit_rows = st.lists(st.floats(-20, 20, allow_nan=False), min_size=1, max_size=40).map(torch.tensor)


@settings(max_examples=150, deadline=None)
@given(z=logit_rows, p=st.floats(0.01, 1.0))
def test_top_p_keeps_the_smallest_set_reaching_p(z, p):
    kept = torch.isfinite(apply_top_p(z, p))
    probs = torch.softmax(z.double(), -1)
    eps = 1e-9
    assert probs[kept].sum() >= p - eps  # the kept set reaches p ...
    smallest = probs[kept].min()
    # ... every kept token is at least as likely as every dropped one ...
    assert (~kept).sum() == 0 or probs[~kept].max() <= smallest + eps
    # ... and without the tokens tied at the bottom it would fall short of p (minimality).
    assert probs[kept & (probs > smallest + eps)].sum() < p + eps


@settings(max_examples=150, deadline=None)
@given(z=logit_rows, k=st.integers(1, 50))
def test_top_k_keeps_at_least_k_and_only_the_best(z, k):
    kept = torch.isfinite(apply_top_k(z, k))
    assert int(kept.sum()) >= min(k, z.numel())
    assert (~kept).sum() == 0 or z[~kept].max() < z[kept].min()


@settings(max_examples=100, deadline=None)
@given(z=logit_rows, m=st.floats(0.0, 1.0))
def test_min_p_keeps_exactly_the_tokens_above_the_bound(z, m):
    kept = torch.isfinite(apply_min_p(z, m))
    probs = torch.softmax(z.double(), -1)
    assert torch.equal(kept, probs >= m * probs.max())


@settings(max_examples=100, deadline=None)
@given(z=logit_rows, t=st.floats(0.05, 10.0))
def test_temperature_keeps_the_order_and_softmax_is_a_power(z, t):
    # In float64: float32's rounding of z / T (z up to 20, T down to 0.05) alone moves a
    # probability by a few 1e-6, which is not what this identity is about.
    out = apply_temperature(z.double(), t)
    # softmax(z / T) is proportional to softmax(z) ** (1 / T)
    expected = torch.softmax(z.double(), -1) ** (1 / t)
    torch.testing.assert_close(torch.softmax(out.double(), -1), expected / expected.sum(), atol=1e-6, rtol=1e-5)
