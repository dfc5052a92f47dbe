"""The course model: configs, the transformer, its KV cache, weights I/O and its two decode steps.

>>> from course_lib.model import Transformer, get_config
>>> model = Transformer(get_config("test-mha"), generator=torch.Generator().manual_seed(0))
>>> cache = model.new_cache(1)
>>> tuple(prefill(model, torch.tensor([[1, 2, 3]]), cache).shape) == (1, model.config.vocab_size)
True

The loops that drive the steps (``greedy_generate`` and friends) are ``course_lib.generation``.
"""
import torch  # noqa: F401  (used by the doctest above)

from course_lib.model.config import CONFIGS, ModelConfig, get_config
from course_lib.model.steps import as_prompt_tensor, decode_step, prefill
from course_lib.model.hf import from_hf_llama, to_hf_llama
from course_lib.model.kv_cache import CacheOverflowError, KVCache
from course_lib.model.transformer import Block, GatedMLP, RMSNorm, Transformer
from course_lib.model.weights import (
    WeightsNotFoundError,
    data_dir,
    default_device,
    load_model,
    load_tokenizer,
    save_model,
    use_reference_threads,
)

__all__ = [
    "CONFIGS",
    "Block",
    "CacheOverflowError",
    "GatedMLP",
    "KVCache",
    "ModelConfig",
    "RMSNorm",
    "Transformer",
    "WeightsNotFoundError",
    "as_prompt_tensor",
    "data_dir",
    "decode_step",
    "default_device",
    "from_hf_llama",
    "get_config",
    "load_model",
    "load_tokenizer",
    "prefill",
    "save_model",
    "use_reference_threads",
    "to_hf_llama",
]
