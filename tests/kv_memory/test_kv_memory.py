"""KV-cache memory: syllabus figures, real geometries against Hugging Face, capacity, paging."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.kv_memory import (
    ACCELERATORS,
    MODEL_GEOMETRIES,
    blocks_needed,
    bytes_per_element,
    compare_paging,
    format_bytes,
    geometry_table,
    get_accelerator,
    get_geometry,
    kv_bytes_per_token,
    kv_cache_bytes,
    max_concurrent_sequences,
    plan_capacity,
)


# --- the formula ---------------------------------------------------------------------------

def test_syllabus_gpt3_figures():
    assert kv_cache_bytes(96, 96, 128, 4096) == 19_327_352_832
    assert round(kv_cache_bytes(96, 96, 128, 4096) / 1e9, 1) == 19.3
    assert round(kv_cache_bytes(96, 8, 128, 4096) / 1e9, 1) == 1.6
    assert kv_cache_bytes(96, 96, 128, 4096, bytes_per_element="fp16") == 19_327_352_832


@pytest.mark.parametrize(
    "name, kib",
    [("llama-2-7b", 512), ("llama-3-8b", 128), ("mistral-7b", 128), ("llama-3-70b", 320)],
)
def test_syllabus_per_token_figures(name, kib):
    assert get_geometry(name).kv_bytes_per_token("fp16") == kib * 1024


def test_formula_equals_bytes_of_real_tensors():
    """Allocate the K and V tensors a cache would hold and count their bytes."""
    n_layers, n_kv_heads, head_dim, seq_len, batch = 3, 2, 16, 10, 4
    for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16"), (torch.int8, "int8")):
        tensors = [torch.zeros(batch, n_kv_heads, seq_len, head_dim, dtype=dtype)
                   for _ in range(2 * n_layers)]  # K and V per layer, each (B, H_kv, T, D)
        held = sum(t.nbytes for t in tensors)
        assert kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len,
                              bytes_per_element=name, batch=batch) == held


def test_batch_and_length_scale_linearly():
    one = kv_cache_bytes(32, 8, 128, 1000)
    assert kv_cache_bytes(32, 8, 128, 3000) == 3 * one
    assert kv_cache_bytes(32, 8, 128, 1000, batch=5) == 5 * one
    assert kv_bytes_per_token(32, 8, 128) * 1000 == one


def test_element_sizes():
    assert [bytes_per_element(d) for d in ("fp32", "bf16", "fp16", "int8", "int4")] == [4, 2, 2, 1, 0.5]
    assert bytes_per_element(torch.float16) == 2 and bytes_per_element("bfloat16") == 2
    fp16 = kv_cache_bytes(32, 8, 128, 4096, bytes_per_element="fp16")
    assert kv_cache_bytes(32, 8, 128, 4096, bytes_per_element="int8") * 2 == fp16
    assert kv_cache_bytes(32, 8, 128, 4096, bytes_per_element="int4") * 4 == fp16


def test_fractional_element_bytes_round_up():
    # 2 x 1 x 1 x 1 x 3 tokens x 0.25 bytes = 1.5 bytes -> 2 whole bytes
    assert kv_cache_bytes(1, 1, 1, 3, bytes_per_element=0.25) == 2


@pytest.mark.parametrize("bad", [0, -1, -4096])
@pytest.mark.parametrize("position", range(4))
def test_zero_or_negative_sizes_rejected(bad, position):
    args = [32, 8, 128, 4096]
    args[position] = bad
    with pytest.raises(ValueError, match="positive int"):
        kv_cache_bytes(*args)


@pytest.mark.parametrize("kwargs", [{"batch": 0}, {"bytes_per_element": 0}, {"bytes_per_element": -2},
                                    {"bytes_per_element": float("nan")}])
def test_bad_keyword_values_rejected(kwargs):
    with pytest.raises(ValueError):
        kv_cache_bytes(32, 8, 128, 4096, **kwargs)


@pytest.mark.parametrize("bad", [4096.0, "4096", True, None])
def test_non_integer_sizes_rejected(bad):
    with pytest.raises(ValueError, match="seq_len must be a positive int"):
        kv_cache_bytes(32, 8, 128, bad)


def test_unknown_dtype_lists_known_ones():
    with pytest.raises(ValueError, match=r"unknown dtype 'int3'.*fp32.*int4"):
        kv_cache_bytes(32, 8, 128, 4096, bytes_per_element="int3")


def test_format_bytes():
    assert format_bytes(19_327_352_832) == "19.33 GB (18.00 GiB)"
    assert format_bytes(12) == "12 B"


# --- the registry against published configurations ----------------------------------------

REQUIRED = ["gpt-3-175b", "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b",
            "llama-3.1-405b", "mistral-7b", "mixtral-8x7b", "qwen2.5-7b"]


def test_registry_has_the_required_models():
    assert set(REQUIRED) <= set(MODEL_GEOMETRIES)
    for g in MODEL_GEOMETRIES.values():
        assert g.head_dim * g.n_heads == g.hidden_size, g.name
        assert g.source


def test_unknown_model_lists_known_names():
    with pytest.raises(ValueError, match=r"unknown model 'llama-9'.*llama-2-7b.*qwen2.5-7b"):
        get_geometry("llama-9")
    assert get_geometry("Llama 3 405B").name == "llama-3.1-405b"


def _hf_model_on_meta(geometry):
    """Build the Hugging Face model for a geometry on the meta device (no memory, no download)."""
    transformers = pytest.importorskip("transformers")
    common = dict(num_hidden_layers=geometry.n_layers, num_attention_heads=geometry.n_heads,
                  num_key_value_heads=geometry.n_kv_heads, hidden_size=geometry.hidden_size,
                  intermediate_size=geometry.intermediate_size, vocab_size=geometry.vocab_size)
    if geometry.name.startswith("mixtral"):
        config, cls = transformers.MixtralConfig(**common), transformers.MixtralForCausalLM
    elif geometry.name.startswith("qwen"):
        config, cls = transformers.Qwen2Config(**common), transformers.Qwen2ForCausalLM
    else:  # Llama and Mistral share the Llama layout
        config, cls = transformers.LlamaConfig(**common), transformers.LlamaForCausalLM
    with torch.device("meta"):
        return config, cls(config)


@pytest.mark.parametrize("name", [n for n in REQUIRED if n != "gpt-3-175b"])
def test_parameter_counts_match_huggingface_models(name):
    """The published parameter count equals what transformers builds from the geometry."""
    geometry = get_geometry(name)
    config, model = _hf_model_on_meta(geometry)
    assert sum(p.numel() for p in model.parameters()) == geometry.n_params
    # ... and the K/V projections have the shapes the formula assumes.
    k_proj = model.model.layers[0].self_attn.k_proj
    assert k_proj.out_features == geometry.n_kv_heads * geometry.head_dim


def test_registry_matches_transformers_default_configs():
    """transformers' default LlamaConfig / MistralConfig / MixtralConfig are these models."""
    transformers = pytest.importorskip("transformers")
    for cls, name in ((transformers.LlamaConfig, "llama-2-7b"), (transformers.MistralConfig, "mistral-7b"),
                      (transformers.MixtralConfig, "mixtral-8x7b")):
        c, g = cls(), get_geometry(name)
        assert (c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.hidden_size,
                c.intermediate_size, c.vocab_size) == (g.n_layers, g.n_heads, g.n_kv_heads,
                                                       g.hidden_size, g.intermediate_size, g.vocab_size)


def test_gpt3_parameter_count_is_close_to_its_architecture():
    g = get_geometry("gpt-3")
    # 12 d^2 per block (attention 4 d^2, MLP 8 d^2) plus token and position embeddings
    approx = 12 * g.n_layers * g.hidden_size**2 + (g.vocab_size + g.context_length) * g.hidden_size
    assert abs(approx - g.n_params) / g.n_params < 0.01


def test_geometry_table_rows():
    rows = geometry_table()
    assert len(rows) == len(MODEL_GEOMETRIES)
    by_name = {row["model"]: row for row in rows}
    assert by_name["llama-2-7b"]["kv_kib_per_token"] == 512
    assert by_name["llama-2-70b"]["attention"] == "GQA"
    assert by_name["gpt-3-175b"]["attention"] == "MHA"


# --- capacity -------------------------------------------------------------------------------

def test_capacity_by_hand():
    # Llama-2-7B in fp16 on an A100-80GB with 8 GB reserved, 4,096-token sequences
    plan = plan_capacity("llama-2-7b", 4096, accelerator="A100-80GB", weight_dtype="fp16",
                         kv_dtype="fp16", reserve_bytes=8 * 10**9)
    weights = 6_738_415_616 * 2
    per_seq = 512 * 1024 * 4096
    assert plan.weight_bytes == weights and plan.kv_bytes_per_sequence == per_seq
    assert plan.max_sequences == (80 * 10**9 - weights - 8 * 10**9) // per_seq == 27
    assert "27 concurrent sequences" in plan.summary()


def test_quantized_cache_and_gqa_fit_more():
    base = plan_capacity("llama-3-8b", 8192, accelerator="L4-24GB", kv_dtype="fp16")
    int8 = plan_capacity("llama-3-8b", 8192, accelerator="L4-24GB", kv_dtype="int8")
    int4 = plan_capacity("llama-3-8b", 8192, accelerator="L4-24GB", kv_dtype="int4")
    assert int8.max_sequences == base.kv_budget_bytes // (base.kv_bytes_per_sequence // 2)
    assert base.max_sequences < int8.max_sequences < int4.max_sequences


def test_weights_that_do_not_fit_give_zero_sequences():
    plan = plan_capacity("llama-3-70b", 4096, accelerator="H100-80GB")  # 141 GB of bf16 weights
    assert plan.max_sequences == 0 and not plan.fits_weights
    assert "exceed the memory" in plan.summary()
    two = plan_capacity("llama-3-70b", 4096, accelerator="H100-80GB", n_devices=4)
    assert two.max_sequences > 0


@settings(max_examples=60, deadline=None)
@given(memory=st.integers(1, 10**12), weights=st.integers(0, 10**12), per_seq=st.integers(1, 10**10),
       reserve=st.integers(0, 10**11))
def test_max_concurrent_sequences_is_the_largest_count_that_fits(memory, weights, per_seq, reserve):
    n = max_concurrent_sequences(memory, weights, per_seq, reserve_bytes=reserve)
    assert n >= 0
    if n > 0:
        assert weights + reserve + n * per_seq <= memory
    assert weights + reserve + (n + 1) * per_seq > memory


def test_capacity_bad_input():
    with pytest.raises(ValueError, match="exactly one of accelerator"):
        plan_capacity("llama-3-8b", 4096)
    with pytest.raises(ValueError, match="unknown accelerator 'A100'.*A100-40GB or A100-80GB"):
        plan_capacity("llama-3-8b", 4096, accelerator="A100")
    with pytest.raises(ValueError, match="reserve_fraction must be below 1"):
        plan_capacity("llama-3-8b", 4096, accelerator="H200", reserve_fraction=1.5)
    with pytest.raises(ValueError, match="unknown dtype"):
        plan_capacity("llama-3-8b", 4096, accelerator="H200", kv_dtype="fp12")
    with pytest.raises(ValueError, match="seq_len must be a positive int"):
        plan_capacity("llama-3-8b", 0, accelerator="H200")
    with pytest.raises(ValueError, match="kv_bytes_per_sequence must be a positive"):
        max_concurrent_sequences(10**9, 0, 0)


def test_accelerator_table_is_marked_representative():
    assert {"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB", "L4-24GB"} <= set(ACCELERATORS)
    assert all(a.representative for a in ACCELERATORS.values())
    assert get_accelerator("h200").memory_bytes == 141 * 10**9


# --- paging ---------------------------------------------------------------------------------

def test_blocks_needed():
    assert [blocks_needed(n, 16) for n in (1, 15, 16, 17, 32, 33)] == [1, 1, 1, 2, 2, 3]
    with pytest.raises(ValueError, match="block_size must be a positive int"):
        blocks_needed(10, 0)


def test_paging_example_by_hand():
    c = compare_paging([100, 1000, 30], block_size=16, max_seq_len=2048, bytes_per_token=1024)
    assert c.used_tokens == 1130
    assert c.contiguous_waste_tokens == 3 * 2048 - 1130
    assert c.paged_waste_tokens == (112 - 100) + (1008 - 1000) + (32 - 30)
    assert c.paged_waste_bytes == 22 * 1024
    assert c.contiguous_waste_fraction > 0.8 > c.paged_waste_fraction


@settings(max_examples=80, deadline=None)
@given(lengths=st.lists(st.integers(1, 4096), min_size=1, max_size=30), block_size=st.integers(1, 256))
def test_paging_wastes_less_than_one_block_per_sequence(lengths, block_size):
    c = compare_paging(lengths, block_size=block_size, max_seq_len=4096)
    assert 0 <= c.paged_waste_tokens < block_size * len(lengths)
    for n in lengths:  # every sequence fits in its blocks, and one block fewer would not do
        assert blocks_needed(n, block_size) == math.ceil(n / block_size)
    assert c.contiguous_waste_tokens == sum(4096 - n for n in lengths)


def test_paging_bad_input():
    with pytest.raises(ValueError, match="exceeds max_seq_len"):
        compare_paging([10, 5000], block_size=16, max_seq_len=4096)
    with pytest.raises(ValueError, match="seq_lens is empty"):
        compare_paging([], block_size=16, max_seq_len=4096)
    with pytest.raises(ValueError, match=r"seq_lens\[1\] must be a positive"):
        compare_paging([3, 0], block_size=16, max_seq_len=4096)


# --- the course model's real cache, and the one-layer append cache --------------------------

@pytest.mark.parametrize("name", ["tinychat", "test-mha", "test-gqa", "test-mqa"])
@pytest.mark.parametrize("dtype, bytes_name", [(torch.float32, "fp32"), (torch.bfloat16, "bf16")])
def test_course_model_cache_bytes_equal_the_formula(name, dtype, bytes_name):
    from course_lib.model import CONFIGS, Transformer

    config = CONFIGS[name]
    model = Transformer(config).to(dtype)
    for batch, length in ((1, None), (3, 40)):
        cache = model.new_cache(batch, max_seq_len=length)
        expected = kv_cache_bytes(config.n_layers, config.n_kv_heads, config.head_dim,
                                  length or config.max_seq_len, bytes_per_element=bytes_name, batch=batch)
        assert cache.nbytes() == expected
        # ... and nbytes() is not just the formula again: count the tensors' own bytes.
        assert sum(t.nbytes for t in (*cache.keys, *cache.values)) == expected


def test_layer_cache_append_equals_concatenation():
    from course_lib.kv_memory import LayerKVCache

    g = torch.Generator().manual_seed(0)
    cache = LayerKVCache(2, 3, 20, 8)
    storage = cache.nbytes()
    ks, vs = [], []
    for n_new in (5, 1, 1, 4):
        k = torch.randn(2, 3, n_new, 8, generator=g)
        v = torch.randn(2, 3, n_new, 8, generator=g)
        ks.append(k)
        vs.append(v)
        keys, values = cache.append(k, v)
        assert torch.equal(keys, torch.cat(ks, dim=2)) and torch.equal(values, torch.cat(vs, dim=2))
    assert cache.length == 11 and cache.nbytes() == storage == kv_cache_bytes(1, 3, 8, 20, bytes_per_element=4, batch=2)
    assert keys.data_ptr() == cache.keys.data_ptr()  # views of the one preallocated tensor
    with pytest.raises(ValueError, match="cache full"):
        cache.append(torch.zeros(2, 3, 10, 8), torch.zeros(2, 3, 10, 8))
    with pytest.raises(ValueError, match="k must have shape"):
        cache.append(torch.zeros(2, 4, 1, 8), torch.zeros(2, 4, 1, 8))
