"""The timed request trace agrees with greedy generation and accounts for every stage."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from course_lib.model import Transformer, get_config
from course_lib.generation import greedy_generate
from course_lib.request_trace import trace_request
from course_lib.tokenization import BPETokenizer
from course_lib.tokenization.chat_template import END, SPECIAL_TOKENS, encode_chat

CHAT = [{"role": "user", "content": "What is 2 + 2?"}]


@pytest.fixture(scope="module")
def tokenizer():
    return BPETokenizer.train("What is 2 + 2? It is 4. " * 30, 270, special_tokens=list(SPECIAL_TOKENS))


@pytest.fixture(scope="module")
def model(tokenizer):
    config = dataclasses.replace(get_config("test-gqa"), vocab_size=tokenizer.n_vocab)
    return Transformer(config, generator=torch.Generator().manual_seed(0)).eval()


def test_trace_matches_greedy_generation_and_lists_the_stages(model, tokenizer):
    trace = trace_request(model, tokenizer, CHAT, max_new_tokens=6, validate=lambda text: True)
    assert [s.stage for s in trace.stages] == ["template", "tokenize", "prefill", "decode", "detokenize", "validate"]
    prompt = encode_chat(tokenizer, CHAT)
    end_id = tokenizer.encode(END, allowed_special={END})[0]
    expected = greedy_generate(model, prompt, 6, stop_ids=[end_id])
    assert trace.prompt_tokens == len(prompt)
    assert trace.completion_tokens == len(expected)
    assert trace.finish_reason == ("stop" if expected[-1] == end_id else "length")
    assert trace.valid is True and all(s.seconds >= 0 for s in trace.stages)
    assert "total" in trace.table()


def test_a_request_that_cannot_fit_the_window_is_refused(model, tokenizer):
    with pytest.raises(ValueError, match="context"):
        trace_request(model, tokenizer, CHAT, max_new_tokens=model.config.max_seq_len)
