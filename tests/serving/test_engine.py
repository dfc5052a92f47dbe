"""The engine against generate(): the same greedy tokens, whatever the batching does.

Oracle: ``course_lib.generation.generate`` (one request alone, in an engine sized for it). Every engine
configuration (big pool, a pool so small it preempts, a token budget so small it chunks every
prefill, prefix caching over a shared system prompt) must reproduce it token for token.
"""
from __future__ import annotations

import pytest
import torch

from course_lib.data.corpus import heldout_split
from course_lib.model import Transformer, get_config, load_model, load_tokenizer
from course_lib.model.steps import decode_step, prefill
from course_lib.sampling import SamplingParams, encode_prompt
from course_lib.generation import generate
from course_lib.sampling.result import Completion
from course_lib.tokenization.chat_template import end_token_ids
from course_lib.serving.engine import Engine

GREEDY = SamplingParams(temperature=0, max_new_tokens=40)


@pytest.fixture(scope="module")
def prompts():
    return [c.prompt_messages for c in heldout_split(4)][:16]  # 9..41 tokens, every task


@pytest.fixture(scope="module")
def reference(model, tok, prompts):
    return [contiguous_greedy(model, tok, p, GREEDY.max_new_tokens) for p in prompts]


@torch.no_grad()
def contiguous_greedy(model, tok, prompt, max_new_tokens):
    """An oracle outside the engine: the model's own forward over a contiguous KV cache."""
    ids = encode_prompt(tok, prompt)
    ends = end_token_ids(tok)
    cache = model.new_cache(1, max_seq_len=len(ids) + max_new_tokens)
    logits = prefill(model, torch.tensor([ids]), cache)  # (1, V)
    out = []
    while True:
        out.append(int(logits.argmax(-1)))
        if out[-1] in ends or len(out) == max_new_tokens:
            break
        logits = decode_step(model, torch.tensor([[out[-1]]]), cache)  # (1, V)
    stopped = out[-1] in ends
    return Completion(tok.decode(out[:-1] if stopped else out), tuple(out), "stop" if stopped else "length",
                      tuple(ids))


def _assert_same(completions, reference):
    for i, (got, want) in enumerate(zip(completions, reference, strict=True)):
        assert got.token_ids == want.token_ids, f"prompt {i}"
        assert (got.text, got.finish_reason, got.prompt_ids) == (want.text, want.finish_reason, want.prompt_ids)


def _assert_no_leak(engine):
    stats = engine.stats()
    assert stats.num_used_blocks == 0 and stats.num_free_blocks == stats.num_blocks
    assert not engine.has_unfinished()


@pytest.mark.parametrize("config", [
    dict(),                                                          # room for everyone
    dict(block_size=4, num_blocks=30, max_num_seqs=8),               # forces preemption
    dict(block_size=4, max_num_seqs=4, max_batched_tokens=8),        # chunks every prefill
    dict(block_size=4, prefix_caching=False),
], ids=["big-pool", "tiny-pool", "tiny-budget", "no-prefix-cache"])
def test_greedy_matches_generate(model, tok, prompts, reference, config):
    engine = Engine(model, tok, **config)
    _assert_same(engine.generate(prompts, GREEDY), reference)
    _assert_no_leak(engine)
    if config.get("num_blocks") == 30:
        assert engine.num_preemptions > 0


def test_long_replies_on_a_random_model_match_generate(tok):
    """A random model never emits an end token: every reply runs to the window or max_new_tokens."""
    model = Transformer(get_config("test-gqa", init_std=0.2), generator=torch.Generator().manual_seed(0)).eval()
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 128, (n,), generator=g).tolist() for n in (3, 20, 9, 40, 1, 57)]
    params = SamplingParams(temperature=0, max_new_tokens=30)
    want = [generate(model, tok, p, params) for p in prompts]
    engine = Engine(model, tok, block_size=4, num_blocks=24, max_num_seqs=4, max_batched_tokens=16)
    _assert_same(engine.generate(prompts, params), want)
    assert [len(c.token_ids) for c in want] == [30, 30, 30, 24, 30, 7]  # the window caps two
    assert engine.num_preemptions > 0
    _assert_no_leak(engine)


def test_prefix_cache_hits_on_a_shared_system_prompt(model, tok):
    system = {"role": "system", "content": "You are TinyChat, a small helpful assistant. Answer briefly, "
                                           "in one sentence, and say when you do not know."}
    prompts = [[system, {"role": "user", "content": q}] for q in
               ("What is 3 + 4?", "What is the capital of France?", "How many legs does a spider have?",
                "Calculate 12 times 3.", "What is the symbol for gold?", "What is 9 minus 5?")]
    want = [generate(model, tok, p, GREEDY) for p in prompts]
    engine = Engine(model, tok, block_size=8, max_num_seqs=2)
    _assert_same(engine.generate(prompts, GREEDY), want)
    assert engine.stats().hit_rate > 0
    _assert_no_leak(engine)


def test_seeded_sampling_does_not_depend_on_the_batch(model, tok, prompts):
    params = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=20, seed=11)
    alone = Engine(model, tok).generate([prompts[5]], params)[0]
    others = [SamplingParams(temperature=0.8, max_new_tokens=20, seed=s) for s in range(7)]
    engine = Engine(model, tok, block_size=4, max_num_seqs=4, max_batched_tokens=12)
    batch = engine.generate(prompts[:5] + [prompts[5]] + prompts[6:8], others[:5] + [params] + others[5:])
    assert batch[5].token_ids == alone.token_ids
    assert alone.token_ids == generate(model, tok, prompts[5], params).token_ids  # generate's own stream
    _assert_no_leak(engine)


def test_penalties_match_generate(model, tok, prompts):
    params = SamplingParams(temperature=0, repetition_penalty=1.3, frequency_penalty=0.5, max_new_tokens=30)
    want = [generate(model, tok, p, params) for p in prompts[12:16]]
    # 24 blocks of 4: room for the longest of these prompts and its 30 tokens, not for all four at once.
    _assert_same(Engine(model, tok, block_size=4, num_blocks=24).generate(prompts[12:16], params), want)


def test_stop_strings_end_with_stop_and_stream_deltas_add_up(model, tok, prompts, reference):
    i = next(i for i, r in enumerate(reference) if len(r.text) > 6)
    stop = reference[i].text[3:5]
    params = SamplingParams(temperature=0, max_new_tokens=40, stop=(stop,))
    want = generate(model, tok, prompts[i], params)
    engine = Engine(model, tok)
    outputs = list(engine.stream(prompts[i], params))
    assert outputs[-1].finished and outputs[-1].finish_reason == "stop"
    assert not any(o.finished for o in outputs[:-1])
    assert "".join(o.text for o in outputs) == want.text == reference[i].text[:reference[i].text.find(stop)]
    assert [t for o in outputs for t in o.token_ids] == list(want.token_ids)
    _assert_no_leak(engine)


def test_length_cap_and_step_outputs(model, tok, prompts):
    engine = Engine(model, tok)
    rid = engine.add_request(prompts[12], SamplingParams(temperature=0, max_new_tokens=3), request_id="x")
    outputs = []
    while engine.has_unfinished():
        outputs += engine.step()
    assert [o.request_id for o in outputs] == ["x"] * 3 and rid == "x"
    assert outputs[-1].finish_reason == "length" and [o.finished for o in outputs] == [False, False, True]


def test_abort_frees_blocks_and_unknown_ids_are_named(model, tok, prompts):
    engine = Engine(model, tok, block_size=4)
    a = engine.add_request(prompts[0], GREEDY)
    b = engine.add_request(prompts[13], GREEDY)
    engine.step()
    final = engine.abort(b)
    assert final.finished and final.finish_reason == "abort"
    engine.abort(a)
    _assert_no_leak(engine)
    with pytest.raises(ValueError, match="'nope'"):
        engine.abort("nope")
    with pytest.raises(ValueError, match=repr(a)):
        engine.abort(a)  # already gone
    stream = engine.stream(prompts[13], GREEDY)
    next(stream)
    stream.close()  # closing a stream early aborts its request
    _assert_no_leak(engine)


def test_bad_input_is_rejected_and_the_engine_stays_usable(model, tok, prompts, reference):
    engine = Engine(model, tok, block_size=4, num_blocks=16)
    window = model.config.max_seq_len
    with pytest.raises(ValueError, match="zero tokens"):
        engine.add_request([], GREEDY)
    with pytest.raises(ValueError, match="context window"):
        engine.add_request([5] * window, GREEDY)
    with pytest.raises(TypeError, match="SamplingParams"):
        engine.add_request(prompts[0], {"temperature": 0})
    with pytest.raises(ValueError, match="vocabulary"):
        engine.add_request([5, 99999], GREEDY)
    with pytest.raises(ValueError, match="blocks"):
        engine.add_request([5] * 100, GREEDY)  # does not fit a 16 x 4 pool
    engine.add_request(prompts[0], GREEDY, request_id="dup")
    with pytest.raises(ValueError, match="'dup'"):
        engine.add_request(prompts[1], GREEDY, request_id="dup")
    with pytest.raises(RuntimeError, match="in flight"):
        engine.generate(prompts[:1], GREEDY)
    engine.abort("dup")
    _assert_same(engine.generate(prompts[:3], GREEDY), reference[:3])
    _assert_no_leak(engine)


def test_window_caps_max_new_tokens_like_generate(model, tok):
    window = model.config.max_seq_len
    prompt = [5] * (window - 4)
    params = SamplingParams(temperature=0, max_new_tokens=100)
    got = Engine(model, tok, max_num_seqs=1).generate([prompt], params)[0]
    want = generate(model, tok, prompt, params)
    assert got.token_ids == want.token_ids and got.finish_reason == want.finish_reason
    assert len(got.token_ids) <= 4


def test_text_deltas_are_safe_across_utf8_boundaries():
    from course_lib.serving.request import Request
    pieces = {1: b"caf", 2: b"\xc3", 3: b"\xa9!", 4: b"\xe2\x82"}  # "é" split over tokens 2 and 3
    req = Request("r", [0], SamplingParams(temperature=0), vocab_size=8)
    assert [req.add_token(t, pieces.__getitem__) for t in (1, 2, 3)] == ["caf", "", "é!"]
    assert req.add_token(4, pieces.__getitem__) == ""  # half of "€": held back
    assert req.finish_text("length") == "\ufffd"        # a cut shows the broken character, as generate() does


# ------------------------------------------------------------------ structured output through the engine
def test_a_guided_request_equals_generate_structured_and_always_validates():
    import json

    import jsonschema

    from course_lib.structured import JSONGuide, generate_structured

    model, tokenizer = load_model("tinychat", device="cpu"), load_tokenizer("tinychat")
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
                                               "party_size": {"type": "integer", "minimum": 1, "maximum": 12}},
              "required": ["name", "party_size"], "additionalProperties": False}
    guide = JSONGuide(schema, tokenizer)
    prompts = [[{"role": "user", "content": f"Extract the booking as JSON: Reservation for {name}: {n} guests, "
                                            "Friday, 19:30."}] for name, n in (("Okafor", 4), ("Patel", 2))]
    engine = Engine(model, tokenizer)
    greedy = SamplingParams(temperature=0, max_new_tokens=60)
    for prompt, completion in zip(prompts, engine.generate(prompts, greedy, guide=guide)):
        reference = generate_structured(model, tokenizer, prompt, guide=guide, params=greedy)
        assert completion.token_ids == reference.token_ids and completion.text == reference.text
    hot = [SamplingParams(temperature=1.5, max_new_tokens=60, seed=s) for s in range(12)]
    for completion in engine.generate(prompts[:1] * 12, hot, guide=guide):
        if completion.finish_reason == "stop":
            jsonschema.validate(json.loads(completion.text), schema)
        else:
            assert completion.finish_reason == "length"
    assert engine.stats().num_used_blocks == 0
    with pytest.raises(ValueError, match="stop strings"):
        engine.add_request(prompts[0], SamplingParams(stop=("}",)), guide=guide)
    with pytest.raises(TypeError, match="RegexGuide"):
        engine.add_request(prompts[0], greedy, guide="{}")
