"""prefill / decode_step / greedy_generate: cached generation gives the uncached tokens."""
import pytest
import torch

from course_lib.model import decode_step, prefill
from course_lib.generation import greedy_generate


@pytest.mark.parametrize("name", ["test-mha", "test-gqa", "test-mqa", "tinychat"])
def test_cached_and_uncached_generation_give_identical_tokens(make_model, name):
    model = make_model(name, seed=3)
    prompt = torch.randint(0, model.config.vocab_size, (6,), generator=torch.Generator().manual_seed(4)).tolist()
    cached = greedy_generate(model, prompt, max_new_tokens=24)
    uncached = greedy_generate(model, prompt, max_new_tokens=24, use_cache=False)
    assert cached == uncached
    assert len(cached) == 24 and len(set(cached)) > 1  # a non-trivial sequence, not one repeated id


def test_generation_is_the_argmax_of_full_forward(make_model):
    """Independent oracle: recompute each next token as argmax of a plain forward pass."""
    model = make_model("test-gqa", seed=8)
    ids = [3, 14, 15, 92]
    out = greedy_generate(model, ids, max_new_tokens=8)
    seq = list(ids)
    with torch.no_grad():
        for _ in range(8):
            seq.append(int(model(torch.tensor([seq]))[0, -1].argmax()))
    assert out == seq[len(ids):]


def test_prefill_and_decode_step_return_last_position_logits(make_model):
    model = make_model("test-mqa")
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    cache = model.new_cache(2)
    last = prefill(model, ids, cache)
    with torch.no_grad():
        full = model(torch.cat([ids, torch.tensor([[9], [10]])], dim=1))
    torch.testing.assert_close(last, full[:, 3], atol=1e-5, rtol=1e-4)
    step = decode_step(model, torch.tensor([[9], [10]]), cache)
    assert step.shape == (2, 128) and cache.seq_len == 5
    torch.testing.assert_close(step, full[:, 4], atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match=r"\(B, 1\)"):
        decode_step(model, torch.tensor([[1, 2]]), cache)


def test_stop_ids_end_generation_and_are_included(make_model):
    model = make_model("test-mha", seed=2)
    free = greedy_generate(model, [1, 2, 3], max_new_tokens=12)
    stop = free[4]
    first = free.index(stop)
    assert greedy_generate(model, [1, 2, 3], 12, stop_ids=[stop]) == free[:first + 1]
    assert greedy_generate(model, [1, 2, 3], 12, stop_ids={stop}, use_cache=False) == free[:first + 1]


def test_prompt_forms_and_edge_cases(make_model):
    model = make_model("test-mha")
    as_list = greedy_generate(model, [4, 5, 6], 3)
    assert greedy_generate(model, torch.tensor([4, 5, 6]), 3) == as_list
    assert greedy_generate(model, torch.tensor([[4, 5, 6]]), 3) == as_list
    assert greedy_generate(model, [4, 5, 6], 0) == []


@pytest.mark.parametrize("prompt, n, error", [
    ([1] * 60, 5, ValueError),               # 65 > max_seq_len 64
    ([], 3, ValueError),
    ([1.5, 2.0], 3, TypeError),
    (torch.tensor([1.0, 2.0]), 3, TypeError),
    (torch.zeros(2, 3, dtype=torch.long), 3, ValueError),
    ([1, 2], -1, ValueError),
])
def test_bad_generation_requests(make_model, prompt, n, error):
    with pytest.raises(error):
        greedy_generate(make_model("test-mha"), prompt, n)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_generation_matches_cpu(make_model):
    model = make_model("test-gqa", seed=3)
    cpu = greedy_generate(model, [1, 2, 3], 16)
    assert greedy_generate(model.to("cuda"), [1, 2, 3], 16) == cpu
