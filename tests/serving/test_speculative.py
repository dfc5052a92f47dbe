"""Speculative decoding's verify rule against its promise: the emitted tokens follow the target.

Distribution checks run the rule thousands of times with seeded generators and compare the
emitted tokens with the target's probabilities by Pearson's chi-square test
(course_lib.sampling.stats); the seeds are fixed, so each p-value is a fixed number. A
known-wrong rule is run through the same test to show it has the power to fail.
"""
from __future__ import annotations

import pytest
import torch

from course_lib.data.corpus import heldout_split
from course_lib.model import load_model, load_tokenizer
from course_lib.generation import greedy_generate
from course_lib.sampling.sampler import sample_from_probs
from course_lib.sampling.stats import chi_square_gof
from course_lib.serving.speculative import (SpeculativeResult, accept_greedy, accept_or_resample, acceptance_rate,
                                            expected_tokens_per_round, ngram_propose)
from course_lib.tokenization.chat_template import END, encode_chat

V = 5


@pytest.fixture(autouse=True)
def _one_thread():
    """tinychat is tiny: one thread avoids oversubscribing a shared CPU (restored after), as in
    tests/model; with two threads these tests ran ~10x slower while other suites shared the cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _distributions(seed: int, rows: int, vocab: int = V) -> tuple[torch.Tensor, torch.Tensor]:
    """Target p and draft q, each (rows, vocab), that disagree: the draft never proposes token 0
    (only the residual can emit it) and the target bans token 1 (it must never come out)."""
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(rows, vocab, generator=g) * 1.5, dim=-1)  # (rows, V)
    q = torch.softmax(torch.randn(rows, vocab, generator=g) * 1.5, dim=-1)  # (rows, V)
    p[:, 1], q[:, 0] = 0.0, 0.0
    return p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)


def _draw(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return sample_from_probs(probs, generator)  # (B, V) -> (B,): the draft's own sampling


def _wrong_rule(draft_tokens, q, p, generator) -> SpeculativeResult:
    """A plausible mistake: on rejection, resample from p instead of the residual max(0, p - q)."""
    for i, x in enumerate(draft_tokens):
        u = float(torch.rand(1, generator=generator, dtype=torch.float64))
        if not u < float(p[i, x] / q[i, x]):
            return SpeculativeResult(list(draft_tokens[:i]), int(sample_from_probs(p[i], generator)), i)
    return SpeculativeResult(list(draft_tokens), int(sample_from_probs(p[-1], generator)), len(draft_tokens))


def _first_token_counts(rule, k: int, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    p, q = _distributions(seed, k + 1)
    q = q[:k]  # (k, V): one draft distribution per drafted position
    draft_gen, verify_gen = torch.Generator().manual_seed(seed + 1), torch.Generator().manual_seed(seed + 2)
    drafts = _draw(q.repeat(n, 1), draft_gen).reshape(n, k).tolist()  # (n, k) tokens, row i from q_i
    counts = torch.zeros(V, dtype=torch.long)
    for tokens in drafts:
        counts[rule(tokens, q, p, verify_gen).tokens[0]] += 1
    return counts, p[0]


# ---------------------------------------------------------------- the target's distribution
@pytest.mark.parametrize("k", [1, 3])
def test_first_emitted_token_follows_the_target(k):
    counts, p0 = _first_token_counts(accept_or_resample, k, n=6000, seed=10 + k)
    result = chi_square_gof(counts, p0)
    assert result.impossible_hits == 0  # token 1, banned by the target, never came out
    assert counts[0] > 0  # token 0, never drafted, came from the residual
    assert result.p_value > 1e-3, (counts.tolist(), p0.tolist(), result)


def test_the_chi_square_check_catches_a_wrong_rule():
    counts, p0 = _first_token_counts(_wrong_rule, 1, n=6000, seed=11)
    assert chi_square_gof(counts, p0).p_value < 1e-6


def test_first_two_tokens_follow_the_target_jointly():
    """k = 2 on a Markov pair: p(a) p(b | a). When a round emits one token, the next round
    (k = 1, drafted from q(. | a)) supplies the second, as it would in a real decode loop."""
    n, k, seed = 8000, 2, 20
    p0, q0 = _distributions(seed, 1)  # (1, V) first position
    p1, q1 = _distributions(seed + 1, V)  # (V, V): row a is the distribution after token a
    p2 = torch.full((V,), 1.0 / V)  # the bonus position: irrelevant to the pair
    draft_gen, verify_gen = torch.Generator().manual_seed(seed + 2), torch.Generator().manual_seed(seed + 3)
    first = _draw(q0.expand(n, V), draft_gen)  # (n,)
    second = _draw(q1[first], draft_gen)  # (n,): each row drafted after its own first token
    counts = torch.zeros(V, V, dtype=torch.long)
    rounds_of_one = 0
    for a, b in zip(first.tolist(), second.tolist()):
        emitted = accept_or_resample([a, b], torch.stack([q0[0], q1[a]]), torch.stack([p0[0], p1[a], p2]),
                                     verify_gen).tokens
        if len(emitted) == 1:
            rounds_of_one += 1
            head = emitted[0]
            again = int(_draw(q1[head], draft_gen))
            emitted += accept_or_resample([again], q1[head][None], torch.stack([p1[head], p2]), verify_gen).tokens
        counts[emitted[0], emitted[1]] += 1
    joint = p0[0][:, None] * p1  # (V, V): p(a) p(b | a)
    result = chi_square_gof(counts.flatten(), joint.flatten() / joint.sum())
    assert rounds_of_one > n // 10  # the second round really ran
    assert result.impossible_hits == 0 and result.p_value > 1e-3, result


# ---------------------------------------------------------------- acceptance rate
def test_acceptance_rate_matches_sum_of_min_p_q():
    n = 8000
    p, q = _distributions(30, 1)
    alpha = acceptance_rate(p[0], q[0])
    draft_gen, verify_gen = torch.Generator().manual_seed(31), torch.Generator().manual_seed(32)
    drafts = _draw(q.expand(n, V), draft_gen).tolist()
    accepted = sum(accept_or_resample([x], q, torch.cat([p, p]), verify_gen).num_accepted for x in drafts)
    sigma = (alpha * (1 - alpha) / n) ** 0.5
    print(f"k=1: measured acceptance {accepted / n:.4f}, theory sum min(p, q) = {alpha:.4f}")
    assert abs(accepted / n - alpha) < 4 * sigma


def test_tokens_per_round_match_the_closed_form():
    """Same p and q at every position: each draft token survives with probability alpha, so a
    round emits (1 - alpha^(k+1)) / (1 - alpha) tokens on average."""
    n, k = 4000, 3
    p, q = _distributions(40, 1)
    alpha = acceptance_rate(p[0], q[0])
    draft_gen, verify_gen = torch.Generator().manual_seed(41), torch.Generator().manual_seed(42)
    drafts = _draw(q.expand(n * k, V), draft_gen).reshape(n, k).tolist()
    emitted = torch.tensor([len(accept_or_resample(x, q.expand(k, V), p.expand(k + 1, V), verify_gen).tokens)
                            for x in drafts], dtype=torch.float64)
    expected = expected_tokens_per_round(alpha, k)
    print(f"k={k}: alpha {alpha:.3f}, tokens per round {float(emitted.mean()):.3f} (theory {expected:.3f})")
    assert abs(float(emitted.mean()) - expected) < 4 * float(emitted.std()) / n ** 0.5


# ---------------------------------------------------------------- greedy
def _one_hot(tokens: list[int], vocab: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(tokens), vocab).float()  # (len, vocab)


def test_greedy_one_hot_rule_emits_exactly_the_target_argmax():
    g = torch.Generator().manual_seed(50)
    verify_gen = torch.Generator().manual_seed(51)
    for _ in range(200):
        k = int(torch.randint(1, 5, (1,), generator=g))
        target = torch.randint(0, 6, (k + 1,), generator=g).tolist()  # the target's argmax per position
        draft = [t if float(torch.rand(1, generator=g)) < 0.7 else (t + 1) % 6 for t in target[:k]]
        result = accept_or_resample(draft, _one_hot(draft, 6), _one_hot(target, 6), verify_gen)
        assert result == accept_greedy(draft, target)
        assert result.tokens == target[: result.num_accepted + 1]  # the target's own greedy tokens
        assert result.num_accepted == next((i for i in range(k) if draft[i] != target[i]), k)


@pytest.fixture(scope="module")
def tinychat():
    return load_model("tinychat", device="cpu"), load_tokenizer("tinychat")


@torch.no_grad()
def _speculative_greedy(model, prompt: list[int], max_new: int, stop: int, propose) -> tuple[list[int], int, int]:
    """A minimal verify loop: draft, score prompt + draft in one uncached pass, keep what agrees."""
    seq, drafted, kept = list(prompt), 0, 0
    while len(seq) - len(prompt) < max_new and stop not in seq[len(prompt):]:
        draft = propose(seq)
        logits = model(torch.tensor([seq + draft]))[0, -len(draft) - 1:]  # (k + 1, V)
        result = accept_greedy(draft, logits.argmax(-1))
        seq += result.tokens
        drafted, kept = drafted + len(draft), kept + result.num_accepted
    out = seq[len(prompt):]
    out = out[: out.index(stop) + 1] if stop in out else out
    return out[:max_new], drafted, kept


@pytest.mark.parametrize("draft", ["ngram", "always wrong"])
def test_speculative_greedy_equals_target_greedy(tinychat, draft):
    model, tokenizer = tinychat
    stop = tokenizer.special_tokens[END]
    vocab = model.config.vocab_size

    def propose(seq):
        if draft == "ngram":
            return ngram_propose(seq, 4) or [seq[-1]]  # nothing matched: any guess keeps it exact
        return [(seq[-1] + 1) % vocab] * 3

    drafted = kept = 0
    for convo in [c for c in heldout_split(1) if c.task in ("extraction", "tool", "arithmetic")]:
        prompt = encode_chat(tokenizer, convo.prompt_messages)
        expected = greedy_generate(model, prompt, 40, stop_ids=[stop])
        got, n_drafted, n_kept = _speculative_greedy(model, prompt, 40, stop, propose)
        assert got == expected, convo.prompt_messages[-1]
        drafted, kept = drafted + n_drafted, kept + n_kept
    print(f"{draft} draft: {kept}/{drafted} drafted tokens accepted")
    assert kept > 0 if draft == "ngram" else kept < drafted / 10  # the replies quote their prompts


# ---------------------------------------------------------------- edge cases
def test_residual_with_nothing_left_falls_back_to_p():
    """Rows that do not sum to 1 (here p is half of q) can reject with max(0, p - q) all zero:
    the token then comes from p, never an error and never a token p rules out."""
    q = torch.tensor([[0.5, 0.5, 0.0]])
    p = torch.tensor([[0.25, 0.25, 0.0], [0.0, 0.0, 1.0]])
    g = torch.Generator().manual_seed(60)
    results = [accept_or_resample([0], q, p, g) for _ in range(200)]
    rejected = {r.next_token for r in results if r.num_accepted == 0}
    assert rejected == {0, 1}
    assert {r.next_token for r in results if r.num_accepted == 1} == {2}


@pytest.mark.parametrize("args, error, match", [
    (([0], [[0.0, 1.0]], [[0.5, 0.5], [0.5, 0.5]]), ValueError, "probability 0 under draft_probs"),
    (([], torch.zeros(0, 2), [[0.5, 0.5]]), ValueError, "k >= 1"),
    (([0], [0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]]), ValueError, r"shape \(k, V\)"),
    (([0], [[0.5, 0.5]], [[0.5, 0.5]]), ValueError, r"k \+ 1 = 2 rows"),
    (([0, 1], [[0.5, 0.5]], [[0.5, 0.5]] * 3), ValueError, "k = 2 rows"),
    (([0], [[0.5, 0.5]], [[0.2, 0.3, 0.5]] * 2), ValueError, "vocabularies differ"),
    (([2], [[0.5, 0.5]], [[0.5, 0.5]] * 2), ValueError, r"lie in \[0, 2\)"),
    (([0], [[-0.5, 1.5]], [[0.5, 0.5]] * 2), ValueError, "non-negative"),
    (([0], [[0.5, 0.5]], [[float("nan"), 0.5]] * 2), ValueError, "finite"),
    ((torch.tensor([0.0]), [[0.5, 0.5]], [[0.5, 0.5]] * 2), ValueError, "integer tensor"),
])
def test_invalid_inputs_name_the_fix(args, error, match):
    tokens, q, p = args
    q = q if isinstance(q, torch.Tensor) else torch.tensor(q)
    with pytest.raises(error, match=match):
        accept_or_resample(tokens, q, torch.tensor(p), torch.Generator().manual_seed(0))


def test_a_generator_is_required():
    with pytest.raises(TypeError, match="torch.Generator"):
        accept_or_resample([0], torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 0.0]] * 2), None)
    with pytest.raises(ValueError, match="k \\+ 1 = 3 argmax tokens"):
        accept_greedy([1, 2], [1, 2])
    with pytest.raises(ValueError, match="k >= 1"):
        accept_greedy([], [1])


def test_closed_forms_validate():
    assert acceptance_rate(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])) == 0.0
    with pytest.raises(ValueError, match=r"shape \(V,\)"):
        acceptance_rate(torch.ones(2, 2), torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        expected_tokens_per_round(1.5, 2)


# ---------------------------------------------------------------- prompt lookup
@pytest.mark.parametrize("tokens, k, kwargs, expected", [
    ([1, 2, 3, 9, 7, 3, 8, 1, 2, 3], 3, {}, [9, 7, 3]),  # "1 2 3" beats the more recent "3"
    ([1, 2, 5, 1, 2, 6, 1, 2], 2, {}, [6, 1]),  # the most recent "1 2" wins among equals
    ([4, 4, 4], 3, {"max_ngram": 2}, [4]),  # up to k: the match sits near the end
    ([1, 2, 3, 1], 2, {}, [2, 3]),
    ([1, 2, 3, 1], 2, {"min_ngram": 2}, []),  # unigram matches not allowed
    ([1, 2, 3], 2, {}, []),  # nothing repeats
    ([7], 4, {}, []),
    (torch.tensor([3, 5, 3]), 1, {}, [5]),
])
def test_ngram_propose_examples(tokens, k, kwargs, expected):
    assert ngram_propose(tokens, k, **kwargs) == expected


def test_ngram_propose_validates():
    with pytest.raises(ValueError, match="k must be a positive int"):
        ngram_propose([1, 2, 1], 0)
    with pytest.raises(ValueError, match="max_ngram"):
        ngram_propose([1, 2, 1], 2, max_ngram=1, min_ngram=2)
    with pytest.raises(ValueError, match="list of ints"):
        ngram_propose([1.0, 2.0], 2)
