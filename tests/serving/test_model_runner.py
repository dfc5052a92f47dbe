"""ModelRunner against the model's own forward (contiguous KVCache, prefill / decode_step).

Sequences are split into ragged passes (prompt chunks next to decodes), their blocks are
scattered over the pool, and unused pool blocks hold poison, so reading a wrong slot or a
padded row shows up as a wrong logit.
"""
from __future__ import annotations

import pytest
import torch

from course_lib.model import Transformer, get_config, load_model
from course_lib.model.steps import decode_step, prefill
from course_lib.serving import BlockManager
from course_lib.serving.model_runner import Chunk, ModelRunner, PagedCache, build_batch

ATOL = 1e-4


def _model(name: str) -> Transformer:
    if name == "tinychat":
        return load_model("tinychat", device="cpu")
    config = get_config(name, init_std=0.2)
    return Transformer(config, generator=torch.Generator().manual_seed(0)).eval()


def _reference_logits(model, ids: list[int]) -> torch.Tensor:
    """Logits (T, V) at every position, one position at a time through the contiguous cache."""
    cache = model.new_cache(1)
    rows = [prefill(model, torch.tensor([ids[:3]]), cache)]  # (1, V): a 3-token prefill first
    with torch.no_grad():
        first = model(torch.tensor([ids[:3]]))[0]  # (3, V): uncached, for positions 0 and 1
    for t in ids[3:]:
        rows.append(decode_step(model, torch.tensor([[t]]), cache))  # (1, V)
    return torch.cat([first[:2], *rows])  # (T, V)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("name", ["test-gqa", "test-mha", "tinychat"])
def test_ragged_passes_match_the_models_forward(name, fused):
    try:
        model = _model(name)
    except ValueError:
        pytest.skip(f"no config {name!r}")
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    lengths = [11, 5, 17, 2]
    seqs = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]
    block_size = 4
    bm = BlockManager(num_blocks=40, block_size=block_size, prefix_caching=False)
    bm.allocate("pad", list(range(9)))  # hold some blocks so the others land out of order
    for i, ids in enumerate(seqs):
        bm.allocate(i, ids)
    runner = ModelRunner(model, num_blocks=40, block_size=block_size, fused_attention=fused)
    for layer in range(model.config.n_layers):
        runner.pool.keys[layer].fill_(1e4)  # poison: anything read before it is written is wrong
        runner.pool.values[layer].fill_(1e4)
    # Each pass: (sequence, number of new tokens); every sequence samples at every chunk's end.
    plans = [[(0, 4), (1, 5), (2, 1)], [(0, 4), (2, 9), (3, 1)], [(0, 3), (2, 7), (3, 1)]]
    done = [0] * len(seqs)
    got: dict[tuple[int, int], torch.Tensor] = {}
    for plan in plans:
        chunks = [Chunk(seqs[i][done[i]:done[i] + n], done[i], bm.block_table(i), True) for i, n in plan]
        batch = build_batch(chunks, block_size)
        expected_slots = sum((bm.slot_mapping(i, done[i], done[i] + n) for i, n in plan), [])
        assert batch.slot_mapping.tolist() == expected_slots
        logits = runner.forward(batch)  # (M, V)
        for row, (i, n) in enumerate(plan):
            done[i] += n
            got[i, done[i] - 1] = logits[row]
    for (i, position), row in got.items():
        ref = _reference_logits(model, seqs[i][:max(position + 1, 3)])[position]
        torch.testing.assert_close(row, ref, atol=ATOL, rtol=1e-4)


def test_pure_decode_pass_and_only_sampling_rows_get_logits():
    model = _model("test-gqa")
    runner = ModelRunner(model, num_blocks=8, block_size=4)
    ids_a, ids_b = [3, 1, 4, 1, 5], [9, 2, 6]
    first = build_batch([Chunk(ids_a[:4], 0, [5, 2], False), Chunk(ids_b[:2], 0, [0], True)], 4)
    assert tuple(runner.forward(first).shape) == (1, model.config.vocab_size)  # only b samples
    decode = build_batch([Chunk(ids_a[4:], 4, [5, 2], True), Chunk(ids_b[2:], 2, [0], True)], 4)
    assert decode.is_decode
    logits = runner.forward(decode)  # (2, V)
    with torch.no_grad():
        torch.testing.assert_close(logits[0], model(torch.tensor([ids_a]))[0, -1], atol=ATOL, rtol=1e-4)
        torch.testing.assert_close(logits[1], model(torch.tensor([ids_b]))[0, -1], atol=ATOL, rtol=1e-4)


def test_a_mixed_pass_attends_its_decodes_apart_from_its_prompt_chunks():
    """Decodes (one token) and longer chunks form two attention calls, so a decode's query is
    never padded to a prompt chunk's length; the tokens keep their flat order."""
    batch = build_batch([Chunk([7, 8, 9], 0, [3], False), Chunk([4], 5, [0, 1], True),
                         Chunk([6, 2], 2, [2], True), Chunk([5], 0, [4], True)], 4)
    decodes, chunks = batch.groups
    assert decodes.rows.tolist() == [3, 6] and decodes.padded_index.shape == (2, 1)
    assert chunks.rows.tolist() == [0, 1, 2, 4, 5] and chunks.padded_index.shape == (2, 3)
    assert chunks.keep.shape == (2, 1, 3, 4) and decodes.keep.shape == (2, 1, 1, 8)
    assert not batch.is_decode and batch.logit_indices.tolist() == [3, 5, 6]
    assert build_batch([Chunk([4], 5, [0, 1], True), Chunk([5], 0, [4], True)], 4).is_decode


def test_the_paged_cache_runs_attention_only_the_causal_way():
    model = _model("test-gqa")
    runner = ModelRunner(model, num_blocks=4, block_size=4)
    batch = build_batch([Chunk([1, 2], 0, [0], True)], 4)
    x = torch.randn(1, 2, model.config.d_model)
    with pytest.raises(ValueError, match="causal"):
        model.layers[0].self_attn(x, cache=PagedCache(runner.pool, batch), return_weights=True)


def test_build_batch_rejects_uncovered_positions_and_empty_input():
    with pytest.raises(ValueError, match="allocate the slots first"):
        build_batch([Chunk([1, 2, 3], 2, [0], True)], 4)
    with pytest.raises(ValueError, match="at least one chunk"):
        build_batch([], 4)
    with pytest.raises(ValueError, match="no tokens"):
        build_batch([Chunk([], 0, [0], True)], 4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_runner_on_cuda_matches_the_models_forward():
    model = _model("test-gqa").to("cuda")
    runner = ModelRunner(model, num_blocks=8, block_size=4)
    ids_a, ids_b = [3, 1, 4, 1, 5], [9, 2, 6]
    batch = build_batch([Chunk(ids_a, 0, [5, 2], True), Chunk(ids_b, 0, [0], True)], 4, device="cuda")
    logits = runner.forward(batch)  # (2, V)
    with torch.no_grad():
        for row, ids in zip(logits, (ids_a, ids_b)):
            torch.testing.assert_close(row, model(torch.tensor([ids], device="cuda"))[0, -1], atol=1e-3, rtol=1e-3)
