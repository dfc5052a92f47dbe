"""Real model geometries, copied from their published configurations.

Only the numbers the memory arithmetic needs are kept: layers, attention heads, KV heads, head
size, hidden size, feed-forward size, vocabulary, context length and parameter count. Sources
are the models' papers and the ``config.json`` files their authors published; parameter counts
are the exact totals of the released checkpoints where the authors give them.

>>> g = get_geometry("llama-3-70b")
>>> g.n_layers, g.n_kv_heads, g.head_dim, g.kv_bytes_per_token("fp16") // 1024
(80, 8, 128, 320)
>>> g.attention_kind
'GQA'
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType

from course_lib.validation import positive_int
from course_lib.kv_memory.dtypes import bytes_per_element
from course_lib.kv_memory.formula import kv_cache_bytes


@dataclass(frozen=True)
class ModelGeometry:
    name: str
    n_layers: int           # transformer blocks; each keeps its own K and V
    n_heads: int            # query heads
    n_kv_heads: int         # key/value heads (== n_heads for MHA, 1 for MQA, between for GQA)
    head_dim: int           # channels per head
    hidden_size: int        # model width (d_model)
    intermediate_size: int  # feed-forward width (per expert for mixture-of-experts models)
    vocab_size: int
    context_length: int     # longest context the released model supports
    n_params: int           # total parameters of the released checkpoint
    source: str             # where the numbers come from
    note: str = ""

    def __post_init__(self) -> None:
        for field in ("n_layers", "n_heads", "n_kv_heads", "head_dim", "hidden_size",
                      "intermediate_size", "vocab_size", "context_length", "n_params"):
            positive_int(field, getattr(self, field))
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"{self.name}: n_heads ({self.n_heads}) must be a multiple of n_kv_heads "
                f"({self.n_kv_heads}) so each KV head serves a whole group of query heads"
            )

    @property
    def attention_kind(self) -> str:
        """'MHA' (one KV head per query head), 'MQA' (one KV head) or 'GQA' (in between)."""
        if self.n_kv_heads == self.n_heads:
            return "MHA"
        return "MQA" if self.n_kv_heads == 1 else "GQA"

    def kv_bytes_per_token(self, dtype: object = "fp16") -> int:
        return kv_cache_bytes(self.n_layers, self.n_kv_heads, self.head_dim, 1,
                              bytes_per_element=bytes_per_element(dtype))

    def kv_cache_bytes(self, seq_len: int, dtype: object = "fp16", *, batch: int = 1) -> int:
        return kv_cache_bytes(self.n_layers, self.n_kv_heads, self.head_dim, seq_len,
                              bytes_per_element=bytes_per_element(dtype), batch=batch)

    def weight_bytes(self, dtype: object = "bf16") -> int:
        """Bytes of the weights alone, every parameter stored at ``dtype``."""
        return math.ceil(self.n_params * Fraction(bytes_per_element(dtype)))


_SOURCES = {
    "gpt3": "Brown et al. 2020, 'Language Models are Few-Shot Learners', Table 2.1",
    "llama2": "Touvron et al. 2023 (Llama 2) and the meta-llama config.json files",
    "llama3": "Llama Team 2024, 'The Llama 3 Herd of Models', Table 3, and meta-llama config.json",
    "mistral": "Jiang et al. 2023 (Mistral 7B) and mistralai config.json",
    "mixtral": "Jiang et al. 2024 (Mixtral of Experts) and mistralai config.json",
    "qwen": "Qwen Team 2024 (Qwen2.5) and Qwen/Qwen2.5-7B-Instruct config.json",
}

_GEOMETRIES = (
    ModelGeometry("gpt-3-175b", 96, 96, 96, 128, 12288, 49152, 50257, 2048, 175_000_000_000,
                  _SOURCES["gpt3"], "parameter count as published (175B, rounded)"),
    ModelGeometry("llama-2-7b", 32, 32, 32, 128, 4096, 11008, 32000, 4096, 6_738_415_616,
                  _SOURCES["llama2"]),
    ModelGeometry("llama-2-13b", 40, 40, 40, 128, 5120, 13824, 32000, 4096, 13_015_864_320,
                  _SOURCES["llama2"]),
    ModelGeometry("llama-2-70b", 80, 64, 8, 128, 8192, 28672, 32000, 4096, 68_976_648_192,
                  _SOURCES["llama2"]),
    ModelGeometry("llama-3-8b", 32, 32, 8, 128, 4096, 14336, 128256, 8192, 8_030_261_248,
                  _SOURCES["llama3"]),
    ModelGeometry("llama-3-70b", 80, 64, 8, 128, 8192, 28672, 128256, 8192, 70_553_706_496,
                  _SOURCES["llama3"]),
    ModelGeometry("llama-3.1-405b", 126, 128, 8, 128, 16384, 53248, 128256, 131072,
                  405_853_388_800, _SOURCES["llama3"],
                  "the 405B member of the Llama 3 herd, released as Llama 3.1"),
    ModelGeometry("mistral-7b", 32, 32, 8, 128, 4096, 14336, 32000, 32768, 7_241_732_096,
                  _SOURCES["mistral"], "v0.1 attends over a 4,096-token sliding window"),
    ModelGeometry("mixtral-8x7b", 32, 32, 8, 128, 4096, 14336, 32000, 32768, 46_702_792_704,
                  _SOURCES["mixtral"],
                  "8 experts of which 2 run per token (~12.9B active); all 46.7B sit in memory"),
    ModelGeometry("qwen2.5-7b", 28, 28, 4, 128, 3584, 18944, 152064, 32768, 7_615_616_512,
                  _SOURCES["qwen"], "32,768 native context; 131,072 with YaRN scaling"),
)

MODEL_GEOMETRIES: Mapping[str, ModelGeometry] = MappingProxyType({g.name: g for g in _GEOMETRIES})
# Names people also write; each maps to a registry key.
_ALIASES = MappingProxyType({"gpt-3": "gpt-3-175b", "gpt3-175b": "gpt-3-175b",
                             "llama-3-405b": "llama-3.1-405b", "qwen-2.5-7b": "qwen2.5-7b"})


def get_geometry(name: str | ModelGeometry) -> ModelGeometry:
    """Registry lookup, forgiving about case, spaces and underscores.

    >>> get_geometry("Llama 2 7B").n_kv_heads
    32
    """
    if isinstance(name, ModelGeometry):
        return name
    if not isinstance(name, str):
        raise TypeError(f"model name must be a str, got {type(name).__name__}")
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    key = _ALIASES.get(key, key)
    if key not in MODEL_GEOMETRIES:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(MODEL_GEOMETRIES)}")
    return MODEL_GEOMETRIES[key]


def geometry_table(dtype: object = "fp16", seq_len: int = 4096) -> list[dict[str, object]]:
    """One row per registry model: geometry, KV bytes per token and per ``seq_len`` sequence."""
    rows = []
    for g in MODEL_GEOMETRIES.values():
        rows.append({
            "model": g.name, "layers": g.n_layers, "heads": g.n_heads, "kv_heads": g.n_kv_heads,
            "head_dim": g.head_dim, "attention": g.attention_kind,
            "params_b": round(g.n_params / 1e9, 1),
            "kv_kib_per_token": g.kv_bytes_per_token(dtype) / 1024,
            f"kv_gb_at_{seq_len}": g.kv_cache_bytes(seq_len, dtype) / 1e9,
        })
    return rows
