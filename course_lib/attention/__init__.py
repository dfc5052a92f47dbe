"""Attention primitives: scaled dot-product attention, masks, positions, heads, tiled attention.

>>> from course_lib.attention import scaled_dot_product_attention, causal_mask
>>> causal_mask(2).tolist()
[[True, False], [True, True]]
"""
from course_lib.attention.core import (
    attention_weights,
    causal_mask,
    merge_heads,
    repeat_kv,
    scaled_dot_product_attention,
    split_heads,
)
from course_lib.attention.multihead import MultiHeadAttention
from course_lib.attention.positions import (
    RotaryEmbedding,
    apply_rotary,
    rope_cos_sin,
    rope_inverse_frequencies,
    rotate_half,
    sinusoidal_positions,
)
from course_lib.attention.tiled import tiled_attention

__all__ = [
    "MultiHeadAttention",
    "RotaryEmbedding",
    "apply_rotary",
    "attention_weights",
    "causal_mask",
    "merge_heads",
    "repeat_kv",
    "rope_cos_sin",
    "rope_inverse_frequencies",
    "rotate_half",
    "scaled_dot_product_attention",
    "sinusoidal_positions",
    "split_heads",
    "tiled_attention",
]
