"""Replays on the shipped tinychat: greedy replies are the engine's one by one, sampled ones repeat by seed."""
from __future__ import annotations

import pytest

from course_lib.data.corpus import heldout_split
from course_lib.data.scoring import SCORERS
from course_lib.operations.replay import Replay, replay
from course_lib.sampling import SamplingParams
from course_lib.serving import Engine


@pytest.fixture(scope="module")
def convos():
    return heldout_split(2)


def test_a_greedy_replay_is_the_engines_reply_one_conversation_at_a_time(tinychat, convos):
    model, tok = tinychat
    run = replay(model, tok, convos, name="greedy", max_new_tokens=32)
    engine = Engine.for_job(model, tok, rows=1)
    alone = [engine.generate([c.prompt_messages], SamplingParams(temperature=0, max_new_tokens=32))[0]
             for c in convos]
    assert run.replies == tuple(d.text for d in alone)                    # batching changes nothing
    assert run.finish_reasons == tuple(d.finish_reason for d in alone)
    assert run.completion_tokens == tuple(len(d.token_ids) for d in alone)
    assert run.tasks == tuple(c.task for c in convos) and run.name == "greedy"
    assert run.correct == tuple(bool(SCORERS[c.task](d.text, c.expected)) for c, d in zip(convos, alone))
    assert run.accuracy == pytest.approx(sum(run.correct) / len(convos))
    by_task = run.accuracy_by_task()
    assert set(by_task) == {c.task for c in convos}
    for task, accuracy in by_task.items():
        flags = [ok for t, ok in zip(run.tasks, run.correct) if t == task]
        assert accuracy == sum(flags) / len(flags)


def test_accuracy_by_task_by_hand():
    run = Replay("x", ("a", "b", "a", "a"), ("",) * 4, (True, False, False, True), ("stop",) * 4, (1,) * 4)
    assert run.accuracy == 0.5 and run.accuracy_by_task() == {"a": 2 / 3, "b": 0.0}


def test_a_sampled_replay_repeats_with_its_seed_and_changes_with_another(tinychat, convos):
    model, tok = tinychat
    varied = [convos[0], convos[2], convos[3]] * 4   # an arithmetic and two fact questions: replies vary at t=1
    first = replay(model, tok, varied, name="t1", temperature=1.0, seed=3, max_new_tokens=24)
    again = replay(model, tok, varied, name="t1", temperature=1.0, seed=3, max_new_tokens=24)
    other = replay(model, tok, varied, name="t1", temperature=1.0, seed=4, max_new_tokens=24)
    assert first == again
    assert first.replies != other.replies


def test_each_request_has_its_own_seed_so_its_batch_does_not_matter(tinychat, convos):
    model, tok = tinychat
    same = [convos[3]] * 8                          # a fact question the model phrases two ways at t=1
    whole = replay(model, tok, same, name="all", temperature=1.0, seed=10, max_new_tokens=24)
    assert len(set(whole.replies)) > 1              # eight copies, eight seeds: not one reply eight times
    tail = replay(model, tok, same[:5], name="tail", temperature=1.0, seed=13, max_new_tokens=24)
    assert whole.replies[3:] == tail.replies        # request i is seeded seed + i, whatever shares its batch


def test_replay_raises_without_a_tokenizer_or_conversations(tinychat, convos):
    model, tok = tinychat
    with pytest.raises(ValueError, match="needs the model's tokenizer"):
        replay(model, None, convos, name="x")
    with pytest.raises(ValueError, match="at least one conversation"):
        replay(model, tok, [], name="x")
