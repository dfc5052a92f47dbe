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


@pytest.fixture(autouse=True)
def _one_thread():
    """These models are tiny: one thread avoids oversubscribing a shared CPU (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
