"""Saving and loading the course model: config.json + model.safetensors in one directory.

The shipped model lives in course_lib/data/<name>/ (written by `course train`):

    config.json         ModelConfig.to_dict()
    model.safetensors   the state dict (a tied output head is stored once, as embed_tokens)
    tokenizer file      written by BPETokenizer.save

>>> import tempfile
>>> from course_lib.model.config import get_config
>>> model = Transformer(get_config("test-mqa"), generator=torch.Generator().manual_seed(0))
>>> with tempfile.TemporaryDirectory() as d:
...     _ = save_model(model, d)
...     again = load_model(directory=d, device="cpu")
>>> torch.equal(again.lm_head.weight, model.lm_head.weight)
True
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from course_lib.model.config import CONFIGS, ModelConfig
from course_lib.model.hf_checkpoint import is_hf_checkpoint, load_hf_checkpoint
from course_lib.model.state import default_device, load_state_strict
from course_lib.model.transformer import Transformer

__all__ = ["WeightsNotFoundError", "data_dir", "save_model", "load_model", "load_tokenizer", "default_device",
           "use_reference_threads", "REFERENCE_THREADS"]

_CONFIG_FILE = "config.json"
_WEIGHTS_FILE = "model.safetensors"
_TRAIN_HINT = "run `course train` to train and save them"


class WeightsNotFoundError(FileNotFoundError):
    """The trained weights (or tokenizer) are not on disk yet."""


def data_dir(name: str) -> Path:
    """course_lib/data/<name>/, where the shipped model and tokenizer live."""
    return Path(__file__).resolve().parent.parent / "data" / name


REFERENCE_THREADS = 2  # the course's reference machine: two CPU cores


def use_reference_threads() -> int:
    """Give torch the reference machine's two CPU threads, unless OMP_NUM_THREADS says how
    many; return the count set. The grader sets OMP_NUM_THREADS=1 because it runs notebooks
    side by side: two kernels with two spinning threads each on two cores ran one 6 s
    notebook in 70 s.

    >>> from unittest import mock
    >>> before = torch.get_num_threads()
    >>> with mock.patch.dict(os.environ, {"OMP_NUM_THREADS": "1"}):
    ...     use_reference_threads()
    1
    >>> with mock.patch.dict(os.environ, {"OMP_NUM_THREADS": ""}):
    ...     use_reference_threads()
    2
    >>> torch.set_num_threads(before)
    """
    setting = os.environ.get("OMP_NUM_THREADS", "").strip()
    threads = int(setting) if setting.isdigit() and int(setting) > 0 else REFERENCE_THREADS
    torch.set_num_threads(threads)
    return threads


def _weights_to_save(model: Transformer) -> dict[str, torch.Tensor]:
    state = model.state_dict()
    if model.config.tie_embeddings:
        state.pop("lm_head.weight")  # the same matrix as embed_tokens.weight; safetensors rejects shared storage
    return {k: v.detach().to("cpu").contiguous() for k, v in state.items()}


def save_model(model: Transformer, directory: str | Path) -> Path:
    """Write config.json and model.safetensors into `directory` (created if needed); return it."""
    from safetensors.torch import save_file

    if not isinstance(model, Transformer):
        raise TypeError(f"save_model expects a course Transformer, got {type(model).__name__}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / _CONFIG_FILE).write_text(json.dumps(model.config.to_dict(), indent=2, sort_keys=True) + "\n")
    save_file(_weights_to_save(model), str(directory / _WEIGHTS_FILE), metadata={"format": "pt"})
    return directory


def load_model(name: str = "tinychat", device=None, dtype: torch.dtype | None = None, *,
               directory: str | Path | None = None) -> Transformer:
    """The trained model `name` from course_lib/data/<name>/ (or from `directory`), in eval mode.

    ``name`` may also be the path of a Hugging Face checkpoint directory (Llama, Mistral,
    SmolLM2, Qwen2, Qwen3: ``course_lib.model.hf_checkpoint``). device defaults to CUDA when
    available, else CPU; dtype defaults to float32.
    """
    if directory is None and name not in CONFIGS:
        directory = _local_directory(name)
    if directory is not None and is_hf_checkpoint(directory):
        return load_hf_checkpoint(directory, device=device, dtype=dtype)
    if directory is None:  # a course model's name (any other name became a directory above, or raised)
        directory = data_dir(name)
    directory = Path(directory)
    config_path, weights_path = directory / _CONFIG_FILE, directory / _WEIGHTS_FILE
    missing = [p.name for p in (config_path, weights_path) if not p.is_file()]
    if missing:
        raise WeightsNotFoundError(f"no trained weights for {name!r}: {', '.join(missing)} missing in "
                                   f"{directory}; {_TRAIN_HINT}")
    config = _read_config(config_path)
    state = _read_weights(weights_path)
    model = Transformer(config, generator=torch.Generator().manual_seed(0))
    load_state_strict(model, state, weights_path)
    device = default_device() if device is None else torch.device(device)
    return model.to(device=device, dtype=dtype or torch.float32).eval()


def _local_directory(name: str) -> Path:
    """``name`` as a local checkpoint directory, or the error that says the course is offline."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if "/" in name and not path.exists() and not name.startswith((".", "/", "~")):
        raise ValueError(f"{name!r} looks like a Hugging Face Hub id, and the course works offline: it never "
                         "downloads. Point it at a local copy instead, e.g. the snapshot folder in your Hugging "
                         f"Face cache (~/.cache/huggingface/hub/models--{name.replace('/', '--')}/snapshots/<hash>)")
    raise ValueError(f"unknown model {name!r}: neither a course model ({', '.join(sorted(CONFIGS))}) nor a "
                     "checkpoint directory that exists")


def _read_config(path: Path) -> ModelConfig:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON ({err}); {_TRAIN_HINT} again") from err
    if not isinstance(data, dict):
        raise ValueError(f"{path} should hold a JSON object of ModelConfig fields")
    try:
        return ModelConfig.from_dict(data)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path} does not describe a valid model: {err}") from err


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError) as err:
        raise ValueError(f"{path} is corrupt or not a safetensors file ({err}); {_TRAIN_HINT} again") from err





def load_tokenizer(name: str = "tinychat", *, directory: str | Path | None = None):
    """The course BPE tokenizer saved beside the model in course_lib/data/<name>/, or the
    tokenizer of a Hugging Face checkpoint directory (``HFTokenizer``)."""
    if directory is None and name not in CONFIGS:
        directory = _local_directory(name)
    if directory is not None and (Path(directory) / "tokenizer.json").is_file() and is_hf_checkpoint(directory):
        from course_lib.tokenization.hf_tokenizer import HFTokenizer
        return HFTokenizer.load(directory)
    if directory is None:  # a course model's name (any other name became a directory above, or raised)
        directory = data_dir(name)
    directory = Path(directory)
    candidates = sorted(p for p in directory.glob("tokenizer*") if p.is_file()) if directory.is_dir() else []
    if not candidates:
        raise WeightsNotFoundError(f"no tokenizer file (tokenizer*) in {directory}; {_TRAIN_HINT}")
    from course_lib.tokenization import BPETokenizer
    preferred = [p for p in candidates if p.name == "tokenizer.json"]
    return BPETokenizer.load(str((preferred or candidates)[0]))
