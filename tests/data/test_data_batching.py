"""Conversation encoding, the assistant-only loss mask, and the length-grouped batches."""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from course_lib.data import TRAIN_SEED, generate_corpus
from course_lib.data.batching import IGNORE_INDEX, LengthBatches, encode_conversation
from course_lib.tokenization.bpe import BPETokenizer
from course_lib.tokenization.chat_template import END, SPECIAL_TOKENS, render_chat


@pytest.fixture(scope="module")
def corpus():
    return generate_corpus(400, TRAIN_SEED)


@pytest.fixture(scope="module")
def tokenizer(corpus):
    text = "".join(render_chat(c.messages, add_generation_prompt=False) for c in corpus)
    return BPETokenizer.train(text, 420, special_tokens=SPECIAL_TOKENS)


def test_piecewise_encoding_equals_whole_template(corpus, tokenizer):
    # Oracle: the tokenizer's own encoding of the rendered template string.
    for convo in corpus:
        ids, mask = encode_conversation(tokenizer, convo.messages)
        whole = tokenizer.encode(render_chat(convo.messages, add_generation_prompt=False), allowed_special="all")
        assert ids == whole and len(mask) == len(ids)


def test_mask_covers_exactly_the_assistant_replies(corpus, tokenizer):
    for convo in corpus[:100]:
        ids, mask = encode_conversation(tokenizer, convo.messages)
        learned = tokenizer.decode([i for i, m in zip(ids, mask) if m])
        assert learned == "".join(m["content"] + END for m in convo.messages if m["role"] == "assistant")


def test_tool_call_marker_is_one_token_only_for_the_assistant(tokenizer):
    tool_call = tokenizer.special_tokens["<|tool_call|>"]
    ids, _ = encode_conversation(tokenizer, [{"role": "assistant", "content": "<|tool_call|>{}"}])
    assert tool_call in ids
    with pytest.raises(ValueError, match="disallowed special token"):
        encode_conversation(tokenizer, [{"role": "user", "content": "<|tool_call|>"}])


def test_a_tokenizer_without_chat_tokens_is_refused(corpus):
    plain = BPETokenizer.train("hello world " * 10, 260)
    with pytest.raises(ValueError, match="SPECIAL_TOKENS"):
        encode_conversation(plain, corpus[0].messages)


def test_batches_shift_targets_and_ignore_the_rest(corpus, tokenizer):
    encoded = [encode_conversation(tokenizer, c.messages) for c in corpus]
    pad = tokenizer.special_tokens["<|endoftext|>"]  # never inside a conversation, so padding is unambiguous
    by_inputs = {tuple(ids[:-1]): (ids, mask) for ids, mask in encoded}
    data = LengthBatches(encoded, batch_size=16, pad_id=pad)
    stream = data.stream(torch.Generator().manual_seed(3))
    rows = Counter()
    for _ in range(len(data)):  # one pass = every conversation exactly once
        inputs, targets = next(stream)
        assert inputs.shape == targets.shape and inputs.dtype == targets.dtype == torch.long
        for x, y in zip(inputs.tolist(), targets.tolist()):
            n = sum(v != pad for v in x)
            assert all(v == pad for v in x[n:])
            ids, mask = by_inputs[tuple(x[:n])]
            want = [ids[t + 1] if mask[t + 1] else IGNORE_INDEX for t in range(n)]
            assert y == want + [IGNORE_INDEX] * (len(x) - n)
            rows[tuple(ids)] += 1
    assert rows == Counter(tuple(ids) for ids, _ in encoded)


def test_same_seed_same_batches(corpus, tokenizer):
    encoded = [encode_conversation(tokenizer, c.messages) for c in corpus[:100]]
    data = LengthBatches(encoded, batch_size=8, pad_id=0)

    def first_batches(seed):
        stream = data.stream(torch.Generator().manual_seed(seed))
        return [next(stream)[0].tolist() for _ in range(5)]

    assert first_batches(1) == first_batches(1)
    assert first_batches(1) != first_batches(2)


def test_batches_group_similar_lengths(corpus, tokenizer):
    encoded = [encode_conversation(tokenizer, c.messages) for c in corpus]
    data = LengthBatches(encoded, batch_size=16, pad_id=0, pool=len(corpus))
    stream = data.stream(torch.Generator().manual_seed(0))
    padded = sum(int((next(stream)[1] == IGNORE_INDEX).sum()) for _ in range(len(data)))
    unsorted = LengthBatches(encoded, batch_size=16, pad_id=0, pool=1)
    stream = unsorted.stream(torch.Generator().manual_seed(0))
    padded_unsorted = sum(int((next(stream)[1] == IGNORE_INDEX).sum()) for _ in range(len(unsorted)))
    assert padded < padded_unsorted


def test_too_long_conversations_are_refused(corpus, tokenizer):
    encoded = [encode_conversation(tokenizer, c.messages) for c in corpus[:20]]
    with pytest.raises(ValueError, match="max_len=8"):
        LengthBatches(encoded, batch_size=4, pad_id=0, max_len=8)
    with pytest.raises(ValueError, match="no conversations"):
        LengthBatches([], batch_size=4, pad_id=0)


def test_weighted_masks_give_each_target_its_weight(corpus, tokenizer):
    # A mask of weights (3 on each reply's first token here) adds a weights tensor: the weight of
    # the token each target names, 0 wherever the target is ignored.
    encoded = []
    for convo in corpus[:64]:
        ids, mask = encode_conversation(tokenizer, convo.messages)
        first = mask.index(1)
        encoded.append((ids, mask[:first] + [3.0] + mask[first + 1:]))
    pad = tokenizer.special_tokens["<|endoftext|>"]
    data = LengthBatches(encoded, batch_size=8, pad_id=pad)
    by_inputs = {tuple(ids[:-1]): mask for ids, mask in encoded}
    stream = data.stream(torch.Generator().manual_seed(0))
    for _ in range(len(data)):
        inputs, targets, weights = next(stream)
        assert weights.dtype == torch.float32 and weights.shape == targets.shape
        assert torch.equal(weights > 0, targets != IGNORE_INDEX)
        for x, w in zip(inputs.tolist(), weights.tolist()):
            n = sum(v != pad for v in x)
            assert w == [float(m) for m in by_inputs[tuple(x[:n])][1:]] + [0.0] * (len(x) - n)
    plain = LengthBatches([(ids, [int(m > 0) for m in mask]) for ids, mask in encoded], batch_size=8, pad_id=0)
    assert len(next(plain.stream(torch.Generator().manual_seed(0)))) == 2  # 0/1 masks: (inputs, targets) as before
