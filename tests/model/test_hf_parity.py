"""Hugging Face LlamaForCausalLM as the oracle: converted models give the same logits and tokens."""
import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from course_lib.generation import greedy_generate  # noqa: E402
from course_lib.model import from_hf_llama, to_hf_llama  # noqa: E402


def _hf_model(n_kv_heads, *, tied=False, scaling=1.0, seed=0, attn="eager"):
    rope = {"rope_type": "default", "rope_theta": 500.0}
    if scaling != 1.0:
        rope = {"rope_type": "linear", "rope_theta": 500.0, "factor": scaling}
    config = LlamaConfig(
        vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=n_kv_heads, max_position_embeddings=64, tie_word_embeddings=tied,
        rope_parameters=rope, initializer_range=0.2,  # large init: logits O(1), so bugs show
        attn_implementation=attn, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    torch.manual_seed(seed)  # HF initialises from the global generator
    return LlamaForCausalLM(config).eval()


def _ids(seed=1):
    return torch.randint(0, 101, (2, 19), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1], ids=["MHA", "GQA", "MQA"])
@pytest.mark.parametrize("tied, scaling", [(False, 1.0), (True, 2.0)])
def test_from_hf_llama_logits_agree(n_kv_heads, tied, scaling):
    hf = _hf_model(n_kv_heads, tied=tied, scaling=scaling)
    model = from_hf_llama(hf)
    assert model.config.n_kv_heads == n_kv_heads and model.config.rope_scaling == scaling
    ids = _ids()
    with torch.no_grad():
        expected, ours = hf(ids).logits, model(ids)
    assert expected.std() > 0.1  # the comparison has signal
    torch.testing.assert_close(ours, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1], ids=["MHA", "GQA", "MQA"])
def test_to_hf_llama_round_trip(make_model, n_kv_heads):
    name = {4: "test-mha", 2: "test-gqa", 1: "test-mqa"}[n_kv_heads]
    model = make_model(name)
    hf = to_hf_llama(model)
    ids = _ids(2) % model.config.vocab_size
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, model(ids), atol=1e-4, rtol=1e-4)
        back = from_hf_llama(hf)
        assert torch.equal(back(ids), model(ids))


def test_greedy_tokens_match_hugging_face_generate():
    hf = _hf_model(2, seed=3, attn="sdpa")
    model = from_hf_llama(hf)
    prompt = [5, 17, 42, 8]
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False,
                          attention_mask=torch.ones(1, 4, dtype=torch.long))
    assert greedy_generate(model, prompt, 20) == out[0, 4:].tolist()


def test_unsupported_hf_models_are_refused():
    hf = _hf_model(2)
    hf.config.attention_bias = True
    with pytest.raises(ValueError, match="attention_bias"):
        from_hf_llama(hf)
    with pytest.raises(TypeError, match="LlamaForCausalLM"):
        from_hf_llama(torch.nn.Linear(2, 2))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_parity_with_hugging_face():
    hf = _hf_model(2).cuda()
    model = from_hf_llama(hf)
    assert model.device.type == "cuda"
    ids = _ids().cuda()
    with torch.no_grad():
        torch.testing.assert_close(model(ids), hf(ids).logits, atol=1e-4, rtol=1e-4)
