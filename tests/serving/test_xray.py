"""The engine's X-ray records (course_lib.serving.xray): written while serving, and harmless.

The HTTP document built from them is checked against independent records in
tests/api/test_xray_api.py; here, what only the engine can show: an X-ray never changes a
reply, shared passes name their batch, guesses are marked, aborts and preemptions appear.
"""
from __future__ import annotations

import pytest

from course_lib.sampling import SamplingParams
from course_lib.serving import Engine, RequestXray

CHAT = [{"role": "user", "content": "What is 2 + 2?"}]
SAMPLED = SamplingParams(temperature=0.9, top_p=0.9, seed=21, max_new_tokens=24)


def run(engine, requests, eos_ids=None):
    """[(tokens, finish reason)] for [(prompt, params, xray)], stepped together."""
    ids = [engine.add_request(prompt, params, xray=xray, eos_ids=eos_ids) for prompt, params, xray in requests]
    tokens, reasons = {rid: [] for rid in ids}, {}
    while engine.has_unfinished():
        for out in engine.step():
            tokens[out.request_id] += out.token_ids
            if out.finished:
                reasons[out.request_id] = out.finish_reason
    return [(tokens[rid], reasons[rid]) for rid in ids]


def test_an_xray_never_changes_the_reply(model, tok):
    plain = run(Engine(model, tok), [(CHAT, SAMPLED, None)])
    xray = RequestXray()
    seen = run(Engine(model, tok), [(CHAT, SAMPLED, xray)])
    assert seen == plain
    assert [t.token_id for t in xray.tokens] == plain[0][0]


def test_requests_stepped_together_see_each_other_in_the_batch(model, tok):
    a, b = RequestXray(), RequestXray()
    run(Engine(model, tok), [(CHAT, SAMPLED, a), ([{"role": "user", "content": "Hi"}], SAMPLED, b)])
    assert a.steps[0].batch_requests == b.steps[0].batch_requests == 2
    assert a.steps[0].batch_tokens == len(a.prompt_ids) + len(b.prompt_ids)


def test_one_recorder_serves_one_request(model, tok):
    engine, xray = Engine(model, tok), RequestXray()
    engine.add_request(CHAT, SAMPLED, xray=xray)
    with pytest.raises(TypeError, match="fresh RequestXray"):
        engine.add_request(CHAT, SAMPLED, xray=xray)
    with pytest.raises(TypeError, match="RequestXray"):
        engine.add_request(CHAT, SAMPLED, xray={"on": True})


def test_an_abort_is_recorded_with_its_blocks_returned(model, tok):
    engine, xray = Engine(model, tok), RequestXray()
    rid = engine.add_request(CHAT, SamplingParams(temperature=0, max_new_tokens=50), xray=xray, eos_ids=())
    for _ in range(3):
        engine.step()
    engine.abort(rid)
    assert (xray.finish.reason, xray.finish.cause, xray.finish.blocks_held) == ("abort", "abort", 0)
    assert len(xray.tokens) == 3 and xray.steps[-1].blocks_held >= 1


def test_verified_guesses_are_marked(model, tok):
    engine = Engine(model, tok, speculative={"method": "ngram", "k": 4})
    xray = RequestXray()
    prompt = [{"role": "user", "content": "Repeat: one two three one two three one two three"}]
    run(engine, [(prompt, SamplingParams(temperature=0, max_new_tokens=30), xray)], eos_ids=())
    verify_steps = [s for s in xray.steps if s.guesses]
    assert verify_steps, "prompt lookup proposed nothing on a repeating prompt"
    assert any(t.speculative for t in xray.tokens)
    assert len(xray.tokens) == len({(t.step, i) for i, t in enumerate(xray.tokens)})


def test_a_preempted_request_shows_its_recompute(model, tok):
    # Two requests, a pool too small for both to finish: the newer one is preempted, and its
    # prompt and kept outputs are prefilled again (after whatever the prefix cache still has).
    # (Without the prefix cache: with it, b's recompute of a block a shares is a cache hit.)
    engine = Engine(model, tok, num_blocks=3, block_size=16, max_num_seqs=2, prefix_caching=False)
    a, b = RequestXray(), RequestXray()
    params = SamplingParams(temperature=0, max_new_tokens=20)
    run(engine, [(CHAT, params, a), (CHAT, params, b)], eos_ids=())
    restarts = [s for prev, s in zip(b.steps, b.steps[1:]) if s.positions[0] < prev.positions[0]]
    assert engine.num_preemptions >= 1 and restarts, [s.positions for s in b.steps]
    assert restarts[0].positions[1] - restarts[0].positions[0] > 1  # a prefill, not a decode
    assert [t.token_id for t in b.tokens][:3] == [t.token_id for t in a.tokens][:3]  # no token lost
