"""The sampler: right distribution (chi-square), seeded determinism, greedy, batches, bad input."""
from __future__ import annotations

import pytest
import torch

from course_lib.sampling import (
    Sampler,
    SamplingParams,
    chi_square_gof,
    next_token_probs,
    sample_counts,
    sample_from_probs,
    sample_next_token,
)

INF = float("inf")


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("params", [
    SamplingParams(),
    SamplingParams(temperature=0.5),
    SamplingParams(temperature=2.0),
    SamplingParams(top_k=4),
    SamplingParams(top_p=0.8),
    SamplingParams(min_p=0.1, temperature=1.3),
])
def test_empirical_distribution_matches_softmax(params):
    z = torch.randn(12, generator=gen(5)) * 1.5
    # Expected: the textbook softmax of the filtered, temperature-scaled logits.
    expected = torch.softmax(z / params.temperature, -1)
    if params.top_k:
        expected[expected < expected.topk(params.top_k).values[-1]] = 0
    expected = expected / expected.sum()
    counts = sample_counts(z, params, 20000, gen(1))
    result = chi_square_gof(counts, next_token_probs(z, params).double())
    assert result.consistent(), result
    if not params.top_p < 1 and not params.min_p:
        assert chi_square_gof(counts, expected.double()).consistent()


def test_chi_square_catches_a_biased_sampler():
    """The same check fails a sampler that ignores the temperature (the test has power)."""
    z = torch.randn(12, generator=gen(5)) * 1.5
    counts = sample_counts(z, SamplingParams(temperature=1.0), 20000, gen(2))
    wrong = next_token_probs(z, SamplingParams(temperature=0.8)).double()
    assert chi_square_gof(counts, wrong).p_value < 1e-6


def test_filtered_tokens_are_never_drawn():
    z = torch.randn(30, generator=gen(3))
    params = SamplingParams(top_k=5, top_p=0.9)
    counts = sample_counts(z, params, 5000, gen(4))
    allowed = next_token_probs(z, params) > 0
    assert counts[~allowed].sum() == 0
    z2 = torch.tensor([0.0, -INF, 0.0, -INF])
    assert sample_counts(z2, SamplingParams(), 2000, gen(0))[[1, 3]].sum() == 0


def test_same_seed_same_tokens_different_seed_different_tokens():
    z = torch.randn(8, 100, generator=gen(0))
    params = SamplingParams(temperature=1.2, top_p=0.95)
    g1, g2 = gen(42), gen(42)
    first = [sample_next_token(z, params, g1) for _ in range(5)]   # five steps of one stream
    again = [sample_next_token(z, params, g2) for _ in range(5)]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, first[1:]))  # the stream moves on
    assert not torch.equal(sample_next_token(z, params, gen(43)), first[0])


def test_greedy_is_argmax_and_draws_nothing():
    z = torch.randn(4, 50, generator=gen(9))
    g = gen(0)
    state = g.get_state()
    assert torch.equal(sample_next_token(z, SamplingParams(temperature=0), g), z.argmax(-1))
    assert torch.equal(g.get_state(), state)
    assert int(sample_next_token(torch.tensor([1.0, 5.0, 5.0]), SamplingParams(temperature=0))) == 1


def test_greedy_respects_repetition_penalty():
    z = torch.tensor([3.0, 2.0, 0.0])
    params = SamplingParams(temperature=0, repetition_penalty=2.0)
    assert int(sample_next_token(z, params, seen_counts=torch.tensor([1, 0, 0]))) == 1


def test_batched_sampling_shapes_and_rows():
    z = torch.randn(5, 20, generator=gen(1))
    out = sample_next_token(z, SamplingParams(top_k=3), gen(0))
    assert out.shape == (5,) and out.dtype == torch.long
    for b in range(5):
        assert int(out[b]) in z[b].topk(3).indices.tolist()
    assert sample_next_token(z[0], SamplingParams(), gen(0)).shape == ()


def test_sampler_class_binds_params_and_generator():
    z = torch.randn(3, 10, generator=gen(2))
    a = Sampler(SamplingParams(temperature=0.7), gen(5))
    b = Sampler(SamplingParams(temperature=0.7), gen(5))
    assert all(torch.equal(a(z), b(z)) for _ in range(4))
    with pytest.raises(TypeError, match="explicit torch.Generator"):
        Sampler(SamplingParams(temperature=0.7))
    Sampler(SamplingParams(temperature=0))  # greedy needs no generator


def test_inverse_cdf_by_hand():
    probs = torch.tensor([[0.2, 0.0, 0.8], [0.5, 0.5, 0.0]])
    g = gen(0)
    u = torch.rand(2, 1, generator=gen(0), dtype=torch.float64).flatten().tolist()
    expected = [0 if u[0] < 0.2 else 2, 0 if u[1] < 0.5 else 1]
    assert sample_from_probs(probs, g).tolist() == expected


def test_errors_are_clear():
    z = torch.zeros(5)
    with pytest.raises(TypeError, match="explicit torch.Generator"):
        sample_next_token(z, SamplingParams(temperature=1.0))
    with pytest.raises(TypeError, match="explicit torch.Generator"):
        sample_next_token(z, SamplingParams(), 1234)
    with pytest.raises(ValueError, match=r"row\(s\) \[1\] was filtered out"):
        sample_next_token(torch.tensor([[0.0, 1.0], [-INF, -INF]]), SamplingParams(), gen(0))
    with pytest.raises(ValueError, match="filtered out"):
        sample_next_token(torch.full((3,), -INF), SamplingParams(temperature=0))
    with pytest.raises(TypeError, match="params must be a SamplingParams"):
        sample_next_token(z, {"temperature": 1.0}, gen(0))
    with pytest.raises(ValueError, match="sums to 0"):
        sample_from_probs(torch.zeros(3), gen(0))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cpu_generator_gives_the_same_tokens_on_cuda():
    z = torch.randn(4, 100, generator=gen(0))
    params = SamplingParams(temperature=0.9, top_p=0.9)
    cpu = sample_next_token(z, params, gen(7))
    cuda = sample_next_token(z.cuda(), params, gen(7))
    assert torch.equal(cpu, cuda.cpu())
