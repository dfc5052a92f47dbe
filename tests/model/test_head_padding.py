"""Widened heads (course_lib.model.head_padding): the same function, checked against the original
model's own logits and its KV-cached decode, for several geometries and widths."""
from __future__ import annotations

import pytest
import torch

from course_lib.model import Transformer, get_config
from course_lib.model.head_padding import pad_heads, padded_positions


@pytest.mark.parametrize("name", ["test-mha", "test-gqa", "test-mqa"])
@pytest.mark.parametrize("factor", [2, 3, 4])
def test_padded_heads_give_the_same_logits(name, factor):
    model = Transformer(get_config(name), generator=torch.Generator().manual_seed(3)).eval()
    wide = pad_heads(model, factor * model.config.head_dim)
    ids = torch.randint(0, model.config.vocab_size, (2, 40), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        torch.testing.assert_close(wide(ids), model(ids), atol=2e-5, rtol=1e-4)
        cache = wide.new_cache(2)  # cached decode too: the rotary tables follow absolute positions
        wide(ids[:, :30], cache)
        torch.testing.assert_close(wide(ids[:, 30:], cache), model(ids)[:, 30:], atol=2e-5, rtol=1e-4)
    assert wide.config.head_dim == factor * model.config.head_dim
    assert wide.layers[0].self_attn.k_proj.weight.shape[0] == model.config.n_kv_heads * wide.config.head_dim


def test_the_original_is_untouched_and_the_padding_is_zero():
    model = Transformer(get_config("test-gqa"), generator=torch.Generator().manual_seed(0)).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    wide = pad_heads(model, 2 * model.config.head_dim)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    d, p = model.config.head_dim, wide.config.head_dim
    unused = sorted(set(range(p)) - set(padded_positions(d, p)))
    k = wide.layers[0].self_attn.k_proj.weight.reshape(model.config.n_kv_heads, p, -1)
    assert torch.count_nonzero(k[:, unused]) == 0 and torch.count_nonzero(k[:, padded_positions(d, p)]) > 0


def test_a_width_that_is_not_a_multiple_is_refused():
    with pytest.raises(ValueError, match="multiple of head_dim=16"):
        padded_positions(16, 24)
    with pytest.raises(ValueError, match="even width"):
        padded_positions(7, 14)
    assert padded_positions(16, 32) == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30]
