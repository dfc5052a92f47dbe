"""pack_context against the oracle: the tinychat tokenizer's own count of the rendered prompt.

Random cases are seeded, so a failure names a seed that reproduces it.
"""
import random
import re

import pytest

from course_lib.context import ContextBudget, ContextOverflow, Passage, pack_context, render_tools
from course_lib.model import CONFIGS, load_tokenizer
from course_lib.tokenization.chat_template import TOOL_CALL, encode_chat, render_chat
from course_lib.tools import tinychat_registry

WINDOW = CONFIGS["tinychat"].max_seq_len  # 512
WORDS = ("the cat sat on a mat Paris Oslo rain sun 42 7 refund order weather time "
         "é café naïve, . ? ! ( ) { } \" ' - _ : ; \n").split(" ")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("tinychat")


def oracle_count(tokenizer, messages) -> int:
    """Tokens of the rendered prompt, encoded in one go with the template's markers allowed."""
    return len(tokenizer.encode(render_chat(messages), allowed_special="all"))


def text(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def random_history(rng: random.Random) -> list[dict[str, str]]:
    history = []
    if rng.random() < 0.2:
        history.append({"role": "assistant", "content": "Hi, how can I help? " + text(rng, 0, 5)})
    for _ in range(rng.randint(0, 6)):
        history.append({"role": "user", "content": text(rng, 1, 30)})
        if rng.random() < 0.3:
            history.append({"role": "assistant",
                            "content": TOOL_CALL + '{"name": "get_time", "arguments": {"city": "Oslo"}}'})
            history.append({"role": "tool", "content": '{"time": "12:00"}'})
        history.append({"role": "assistant", "content": text(rng, 1, 30)})
    history.append({"role": "user", "content": text(rng, 1, 20)})
    return history


def random_case(seed: int) -> dict:
    rng = random.Random(seed)
    registry = list(tinychat_registry())
    tools = [t if rng.random() < 0.5 else t.openai_spec() for t in rng.sample(registry, rng.randint(0, 2))]
    passages = [(f"doc-{i}", text(rng, 1, 40), rng.choice([0.1, 0.5, 0.5, 0.9, rng.random()]))
                for i in range(rng.randint(0, 6))]
    if passages and rng.random() < 0.5:
        passages = [Passage(*p) for p in passages]
    window = rng.choice([WINDOW, rng.randint(60, WINDOW)])
    return dict(system=text(rng, 0, 12), tools=tools, history=random_history(rng), passages=passages,
                window=window, reserve_output=rng.randint(0, window // 3), margin=rng.choice([0, 0, 5]),
                policy=rng.choice(["drop-oldest", "passages-first"]))


def turns_of(messages):
    """Split earlier messages at each user message, as the packer documents."""
    turns = []
    for m in messages:
        if m["role"] == "user" or not turns:
            turns.append([])
        turns[-1].append(m)
    return turns


def passage_ids_in(content: str) -> list[str]:
    return re.findall(r"^\[([^\]]*)\] ", content, re.M)


@pytest.mark.parametrize("block", range(4))
def test_random_inputs_count_exactly_and_keep_every_invariant(tokenizer, block):
    for seed in range(block * 40, block * 40 + 40):
        case = random_case(seed)
        history, policy = case["history"], case["policy"]
        try:
            packed = pack_context(tokenizer=tokenizer, **case)
        except ContextOverflow as error:
            fixed = pack_context(case["system"], case["tools"], history[-1:], [], tokenizer=tokenizer,
                                 window=10_000, reserve_output=0).prompt_tokens
            available = case["window"] - case["reserve_output"] - case["margin"]
            assert error.over == fixed - available > 0, seed
            assert f"over by {fixed - available} tokens" in str(error), seed
            continue
        messages = packed.messages
        # Exact count, checked against an independent encoding of the rendered prompt.
        assert packed.prompt_tokens == len(encode_chat(tokenizer, messages)) == oracle_count(tokenizer, messages), seed
        assert packed.prompt_tokens <= packed.budget.available, seed
        parts = (packed.system_tokens + packed.history_tokens + packed.passages_tokens
                 + packed.current_turn_tokens + packed.template_tokens)
        assert parts == packed.prompt_tokens, seed
        n_tool_calls = sum(m["role"] == "assistant" and m["content"].startswith(TOOL_CALL) for m in messages)
        assert packed.template_tokens == 2 * len(messages) + n_tool_calls + 1, seed
        # System first (with every tool), current turn last.
        assert messages[0]["role"] == "system" and messages[0]["content"].startswith(case["system"]), seed
        assert render_tools(case["tools"]) in messages[0]["content"], seed
        assert messages[-1]["role"] == "user" and messages[-1]["content"].endswith(history[-1]["content"]), seed
        # Passages: whole, a prefix of the ranking (score desc, ties in input order).
        ranked = sorted((p if isinstance(p, Passage) else Passage(*p) for p in case["passages"]),
                        key=lambda p: -p.score)
        kept_ids = passage_ids_in(messages[-1]["content"])
        assert kept_ids == [p.id for p in ranked[:len(kept_ids)]] == list(packed.kept_passages), seed
        for p in ranked[:len(kept_ids)]:
            assert f"\n[{p.id}] {p.text}\n" in messages[-1]["content"], seed
        # History: the newest whole turns, contiguous, unchanged.
        all_turns, kept = turns_of(history[:-1]), messages[1:-1]
        n_kept = len(turns_of(kept))
        assert kept == [m for turn in all_turns[len(all_turns) - n_kept:] for m in turn], seed
        assert len(packed.dropped) == (len(all_turns) - n_kept) + (len(ranked) - len(kept_ids)), seed
        # Nothing dropped that would have fitted: the first dropped piece of each kind overflows.
        for kind in ("turn", "passage"):
            first = next((d for d in packed.dropped if d.kind == kind), None)
            if first is None:
                continue
            if kind == "turn":
                bigger = [messages[0], *all_turns[len(all_turns) - n_kept - 1], *kept, messages[-1]]
            else:
                with_next = ranked[:len(kept_ids) + 1]
                block = pack_context("", [], [{"role": "user", "content": history[-1]["content"]}], with_next,
                                     tokenizer=tokenizer, window=100_000, reserve_output=0).messages[-1]
                bigger = [*messages[:-1], block]
            assert len(encode_chat(tokenizer, bigger)) > packed.budget.available, (seed, kind)
        # Each policy serves one part first: that part is packed as if the other were absent.
        if policy == "drop-oldest":
            alone = pack_context(**{**case, "passages": []}, tokenizer=tokenizer)
            assert alone.messages[1:-1] == kept, seed
        else:
            alone = pack_context(**{**case, "history": history[-1:]}, tokenizer=tokenizer)
            assert alone.kept_passages == packed.kept_passages, seed

def conversation(n_turns: int) -> list[dict[str, str]]:
    history = []
    for i in range(n_turns):
        history += [{"role": "user", "content": f"question {i} about the weather in Paris today"},
                    {"role": "assistant", "content": f"answer {i}: it is sunny and mild in Paris"}]
    return history + [{"role": "user", "content": "and tomorrow?"}]


def test_drop_oldest_keeps_the_newest_turns_and_drops_from_the_oldest(tokenizer):
    history = conversation(4)
    full = pack_context("sys", [], history, [], tokenizer=tokenizer, window=10_000, reserve_output=0)
    turn_cost = len(encode_chat(tokenizer, history[6:8], add_generation_prompt=False))
    # Room for two of the four turns (all turns cost about the same; the +1 absorbs no rounding).
    window = full.prompt_tokens - 2 * turn_cost + 1
    packed = pack_context("sys", [], history, [], tokenizer=tokenizer, window=window, reserve_output=0)
    assert packed.messages[1:-1] == history[4:8]
    assert [(d.kind, d.ref) for d in packed.dropped] == [("turn", 2), ("turn", 0)]
    assert packed.dropped[0].reason.startswith("did not fit")
    assert packed.dropped[1].reason == "older than a turn that did not fit"


def test_a_turn_is_dropped_whole_never_half(tokenizer):
    history = [{"role": "user", "content": "hi"},
               {"role": "assistant", "content": TOOL_CALL + '{"name": "get_time", "arguments": {"city": "Oslo"}}'},
               {"role": "tool", "content": '{"time": "12:00"}'},
               {"role": "assistant", "content": "It is noon in Oslo. " * 5},
               {"role": "user", "content": "thanks"}]
    base = pack_context("sys", [], history[-1:], [], tokenizer=tokenizer, window=10_000, reserve_output=0)
    user_only = len(encode_chat(tokenizer, history[:1], add_generation_prompt=False))
    # Room for the turn's user message and tool call, not its whole.
    window = base.prompt_tokens + user_only + 30
    assert len(encode_chat(tokenizer, history[:4], add_generation_prompt=False)) > 30 + user_only
    packed = pack_context("sys", [], history, [], tokenizer=tokenizer, window=window, reserve_output=0)
    assert [m["role"] for m in packed.messages] == ["system", "user"]
    assert packed.messages[-1]["content"] == "thanks"
    assert [(d.kind, d.ref) for d in packed.dropped] == [("turn", 0)]


def test_the_two_policies_give_the_budget_to_different_parts(tokenizer):
    history = conversation(2)
    passages = [("low", "Paris had light rain last week. " * 3, 0.2),
                ("high", "Tomorrow Paris will be sunny, 21 C. " * 3, 0.9)]
    everything = pack_context("sys", [], history, passages, tokenizer=tokenizer, window=10_000, reserve_output=0)
    assert everything.kept_passages == ("high", "low") and not everything.dropped
    window = everything.prompt_tokens - 5  # not quite room for all of it
    oldest_first = pack_context("sys", [], history, passages, tokenizer=tokenizer, window=window, reserve_output=0)
    passages_first = pack_context("sys", [], history, passages, tokenizer=tokenizer, window=window,
                                  reserve_output=0, policy="passages-first")
    # drop-oldest serves history first: every turn kept, the lowest-ranked passage goes.
    assert oldest_first.messages[1:-1] == history[:-1]
    assert oldest_first.kept_passages == ("high",)
    assert [(d.kind, d.ref) for d in oldest_first.dropped] == [("passage", "low")]
    # passages-first serves passages first: both kept, the oldest turn goes.
    assert passages_first.kept_passages == ("high", "low")
    assert passages_first.messages[1:-1] == history[2:4]
    assert [(d.kind, d.ref) for d in passages_first.dropped] == [("turn", 0)]


def test_an_impossible_budget_raises_with_the_exact_overage(tokenizer):
    tools = list(tinychat_registry())
    history = [{"role": "user", "content": "What time is it in Oslo?"}]
    needed = pack_context("You are TinyChat.", tools, history, [], tokenizer=tokenizer,
                          window=10_000, reserve_output=0).prompt_tokens
    pack_context("You are TinyChat.", tools, history, [], tokenizer=tokenizer, window=needed + 100,
                 reserve_output=100)  # exactly enough is enough
    with pytest.raises(ContextOverflow, match="over by 1 tokens"):  # one short is too short
        pack_context("You are TinyChat.", tools, history, [], tokenizer=tokenizer, window=needed + 99,
                     reserve_output=100)
    with pytest.raises(ContextOverflow, match="over by 7 tokens.*lower reserve_output") as caught:
        pack_context("You are TinyChat.", tools, history, [], tokenizer=tokenizer, window=needed + 100,
                     reserve_output=100, margin=7)
    assert caught.value.over == 7 and isinstance(caught.value, ValueError)


def test_the_report_says_what_was_dropped_and_why(tokenizer):
    history = conversation(3)
    packed = pack_context("sys", [], history, [("doc-9", "Paris weather report. " * 200, 1.0)], tokenizer=tokenizer,
                          window=WINDOW, reserve_output=128)
    report = packed.report()
    assert re.search(r"passage +doc-9", report) and "did not fit" in report
    assert f"prompt {packed.prompt_tokens}".replace(" ", "") in report.replace(" ", "")
    assert "window 512 - reserve 128 - margin 0" in report


def test_tools_render_the_same_from_a_tool_or_its_spec():
    tools = list(tinychat_registry())
    specs = [t.openai_spec() for t in tools]
    reordered = [{"function": s["function"], "type": "function"} for s in specs]
    assert render_tools(tools) == render_tools(specs) == render_tools(reordered)
    assert render_tools(tools).count("\n") == len(tools)  # header + one line per tool
    assert render_tools([]) == ""


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    (dict(reserve_output=-1), ValueError, "reserve_output must be >= 0"),
    (dict(reserve_output=512), ValueError, "must be smaller than the window"),
    (dict(margin=400, reserve_output=112), ValueError, "leaves 0 tokens"),
    (dict(window=512.0), TypeError, "window must be an int"),
    (dict(policy="newest"), ValueError, "unknown policy 'newest'; choose one of drop-oldest, passages-first"),
    (dict(history=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]), ValueError,
     "must have role 'user', got 'assistant'"),
    (dict(history=[]), ValueError, "history is empty"),
    (dict(history=[{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]), ValueError,
     "pass the system prompt as `system`"),
    (dict(history=[{"role": "bot", "content": "q"}]), ValueError, "unknown role 'bot'"),
    (dict(passages=[("doc", "text")]), TypeError, r"passages\[0\] must be a Passage"),
    (dict(passages=[("doc", "text", "high")]), TypeError, "score must be a number"),
    (dict(tools=["get_time"]), TypeError, r"tools\[0\] must be a Tool"),
])
def test_bad_input_says_what_is_wrong(tokenizer, kwargs, error, message):
    args = dict(system="sys", tools=[], history=[{"role": "user", "content": "q"}], passages=[],
                tokenizer=tokenizer, window=512, reserve_output=100)
    args.update(kwargs)
    with pytest.raises(error, match=message):
        pack_context(**args)


def test_budget_available_is_window_minus_reserve_minus_margin():
    assert ContextBudget(WINDOW, 128, 16).available == 512 - 128 - 16
    with pytest.raises(ValueError, match="margin must be >= 0"):
        ContextBudget(512, 128, -1)
