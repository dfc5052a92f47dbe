"""KVCache: preallocation, in-place filling, nbytes against the memory formula."""
import pytest
import torch

from course_lib.model import CacheOverflowError, KVCache


def test_shapes_and_nbytes_formula(make_model):
    model = make_model("tinychat")
    cfg = model.config
    cache = model.new_cache(batch_size=3)
    assert len(cache.keys) == len(cache.values) == cfg.n_layers
    assert cache.keys[0].shape == (3, cfg.n_kv_heads, cfg.max_seq_len, cfg.head_dim)
    formula = 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * cfg.max_seq_len * 4 * 3
    assert cache.nbytes() == formula
    half = model.to(torch.bfloat16).new_cache(batch_size=3, max_seq_len=100)
    assert half.dtype == torch.bfloat16 and half.nbytes() == formula // 2 * 100 // cfg.max_seq_len


def test_forward_fills_in_place_and_advances(make_model):
    model = make_model("test-gqa")
    cache = model.new_cache(1, max_seq_len=10)
    pointers = [t.data_ptr() for t in cache.keys + cache.values]
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3, 4]]), cache=cache)
        assert cache.seq_len == 4
        assert cache.keys[0][:, :, :4].abs().sum() > 0 and cache.keys[0][:, :, 4:].abs().sum() == 0
        model(torch.tensor([[5]]), cache=cache)
    assert cache.seq_len == 5
    assert [t.data_ptr() for t in cache.keys + cache.values] == pointers  # nothing reallocated
    cache.reset()
    assert cache.seq_len == 0 and cache.free == 10


def test_overflow_raises_before_writing(make_model):
    model = make_model("test-mqa")
    cache = model.new_cache(1, max_seq_len=4)
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]), cache=cache)
        with pytest.raises(CacheOverflowError, match="overflow"):
            model(torch.tensor([[4, 5]]), cache=cache)
    assert cache.seq_len == 3


def test_cache_longer_than_context_is_refused(make_model):
    model = make_model("test-mha")
    with pytest.raises(ValueError, match="context window"):
        model.new_cache(1, max_seq_len=model.config.max_seq_len + 1)


def test_invalid_construction():
    with pytest.raises(ValueError):
        KVCache(n_layers=0, batch_size=1, n_kv_heads=1, max_seq_len=4, head_dim=2)
