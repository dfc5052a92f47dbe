"""tinychat-draft, the draft model for speculative decoding: registered, cheaper than tinychat,
and trained with tinychat's own tokenizer so that both models give every token the same ID."""
from __future__ import annotations

import hashlib
import json

import pytest
import torch

from course_lib import train
from course_lib.data import heldout_split
from course_lib.model import (
    CONFIGS,
    Transformer,
    WeightsNotFoundError,
    data_dir,
    get_config,
    load_model,
    load_tokenizer,
)
from course_lib.generation import greedy_generate
from course_lib.tokenization import BPETokenizer
from course_lib.tokenization.chat_template import END, render_chat
from course_lib.train import METADATA_FILE, TOKENIZER_FILE, default_settings, run_training, save_artifacts

DRAFT, TARGET = data_dir("tinychat-draft"), data_dir("tinychat")
# A draft run that takes a second: few conversations, tiny batches, two steps.
QUICK = dict(steps=2, conversations=40, batch_size=4)


def _same_tokenizer(a: BPETokenizer, b: BPETokenizer) -> bool:
    return (a.vocab == b.vocab and a.special_tokens == b.special_tokens and a.pattern == b.pattern
            and a.merges == b.merges)


def test_draft_config_is_registered_and_cheaper():
    draft, target = get_config("tinychat-draft"), get_config("tinychat")
    assert "tinychat-draft" in CONFIGS and draft.name == "tinychat-draft"
    assert (draft.vocab_size, draft.max_seq_len) == (target.vocab_size, target.max_seq_len)
    assert draft.n_layers < target.n_layers and draft.d_model < target.d_model
    sizes = [Transformer(c, generator=torch.Generator().manual_seed(0)).num_parameters() for c in (draft, target)]
    assert sizes[0] * 3 <= sizes[1], sizes


def test_draft_defaults_reuse_the_tinychat_tokenizer():
    settings = default_settings("tinychat-draft")
    assert settings.config == "tinychat-draft" and settings.tokenizer == "tinychat"
    assert train.tokenizer_path("tinychat") == TARGET / TOKENIZER_FILE
    assert default_settings("tinychat").tokenizer is None  # tinychat learns its own


@pytest.mark.skipif(not (DRAFT / "model.safetensors").is_file(), reason="the draft has not been trained yet")
def test_shipped_draft_loads_and_shares_tinychat_ids():
    files = [DRAFT / n for n in ("config.json", "model.safetensors", TOKENIZER_FILE, METADATA_FILE)]
    assert all(f.is_file() for f in files)
    draft, tok = load_model("tinychat-draft", device="cpu"), load_tokenizer("tinychat-draft")
    assert draft.config == get_config("tinychat-draft")
    assert (DRAFT / TOKENIZER_FILE).read_bytes() == (TARGET / TOKENIZER_FILE).read_bytes()
    assert _same_tokenizer(tok, load_tokenizer("tinychat"))
    meta = json.loads((DRAFT / METADATA_FILE).read_text())
    assert meta["parameters"] == draft.num_parameters()
    # that `make train`'s defaults reproduce it: test_train_eval, beside tinychat's
    assert meta["tokenizer"]["reused_from"] == "tinychat"
    assert meta["tokenizer"]["sha256"] == hashlib.sha256((TARGET / TOKENIZER_FILE).read_bytes()).hexdigest()


@pytest.mark.skipif(not (DRAFT / "model.safetensors").is_file() or not (TARGET / "model.safetensors").is_file(),
                    reason="the models have not been trained yet")
def test_shipped_draft_mostly_agrees_with_tinychats_greedy_tokens():
    """Teacher-forced on tinychat's own greedy replies (one held-out prompt per task), the draft's
    argmax is tinychat's at nearly every position: what greedy speculative decoding accepts."""
    target, draft = load_model("tinychat", device="cpu"), load_model("tinychat-draft", device="cpu")
    tok = load_tokenizer("tinychat")
    stop = tok.special_tokens[END]
    agree = total = 0
    with torch.no_grad():
        for convo in heldout_split(1):
            prompt = tok.encode(render_chat(convo.prompt_messages), allowed_special="all")
            reply = greedy_generate(target, prompt, 48, stop_ids=[stop])
            ids = torch.tensor([prompt + reply])
            span = slice(len(prompt) - 1, len(prompt) - 1 + len(reply))
            agree += int((draft(ids)[0, span].argmax(-1) == torch.tensor(reply)).sum())
            total += len(reply)
    assert total > 20 and agree >= 0.9 * total, f"{agree}/{total}"


@pytest.fixture
def given_tokenizer(tmp_path):
    """A small BPE tokenizer learned here, saved where a draft run can be pointed at it."""
    from course_lib.data import generate_corpus

    tok = train.train_tokenizer(generate_corpus(60, 5), 300, train.PATTERNS["digits"])
    (tmp_path / "given").mkdir()
    tok.save(tmp_path / "given" / TOKENIZER_FILE)
    return tmp_path / "given", tok


def test_a_quick_draft_run_reuses_the_given_tokenizer(given_tokenizer, tmp_path):
    directory, tok = given_tokenizer
    settings = default_settings("tinychat-draft", tokenizer=str(directory), vocab_size=300, **QUICK)
    result = run_training(settings, device="cpu", progress=False)
    assert len(result.losses) == 2 and result.model.config.vocab_size == 300
    assert _same_tokenizer(result.tokenizer, tok)
    out = save_artifacts(result, tmp_path / "out")
    assert (out / TOKENIZER_FILE).read_bytes() == (directory / TOKENIZER_FILE).read_bytes()
    meta = json.loads((out / METADATA_FILE).read_text())
    assert meta["settings"]["tokenizer"] == str(directory)
    assert meta["tokenizer"]["sha256"] == hashlib.sha256((directory / TOKENIZER_FILE).read_bytes()).hexdigest()
    again = run_training(settings, device="cpu", progress=False)
    assert again.losses == result.losses  # seeded like tinychat's run


def test_the_cli_trains_the_draft_with_tinychats_tokenizer(tmp_path, monkeypatch, given_tokenizer):
    # `course train --config tinychat-draft` reads data_dir("tinychat"); point it at a stand-in.
    directory, tok = given_tokenizer
    monkeypatch.setattr(train, "data_dir", lambda name: directory if name == "tinychat" else tmp_path / name)
    code = train.main(["--config", "tinychat-draft", "--vocab-size", "300", "--steps", "2", "--conversations", "40",
                       "--batch-size", "4", "--quiet", "--out", str(tmp_path / "draft")])
    assert code == 0
    meta = json.loads((tmp_path / "draft" / METADATA_FILE).read_text())
    assert meta["settings"]["tokenizer"] == "tinychat" and meta["settings"]["config"] == "tinychat-draft"
    assert _same_tokenizer(load_tokenizer(directory=tmp_path / "draft"), tok)
    assert load_model(directory=tmp_path / "draft", device="cpu").config.n_layers == get_config("tinychat-draft").n_layers


def test_a_missing_tinychat_tokenizer_is_refused_clearly(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(train, "data_dir", lambda name: tmp_path / name)
    with pytest.raises(WeightsNotFoundError, match=r"tokenizer of 'tinychat'.*course train --config tinychat"):
        run_training(default_settings("tinychat-draft", **QUICK), device="cpu", progress=False)
    assert train.main(["--config", "tinychat-draft", "--out", str(tmp_path / "draft")]) == 2
    assert "train that model first" in capsys.readouterr().err
    assert not (tmp_path / "draft").exists()


def test_a_tokenizer_that_disagrees_with_the_settings_is_refused(given_tokenizer):
    directory, _ = given_tokenizer
    with pytest.raises(ValueError, match="300 tokens but vocab_size is 1024"):
        run_training(default_settings("tinychat-draft", tokenizer=str(directory), **QUICK), progress=False)
    with pytest.raises(ValueError, match="split_pattern"):
        run_training(default_settings("tinychat-draft", tokenizer=str(directory), vocab_size=300,
                                      split_pattern="gpt4", **QUICK), progress=False)
