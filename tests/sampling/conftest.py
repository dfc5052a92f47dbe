"""Shared helpers for the sampling tests: a tiny trained tokenizer and a scripted model."""
from __future__ import annotations

import pytest
import torch

from course_lib.model import Transformer, get_config
from course_lib.tokenization import BPETokenizer
from course_lib.tokenization.chat_template import SPECIAL_TOKENS

TRAINING_TEXT = ("The answer is 4. What is 2 + 2? Two plus two is four. END of story.\n"
                 "User: thanks. Assistant: you are welcome. ") * 10


@pytest.fixture(scope="session")
def tokenizer():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tiny text runs out of pairs; that is fine here
        return BPETokenizer.train(TRAINING_TEXT, 320, special_tokens=list(SPECIAL_TOKENS))


@pytest.fixture(scope="session")
def random_model(tokenizer):
    """A seeded random transformer whose vocabulary covers the tokenizer."""
    config = get_config("test-gqa", vocab_size=tokenizer.n_vocab, max_seq_len=64, init_std=0.2)
    return Transformer(config, generator=torch.Generator().manual_seed(0)).eval()


class ScriptedHead(torch.nn.Module):
    """An output head that ignores its input: the i-th time it is called (the i-th pass of a
    single request: the prompt, then one per token) it puts all mass on script[i]."""

    def __init__(self, vocab_size: int, script, margin: float):
        super().__init__()
        self.vocab_size, self.script, self.margin = vocab_size, list(script), margin
        self.calls = 0

    def forward(self, x):  # x (M, d) -> (M, V)
        logits = torch.zeros(x.shape[0], self.vocab_size)
        if self.calls < len(self.script):
            logits[:, self.script[self.calls]] = self.margin
        self.calls += 1
        return logits


def ScriptedModel(vocab_size: int, script, *, max_seq_len: int = 64, margin: float = 50.0) -> Transformer:
    """A real course Transformer (so the serving engine runs it like any other) whose head plays
    a fixed token script: after the prompt, position i puts all mass on script[i]. ``margin``
    sets how sure it is; with a small margin sampling can leave the script. One request per
    model: the script advances once per forward pass."""
    config = get_config("test-mha", vocab_size=vocab_size, max_seq_len=max_seq_len, n_layers=1)
    model = Transformer(config, generator=torch.Generator().manual_seed(0)).eval()
    model.lm_head = ScriptedHead(vocab_size, script, margin)
    return model


@pytest.fixture
def scripted():
    return ScriptedModel
