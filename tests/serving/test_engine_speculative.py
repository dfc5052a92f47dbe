"""Speculative decoding, batch invariance and the request options of the engine.

Oracle for greedy output: the same engine with ``batch_invariant=True`` running each prompt
alone (every token computed in a pass of its own, so the logits do not depend on batching).
Speculation, batching, chunking, preemption and prefix caching must all reproduce it token for
token; the sampled path is checked for its distribution (chi-square) and its seeding.
"""
from __future__ import annotations

import pytest
import torch

from course_lib.data.corpus import heldout_split
from course_lib.model import Transformer, get_config
from course_lib.sampling import SamplingParams, chi_square_gof, encode_prompt
from course_lib.serving.drafting import Draft
from course_lib.serving.engine import Engine
from course_lib.serving.request import Request
from course_lib.serving.verify import verify

GREEDY = SamplingParams(temperature=0, max_new_tokens=24)


@pytest.fixture(scope="module")
def draft():
    """An untrained one-layer draft: it is mostly wrong, which is what must not change the output."""
    config = get_config("tinychat", n_layers=1, d_model=64, n_heads=4, n_kv_heads=1, d_ff=128)
    return Transformer(config, generator=torch.Generator().manual_seed(0)).eval()


@pytest.fixture(scope="module")
def prompts():
    return [c.prompt_messages for c in heldout_split(4)][:12]


@pytest.fixture(scope="module")
def alone(model, tok, prompts):
    return [Engine(model, tok, batch_invariant=True, max_num_seqs=1).generate([p], GREEDY)[0].token_ids
            for p in prompts]


def _no_leak(engine):
    assert engine.stats().num_used_blocks == 0 and not engine.has_unfinished()
    if getattr(engine.speculation.proposer, "blocks", None) is not None:
        assert engine.speculation.proposer.blocks.num_used_blocks == 0


@pytest.mark.parametrize("speculative", ["ngram", "draft", "self"])
@pytest.mark.parametrize("config", [dict(), dict(block_size=4, num_blocks=40, max_num_seqs=6),
                                    dict(block_size=4, max_num_seqs=4, max_batched_tokens=24)],
                         ids=["big-pool", "tiny-pool", "tiny-budget"])
def test_greedy_speculative_output_equals_plain_greedy(model, tok, draft, prompts, alone, speculative, config):
    spec = {"ngram": {"method": "ngram", "k": 4}, "draft": {"method": "draft", "model": draft, "k": 3},
            "self": {"method": "draft", "model": model, "k": 4}}[speculative]
    engine = Engine(model, tok, batch_invariant=True, speculative=spec, **config)
    assert [c.token_ids for c in engine.generate(prompts, GREEDY)] == alone
    stats = engine.speculative_stats
    assert stats.num_rounds > 0 and stats.num_drafted > 0
    if speculative == "self":  # the target drafting for itself is always right
        assert stats.acceptance_rate == 1.0 and stats.tokens_per_round > 2
    _no_leak(engine)


def test_batch_invariant_greedy_ignores_batching_chunking_preemption_and_the_prefix_cache():
    model = Transformer(get_config("test-gqa", init_std=0.2), generator=torch.Generator().manual_seed(0)).eval()
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        shared = torch.randint(0, 128, (9,), generator=g).tolist()
        prompts = [(shared if i % 2 else []) + torch.randint(0, 128, (int(n),), generator=g).tolist()
                   for i, n in enumerate(torch.randint(1, 30, (10,), generator=g))]
        params = SamplingParams(temperature=0, max_new_tokens=16)
        want = [Engine(model, None, batch_invariant=True, max_num_seqs=1).generate([p], params)[0].token_ids
                for p in prompts]
        for config in (dict(), dict(block_size=4, num_blocks=16, max_num_seqs=4),
                       dict(block_size=4, max_num_seqs=3, max_batched_tokens=5)):
            engine = Engine(model, None, batch_invariant=True, **config)
            assert [c.token_ids for c in engine.generate(prompts, params)] == want, (seed, config)
            _no_leak(engine)


def test_seeded_speculative_sampling_is_the_same_alone_and_in_a_batch_of_16(model, tok, prompts):
    params = SamplingParams(temperature=0.9, top_p=0.95, max_new_tokens=20, seed=5)
    spec = {"method": "ngram", "k": 3}
    alone = Engine(model, tok, batch_invariant=True, speculative=spec).generate([prompts[3]], params)[0]
    others = [SamplingParams(temperature=1.0, max_new_tokens=20, seed=s) for s in range(15)]
    batch_prompts = (prompts * 2)[:15]
    engine = Engine(model, tok, batch_invariant=True, speculative=spec, max_num_seqs=16)
    batch = engine.generate(batch_prompts[:7] + [prompts[3]] + batch_prompts[7:], others[:7] + [params] + others[7:])
    assert batch[7].token_ids == alone.token_ids
    _no_leak(engine)


def _request(logits_rows, params, seed):
    return Request("r", [1, 2, 3], params, vocab_size=logits_rows.shape[-1], generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("with_draft_probs", [False, True])
def test_verify_keeps_the_first_token_distributed_as_the_target(with_draft_probs):
    """Whatever is guessed, the first token a verify round emits follows the target's p_0."""
    vocab = 6
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, 0.3], [0.0, 1.0, 2.0, 0.0, 0.0, 0.0],
                           [1.0, 0.0, 0.0, 3.0, 0.0, 0.0]])  # (1 + 2 guesses, V)
    params = SamplingParams(temperature=1.0, max_new_tokens=8)
    q = torch.softmax(torch.tensor([[0.0, 3.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 2.0, 0.0]]), dim=-1)
    p0 = torch.softmax(logits[0].double(), dim=-1)
    counts = torch.zeros(vocab)
    req = _request(logits, params, 0)
    g = torch.Generator().manual_seed(1)
    for _ in range(4000):
        if with_draft_probs:  # the guesses really are drawn from q
            guesses = (int(torch.multinomial(q[0], 1, generator=g)), int(torch.multinomial(q[1], 1, generator=g)))
            draft = Draft(list(guesses), q)
        else:  # a deterministic guess (prompt lookup) of a likely-wrong token
            guesses, draft = (1, 4), Draft([1, 4], None)
        counts[verify(req, logits, guesses, draft)[0]] += 1
    result = chi_square_gof(counts, p0)
    assert result.p_value > 1e-3, result


def test_bad_speculative_configs_are_refused_with_a_reason(model, tok, draft):
    for spec, message in [({"method": "ngram", "k": 0}, "k must be an int >= 1"),
                          ({"method": "ngram", "k": True}, "k must be an int >= 1"),
                          ({"method": "medusa", "k": 2}, "'ngram' or 'draft'"),
                          ({"method": "ngram", "k": 2, "model": draft}, "unknown speculative option"),
                          ({"method": "draft", "k": 2}, "needs a draft model"),
                          ("ngram", "must be a dict")]:
        with pytest.raises((ValueError, TypeError), match=message):
            Engine(model, tok, speculative=spec)
    small_vocab = Transformer(get_config("test-gqa"), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="share one tokenizer"):
        Engine(model, tok, speculative={"method": "draft", "model": small_vocab, "k": 2})


def test_abort_and_stop_strings_free_the_draft_models_blocks(model, tok, draft, prompts):
    engine = Engine(model, tok, speculative={"method": "draft", "model": draft, "k": 3})
    ids = [engine.add_request(p, SamplingParams(temperature=0, max_new_tokens=30, stop=(".",))) for p in prompts[:4]]
    engine.step()  # the prompts' pass: one token each, nobody has drafted yet
    engine.step()  # the first verify round
    engine.abort(ids[3])  # a long answer, still running
    while engine.has_unfinished():
        engine.step()
    _no_leak(engine)


def test_shared_generator_and_own_end_tokens(model, tok, prompts):
    small = Transformer(get_config("test-gqa"), generator=torch.Generator().manual_seed(0)).eval()
    params = SamplingParams(temperature=1.0, max_new_tokens=12)

    def run(n, seed=3):
        return [c.token_ids for c in Engine(small).generate([[1, 2, 3]] * n, params,
                                                            generator=torch.Generator().manual_seed(seed))]
    (one,), both = run(1), run(2)
    assert both == run(2)  # one seeded stream for both, drawn in turn: repeatable
    assert both[0][0] == one[0] and both[0] != one  # the first draw is the same; then row 1 takes one
    free = Engine(model, tok).generate([prompts[0]], SamplingParams(temperature=0, max_new_tokens=40), eos_ids=())[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 40  # ran through <|end|>


def test_an_engine_without_a_tokenizer_takes_ids_only(model):
    engine = Engine(model)
    with pytest.raises(TypeError, match="no tokenizer"):
        engine.add_request("<|user|>hi", GREEDY)
    with pytest.raises(ValueError, match="stop strings need text"):
        engine.add_request([1, 2], SamplingParams(temperature=0, stop=("x",)))
    with pytest.raises(ValueError, match="eos_ids must be non-negative"):
        engine.add_request([1, 2], GREEDY, eos_ids=[-1])
    (done,) = engine.generate([[1019, 301, 1022, 1020]], SamplingParams(temperature=0, max_new_tokens=5))
    assert done.text == "" and done.finish_reason == "length" and len(done.token_ids) == 5
    _no_leak(engine)


def test_logprobs_are_the_models_own_and_follow_speculation(model, tok, prompts):
    chat = prompts[2]
    params = SamplingParams(temperature=0, max_new_tokens=12)
    for spec in (None, {"method": "ngram", "k": 3}):
        engine = Engine(model, tok, speculative=spec)
        rid = engine.add_request(chat, params, logprobs=3)
        outputs = []
        while engine.has_unfinished():
            outputs += engine.step()
        tokens = [t for o in outputs for t in o.token_ids]
        logprobs = [lp for o in outputs for lp in o.logprobs]
        assert [lp.token_id for lp in logprobs] == tokens and all(o.request_id == rid for o in outputs)
        with torch.no_grad():  # oracle: the model's own forward over prompt + reply
            ids = torch.tensor([encode_prompt(tok, chat) + tokens])
            full = torch.log_softmax(model(ids)[0, -len(tokens) - 1:-1].float(), dim=-1)  # (n, V)
        for row, lp in zip(full, logprobs):
            assert abs(lp.logprob - float(row[lp.token_id])) < 1e-4
            assert [t for t, _ in lp.top] == row.topk(3).indices.tolist()  # greedy: the top one is chosen
    with pytest.raises(ValueError, match="logprobs must be an int in 0..20"):
        Engine(model, tok).add_request(chat, params, logprobs=21)
