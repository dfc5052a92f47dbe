"""Shared helpers for the model tests: seeded tiny models built from the registry."""
import pytest
import torch

from course_lib.model import Transformer, get_config


def build(name: str, seed: int = 0, **overrides) -> Transformer:
    """A seeded, eval-mode model; init_std 0.2 makes logits O(1) so numeric bugs show."""
    overrides.setdefault("init_std", 0.2)
    model = Transformer(get_config(name, **overrides), generator=torch.Generator().manual_seed(seed))
    return model.eval()


@pytest.fixture
def make_model():
    return build
