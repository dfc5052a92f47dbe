"""Context drills (notebook 07): the token budget, and how many retrieved passages it holds.

    room for history and retrieval = window - reserved output - margin - system/tools

>>> from random import Random
>>> print(draw_context_budget(Random(0)).solution.splitlines()[0])
prompt budget = window - reserved output - margin

The budget comes from ``context.budget.ContextBudget``, the one the course's packer uses.
"""
from __future__ import annotations

import math
import random

from course_lib.context.budget import ContextBudget
from course_lib.drills.problem_model import Draft, Generator, answer_line, floor_is_clear, num

WINDOWS = (8_192, 16_384, 32_768, 128_000, 131_072, 200_000)


def draw_context_budget(rng: random.Random) -> Draft:
    asked = rng.choice(("room", "passages"))
    for _ in range(1000):
        window = rng.choice(WINDOWS[:3] if asked == "passages" else WINDOWS)
        system = 100 * rng.randint(3, 60)
        reserve = rng.choice((512, 1_024, 2_048, 4_096, 8_192))
        margin = rng.choice((0, 128, 256, 500, 1_000))
        history = 50 * rng.randint(5, 80)
        passage = rng.choice((200, 250, 300, 400, 500, 800))
        if reserve + margin + system >= window:
            continue
        room = ContextBudget(window, reserve, margin).available - system
        if asked == "room" or (history < room and 1 <= (room - history) / passage <= 60
                               and floor_is_clear((room - history) / passage)):
            break
    else:
        raise RuntimeError("no context-budget case with room for passages in 1,000 draws")
    available = ContextBudget(window, reserve, margin).available
    setup = (f"A model's context window is {num(window)} tokens. The system prompt and tool definitions take "
             f"{num(system)} tokens; {num(reserve)} tokens are reserved for the reply, and a safety margin of "
             f"{num(margin)} tokens is kept free.")
    steps = ["prompt budget = window - reserved output - margin",
             f"= {num(window)} - {num(reserve)} - {num(margin)} = {num(available)} tokens",
             f"room for history and retrieval = {num(available)} - {num(system)} (system and tools) = {num(room)} tokens"]
    params = {"window": window, "system_tokens": system, "reserve_output": reserve, "margin": margin, "asked": asked}
    if asked == "room":
        answer, unit = room, "tokens"
        question = (f"{setup}\nHow many tokens are left for conversation history and retrieved passages?\n"
                    f"Answer in tokens.")
    else:
        answer, unit = math.floor((room - history) / passage), "passages"
        params.update(history_tokens=history, passage_tokens=passage)
        question = (f"{setup}\nThe conversation history kept takes {num(history)} tokens. Retrieved passages cost "
                    f"{num(passage)} tokens each, kept whole. How many passages fit?\nAnswer in passages (a whole number).")
        steps += [f"left for passages = {num(room)} - {num(history)} (history) = {num(room - history)} tokens",
                  f"passages = floor({num(room - history)} / {num(passage)}) = floor({(room - history) / passage:.2f}) "
                  f"= {answer}"]
    return Draft(question, answer, unit, "\n".join([*steps, answer_line(answer, unit)]), params, tolerance=0.0)


GENERATORS = (
    Generator("context_budget", "context", "The context budget: room for history, or passages that fit",
              draw_context_budget),
)
