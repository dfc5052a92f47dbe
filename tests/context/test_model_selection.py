"""Cost per successful task measured on the course engine: the counts are the engine's own."""
from __future__ import annotations

import pytest
import torch

from course_lib.context.cost import cost_per_success
from course_lib.context.model_selection import Measured, measure_runs, priced
from course_lib.data.corpus import TASKS, heldout_split
from course_lib.data.scoring import SCORERS
from course_lib.generation import generate_replies
from course_lib.model import load_model, load_tokenizer
from course_lib.tokenization.chat_template import encode_chat


@pytest.fixture(scope="module")
def shipped():
    torch.set_num_threads(1)
    return load_model("tinychat", device="cpu"), load_tokenizer("tinychat")


def test_runs_count_what_the_engine_served(shipped):
    model, tok = shipped
    convos = heldout_split(2)
    measured = measure_runs({"fp32": model}, tok, convos, max_new_tokens=32)
    runs = {r.task: r for r in measured.runs["fp32"]}
    assert set(runs) == set(TASKS) and all(r.requests == 2 for r in runs.values())
    replies = generate_replies(model, tok, convos, max_new_tokens=32)
    for task, run in runs.items():
        mine = [(c, r) for c, r in zip(convos, replies) if c.task == task]
        assert run.successes == sum(SCORERS[task](r, c.expected) for c, r in mine)
        assert run.prompt_tokens == sum(len(encode_chat(tok, c.prompt_messages)) for c, _ in mine)
        assert run.completion_tokens >= len(mine)  # at least the end token each
    assert measured.completion_tokens["fp32"] == sum(r.completion_tokens for r in runs.values())
    price = priced(measured, dollars_per_hour=1.0)[0]
    assert price.name == "fp32" and price.output_per_million == pytest.approx(
        1.0 / 3600 / measured.tokens_per_second["fp32"] * 1e6)
    assert cost_per_success(runs["fact"], price) > 0


def test_bad_calls_say_what_to_give():
    with pytest.raises(ValueError, match="at least one model"):
        measure_runs({}, None, heldout_split(1))
    with pytest.raises(ValueError, match="conversation"):
        measure_runs({"m": object()}, None, [])
    with pytest.raises(ValueError, match="rounds"):
        measure_runs({"m": object()}, None, heldout_split(1), rounds=0)


def test_time_is_the_median_round_and_replies_do_not_change(shipped):
    model, tok = shipped
    convos = heldout_split(1)
    one, three = (measure_runs({"fp32": model}, tok, convos, max_new_tokens=16, rounds=r) for r in (1, 3))
    assert one.runs == three.runs and one.completion_tokens == three.completion_tokens
    assert three.seconds["fp32"] > 0
    m = Measured({}, {"a": 2.0}, {"a": 100})
    assert m.tokens_per_second == {"a": 50.0} and m.all_runs() == []
