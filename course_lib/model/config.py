"""Model geometry: the ModelConfig dataclass and a registry of named configurations.

>>> cfg = get_config("test-gqa")
>>> cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
(4, 2, 16)
>>> get_config("nope")
Traceback (most recent call last):
...
ValueError: unknown model config 'nope'; known configs: test-gqa, test-mha, test-mqa, tinychat, tinychat-draft
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping
from course_lib.validation import positive_int

__all__ = ["ModelConfig", "CONFIGS", "get_config"]


@dataclass
class ModelConfig:
    """Everything needed to build the decoder-only transformer (not its weights)."""

    name: str = "custom"  # registry name, recorded in config.json for humans
    vocab_size: int = 2048  # number of token IDs the embedding table and the output head cover
    d_model: int = 256  # width of the residual stream
    n_layers: int = 4  # transformer blocks
    n_heads: int = 8  # query heads per attention layer
    n_kv_heads: int = 2  # key/value heads; n_heads for MHA, 1 for MQA, in between for GQA
    head_dim: int | None = None  # per-head width; None means d_model // n_heads
    d_ff: int = 768  # hidden width of the gated SiLU MLP
    max_seq_len: int = 512  # context window: longest sequence the model (and its cache) accepts
    rope_theta: float = 10000.0  # RoPE base: larger means slower rotations, longer wavelengths
    rope_scaling: float = 1.0  # linear position interpolation factor (>1 stretches the context)
    norm_eps: float = 1e-5  # RMSNorm epsilon, keeps the rsqrt finite for all-zero rows
    rope_llama3: dict | None = None  # Llama 3's frequency-dependent RoPE scaling: factor, low_freq_factor,
    # high_freq_factor, original_max_position_embeddings (None: off)
    qkv_bias: bool = False  # biases on the q, k and v projections (Qwen2)
    qk_norm: bool = False  # RMSNorm of each head's queries and keys before RoPE (Qwen3)
    tie_embeddings: bool = True  # share one matrix between token embedding and output head
    init_std: float = 0.02  # std of the normal init for linear and embedding weights

    def __post_init__(self) -> None:
        if self.head_dim is None:
            if self.n_heads > 0 and self.d_model % self.n_heads:
                raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}; set head_dim")
            self.head_dim = self.d_model // max(self.n_heads, 1)
        for field in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff", "max_seq_len"):
            positive_int(f"ModelConfig.{field}", getattr(self, field))
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"rotary embeddings need an even head_dim, got {self.head_dim}")
        if self.rope_theta <= 0 or self.rope_scaling <= 0 or self.norm_eps <= 0:
            raise ValueError("rope_theta, rope_scaling and norm_eps must be positive")

    @property
    def n_rep(self) -> int:
        """How many query heads share each key/value head."""
        return self.n_heads // self.n_kv_heads

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ModelConfig":
        """Inverse of to_dict; unknown keys are an error (they usually mean a different format)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown ModelConfig fields {unknown}; known fields: {sorted(known)}")
        return cls(**data)


# The shipped model. The training engineer tunes this geometry; config.json saved next to the
# weights is what load_model actually uses, so retuning here never breaks an old checkpoint.
_TINYCHAT = ModelConfig(
    name="tinychat", vocab_size=1024, d_model=128, n_layers=4, n_heads=8, n_kv_heads=2,
    d_ff=384, max_seq_len=512, rope_theta=10000.0, tie_embeddings=True,
)

# The draft for speculative decoding (``speculative={"method": "draft", ...}``): it proposes
# tokens that tinychat verifies, so it shares tinychat's vocabulary (and is trained with its very
# tokenizer, see course_lib.train) and context window, at about a fifth of the parameters:
# half the layers, half the width, one key/value head.
_TINYCHAT_DRAFT = ModelConfig(
    name="tinychat-draft", vocab_size=_TINYCHAT.vocab_size, d_model=64, n_layers=2, n_heads=4, n_kv_heads=1,
    d_ff=192, max_seq_len=_TINYCHAT.max_seq_len, rope_theta=_TINYCHAT.rope_theta, tie_embeddings=True,
)

# Tiny geometries for tests: one per attention flavour, fast enough for many seeded checks.
_TEST_COMMON = dict(vocab_size=128, d_model=64, n_layers=2, d_ff=128, max_seq_len=64, tie_embeddings=False)

CONFIGS: Mapping[str, ModelConfig] = MappingProxyType({
    "tinychat": _TINYCHAT,
    "tinychat-draft": _TINYCHAT_DRAFT,
    "test-mha": ModelConfig(name="test-mha", n_heads=4, n_kv_heads=4, **_TEST_COMMON),
    "test-gqa": ModelConfig(name="test-gqa", n_heads=4, n_kv_heads=2, **_TEST_COMMON),
    "test-mqa": ModelConfig(name="test-mqa", n_heads=4, n_kv_heads=1, **_TEST_COMMON),
})


def get_config(name: str, **overrides: Any) -> ModelConfig:
    """A fresh copy of a registered config, with optional field overrides.

    >>> get_config("tinychat", n_layers=2).n_layers
    2
    """
    if name not in CONFIGS:
        raise ValueError(f"unknown model config {name!r}; known configs: {', '.join(sorted(CONFIGS))}")
    base = CONFIGS[name]
    derived = base.head_dim == base.d_model // base.n_heads
    if derived and "head_dim" not in overrides and overrides.keys() & {"d_model", "n_heads"}:
        overrides["head_dim"] = None  # it was derived from the widths: derive it again from the new ones
    return dataclasses.replace(base, **overrides)
