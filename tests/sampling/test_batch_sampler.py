"""sample_batch: each row exactly as sample_next_token alone, from its own stream; and the
shared pipeline against the single processors (themselves checked against Hugging Face)."""
from __future__ import annotations

import random

import pytest
import torch

from course_lib.sampling import (
    SamplingParams,
    apply_frequency_presence_penalties,
    apply_min_p,
    apply_repetition_penalty,
    apply_temperature,
    apply_token_mask,
    apply_top_k,
    apply_top_p,
    process_logits,
    sample_batch,
    sample_from_probs,
    sample_next_token,
)
from course_lib.sampling.batch import filter_rows

INF = float("inf")


# --- seeded random cases -----------------------------------------------------------------------

def random_params(rng: random.Random, vocab: int) -> SamplingParams:
    """A mix of greedy and sampling rows, each processor on or off with its own value."""
    penalties = dict(repetition_penalty=rng.choice([1.0, 1.0, 1.3, 0.7]),
                     frequency_penalty=rng.choice([0.0, 0.0, 0.5, -0.4]),
                     presence_penalty=rng.choice([0.0, 0.0, 0.6, -1.0]))
    if rng.random() < 0.25:
        return SamplingParams(temperature=0, **penalties)
    return SamplingParams(temperature=rng.choice([1.0, 0.7, 1.6, 0.05]),
                          top_k=rng.choice([0, 0, 1, 2, 5, 40, vocab - 1, vocab + 3]),
                          top_p=rng.choice([1.0, 1.0, 0.9, 0.5, 0.999, 1e-6]),
                          min_p=rng.choice([0.0, 0.0, 0.05, 0.3, 1.0]), **penalties)


def random_case(seed: int):
    """Logits (B, V) with ties and -inf, counts, an optional mask, params and seeds per row."""
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    batch, vocab = rng.randint(1, 16), rng.choice([3, 7, 50, 1000, 1030])
    logits = torch.randn(batch, vocab, generator=g) * rng.choice([1.0, 4.0])
    if rng.random() < 0.4:
        logits = logits.round()  # many exact ties, also at the k-th logit
    if rng.random() < 0.4:
        logits[torch.rand(batch, vocab, generator=g) < 0.3] = -INF
        logits[:, 0] = 1.0  # keep every row alive
    output_counts = torch.randint(0, 3, (batch, vocab), generator=g)
    seen_counts = output_counts + torch.randint(0, 2, (batch, vocab), generator=g)
    allowed = None
    if rng.random() < 0.5:
        allowed = torch.rand(batch, vocab, generator=g) < 0.6
        allowed[:, 0] = True
    params = [random_params(rng, vocab) for _ in range(batch)]
    seeds = [rng.randrange(2**31) for _ in range(batch)]
    return logits, output_counts, seen_counts, allowed, params, seeds


def streams(params, seeds, *, none_for_greedy: bool = True):
    return [None if p.greedy and none_for_greedy else torch.Generator().manual_seed(s)
            for p, s in zip(params, seeds)]


def row_of(tensor, i):
    return None if tensor is None else tensor[i:i + 1]


def one_by_one(logits, output_counts, seen_counts, allowed, params, generators):
    """The contract: each row alone through sample_next_token with its own generator."""
    return torch.stack([sample_next_token(logits[i:i + 1], params[i], generators[i],
                                          output_counts=row_of(output_counts, i),
                                          seen_counts=row_of(seen_counts, i),
                                          allowed=row_of(allowed, i))[0]
                        for i in range(logits.shape[0])])


def same_states(a, b) -> bool:
    return all((x is None and y is None) or torch.equal(x.get_state(), y.get_state()) for x, y in zip(a, b))


# --- the contract ------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(60))
def test_each_row_is_sample_next_token_alone_and_draws_the_same(seed):
    logits, output_counts, seen_counts, allowed, params, seeds = random_case(seed)
    batched, alone = streams(params, seeds), streams(params, seeds)
    for _ in range(3):  # three steps: the streams must stay in step too
        tokens = sample_batch(logits, params, batched, output_counts=output_counts,
                              seen_counts=seen_counts, allowed=allowed)
        expected = one_by_one(logits, output_counts, seen_counts, allowed, params, alone)
        assert tokens.dtype == torch.long and tokens.shape == (logits.shape[0],)
        assert torch.equal(tokens, expected)
        assert same_states(batched, alone)


def test_a_rows_token_does_not_depend_on_its_batch():
    vocab = 1000
    g = torch.Generator().manual_seed(0)
    mine = SamplingParams(temperature=0.9, top_k=40, top_p=0.9, min_p=0.02, repetition_penalty=1.2)
    row = torch.randn(1, vocab, generator=g) * 3
    counts = torch.randint(0, 2, (1, vocab), generator=g)
    alone_stream = torch.Generator().manual_seed(7)
    alone = [int(sample_batch(row, [mine], [alone_stream], seen_counts=counts)[0]) for _ in range(8)]
    rng = random.Random(1)
    for position in (0, 9, 15):
        others = [random_params(rng, vocab) for _ in range(16)]
        others[position] = mine
        logits = torch.randn(16, vocab, generator=g) * 3
        logits[position] = row[0]
        seen = torch.randint(0, 3, (16, vocab), generator=g)
        seen[position] = counts[0]
        gens = streams(others, [rng.randrange(2**31) for _ in range(16)], none_for_greedy=False)
        gens[position] = torch.Generator().manual_seed(7)
        batched = [int(sample_batch(logits, others, gens, output_counts=seen, seen_counts=seen)[position])
                   for _ in range(8)]
        assert batched == alone, f"row {position} of 16 drew {batched}, alone it drew {alone}"
        assert torch.equal(gens[position].get_state(), alone_stream.get_state())


def test_greedy_rows_draw_nothing_and_need_no_generator():
    logits = torch.tensor([[0.0, 5.0, 5.0, 1.0], [3.0, 1.0, 2.0, 0.0], [1.0, 2.0, 3.0, 4.0]])
    g = torch.Generator().manual_seed(3)
    before = g.get_state()
    params = [SamplingParams(temperature=0), SamplingParams(temperature=0, repetition_penalty=4.0),
              SamplingParams(temperature=0.5)]
    seen = torch.tensor([[0, 0, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    tokens = sample_batch(logits, params, [None, None, g], seen_counts=seen)
    assert tokens[:2].tolist() == [1, 2]  # the first maximal logit; 3 / 4 < 2 after the penalty
    draws = torch.Generator().set_state(before)
    torch.rand(1, 1, generator=draws, dtype=torch.float64)  # the one draw of the sampling row
    assert torch.equal(g.get_state(), draws.get_state())


def test_the_contract_check_catches_a_shared_stream():
    """Drawing every row from one generator (as sample_next_token does for a batch) breaks the
    per-row contract, so the checks above have power."""
    logits = torch.randn(8, 50, generator=torch.Generator().manual_seed(0))
    params = [SamplingParams(temperature=1.2)] * 8
    expected = one_by_one(logits, None, None, None, params, [torch.Generator().manual_seed(5)] * 8)
    shared = sample_next_token(logits, params[0], torch.Generator().manual_seed(5))
    own = sample_batch(logits, params, [torch.Generator().manual_seed(5) for _ in range(8)])
    assert not torch.equal(shared, own)
    assert torch.equal(own[:1], expected[:1])


# --- the pipeline against the single processors --------------------------------------------------

def chained(logits, params, output_counts=None, seen_counts=None, allowed=None):
    """The processors one by one, in process_logits's order (each checked against Hugging Face)."""
    out = logits
    if params.repetition_penalty != 1:
        out = apply_repetition_penalty(out, seen_counts, params.repetition_penalty)
    if params.frequency_penalty or params.presence_penalty:
        out = apply_frequency_presence_penalties(out, output_counts, params.frequency_penalty,
                                                 params.presence_penalty)
    if allowed is not None:
        out = apply_token_mask(out, allowed)
    out = apply_temperature(out, params.temperature)
    return apply_min_p(apply_top_p(apply_top_k(out, params.top_k), params.top_p), params.min_p)


@pytest.mark.parametrize("seed", range(40))
def test_batched_pipeline_equals_the_processors_chained(seed):
    logits, output_counts, seen_counts, allowed, params, seeds = random_case(seed)
    processed = filter_rows(logits, params, output_counts=output_counts, seen_counts=seen_counts,
                            allowed=allowed).processed_logits()
    tokens = sample_batch(logits, params, streams(params, seeds), output_counts=output_counts,
                          seen_counts=seen_counts, allowed=allowed)
    for i, (p, s) in enumerate(zip(params, seeds)):
        expected = chained(logits[i:i + 1], p, row_of(output_counts, i), row_of(seen_counts, i), row_of(allowed, i))
        assert torch.equal(processed[i:i + 1], expected), f"row {i}, {p}"  # same -inf, same values
        draw = (expected.argmax(-1) if p.greedy else
                sample_from_probs(torch.softmax(expected.double(), -1), torch.Generator().manual_seed(s)))
        assert int(tokens[i]) == int(draw), f"row {i}, {p}"


def test_the_documented_tie_rules_hold_per_row():
    """processors.py's rules, each row of one batch with its own values."""
    kept = lambda logits, params: torch.isfinite(filter_rows(logits, params).processed_logits()).tolist()
    halves = torch.log(torch.tensor([0.5, 0.25, 0.25])).expand(4, 3)
    assert kept(halves, [SamplingParams(top_p=0.5), SamplingParams(top_p=0.6), SamplingParams(top_p=1e-9),
                         SamplingParams(top_p=1.0)]) == [
        [True, False, False],  # the top token's 0.5 reaches p = 0.5
        [True, True, True],    # 0.5 < 0.6: the next joins, and its twin with it
        [True, False, False],  # the top token is always kept
        [True, True, True]]
    # p exactly the mass ranked above the second token: that token stays out (it is < p that joins).
    probs = torch.softmax(halves[0].double(), -1)
    boundary = float((probs.cumsum(-1) - probs)[1])
    assert kept(halves[:1], [SamplingParams(top_p=boundary)]) == [[True, False, False]]
    fifths = torch.log(torch.tensor([0.4, 0.4, 0.2])).expand(2, 3)
    assert kept(fifths, [SamplingParams(min_p=1.0), SamplingParams(min_p=0.3)]) == [
        [True, True, False], [True, True, True]]  # ties with the bound (the top) stay
    ranked = torch.tensor([3.0, 1.0, 1.0, 0.0]).expand(3, 4)
    assert kept(ranked, [SamplingParams(top_k=2), SamplingParams(top_k=1), SamplingParams(top_k=4)]) == [
        [True, True, True, False], [True, False, False, False], [True, True, True, True]]
    first = torch.tensor([[1.0, 3.0, 3.0, -2.0]])
    assert kept(first, [SamplingParams(temperature=0)]) == [[False, True, False, False]]


def test_ties_with_the_kth_logit_reaching_past_the_shortlist_are_kept():
    logits = torch.zeros(2, 300)
    logits[0, :5] = 1.0  # k = 3 lands inside a run of 5 ties; row 1: every logit ties
    processed = process_logits(logits, SamplingParams(top_k=3))
    assert torch.isfinite(processed).sum(-1).tolist() == [5, 300]
    tokens = {int(sample_batch(logits[1:], [SamplingParams(top_k=3)], [torch.Generator().manual_seed(s)])[0])
              for s in range(200)}
    assert len(tokens) > 100  # drawn from all 300 tied tokens, not from a shortlist of 4


def test_a_tiny_temperature_is_the_argmax_limit():
    logits = torch.tensor([[10.0, 9.0, -INF, 3.0], [1.0, 2.0, 3.0, 4.0]])
    params = [SamplingParams(temperature=1e-40, top_k=3), SamplingParams(temperature=1e-40)]
    processed = filter_rows(logits, params).processed_logits()
    assert torch.isfinite(processed).tolist() == [[True, False, False, False], [False, False, False, True]]
    assert sample_batch(logits, params, [torch.Generator(), torch.Generator()]).tolist() == [0, 3]


def test_one_shared_mask_or_counts_row_broadcasts_in_process_logits():
    logits = torch.randn(3, 20, generator=torch.Generator().manual_seed(2))
    allowed = torch.arange(20) % 2 == 0  # (V,) for every row
    out = process_logits(logits, SamplingParams(top_k=4), allowed=allowed)
    assert torch.isfinite(out[:, 1::2]).sum() == 0 and torch.isfinite(out).sum(-1).tolist() == [4, 4, 4]


# --- clear errors ------------------------------------------------------------------------------

def test_bad_inputs_are_rejected_clearly():
    logits = torch.zeros(2, 5)
    sampling, greedy = SamplingParams(temperature=0.7), SamplingParams(temperature=0)
    g = [torch.Generator(), torch.Generator()]
    with pytest.raises(ValueError, match="got 1 params for 2 rows"):
        sample_batch(logits, [sampling], g)
    with pytest.raises(ValueError, match="got 3 generators for 2 rows"):
        sample_batch(logits, [sampling, sampling], g + g[:1])
    with pytest.raises(TypeError, match=r"row 1 samples .* needs its own torch.Generator"):
        sample_batch(logits, [greedy, sampling], [None, None])
    with pytest.raises(TypeError, match=r"params\[0\] must be a SamplingParams"):
        sample_batch(logits, [{"temperature": 1.0}, sampling], g)
    with pytest.raises(ValueError, match=r"logits must be \(B, V\)"):
        sample_batch(torch.zeros(5), [sampling], g[:1])
    with pytest.raises(ValueError, match=r"seen_counts must be a tensor shaped like the logits \(2, 5\)"):
        sample_batch(logits, [sampling] * 2, g, seen_counts=torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"allowed must be a tensor shaped like the logits"):
        sample_batch(logits, [sampling] * 2, g, allowed=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="allowed must be a bool tensor"):
        sample_batch(logits, [sampling] * 2, g, allowed=torch.ones(2, 5))
    with pytest.raises(ValueError, match="pass seen_counts"):
        sample_batch(logits, [sampling, SamplingParams(repetition_penalty=1.2)], g)
    with pytest.raises(ValueError, match="pass output_counts"):
        sample_batch(logits, [SamplingParams(presence_penalty=0.5), sampling], g)
    with pytest.raises(TypeError, match="floating point"):
        sample_batch(logits.long(), [sampling] * 2, g)


def test_broken_or_empty_rows_raise_and_take_nothing_from_the_streams():
    params = [SamplingParams(temperature=0.7)] * 2
    g = [torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)]
    before = [x.get_state() for x in g]
    with pytest.raises(ValueError, match="NaN"):
        sample_batch(torch.tensor([[0.0, float("nan")], [0.0, 1.0]]), params, g)
    with pytest.raises(ValueError, match=r"\+inf"):
        sample_batch(torch.tensor([[0.0, 1.0], [INF, 1.0]]), params, g)
    with pytest.raises(ValueError, match=r"row\(s\) \[1\] was filtered out"):
        sample_batch(torch.tensor([[0.0, 1.0], [0.0, 1.0]]), params, g,
                     allowed=torch.tensor([[True, True], [False, False]]))
    with pytest.raises(ValueError, match="filtered out"):  # as sample_next_token: every x / T is -inf
        sample_batch(torch.tensor([[-1.0, -2.0], [0.0, 1.0]]), [SamplingParams(temperature=1e-40)] * 2, g)
    assert all(torch.equal(x.get_state(), b) for x, b in zip(g, before))
