"""Conversion to and from Hugging Face's LlamaForCausalLM (the course model is the same network).

Module names already match, so conversion is a key rename ("model." prefix,
``hf_llama_state_dict``) plus a config translation (``hf_llama_config``, which ``export_hf``
also writes as config.json). transformers is imported only inside these functions: the course
runs without it.

>>> from transformers import LlamaConfig, LlamaForCausalLM            # doctest: +SKIP
>>> hf = LlamaForCausalLM(LlamaConfig(hidden_size=64, num_hidden_layers=2, ...))  # doctest: +SKIP
>>> model = from_hf_llama(hf); torch.allclose(model(ids), hf(ids).logits, atol=1e-4)  # doctest: +SKIP
True
"""
from __future__ import annotations

import inspect

import torch

from course_lib.model.config import ModelConfig
from course_lib.model.transformer import Transformer
from course_lib.model.state import load_state_strict

__all__ = ["from_hf_llama", "hf_llama_config", "hf_llama_state_dict", "to_hf_llama"]


def _rope_settings(hf_config) -> tuple[float, float]:
    """(theta, linear scaling factor) from either the transformers 5 or the 4.x config layout."""
    params = getattr(hf_config, "rope_parameters", None)
    if params is None:  # transformers 4.x: rope_theta plus an optional rope_scaling dict
        params = dict(getattr(hf_config, "rope_scaling", None) or {})
        params.setdefault("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ("default", "linear"):
        raise ValueError(f"rope type {rope_type!r} is not supported; the course model does default and linear RoPE")
    factor = float(params.get("factor", 1.0)) if rope_type == "linear" else 1.0
    return float(params["rope_theta"]), factor


def from_hf_llama(hf_model) -> Transformer:
    """Copy a Hugging Face LlamaForCausalLM into a course Transformer (same device and dtype)."""
    cfg = getattr(hf_model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) != "llama":
        raise TypeError(f"from_hf_llama expects a transformers LlamaForCausalLM, got {type(hf_model).__name__}")
    for flag in ("attention_bias", "mlp_bias"):
        if getattr(cfg, flag, False):
            raise ValueError(f"{flag}=True is not supported: the course model has no biases")
    if getattr(cfg, "hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act {cfg.hidden_act!r} is not supported; the course MLP uses SiLU")
    theta, factor = _rope_settings(cfg)
    config = ModelConfig(
        name="hf-llama",
        vocab_size=cfg.vocab_size,
        d_model=cfg.hidden_size,
        n_layers=cfg.num_hidden_layers,
        n_heads=cfg.num_attention_heads,
        n_kv_heads=cfg.num_key_value_heads or cfg.num_attention_heads,
        head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
        d_ff=cfg.intermediate_size,
        max_seq_len=cfg.max_position_embeddings,
        rope_theta=theta,
        rope_scaling=factor,
        norm_eps=cfg.rms_norm_eps,
        tie_embeddings=bool(getattr(cfg, "tie_word_embeddings", False)),
        init_std=getattr(cfg, "initializer_range", 0.02),
    )
    state = {}
    for key, tensor in hf_model.state_dict().items():
        if "rotary_emb" in key:
            continue  # derived tables, rebuilt from the config
        state[key.removeprefix("model.")] = tensor.detach()
    reference = next(iter(hf_model.parameters()))
    model = Transformer(config, generator=torch.Generator().manual_seed(0))
    load_state_strict(model, {k: v.to("cpu", torch.float32) for k, v in state.items()}, "the Hugging Face model")
    return model.to(device=reference.device, dtype=reference.dtype).eval()


def hf_llama_config(config: ModelConfig) -> dict:
    """A course ModelConfig as Hugging Face LlamaConfig fields, in the config.json layout that
    transformers 4.x and 5.x and vLLM all read (RoPE as the older rope_theta / rope_scaling keys).

    bos/eos/pad ids are left unset, so `generate` never stops early on its own.

    >>> from course_lib.model.config import get_config
    >>> fields = hf_llama_config(get_config("tinychat"))
    >>> fields["hidden_size"], fields["num_key_value_heads"], fields["rope_scaling"]
    (128, 2, None)
    """
    c = config
    return dict(
        vocab_size=c.vocab_size, hidden_size=c.d_model, intermediate_size=c.d_ff,
        num_hidden_layers=c.n_layers, num_attention_heads=c.n_heads, num_key_value_heads=c.n_kv_heads,
        head_dim=c.head_dim, max_position_embeddings=c.max_seq_len, rms_norm_eps=c.norm_eps,
        tie_word_embeddings=c.tie_embeddings, attention_bias=False, mlp_bias=False, hidden_act="silu",
        bos_token_id=None, eos_token_id=None, pad_token_id=None, initializer_range=c.init_std,
        rope_theta=c.rope_theta,
        rope_scaling=None if c.rope_scaling == 1.0 else {"rope_type": "linear", "factor": c.rope_scaling},
    )


def hf_llama_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """The model's tensors under Hugging Face names: a "model." prefix on all but lm_head.

    A tied head is the same tensor as model.embed_tokens.weight (drop it before safetensors).
    """
    return {(k if k == "lm_head.weight" else f"model.{k}"): v.detach() for k, v in model.state_dict().items()}


def to_hf_llama(model: Transformer, *, attn_implementation: str = "sdpa"):
    """The inverse: a transformers LlamaForCausalLM holding the same weights (same device and dtype).

    bos/eos/pad ids are left unset, so `generate` never stops early on its own.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    kwargs = hf_llama_config(model.config)
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:  # transformers >= 5
        rope = {"rope_type": "default", "rope_theta": kwargs.pop("rope_theta")}
        rope.update(kwargs.pop("rope_scaling") or {})
        kwargs["rope_parameters"] = rope
    hf_config = LlamaConfig(**kwargs)
    hf_config._attn_implementation = attn_implementation
    hf_model = LlamaForCausalLM(hf_config)
    state = {k: v.to("cpu", torch.float32) for k, v in hf_llama_state_dict(model).items()}
    result = hf_model.load_state_dict(state, strict=False)
    leftover = [k for k in result.missing_keys if "rotary_emb" not in k]
    if leftover or result.unexpected_keys:
        raise RuntimeError(f"conversion to Hugging Face left missing {leftover} and unexpected {result.unexpected_keys}")
    return hf_model.to(device=model.device, dtype=model.dtype).eval()
