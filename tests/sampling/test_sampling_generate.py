"""generate(): finish reasons, stop strings across tokens, seeds, batches, and the greedy oracle."""
from __future__ import annotations

import pytest
import torch

from course_lib.generation import greedy_generate
from course_lib.sampling import SamplingParams, encode_prompt
from course_lib.generation import default_eos_ids, generate, generate_many
from course_lib.sampling.sampler import sample_next_token

PROMPT = "<|user|>What is 2 + 2?<|end|><|assistant|>"


def script_for(tokenizer, text: str, end: str | None = None) -> list[int]:
    ids = tokenizer.encode(text)
    return ids + ([tokenizer.special_tokens[end]] if end else [])


def test_eos_ends_generation_and_is_not_in_the_text(tokenizer, scripted):
    model = scripted(tokenizer.n_vocab, script_for(tokenizer, "The answer is 4.", "<|end|>") + [5, 6, 7])
    result = generate(model, tokenizer, PROMPT, SamplingParams(temperature=0, max_new_tokens=40))
    assert result.finish_reason == "stop" and result.text == "The answer is 4."
    assert result.token_ids[-1] == tokenizer.special_tokens["<|end|>"]
    assert list(result.prompt_ids) == tokenizer.encode(PROMPT, allowed_special="all")


def test_stop_string_straddling_tokens_is_found_and_trimmed(tokenizer, scripted):
    text = "The answer is 4.\nUser: thanks"
    script = script_for(tokenizer, text)
    pieces = [tokenizer.decode([t]) for t in script]
    assert not any("\nUser:" in piece for piece in pieces)  # the stop really straddles tokens
    model = scripted(tokenizer.n_vocab, script)
    result = generate(model, tokenizer, PROMPT, SamplingParams(temperature=0, stop=["\nUser:"]))
    assert result.finish_reason == "stop" and result.stop_sequence == "\nUser:"
    assert result.text == "The answer is 4."
    assert tokenizer.decode(result.token_ids).startswith("The answer is 4.\nUser:")
    assert len(result.token_ids) < len(script)  # it stopped as soon as the stop completed


def test_length_cap(tokenizer, scripted):
    model = scripted(tokenizer.n_vocab, script_for(tokenizer, "Two plus two is four. " * 4))
    result = generate(model, tokenizer, PROMPT, SamplingParams(temperature=0, max_new_tokens=3))
    assert result.finish_reason == "length" and len(result.token_ids) == 3
    assert result.text == tokenizer.decode(result.token_ids)


def test_context_window_caps_generation(tokenizer, scripted):
    model = scripted(tokenizer.n_vocab, [65] * 100, max_seq_len=20)
    ids = encode_prompt(tokenizer, PROMPT)
    result = generate(model, tokenizer, ids, SamplingParams(temperature=0, max_new_tokens=50))
    assert result.finish_reason == "length" and len(ids) + len(result.token_ids) == 20
    with pytest.raises(ValueError, match="fills the context window"):
        generate(model, tokenizer, [65] * 20, SamplingParams(temperature=0))


def test_stop_token_ids_end_with_stop(tokenizer, scripted):
    model = scripted(tokenizer.n_vocab, script_for(tokenizer, "four", "<|tool_call|>"))
    params = SamplingParams(temperature=0, stop_token_ids=[tokenizer.special_tokens["<|tool_call|>"]])
    result = generate(model, tokenizer, PROMPT, params)
    assert result.finish_reason == "stop" and result.text == "four" and result.stop_sequence is None


def test_multibyte_characters_split_across_tokens_decode_cleanly(tokenizer, scripted):
    script = list("é→".encode("utf-8"))  # single-byte tokens: 0xC3 0xA9 0xE2 0x86 0x92
    model = scripted(tokenizer.n_vocab, [tokenizer.byte_ids[b] for b in script] + [tokenizer.special_tokens["<|end|>"]])
    result = generate(model, tokenizer, PROMPT, SamplingParams(temperature=0, stop=["→"]))
    assert result.text == "é" and result.finish_reason == "stop"


def test_greedy_matches_the_model_engineers_greedy_loop(tokenizer, random_model):
    ids = encode_prompt(tokenizer, PROMPT)
    expected = greedy_generate(random_model, ids, 15)
    result = generate(random_model, tokenizer, ids, SamplingParams(temperature=0, max_new_tokens=15), eos_ids=[])
    assert list(result.token_ids) == expected


@torch.no_grad()
def reference_sampling(model, ids, params, generator, n_tokens):
    """Uncached, one token at a time, straight from the definitions: the slow oracle."""
    seq = torch.tensor([ids])
    out = []
    for _ in range(n_tokens):
        logits = model(seq)[:, -1, :]  # (1, V): the whole prefix recomputed
        counts = torch.bincount(torch.tensor(out, dtype=torch.long), minlength=logits.shape[-1])[None]
        seen = torch.bincount(seq[0], minlength=logits.shape[-1])[None]
        token = sample_next_token(logits, params, generator, output_counts=counts, seen_counts=seen)
        out.append(int(token))
        seq = torch.cat([seq, token[:, None]], dim=1)
    return out


def test_cached_sampling_equals_the_uncached_reference(tokenizer, random_model):
    ids = encode_prompt(tokenizer, PROMPT)
    params = SamplingParams(temperature=0.9, top_p=0.95, frequency_penalty=0.5, repetition_penalty=1.2,
                            max_new_tokens=12)
    result = generate(random_model, tokenizer, ids, params, generator=torch.Generator().manual_seed(3), eos_ids=[])
    expected = reference_sampling(random_model, ids, params, torch.Generator().manual_seed(3), 12)
    assert list(result.token_ids) == expected


def test_same_seed_same_output_and_seed_field(tokenizer, random_model):
    params = SamplingParams(temperature=1.0, max_new_tokens=10, seed=7)
    a = generate(random_model, tokenizer, PROMPT, params, eos_ids=[])
    b = generate(random_model, tokenizer, PROMPT, params, eos_ids=[])
    c = generate(random_model, tokenizer, PROMPT, params, generator=torch.Generator().manual_seed(7), eos_ids=[])
    assert a == b == c
    d = generate(random_model, tokenizer, PROMPT, SamplingParams(temperature=1.0, max_new_tokens=10, seed=8), eos_ids=[])
    assert d.token_ids != a.token_ids


def test_batch_composition_changes_samples_under_one_seed(tokenizer, random_model):
    params = SamplingParams(temperature=1.0, max_new_tokens=10)
    alone = generate(random_model, tokenizer, PROMPT, params, generator=torch.Generator().manual_seed(0), eos_ids=[])
    batch = generate_many(random_model, tokenizer, PROMPT, params, 8, generator=torch.Generator().manual_seed(0),
                          eos_ids=[])
    assert len(batch) == 8 and len({r.token_ids for r in batch}) > 1  # rows sample independently
    assert batch[0].token_ids != alone.token_ids  # same seed, different batch: a different stream


def test_penalties_change_what_is_generated(tokenizer, scripted):
    # A model that always prefers token 65 a little: a strong presence penalty pushes it off.
    model = scripted(tokenizer.n_vocab, [65] * 30, margin=1.0)
    plain = generate(model, tokenizer, PROMPT, SamplingParams(temperature=0, max_new_tokens=5), eos_ids=[])
    assert plain.token_ids == (65,) * 5
    penalised = generate(model, tokenizer, PROMPT,
                         SamplingParams(temperature=0, max_new_tokens=5, presence_penalty=1.5), eos_ids=[])
    assert penalised.token_ids[0] == 65 and penalised.token_ids.count(65) == 1


def test_default_eos_ids_and_prompt_forms(tokenizer):
    assert set(default_eos_ids(tokenizer)) == {tokenizer.special_tokens["<|end|>"],
                                                 tokenizer.special_tokens["<|endoftext|>"]}
    messages = [{"role": "user", "content": "What is 2 + 2?"}]
    assert encode_prompt(tokenizer, messages) == encode_prompt(tokenizer, PROMPT)
    assert encode_prompt(tokenizer, torch.tensor([1, 2])) == [1, 2]
    with pytest.raises(TypeError, match="prompt must be"):
        encode_prompt(tokenizer, 3.5)
    with pytest.raises(ValueError, match="zero tokens"):
        encode_prompt(tokenizer, "")


def test_bad_arguments(tokenizer, random_model):
    with pytest.raises(TypeError, match="params must be a SamplingParams"):
        generate(random_model, tokenizer, PROMPT, {"temperature": 0})
    with pytest.raises(TypeError, match="course Transformer"):
        generate(object(), tokenizer, PROMPT, SamplingParams())
    with pytest.raises(ValueError, match="n must be a positive int"):
        generate_many(random_model, tokenizer, PROMPT, SamplingParams(), 0)
