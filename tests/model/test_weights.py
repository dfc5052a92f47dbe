"""save_model / load_model / load_tokenizer: round trips and clear errors for bad files."""
import json

import pytest
import torch

from course_lib.model import WeightsNotFoundError, data_dir, load_model, load_tokenizer, save_model


@pytest.mark.parametrize("tied", [False, True])
def test_round_trip_gives_identical_logits(make_model, tmp_path, tied):
    model = make_model("test-gqa", tie_embeddings=tied)
    save_model(model, tmp_path / "m")
    again = load_model(directory=tmp_path / "m", device="cpu")
    assert again.config == model.config and not again.training
    ids = torch.tensor([[1, 5, 9, 2]])
    with torch.no_grad():
        assert torch.equal(again(ids), model(ids))
    if tied:
        assert again.lm_head.weight is again.embed_tokens.weight


def test_load_in_bfloat16(make_model, tmp_path):
    save_model(make_model("test-mqa"), tmp_path)
    model = load_model(directory=tmp_path, device="cpu", dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16 and model.new_cache(1).dtype == torch.bfloat16


def test_missing_weights_name_the_training_command(tmp_path):
    with pytest.raises(WeightsNotFoundError, match="course train"):
        load_model(directory=tmp_path / "nothing")
    assert issubclass(WeightsNotFoundError, FileNotFoundError)


def test_shipped_model_loads_or_says_how_to_make_it():
    if (data_dir("tinychat") / "model.safetensors").is_file():
        model = load_model("tinychat", device="cpu")
        assert model.config.vocab_size > 0
    else:
        with pytest.raises(WeightsNotFoundError, match="course train"):
            load_model("tinychat")


def test_unknown_model_name_lists_known_ones():
    with pytest.raises(ValueError, match="test-gqa"):
        load_model("gpt-5")
    with pytest.raises(ValueError, match="tinychat"):
        load_tokenizer("gpt-5")


def test_corrupt_weights_file(make_model, tmp_path):
    save_model(make_model("test-mha"), tmp_path)
    path = tmp_path / "model.safetensors"
    path.write_bytes(path.read_bytes()[:200])  # truncated download / disk full
    with pytest.raises(ValueError, match="corrupt"):
        load_model(directory=tmp_path, device="cpu")


def test_corrupt_config_file(make_model, tmp_path):
    save_model(make_model("test-mha"), tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_model(directory=tmp_path, device="cpu")


def test_weights_that_do_not_match_the_config(make_model, tmp_path):
    save_model(make_model("test-mha"), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["d_ff"] = 256
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="shape"):
        load_model(directory=tmp_path, device="cpu")
    config["d_ff"], config["n_layers"] = 128, 3
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="missing"):
        load_model(directory=tmp_path, device="cpu")


def test_load_tokenizer_reads_the_saved_bpe_file(tmp_path):
    from course_lib.tokenization import BPETokenizer

    tokenizer = BPETokenizer.train("the cat sat on the mat, the cat ate " * 20, vocab_size=270)
    tokenizer.save(tmp_path / "tokenizer.json")
    again = load_tokenizer(directory=tmp_path)
    assert again.encode("the cat") == tokenizer.encode("the cat")
    with pytest.raises(WeightsNotFoundError, match="course train"):
        load_tokenizer(directory=tmp_path / "empty")
