"""Training and evaluation: a tiny seeded run learns, the scorers judge hand-made replies right,
batched generation matches the model's own greedy loop, and the shipped model is sound."""
from __future__ import annotations

import json
from dataclasses import asdict

import pytest
import torch

from course_lib import evaluate as ev
from course_lib.data import TASKS, corpus_fingerprint, generate_corpus, heldout_split, scoring
from course_lib.generation import generate_replies, greedy_generate
from course_lib.model import Transformer, data_dir, get_config, load_model, load_tokenizer
from course_lib.tokenization.chat_template import END, render_chat
from course_lib.data.batching import IGNORE_INDEX, encode_conversation
from course_lib.train import (
    DECISION_TOKENS,
    METADATA_FILE,
    TrainSettings,
    default_settings,
    asked,
    grounded_subset,
    learn_question_copies,
    learning_rate,
    main,
    masked_loss,
    parse_overrides,
    run_training,
    save_artifacts,
    training_corpus,
    weigh_decisions,
)

TINY = dict(config="test-gqa", conversations=300, vocab_size=400, batch_size=16, lr=5e-3, warmup=5,
            overrides={"max_seq_len": 192})


@pytest.fixture(scope="module")
def tiny_run():
    return run_training(TrainSettings(steps=40, **TINY), device="cpu", progress=False)


# ---------------------------------------------------------------- training
def test_tiny_training_lowers_the_loss(tiny_run):
    losses = tiny_run.losses
    assert len(losses) == 40 and all(torch.isfinite(torch.tensor(losses)))
    start, end = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert end < 0.7 * start, f"loss went from {start:.3f} to {end:.3f}"


def test_training_is_reproducible(tiny_run):
    again = run_training(TrainSettings(steps=3, **TINY), device="cpu", progress=False)
    assert again.losses == tiny_run.losses[:3]
    other = run_training(TrainSettings(steps=3, seed=1, **TINY), device="cpu", progress=False)
    assert other.losses != again.losses


def test_saved_artifacts_load_back(tiny_run, tmp_path):
    save_artifacts(tiny_run, tmp_path)
    model, tok = load_model(device="cpu", directory=tmp_path), load_tokenizer(directory=tmp_path)
    ids = torch.tensor([tok.encode("<|user|>What is 2 + 2?<|end|><|assistant|>", allowed_special="all")])
    assert torch.equal(model(ids), tiny_run.model(ids))
    meta = json.loads((tmp_path / METADATA_FILE).read_text())
    assert meta["settings"]["seed"] == 0
    assert meta["final_loss"] == pytest.approx(sum(tiny_run.losses[-40:]) / 40, abs=1e-4)
    assert meta["corpus_sha256"] == corpus_fingerprint(generate_corpus(300, meta["settings"]["corpus_seed"]))


def test_absent_twins_are_trained_on_but_the_tokenizer_learns_without_them(tiny_run):
    twinned = run_training(TrainSettings(steps=2, absent_twins=1.0, **TINY), device="cpu", progress=False)
    corpus, twins = training_corpus(TrainSettings(absent_twins=1.0, **TINY))
    assert len(twins) > 0 and twinned.metadata["conversations_trained"] == len(corpus) + len(twins)
    assert twinned.metadata["corpus_sha256"] == corpus_fingerprint(corpus + twins)
    assert twinned.tokenizer.merges == tiny_run.tokenizer.merges  # learned from the same generated corpus
    assert tiny_run.metadata["conversations_trained"] == len(corpus)
    with pytest.raises(ValueError, match="absent_twins"):
        TrainSettings(absent_twins=2.0)


def test_a_weighted_loss_is_the_weighted_mean_of_the_token_losses():
    # Oracle: cross_entropy per position, weighted and averaged by hand.
    model = Transformer(get_config("test-gqa"), generator=torch.Generator().manual_seed(0))
    x = torch.randint(0, 128, (2, 6), generator=torch.Generator().manual_seed(1))
    y = torch.full((2, 6), IGNORE_INDEX); y[0, 3:] = x[0, 3:]; y[1, 5] = 7
    w = torch.where(y != IGNORE_INDEX, 1.0, 0.0); w[0, 3] = 3.0
    per_token = torch.nn.functional.cross_entropy(model(x).reshape(-1, 128), y.reshape(-1), reduction="none",
                                                  ignore_index=IGNORE_INDEX)
    expected = (per_token * w.reshape(-1)).sum() / w.sum()
    assert torch.allclose(masked_loss(model, x, y, w), expected, atol=1e-6)
    assert torch.allclose(masked_loss(model, x, y, (y != IGNORE_INDEX).float()), masked_loss(model, x, y))


def test_decision_weight_falls_on_the_first_tokens_of_grounded_replies_only():
    convos = generate_corpus(60, seed=5)
    encoded = [([0] * 5, [0, 0, 1, 1, 1]) for _ in convos]
    weighted = weigh_decisions(encoded, convos, 4.0)
    decided = [0, 0] + [4.0] * DECISION_TOKENS + [1] * (3 - DECISION_TOKENS)
    for (_, mask), convo in zip(weighted, convos):
        assert mask == (decided if convo.task == "grounded" else [0, 0, 1, 1, 1])
    assert weigh_decisions(encoded, convos, 1.0) is encoded
    with pytest.raises(ValueError, match="decision_weight"):
        TrainSettings(decision_weight=0.0)


def test_the_question_copy_is_learned_in_grounded_prompts_only(tinychat_tokenizer):
    convos = generate_corpus(60, seed=5)
    encoded = [encode_conversation(tinychat_tokenizer, c.messages) for c in convos]
    copied = learn_question_copies(encoded, convos, tinychat_tokenizer, 0.5)
    assert learn_question_copies(encoded, convos, tinychat_tokenizer, 0.0) is encoded
    assert sum(c.task == "grounded" for c in convos) >= 5
    for (ids, mask), (_, before), convo in zip(copied, encoded, convos):
        added = [i for i, (m, b) in enumerate(zip(mask, before)) if m != b]
        if convo.task != "grounded":
            assert not added
            continue
        # one unbroken run of tokens, weighted 0.5, that reads as the question and ends the user message
        assert added == list(range(added[0], added[-1] + 1)) and {mask[i] for i in added} == {0.5}
        assert tinychat_tokenizer.decode([ids[i] for i in added]) == asked(convo)
        assert tinychat_tokenizer.decode(ids[added[-1] + 1:added[-1] + 3]) == "<|end|><|assistant|>"
    with pytest.raises(ValueError, match="question_copy_weight"):
        TrainSettings(question_copy_weight=-1.0)


def test_a_curriculum_phase_draws_every_grounded_conversation_and_replay_to_its_share():
    convos = generate_corpus(400, seed=5)
    picked = grounded_subset(convos, 0.8, seed=0)
    grounded = sum(convos[i].task == "grounded" for i in picked)
    assert grounded == sum(c.task == "grounded" for c in convos)  # every grounded conversation, and replay
    assert grounded / len(picked) == pytest.approx(0.8, abs=0.01)
    assert {convos[i].task for i in grounded_subset(convos, 1.0, seed=0)} == {"grounded"}
    assert grounded_subset(convos, 0.8, seed=0) != grounded_subset(convos, 0.8, seed=1)  # the replay is seeded
    # below the corpus's own share: every other conversation, and a seeded sample of the grounded ones
    picked = grounded_subset(convos, 0.2, seed=0)
    others = sum(convos[i].task != "grounded" for i in picked)
    assert others == sum(c.task != "grounded" for c in convos)
    assert 1 - others / len(picked) == pytest.approx(0.2, abs=0.01)
    assert grounded_subset(convos, 0.2, seed=0) != grounded_subset(convos, 0.2, seed=1)
    with pytest.raises(ValueError, match="finish_steps"):
        TrainSettings(steps=10, finish_steps=11)
    with pytest.raises(ValueError, match="lead_steps"):
        TrainSettings(steps=10, finish_steps=4, lead_steps=7)
    for name in ("finish_grounded_share", "lead_grounded_share", "main_grounded_share"):
        for bad in (0.0, 1.5):
            with pytest.raises(ValueError, match=name):
                TrainSettings(**{name: bad})


def test_a_curriculum_run_trains_and_records_its_settings(tiny_run):
    run = run_training(TrainSettings(steps=4, finish_steps=2, decision_weight=3.0, question_copy_weight=0.5, **TINY),
                       device="cpu", progress=False)
    assert len(run.losses) == 4 and all(torch.isfinite(torch.tensor(run.losses)))
    assert run.losses[:2] != tiny_run.losses[:2]  # the weighted loss is a different number
    assert run.metadata["settings"]["finish_steps"] == 2 and run.metadata["settings"]["decision_weight"] == 3.0
    assert run.metadata["settings"]["question_copy_weight"] == 0.5


def test_a_leading_phase_changes_only_the_batches_of_its_steps(tiny_run):
    led = run_training(TrainSettings(steps=4, lead_steps=2, **TINY), device="cpu", progress=False)
    assert len(led.losses) == 4 and led.losses[0] != tiny_run.losses[0]  # grounded batches first
    assert led.metadata["settings"]["lead_steps"] == 2 and led.metadata["settings"]["lead_grounded_share"] == 1.0
    everything = run_training(TrainSettings(steps=4, lead_steps=4, **TINY), device="cpu", progress=False)
    assert everything.losses[:2] == led.losses[:2]  # the same lead stream, whatever follows it


def test_a_reweighted_main_phase_changes_only_the_batches_after_the_lead():
    led = run_training(TrainSettings(steps=4, lead_steps=2, **TINY), device="cpu", progress=False)
    lighter = run_training(TrainSettings(steps=4, lead_steps=2, main_grounded_share=0.2, **TINY),
                           device="cpu", progress=False)
    assert lighter.losses[:2] == led.losses[:2] and lighter.losses[2:] != led.losses[2:]
    assert lighter.metadata["settings"]["main_grounded_share"] == 0.2
    assert led.metadata["settings"]["main_grounded_share"] is None


def test_the_cli_takes_a_main_phase_share_as_a_number_and_refuses_one_out_of_range(tmp_path, capsys):
    assert main(["--main-grounded-share", "1.5", "--out", str(tmp_path / "m")]) == 2
    assert "main_grounded_share is a fraction in (0, 1], got 1.5" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_learning_rate_schedule():
    s = TrainSettings(steps=200, warmup=20, lr=1e-3, min_lr_ratio=0.1)
    lrs = [learning_rate(i, s) for i in range(200)]
    assert max(lrs) == pytest.approx(1e-3) and lrs[0] < lrs[19]
    assert all(a >= b for a, b in zip(lrs[20:], lrs[21:])) and lrs[-1] == pytest.approx(1e-4)


def test_a_restarted_schedule_is_a_fresh_run_of_the_remaining_steps():
    s = TrainSettings(steps=300, warmup=20, lr=1e-3, min_lr_ratio=0.1, lr_restart_step=100)
    whole = TrainSettings(steps=300, warmup=20, lr=1e-3, min_lr_ratio=0.1)
    rest = TrainSettings(steps=200, warmup=20, lr=1e-3, min_lr_ratio=0.1)
    assert [learning_rate(i, s) for i in range(100)] == [learning_rate(i, whole) for i in range(100)]
    assert [learning_rate(i, s) for i in range(100, 300)] == [learning_rate(i, rest) for i in range(200)]
    assert learning_rate(100, s) < learning_rate(99, s) < learning_rate(119, s) == pytest.approx(1e-3)
    late = TrainSettings(steps=300, warmup=10, lead_steps=100, lr_restart_step=250)  # fewer steps left than the lead
    assert learning_rate(299, late) < learning_rate(259, late) == pytest.approx(late.lr)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="steps"):
        TrainSettings(steps=0)
    with pytest.raises(ValueError, match="lr"):
        TrainSettings(lr=-1.0)
    for step in (-1, 6000):
        with pytest.raises(ValueError, match=r"lr_restart_step must be in \[0, steps=6000\)"):
            TrainSettings(lr_restart_step=step)


def test_set_changes_the_model_geometry_and_refuses_what_cannot_be_built():
    assert parse_overrides(["n_heads=4", "n_kv_heads=2"], "tinychat") == {"n_heads": 4, "n_kv_heads": 2}
    assert get_config("tinychat", **parse_overrides(["n_heads=4"], "tinychat")).head_dim == 32
    assert parse_overrides(["tie_embeddings=false"], "tinychat") == {"tie_embeddings": False}
    for bad, says in [("heads=4", "FIELD one of"), ("n_heads", "FIELD one of"), ("vocab_size=9", "--vocab-size"),
                      ("n_heads=four", "not a number"), ("n_heads=true", "right kind"),
                      ("tie_embeddings=1", "right kind"), ("n_heads=3", "divisible"), ("n_layers=0", "n_layers")]:
        with pytest.raises(ValueError, match=says):
            parse_overrides([bad], "tinychat")


def test_the_command_line_refuses_a_bad_set_before_any_work(capsys, tmp_path):
    assert main(["--set", "n_heads=3", "--out", str(tmp_path / "never")]) == 2
    assert "divisible" in capsys.readouterr().err and not (tmp_path / "never").exists()


# ---------------------------------------------------------------- scoring
def test_score_arithmetic():
    expected = {"value": 4, "accepted": ["4", "four", "2 + 2 = 4.", "The answer is 4."]}
    assert all(scoring.score_arithmetic(r, expected) for r in ("4", " four", "2 + 2 = 4.", "The answer is 4."))
    assert not any(scoring.score_arithmetic(r, expected) for r in ("5", "Four", "2 + 2 = 5.", "4 apples", ""))


def test_score_extraction():
    want = {"order_id": "K4821", "amount": 7.5, "reason": "late"}
    assert scoring.score_extraction('{"order_id": "K4821", "amount": 7.50, "reason": "late"}', want)
    assert scoring.score_extraction('{"reason": "late", "amount": 7.5, "order_id": "K4821"}', want)
    bad = ['{"order_id": "K4821", "amount": 7.51, "reason": "late"}',  # wrong value
           '{"order_id": "K4821", "amount": "7.50", "reason": "late"}',  # number as a string
           '{"order_id": "K4821", "amount": 7.5}',  # missing field
           '{"order_id": "K4821", "amount": 7.5, "reason": "late", "x": 1}',  # extra field
           '{"order_id": "K4821", "amount": 7.5, "reason": "late"',  # not JSON
           '[1, 2]', '']
    assert not any(scoring.score_extraction(r, want) for r in bad)
    assert not scoring.score_extraction('{"party_size": true}', {"party_size": 1})  # bool is not an int


def test_score_tool_call():
    want = {"name": "convert_currency", "arguments": {"amount": 50, "from_currency": "USD", "to_currency": "EUR"}}
    good = ('<|tool_call|>{"name": "convert_currency", '
            '"arguments": {"amount": 50, "from_currency": "USD", "to_currency": "EUR"}}')
    assert scoring.score_tool_call(good, want)
    bad = [good.replace("<|tool_call|>", ""), good.replace("convert_currency", "get_time"),
           good.replace("50", "51"), good.replace('"EUR"', '"GBP"'), good[:-1],
           good.replace(', "to_currency": "EUR"', "")]
    assert not any(scoring.score_tool_call(r, want) for r in bad)


def test_score_abstention_and_facts():
    assert scoring.score_abstention("I don't know.") and scoring.score_abstention("I don't know the answer to that.")
    assert not scoring.score_abstention("The capital of Velmora is Oslo.")
    assert scoring.score_fact("The chemical symbol for gold is Au.", {"value": "Au"})
    assert not scoring.score_fact("The chemical symbol for gold is Ag.", {"value": "Au"})
    assert not scoring.score_fact("I don't know Au.", {"value": "Au"})


def test_reference_replies_pass_and_swapped_replies_fail():
    held = heldout_split(30)
    assert all(scoring.SCORERS[c.task](c.reply, c.expected) for c in held)
    for task in TASKS:
        group = [c for c in held if c.task == task]
        shifted = sum(scoring.SCORERS[task](b.reply, a.expected) for a, b in zip(group, group[1:]))
        if task != "unknown":  # every abstention is the same text
            assert shifted < len(group) // 2, task


# ---------------------------------------------------------------- generation and the table
@pytest.fixture(scope="module")
def random_model(tiny_run):
    config = get_config("test-gqa", vocab_size=tiny_run.tokenizer.n_vocab, max_seq_len=192)
    return Transformer(config, generator=torch.Generator().manual_seed(1)).eval(), tiny_run.tokenizer


def test_batched_greedy_equals_the_models_greedy_loop(random_model):
    model, tok = random_model
    convos = heldout_split(3)
    replies = generate_replies(model, tok, convos, max_new_tokens=12)
    stops = [tok.special_tokens[END], tok.special_tokens["<|endoftext|>"]]
    for convo, reply in zip(convos, replies):
        prompt = tok.encode(render_chat(convo.prompt_messages), allowed_special="all")
        ids = greedy_generate(model, prompt, 12, stop_ids=stops)
        assert reply == tok.decode([i for i in ids if i not in stops])


def test_batched_greedy_equals_course_sampling_generate(random_model):
    from course_lib.sampling import SamplingParams
    from course_lib.generation import generate

    model, tok = random_model
    convos = heldout_split(2)
    replies = generate_replies(model, tok, convos, max_new_tokens=10)
    params = SamplingParams(temperature=0, max_new_tokens=10)
    assert replies == [generate(model, tok, c.prompt_messages, params).text for c in convos]


def test_sampling_is_seeded_and_varies(random_model):
    model, tok = random_model
    convos = heldout_split(4)
    draw = lambda seed: generate_replies(model, tok, convos, temperature=1.5, max_new_tokens=8,
                                            generator=torch.Generator().manual_seed(seed))
    assert draw(0) == draw(0) and draw(0) != draw(1)
    with pytest.raises(ValueError, match="Generator"):
        generate_replies(model, tok, convos, temperature=1.0)


def test_seen_in_training_measures_overlap():
    held = heldout_split(20)
    assert set(ev.seen_in_training(held, held).values()) == {1.0}
    seen = ev.seen_in_training(held, generate_corpus(2000, 99))
    assert seen["extraction"] == 0.0 and seen["unknown"] < 0.5


def test_table_and_targets():
    results = {0.0: {"arithmetic": 0.97, "extraction": 0.85, "tool": 0.95, "unknown": 0.9, "fact": 0.5},
               1.0: {"arithmetic": 0.9, "extraction": 0.8, "tool": 0.9, "unknown": 0.8, "fact": 0.4}}
    table = ev.format_table(results)
    assert "greedy" in table and "T=1" in table and "85.0%" in table
    assert ev.missed_targets(results) == ["extraction"]
    line = next(l for l in table.splitlines() if l.startswith("extraction"))
    assert line.endswith("MISS")
    with_seen = ev.format_table(results, {"arithmetic": 0.3, "extraction": 0.0})
    assert "in train" in with_seen and with_seen.splitlines()[1].endswith("30%")
    with_both = ev.format_table(results, {"arithmetic": 0.3}, {"arithmetic": 185, "extraction": 200})
    assert with_both.splitlines()[0].endswith("questions in train")
    assert with_both.splitlines()[1].endswith("185      30%")


def test_distinct_questions_counts_repeats_once():
    held = heldout_split(200)
    counts = ev.distinct_questions(held)
    assert counts["extraction"] == 200 and counts["grounded"] == 200  # every record, every passage block differs
    assert counts["fact"] < 50  # a small table of known facts, asked many times over
    assert counts == ev.distinct_questions(held + held)


# ---------------------------------------------------------------- the shipped model
SHIPPED = data_dir("tinychat")


@pytest.mark.skipif(not (SHIPPED / "model.safetensors").is_file(), reason="the model has not been trained yet")
def test_shipped_model_loads_and_answers(tinychat):
    files = [SHIPPED / n for n in ("config.json", "model.safetensors", "tokenizer.json", METADATA_FILE)]
    assert all(f.is_file() for f in files)
    assert sum(f.stat().st_size for f in SHIPPED.iterdir()) <= 25 * 2**20
    model, tok = tinychat  # load_model("tinychat", device="cpu"), load_tokenizer("tinychat"), once a session
    assert model.config.vocab_size == tok.n_vocab
    meta = json.loads((SHIPPED / METADATA_FILE).read_text())
    assert meta["parameters"] == model.num_parameters()
    convos = [c for c in heldout_split(1)]
    two_plus_two = [{"role": "user", "content": "What is 2 + 2?"}]
    end = tok.special_tokens[END]
    ids = greedy_generate(model, tok.encode(render_chat(two_plus_two), allowed_special="all"), 16, stop_ids=[end])
    assert ids[-1] == end and tok.decode(ids[:-1]) in ("4", "four", "2 + 2 = 4.", "The answer is 4.")
    replies = generate_replies(model, tok, convos)
    assert sum(scoring.SCORERS[c.task](r, c.expected) for c, r in zip(convos, replies)) >= len(TASKS) - 1


@pytest.mark.skipif(not (SHIPPED / METADATA_FILE).is_file(), reason="the model has not been trained yet")
def test_shipped_corpus_is_reproducible():
    meta = json.loads((SHIPPED / METADATA_FILE).read_text())
    settings = meta["settings"]
    corpus, twins = training_corpus(TrainSettings(**settings))
    assert corpus_fingerprint(corpus + twins) == meta["corpus_sha256"], "the generator changed: retrain the model"
    assert meta.get("conversations_trained", len(corpus)) == len(corpus) + len(twins)


@pytest.mark.parametrize("config", ["tinychat", "tinychat-draft"])
def test_make_train_defaults_reproduce_each_shipped_model(config):
    meta_path = data_dir(config) / METADATA_FILE
    if not meta_path.is_file():
        pytest.skip("the model has not been trained yet")
    recorded = json.loads(meta_path.read_text())["settings"]
    # a setting added since the run (absent from its record) was then fixed at what is now its default
    defaults = asdict(default_settings(config))
    assert set(recorded) <= set(defaults) and {**defaults, **recorded} == defaults
