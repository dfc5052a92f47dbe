"""A deterministic chat corpus for the course model: a pure function of (size, seed).

Six kinds of conversation, each in the course chat template
(``course_lib.tokenization.chat_template``):

- ``arithmetic``: "What is 2 + 2?" answered as digits ("4"), words ("four") or a sentence
  ("2 + 2 = 4."); a question may ask for one form ("Answer in words.").
- ``fact``: questions the model knows ("What is the capital of France?").
- ``unknown``: the same questions about made-up things, or unanswerable ones, answered
  "I don't know."
- ``extraction``: a refund or a table booking written as prose, answered with one JSON record.
- ``tool``: a request answered by a tool call (``<|tool_call|>`` then JSON with ``name`` and
  ``arguments``), the tool's JSON result, then the final answer.
- ``grounded``: fenced passages and a question, answered from the passages with the supporting
  passage's statement and id ("The capital of France is Lima. [4]"), or "The passages do not
  say." (``course_lib.data.grounded``).

Each ``Conversation`` records which assistant message is graded and what it should say, so
``course_lib.evaluate`` can score a model's reply against it. The held-out split is drawn with a
different seed from the training split, and from questions training never contains: each
question's split is fixed by a hash of its text (``question_split``).

    >>> convo = generate_corpus(1, seed=7)[0]
    >>> generate_corpus(1, seed=7)[0] == convo      # same seed, same corpus
    True
    >>> convo.messages[convo.reply_index]["role"]
    'assistant'
"""
from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from course_lib.data import facts
from course_lib.data.facts import article, made_up_name
from course_lib.data.grounded import absent_twin, grounded_conversation
from course_lib.tokenization.chat_template import END_OF_TEXT, TOOL_CALL, render_chat

TRAIN_SEED = 20261129
HELDOUT_SEED = 7319  # a different seed: the held-out split is a fresh draw, never a slice of training
TASKS: tuple[str, ...] = ("arithmetic", "fact", "unknown", "extraction", "tool", "grounded")
# How often each task is drawn: grounded questions (find the one passage about the entity
# asked, among up to five) are the hardest for a tiny model, then arithmetic (memorised sums)
# and extraction (copying ids and amounts), so they get the most examples.
TASK_WEIGHTS: dict[str, float] = {
    "arithmetic": 0.25, "fact": 0.05, "unknown": 0.05, "extraction": 0.12, "tool": 0.08, "grounded": 0.45,
}
# Every question belongs to one split, decided by a hash of its text: one in HELDOUT_BUCKETS
# goes to the held-out split and never into training, so a held-out prompt is unseen by
# construction (course eval measures the overlap anyway). The salt is fixed so the split never moves.
HELDOUT_BUCKETS = 8
SPLIT_SALT = "tinychat-split-1"
SPLITS = ("train", "heldout")
SYSTEM_PROMPTS: tuple[str, ...] = ("You are TinyChat.", "You are TinyChat, a small helpful assistant.")
ABSTAIN = "I don't know."


@dataclass(frozen=True)
class Conversation:
    """One chat: ``messages[reply_index]`` is the graded assistant reply, ``expected`` its key.

    ``expected`` by task: arithmetic ``{"value": int, "accepted": [str, ...]}``; fact
    ``{"value": str}``; unknown ``{}``; extraction the record dict; tool
    ``{"name": str, "arguments": dict}``.
    """

    task: str
    messages: tuple[dict[str, str], ...]
    reply_index: int
    expected: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt_messages(self) -> list[dict[str, str]]:
        """The messages the model sees before it writes the graded reply."""
        return list(self.messages[: self.reply_index])

    @property
    def reply(self) -> str:
        return self.messages[self.reply_index]["content"]


def _user(content: str) -> dict[str, str]:
    return {"role": "user", "content": content}


def _assistant(content: str) -> dict[str, str]:
    return {"role": "assistant", "content": content}


# ---------------------------------------------------------------- arithmetic
_OPS = {"+": ("plus", lambda a, b: a + b), "-": ("minus", lambda a, b: a - b), "*": ("times", lambda a, b: a * b)}
_QUESTIONS = ("What is {q}?", "What is {q}?", "What's {q}?", "Calculate {q}.", "How much is {q}?", "{q} = ?")
_FORMS = {  # requested form -> instruction appended to the question
    "digits": (" Answer with digits.", " Reply with just the number."),
    "words": (" Answer in words.", " Write the answer in words."),
    "sentence": (" Answer in a sentence.",),
}


def _operand(rng: random.Random, top: int) -> int:
    # Half the draws come from 0..10: small sums ("2 + 2") are the ones people ask most.
    return rng.randint(0, min(top, 10)) if rng.random() < 0.5 else rng.randint(0, top)


def _operands(rng: random.Random, op: str) -> tuple[int, int]:
    if op == "+":
        return _operand(rng, 20), _operand(rng, 20)
    if op == "-":
        a = _operand(rng, 20)
        return a, rng.randint(0, a)  # results stay >= 0: the words table covers 0..100
    return _operand(rng, 10), _operand(rng, 10)


def arithmetic_answers(a: int, op: str, b: int, spelled: bool) -> dict[str, list[str]]:
    """Every accepted reply to ``a op b``, by surface form.

    >>> arithmetic_answers(2, "+", 2, spelled=False)["sentence"]
    ['2 + 2 = 4.', 'The answer is 4.']
    """
    word, fn = _OPS[op]
    value = fn(a, b)
    shown = f"{a} {word} {b}" if spelled else f"{a} {op} {b}"
    sentence_op = "is" if spelled else "="
    return {
        "digits": [str(value)],
        "words": [facts.number_to_words(value)],
        "sentence": [f"{shown} {sentence_op} {value}.", f"The answer is {value}."],
    }


def _arithmetic(rng: random.Random) -> tuple[list[dict[str, str]], dict[str, Any]]:
    op = rng.choice("+-*")
    a, b = _operands(rng, op)
    spelled = rng.random() < 0.3
    q = f"{a} {_OPS[op][0]} {b}" if spelled else f"{a} {op} {b}"
    question = rng.choice(_QUESTIONS).format(q=q)
    answers = arithmetic_answers(a, op, b, spelled)
    if rng.random() < 0.5:  # free form: any surface form is right, so sampling can vary wording
        accepted = [text for form in ("digits", "words", "sentence") for text in answers[form]]
        # Never a bare number here: "5" could then be the answer or the start of "5 + 1 = 6.",
        # and the model would have to tell them apart after the fact. Digits are asked for.
        reply = rng.choice(["words", "sentence", "sentence"])
    else:
        reply = rng.choice(list(_FORMS))
        question += rng.choice(_FORMS[reply])
        accepted = answers[reply]
    text = rng.choice(answers[reply])
    return [_user(question), _assistant(text)], {"value": _OPS[op][1](a, b), "accepted": accepted}


# ---------------------------------------------------------------- facts and abstention
_FACT_KINDS = {
    # kind -> (question templates, answer templates)
    "capital": (
        ("What is the capital of {x}?", "What's the capital city of {x}?", "Name the capital of {x}.",
         "Which city is the capital of {x}?"),
        ("The capital of {x} is {y}.", "{y}."),
    ),
    "symbol": (
        ("What is the chemical symbol for {x}?", "What's the symbol of {x}?", "Which symbol stands for {x}?"),
        ("The chemical symbol for {x} is {y}.", "{y}."),
    ),
    "legs": (
        ("How many legs does {a} {x} have?", "How many legs has {a} {x} got?", "Count the legs of {a} {x}."),
        ("{A} {x} has {y} legs.", "{y}."),
    ),
}
_FACT_TABLES = {"capital": facts.CAPITALS, "symbol": facts.SYMBOLS, "legs": facts.LEGS}


def _fact(rng: random.Random) -> tuple[list[dict[str, str]], dict[str, Any]]:
    kind = rng.choice(list(_FACT_KINDS))
    x, y = rng.choice(list(_FACT_TABLES[kind].items()))
    questions, answers = _FACT_KINDS[kind]
    reply = rng.choice(answers).format(x=x, y=y, A=article(x).capitalize())
    return [_user(rng.choice(questions).format(x=x, a=article(x))), _assistant(reply)], {"value": str(y)}


def _unknown(rng: random.Random) -> tuple[list[dict[str, str]], dict[str, Any]]:
    if rng.random() < 0.15:
        question = rng.choice(facts.UNANSWERABLE)
    else:
        kind = rng.choice(list(_FACT_KINDS))
        name = made_up_name(rng, kind)
        question = rng.choice(_FACT_KINDS[kind][0]).format(x=name, a=article(name))
    return [_user(question), _assistant(ABSTAIN)], {}


# ---------------------------------------------------------------- extraction into JSON
_REFUND_TEXTS = (
    "Please refund ${a} for order {o}; it {r}.",
    "Order {o} {r}, so I would like ${a} back.",
    "Refund request: order {o}, ${a}, it {r}.",
    "My order {o} {r}. I paid ${a} and want a refund.",
)
_BOOKING_TEXTS = (
    "Book a table for {p} under {n} on {d} at {t}.",
    "Hi, this is {n}. We are {p} people and would like {d} at {t}.",
    "Reservation for {n}: {p} guests, {d}, {t}.",
)


def order_id(rng: random.Random) -> str:
    """An order id such as 'K4821': one capital letter and four digits."""
    return rng.choice("ABCDEFGHJKLMNPRSTUVWXYZ") + f"{rng.randint(0, 9999):04d}"


def _extraction(rng: random.Random) -> tuple[list[dict[str, str]], dict[str, Any]]:
    if rng.random() < 0.6:
        oid, cents = order_id(rng), rng.randint(100, 9999)
        amount = f"{cents // 100}.{cents % 100:02d}"
        reason = rng.choice(list(facts.REFUND_REASONS))
        text = rng.choice(_REFUND_TEXTS).format(o=oid, a=amount, r=rng.choice(facts.REFUND_REASONS[reason]))
        record = {"order_id": oid, "amount": float(amount), "reason": reason}
        # The amount is written with its cents ("7.50"), as a person would, and still parses as JSON.
        reply = f'{{"order_id": "{oid}", "amount": {amount}, "reason": "{reason}"}}'
        question = rng.choice(("Extract the refund as JSON: ", "Extract the refund fields as JSON.\n"))
    else:
        hour, half = rng.randint(17, 21), rng.choice(("00", "30"))
        record = {"name": rng.choice(facts.SURNAMES), "party_size": rng.randint(1, 12),
                  "day": rng.choice(facts.DAYS), "time": f"{hour}:{half}"}
        text = rng.choice(_BOOKING_TEXTS).format(
            n=record["name"], p=record["party_size"], d=record["day"], t=record["time"])
        reply = json.dumps(record)
        question = rng.choice(("Extract the booking as JSON: ", "Extract the booking fields as JSON.\n"))
    return [_user(question + text), _assistant(reply)], record


# ---------------------------------------------------------------- tool calls
def _tool_call(name: str, arguments: dict[str, Any]) -> str:
    return TOOL_CALL + json.dumps({"name": name, "arguments": arguments})


def _weather(rng: random.Random) -> tuple[str, str, dict, dict, str]:
    city = rng.choice(facts.CITIES)
    ask = rng.choice(("What's the weather in {c}?", "Is it sunny in {c} right now?",
                      "How warm is it in {c}?", "Weather for {c}, please.")).format(c=city)
    temp, cond = rng.randint(-5, 35), rng.choice(facts.CONDITIONS)
    return ask, "get_weather", {"city": city}, {"city": city, "temperature_c": temp, "condition": cond}, \
        f"It is {temp} degrees and {cond} in {city}."


def _time(rng: random.Random) -> tuple[str, str, dict, dict, str]:
    city = rng.choice(facts.CITIES)
    ask = rng.choice(("What time is it in {c}?", "Tell me the local time in {c}.")).format(c=city)
    clock = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
    return ask, "get_time", {"city": city}, {"city": city, "time": clock}, f"It is {clock} in {city}."


def _order(rng: random.Random) -> tuple[str, str, dict, dict, str]:
    oid = order_id(rng)
    ask = rng.choice(("Where is my order {o}?", "Has order {o} shipped?",
                      "Check the status of order {o}.")).format(o=oid)
    status = rng.choice(facts.ORDER_STATUSES)
    return ask, "lookup_order", {"order_id": oid}, {"order_id": oid, "status": status}, f"Order {oid} is {status}."


def _currency(rng: random.Random) -> tuple[str, str, dict, dict, str]:
    src, dst = rng.sample(list(facts.CURRENCIES), 2)
    amount = rng.randint(1, 1000)
    ask = rng.choice(("Convert {x} {f} to {t}.", "How much is {x} {f} in {t}?")).format(x=amount, f=src, t=dst)
    result = round(amount * facts.CURRENCIES[src] / facts.CURRENCIES[dst], 2)
    args = {"amount": amount, "from_currency": src, "to_currency": dst}
    return ask, "convert_currency", args, {"amount": result, "currency": dst}, f"{amount} {src} is {result:.2f} {dst}."


_TOOLS: tuple[Callable[[random.Random], tuple[str, str, dict, dict, str]], ...] = (_weather, _time, _order, _currency)


def _tool(rng: random.Random) -> tuple[list[dict[str, str]], dict[str, Any]]:
    ask, name, args, result, final = rng.choice(_TOOLS)(rng)
    messages = [_user(ask), _assistant(_tool_call(name, args)),
                {"role": "tool", "content": json.dumps(result)}, _assistant(final)]
    return messages, {"name": name, "arguments": args}


_GENERATORS = {"arithmetic": _arithmetic, "fact": _fact, "unknown": _unknown,
               "extraction": _extraction, "tool": _tool, "grounded": grounded_conversation}


def question_split(question: str) -> str:
    """'heldout' or 'train': which split a user question belongs to, fixed by its text.

    >>> question_split("What is 2 + 2?"), question_split("What is the capital of France?")
    ('train', 'train')
    """
    digest = hashlib.sha256(f"{SPLIT_SALT}\n{question}".encode("utf-8")).digest()
    return "heldout" if digest[0] % HELDOUT_BUCKETS == 0 else "train"


def generate_conversation(rng: random.Random, task: str, split: str = "train") -> Conversation:
    """One conversation of ``task`` whose question belongs to ``split``, drawn from ``rng``
    (which it advances; draws from the other split are discarded)."""
    if task not in _GENERATORS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    while True:
        messages, expected = _GENERATORS[task](rng)
        if question_split(messages[0]["content"]) == split:
            break
    # A system prompt on some conversations, so the model answers the same with or without one.
    if rng.random() < 0.4:
        messages.insert(0, {"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    reply_index = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    return Conversation(task, tuple(messages), reply_index, expected)


def generate_corpus(n: int, seed: int, tasks: tuple[str, ...] | None = None,
                    split: str = "train") -> list[Conversation]:
    """``n`` conversations drawn from ``random.Random(seed)``: same arguments, same list.

    ``tasks`` restricts the draw (weights renormalised); by default all of ``TASKS``.

    >>> [c.task for c in generate_corpus(3, seed=1, tasks=("tool",))]
    ['tool', 'tool', 'tool']
    """
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    chosen = TASKS if tasks is None else tuple(tasks)
    unknown = [t for t in chosen if t not in TASK_WEIGHTS]
    if unknown or not chosen:
        raise ValueError(f"tasks must be a non-empty subset of {TASKS}, got {tasks!r}")
    rng = random.Random(seed)
    weights = [TASK_WEIGHTS[t] for t in chosen]
    return [generate_conversation(rng, rng.choices(chosen, weights)[0], split) for _ in range(n)]


def absent_twins(conversations: list[Conversation], fraction: float, seed: int) -> list[Conversation]:
    """Minimal pairs for training: ``fraction`` of the answered grounded conversations, each with
    its supporting passage swapped for a same-kind statement about another entity and the reply
    changed to the abstention (``course_lib.data.grounded.absent_twin``).

    Training data only: every twin's question is redrawn until it falls in the training split,
    and the held-out split stays a plain draw of ``generate_corpus``'s generator. The same
    (conversations, fraction, seed) give the same twins.

    >>> base = generate_corpus(40, seed=5, tasks=("grounded",))
    >>> twins = absent_twins(base, 1.0, seed=5)
    >>> len(twins) == sum(c.expected["passage_id"] is not None for c in base)
    True
    >>> {t.reply for t in twins}, {question_split(t.messages[t.reply_index - 1]["content"]) for t in twins}
    ({'The passages do not say.'}, {'train'})
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction!r}")
    rng = random.Random(f"absent-twins/{seed}")
    twins = []
    for convo in conversations:
        if convo.task != "grounded" or convo.expected["passage_id"] is None or rng.random() >= fraction:
            continue
        while True:
            messages, expected = absent_twin(rng, convo.messages[: convo.reply_index + 1], convo.expected)
            if question_split(messages[-2]["content"]) == "train":
                break
        twins.append(Conversation("grounded", tuple(messages), len(messages) - 1, expected))
    return twins


def heldout_split(per_task: int, seed: int = HELDOUT_SEED) -> list[Conversation]:
    """``per_task`` held-out conversations of each task, drawn from ``seed`` (not the training seed)."""
    if seed == TRAIN_SEED:
        raise ValueError("the held-out split must use a seed other than TRAIN_SEED")
    return [c for task in TASKS for c in generate_corpus(per_task, seed + TASKS.index(task), (task,), "heldout")]


def corpus_fingerprint(conversations: list[Conversation]) -> str:
    """SHA-256 of the rendered corpus: proves a rerun trains on exactly the same text."""
    digest = hashlib.sha256()
    for convo in conversations:
        digest.update(render_chat(convo.messages, add_generation_prompt=False).encode("utf-8"))
        digest.update(END_OF_TEXT.encode("utf-8"))
    return digest.hexdigest()
