"""The course's diagrams render, say what they claim, and refuse impossible shapes."""
import io

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from course_lib.diagrams import (  # noqa: E402
    attention_shapes,
    gqa_head_sharing,
    kv_cache_layout,
    request_pipeline,
)


@pytest.fixture(autouse=True)
def close_figures():
    # the diagrams are pyplot figures (so notebooks show them); do not let them pile up
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def texts(fig: Figure) -> str:
    return "\n".join(t.get_text() for ax in fig.axes for t in ax.texts + [ax.title])


def renders_png(fig: Figure) -> bool:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue().startswith(b"\x89PNG")


def test_request_pipeline_names_every_stage_and_which_are_the_network():
    fig = request_pipeline()
    assert renders_png(fig)
    text = texts(fig)
    for stage in ("messages", "chat template", "tokenizer", "prefill", "logits", "decoding rule",
                  "KV cache", "stop", "detokenize", "validation"):
        assert stage in text, stage
    assert "neural network" in text and "ordinary code" in text


@pytest.mark.parametrize("batch,heads,seq,head_dim", [(1, 8, 6, 16), (2, 4, 3, 64)])
def test_attention_shapes_labels_follow_the_arguments(batch, heads, seq, head_dim):
    fig = attention_shapes(batch=batch, heads=heads, seq=seq, head_dim=head_dim)
    assert renders_png(fig)
    text = texts(fig)
    assert f"(B={batch}, H={heads}, T={seq}, D={head_dim})" in text
    assert f"(B={batch}, H={heads}, T={seq}, T={seq})" in text
    assert f"T×T = {seq * seq}" in text


@pytest.mark.parametrize("layers,kv_heads,seq,head_dim,dtype_bytes", [(4, 2, 8, 16, 2), (32, 8, 5, 128, 2)])
def test_kv_cache_layout_computes_bytes_per_token(layers, kv_heads, seq, head_dim, dtype_bytes):
    fig = kv_cache_layout(layers=layers, kv_heads=kv_heads, seq=seq, head_dim=head_dim,
                          dtype_bytes=dtype_bytes)
    assert renders_png(fig)
    text = texts(fig)
    per_token = 2 * layers * kv_heads * head_dim * dtype_bytes
    assert f"= {per_token:,}" in text
    assert f"{seq} tokens = {per_token * seq:,} bytes" in text
    assert f"{kv_heads} × {seq} × {head_dim}" in text


@pytest.mark.parametrize("query_heads,kv_heads", [(8, 2), (4, 4), (6, 1)])
def test_gqa_head_sharing_shows_groups_and_the_extremes(query_heads, kv_heads):
    fig = gqa_head_sharing(query_heads=query_heads, kv_heads=kv_heads)
    assert renders_png(fig)
    text = texts(fig)
    assert "MHA" in text and "GQA" in text and "MQA" in text
    group = query_heads // kv_heads
    assert f"{group} query head{'s' * (group != 1)} per KV head" in text


def test_gqa_rejects_query_heads_not_divisible_by_kv_heads():
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        gqa_head_sharing(query_heads=8, kv_heads=3)
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        gqa_head_sharing(query_heads=2, kv_heads=4)


@pytest.mark.parametrize("call", [
    lambda: attention_shapes(heads=0),
    lambda: attention_shapes(seq=-1),
    lambda: kv_cache_layout(dtype_bytes=0),
    lambda: kv_cache_layout(layers=2.5),
    lambda: gqa_head_sharing(kv_heads=0),
])
def test_non_positive_sizes_are_rejected(call):
    with pytest.raises(ValueError, match="positive integer"):
        call()
