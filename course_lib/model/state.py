"""Two helpers every way of loading weights shares: where a model goes by default, and a copy
of a state dict into a Transformer that refuses anything that does not match."""
from __future__ import annotations

import torch

from course_lib.model.transformer import Transformer

__all__ = ["default_device", "load_state_strict"]


def default_device() -> torch.device:
    """CUDA when available, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_state_strict(model: Transformer, state: dict[str, torch.Tensor], source) -> None:
    """Copy `state` into model, refusing missing, unexpected or wrongly shaped tensors."""
    expected = model.state_dict()
    if model.config.tie_embeddings:
        expected.pop("lm_head.weight")
        state = {k: v for k, v in state.items() if k != "lm_head.weight"}  # tolerated: it is the same matrix
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(f"weights in {source} do not match the config: missing {missing[:5]}"
                         f"{' ...' if len(missing) > 5 else ''}, unexpected {unexpected[:5]}"
                         f"{' ...' if len(unexpected) > 5 else ''}")
    for key, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[key].shape):
            raise ValueError(f"weights in {source}: {key} has shape {tuple(tensor.shape)} but the config "
                             f"needs {tuple(expected[key].shape)}")
        if not tensor.is_floating_point():
            raise ValueError(f"weights in {source}: {key} has dtype {tensor.dtype}, expected floating point")
    model.load_state_dict(state, strict=False)  # strictness checked above, tied head allowed
