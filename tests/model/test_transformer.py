"""The transformer forward: shapes, causality, cached == uncached logits, bad input, dtypes."""
import pytest
import torch

from course_lib.model import CacheOverflowError, Transformer, get_config

NAMES = ["test-mha", "test-gqa", "test-mqa"]


def _ids(batch, length, vocab, seed=0):
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", NAMES)
def test_logits_shape_and_config(make_model, name):
    model = make_model(name)
    cfg = model.config
    with torch.no_grad():
        logits = model(_ids(2, 9, cfg.vocab_size))
    assert logits.shape == (2, 9, cfg.vocab_size)
    assert model.layers[0].self_attn.k_proj.weight.shape == (cfg.n_kv_heads * cfg.head_dim, cfg.d_model)


def test_future_tokens_do_not_change_past_logits(make_model):
    model = make_model("test-gqa")
    ids = _ids(1, 12, 128)
    changed = ids.clone()
    changed[0, 8:] = (changed[0, 8:] + 1) % 128
    with torch.no_grad():
        a, b = model(ids), model(changed)
    torch.testing.assert_close(a[:, :8], b[:, :8])
    assert not torch.allclose(a[:, 8:], b[:, 8:])


@pytest.mark.parametrize("name", NAMES)
def test_cached_logits_equal_uncached(make_model, name):
    """Prefill 5 tokens, then a chunk of 3, then one at a time: same logits as one full pass."""
    model = make_model(name, seed=1)
    ids = _ids(2, 14, model.config.vocab_size, seed=2)
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache(2, max_seq_len=20)
        pieces = [model(ids[:, :5], cache=cache), model(ids[:, 5:8], cache=cache)]
        pieces += [model(ids[:, t:t + 1], cache=cache) for t in range(8, 14)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-4)
    assert cache.seq_len == 14


def test_batch_rows_are_independent(make_model):
    model = make_model("test-gqa")
    ids = _ids(3, 7, 128, seed=3)
    with torch.no_grad():
        batched = model(ids)
        one = model(ids[1:2])
    torch.testing.assert_close(batched[1:2], one, atol=1e-5, rtol=1e-4)


def test_tied_embeddings_share_one_matrix(make_model):
    model = make_model("test-mha", tie_embeddings=True)
    assert model.lm_head.weight is model.embed_tokens.weight
    untied = make_model("test-mha")
    assert untied.num_parameters() == model.num_parameters() + 128 * 64


def test_same_seed_same_weights_different_seed_different(make_model):
    a, b, c = make_model("test-mqa", seed=5), make_model("test-mqa", seed=5), make_model("test-mqa", seed=6)
    assert torch.equal(a.lm_head.weight, b.lm_head.weight)
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)


def test_bfloat16_forward_close_to_float32(make_model):
    model = make_model("test-gqa", init_std=0.02)
    ids = _ids(1, 10, 128, seed=4)
    with torch.no_grad():
        ref = model(ids)
        half = model.to(torch.bfloat16)
        cache = half.new_cache(1)
        out = torch.cat([half(ids[:, :6], cache=cache), half(ids[:, 6:], cache=cache)], dim=1)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, atol=5e-2, rtol=5e-2)


def test_attention_maps_are_causal_distributions(make_model):
    model = make_model("test-gqa")
    maps = model.attention_maps(_ids(1, 6, 128))
    assert len(maps) == 2 and maps[0].shape == (1, 4, 6, 6)
    torch.testing.assert_close(maps[1].sum(-1), torch.ones(1, 4, 6))
    assert torch.all(maps[0].triu(diagonal=1) == 0)


@pytest.mark.parametrize("bad, error, words", [
    (lambda m: m(torch.tensor([[1.0, 2.0]])), TypeError, "integer"),
    (lambda m: m(torch.tensor([[True]])), TypeError, "integer"),
    (lambda m: m(torch.tensor([1, 2, 3])), ValueError, "unsqueeze"),
    (lambda m: m(torch.zeros(1, 0, dtype=torch.long)), ValueError, "(B, T)"),
    (lambda m: m([[1, 2]]), TypeError, "torch.Tensor"),
    (lambda m: m(torch.tensor([[1, 128]])), ValueError, "[0, 128)"),
    (lambda m: m(torch.tensor([[-1, 3]])), ValueError, "[0, 128)"),
    (lambda m: m(torch.zeros(1, 65, dtype=torch.long)), ValueError, "context window"),
    (lambda m: m(torch.zeros(2, 3, dtype=torch.long), cache=m.new_cache(1)), ValueError, "batch size"),
    (lambda m: m(torch.zeros(1, 3, dtype=torch.long), cache=m.new_cache(1, 2)), CacheOverflowError, "overflow"),
    (lambda m: m(torch.zeros(1, 3, dtype=torch.long), cache="cache"), TypeError, "KVCache"),
])
def test_bad_input_gets_a_clear_error(make_model, bad, error, words):
    model = make_model("test-mha")
    with pytest.raises(error) as info:
        with torch.no_grad():
            bad(model)
    assert words in str(info.value)


def test_cache_from_another_geometry_is_refused(make_model):
    model, other = make_model("test-mha"), make_model("test-mqa")
    with pytest.raises(ValueError, match="geometry"):
        model(torch.zeros(1, 2, dtype=torch.long), cache=other.new_cache(1))


def test_cache_built_before_a_dtype_change_is_refused(make_model):
    model = make_model("test-mha")
    cache = model.new_cache(1)
    model.to(torch.bfloat16)
    with pytest.raises(ValueError, match="after moving the model"):
        model(torch.zeros(1, 2, dtype=torch.long), cache=cache)


def test_transformer_needs_a_model_config():
    with pytest.raises(TypeError, match="ModelConfig"):
        Transformer({"d_model": 64})
    assert isinstance(Transformer(get_config("test-mha")), torch.nn.Module)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_forward_matches_cpu(make_model, dtype):
    model = make_model("test-gqa", init_std=0.02)
    ids = _ids(2, 11, 128, seed=7)
    with torch.no_grad():
        ref = model(ids)
        gpu = model.to("cuda", dtype)
        cache = gpu.new_cache(2)
        assert cache.device.type == "cuda" and cache.dtype == dtype
        out = torch.cat([gpu(ids[:, :7].cuda(), cache=cache), gpu(ids[:, 7:].cuda(), cache=cache)], dim=1)
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    torch.testing.assert_close(out.float().cpu(), ref, atol=tol, rtol=tol)


def test_fused_training_attention_gives_the_course_values_and_gradients(make_model):
    """Training runs attention in torch's fused kernel; it must be the same function as the course's."""
    from course_lib.data.batching import IGNORE_INDEX
    from course_lib.train import masked_loss

    model = make_model("test-gqa")
    x = torch.randint(0, model.config.vocab_size, (3, 17), generator=torch.Generator().manual_seed(4))
    y = torch.full_like(x, IGNORE_INDEX)
    y[:, 9:] = x[:, 9:]
    grads = []
    for fused in (False, True):
        model.zero_grad(set_to_none=True)
        loss = masked_loss(model, x, y, fused=fused)
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (course_loss, course_grads), (fused_loss, fused_grads) = grads
    torch.testing.assert_close(fused_loss, course_loss, atol=1e-5, rtol=1e-5)
    for a, b in zip(fused_grads, course_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(model.hidden_states(x, fused=True), model.hidden_states(x), atol=1e-5, rtol=1e-4)


def test_fused_attention_refuses_a_cache(make_model):
    model = make_model("test-gqa")
    with pytest.raises(ValueError, match="fused attention"):
        model.hidden_states(torch.zeros(1, 4, dtype=torch.long), model.new_cache(1), fused=True)
