"""Load a Hugging Face checkpoint directory into the course Transformer: Llama (Llama 3's RoPE
scaling included), Mistral-style, SmolLM2, Qwen2/2.5 and Qwen3, from local files only.

A directory holds ``config.json`` and the weights: ``model.safetensors``, or shards listed in
``model.safetensors.index.json``. The architectures differ from tinychat in three switches
the course model has (``ModelConfig``): biases on q, k and v (Qwen2), an RMSNorm on each
head's queries and keys (Qwen3), and Llama 3's frequency-dependent RoPE scaling; anything
else a config asks for (another activation, sliding-window attention, another RoPE type,
MLP biases) is refused before a single weight is read, naming the field and its value.

    model = load_hf_checkpoint("~/models/SmolLM2-135M-Instruct")        # float32 on the CPU
    model = load_hf_checkpoint(path, device="cuda", dtype=torch.bfloat16)

The context window is capped (``max_seq_len``, default ``DEFAULT_MAX_SEQ_LEN``): the rotary
tables and the engine's KV pool are sized by it, and 131,072 positions would cost gigabytes
before the first request.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from course_lib.model.config import ModelConfig
from course_lib.model.state import default_device, load_state_strict
from course_lib.model.transformer import Transformer

__all__ = ["DEFAULT_MAX_SEQ_LEN", "SUPPORTED", "hf_model_config", "is_hf_checkpoint", "load_hf_checkpoint"]

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3")  # config.json model_type values
DEFAULT_MAX_SEQ_LEN = 4096
_INDEX = "model.safetensors.index.json"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def is_hf_checkpoint(directory: str | Path) -> bool:
    """A directory whose config.json names a ``model_type`` (the course's own has none)."""
    path = Path(directory).expanduser() / "config.json"
    try:
        return path.is_file() and "model_type" in json.loads(path.read_text())
    except (OSError, ValueError):
        return False


def _refuse(config_path: Path, field: str, value, why: str) -> ValueError:
    return ValueError(f"{config_path}: {field}={value!r} is not supported ({why})")


def _rope(cfg: dict, config_path: Path) -> dict:
    """theta, linear factor and Llama 3 settings from either config layout (rope_scaling, or
    transformers 5's rope_parameters)."""
    params = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    theta = float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    out = {"rope_theta": theta, "rope_scaling": 1.0, "rope_llama3": None}
    if kind == "linear":
        out["rope_scaling"] = float(params["factor"])
    elif kind == "llama3":
        out["rope_llama3"] = {k: float(params[k]) if k != "original_max_position_embeddings" else int(params[k])
                              for k in ("factor", "low_freq_factor", "high_freq_factor",
                                        "original_max_position_embeddings")}
    elif kind != "default":
        raise _refuse(config_path, "rope_scaling.rope_type", kind, "the course model does default, linear and "
                                                                   "llama3 RoPE")
    return out


def hf_model_config(cfg: dict, config_path: Path = Path("config.json"), *,
                    max_seq_len: int | None = None) -> ModelConfig:
    """A Hugging Face config.json (as a dict) -> the course ModelConfig, or a ValueError naming
    the first field the course model cannot honour.

    >>> hf_model_config({"model_type": "qwen2", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2,
    ...                  "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64,
    ...                  "max_position_embeddings": 128}).qkv_bias
    True
    >>> hf_model_config({"model_type": "gpt2"})
    Traceback (most recent call last):
    ...
    ValueError: config.json: model_type='gpt2' is not supported (the course loads llama, mistral, qwen2, qwen3)
    """
    kind = cfg.get("model_type")
    if kind not in SUPPORTED:
        raise _refuse(config_path, "model_type", kind, f"the course loads {', '.join(SUPPORTED)}")
    act = cfg.get("hidden_act", cfg.get("hidden_activation", "silu"))
    if act != "silu":
        raise _refuse(config_path, "hidden_act", act, "the course MLP is gated SiLU")
    if cfg.get("mlp_bias"):
        raise _refuse(config_path, "mlp_bias", True, "the course MLP has no biases")
    if kind in ("llama", "mistral", "qwen3") and cfg.get("attention_bias"):
        raise _refuse(config_path, "attention_bias", True, "biases on q, k and v are Qwen2's; the course model "
                                                             "has none on the output projection")
    window = cfg.get("sliding_window")
    if window is not None and (kind != "qwen2" or cfg.get("use_sliding_window")) and \
            window < cfg.get("max_position_embeddings", 0):
        raise _refuse(config_path, "sliding_window", window, "the course model attends to the whole context")
    heads = cfg["num_attention_heads"]
    window_len = int(cfg["max_position_embeddings"])
    return ModelConfig(
        name=str(cfg.get("_name_or_path") or kind), vocab_size=int(cfg["vocab_size"]), d_model=int(cfg["hidden_size"]),
        n_layers=int(cfg["num_hidden_layers"]), n_heads=int(heads),
        n_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or cfg["hidden_size"] // heads), d_ff=int(cfg["intermediate_size"]),
        max_seq_len=min(window_len, max_seq_len or DEFAULT_MAX_SEQ_LEN), norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)), qkv_bias=kind == "qwen2",
        qk_norm=kind == "qwen3", **_rope(cfg, config_path))


def _shards(directory: Path) -> list[Path]:
    single, index = directory / "model.safetensors", directory / _INDEX
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [n for n in names if not (directory / n).is_file()]
        if missing:
            raise FileNotFoundError(f"{index} lists shard(s) {', '.join(missing)} that are not in {directory}; "
                                    "copy the whole checkpoint directory")
        return [directory / n for n in names]
    if single.is_file():
        return [single]
    raise FileNotFoundError(f"no weights in {directory}: neither model.safetensors nor {_INDEX} (the course reads "
                            "safetensors only; convert .bin checkpoints with transformers' save_pretrained)")


def _check_memory(shards: list[Path], config: ModelConfig, dtype: torch.dtype, device: torch.device) -> None:
    """Weights (at ``dtype``) plus a KV pool for one full context must fit in what is free."""
    from safetensors import safe_open

    count = 0
    for shard in shards:
        with safe_open(str(shard), framework="pt") as f:
            count += sum(_numel(f.get_slice(key).get_shape()) for key in f.keys())
    size = torch.empty(0, dtype=dtype).element_size()
    weights = count * size
    kv = 2 * config.n_layers * config.n_kv_heads * config.head_dim * config.max_seq_len * size
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    else:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if weights + kv > free:
        raise MemoryError(f"the model needs {weights / 2**30:.2f} GiB of weights ({count:,} parameters x {size} bytes) "
                          f"+ {kv / 2**30:.2f} GiB of KV for one {config.max_seq_len}-token sequence "
                          f"(2 x {config.n_layers} layers x {config.n_kv_heads} KV heads x {config.head_dim} x "
                          f"{size} bytes per token), but {free / 2**30:.2f} GiB is free on {device}; use a smaller "
                          "dtype, a shorter max_seq_len or a smaller model")


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def load_hf_checkpoint(directory: str | Path, device=None, dtype: torch.dtype | None = None, *,
                       max_seq_len: int | None = None) -> Transformer:
    """The checkpoint in ``directory`` as a course Transformer in eval mode (see the module
    docstring). ``dtype`` defaults to float32 (``torch.bfloat16`` or ``float16`` halve it)."""
    from safetensors.torch import load_file

    directory = Path(directory).expanduser()
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"no config.json in {directory}")
    config = hf_model_config(json.loads(config_path.read_text()), config_path, max_seq_len=max_seq_len)
    device = default_device() if device is None else torch.device(device)
    dtype = dtype or torch.float32
    if dtype not in _DTYPES.values():
        raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype}")
    shards = _shards(directory)
    _check_memory(shards, config, dtype, device)
    state = {}
    for shard in shards:
        for key, tensor in load_file(str(shard), device="cpu").items():
            if "rotary_emb" not in key:
                state[key.removeprefix("model.")] = tensor
    model = Transformer(config, generator=torch.Generator().manual_seed(0))
    load_state_strict(model, {k: v.float() for k, v in state.items()}, directory)
    return model.to(device=device, dtype=dtype).eval()
