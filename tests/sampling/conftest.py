"""Shared helpers for the sampling tests: a tiny trained tokenizer and a scripted model."""
from __future__ import annotations

import pytest
import torch

from course_lib.model import KVCache, Transformer, get_config
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


class ScriptedModel:
    """Emits a fixed token script: after the prompt, position i puts all mass on script[i].

    It honours the course model's contract (config, device, new_cache, __call__(idx, cache))
    so the real prefill/decode_step drive it. ``margin`` sets how sure it is; with a small
    margin sampling can leave the script.
    """

    def __init__(self, vocab_size: int, script, *, max_seq_len: int = 64, margin: float = 50.0):
        self.config = get_config("test-mha", vocab_size=vocab_size, max_seq_len=max_seq_len)
        self.script = list(script)
        self.margin = margin
        self.device = torch.device("cpu")
        self.prompt_len = None

    def new_cache(self, batch_size, max_seq_len=None):
        cfg = self.config
        return KVCache(cfg.n_layers, batch_size, cfg.n_kv_heads, max_seq_len or cfg.max_seq_len, cfg.head_dim)

    def __call__(self, idx, cache=None):
        batch, length = idx.shape
        if cache.seq_len == 0:
            self.prompt_len = length
        logits = torch.zeros(batch, length, self.config.vocab_size)  # (B, T, V)
        step = cache.seq_len + length - self.prompt_len  # index of the token being predicted
        if step < len(self.script):
            logits[:, -1, self.script[step]] = self.margin
        cache.advance(length)
        return logits


@pytest.fixture
def scripted():
    return ScriptedModel
