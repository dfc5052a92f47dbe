"""Token and cost drills (notebooks 00 and 01): a chat's prompt tokens from words, a request's bill.

>>> from random import Random
>>> d = draw_request_cost(Random(0))
>>> d.unit, d.solution.splitlines()[-1].startswith("Answer: ")
('USD per day', True)
"""
from __future__ import annotations

import random

from course_lib.drills.problem_formulas import prompt_tokens_from_words, request_cost_usd
from course_lib.drills.problem_model import Draft, Generator, answer_line, num, sig
from course_lib.orientation import MESSAGE_OVERHEAD_TOKENS

WORDS_PER_TOKEN = (0.75, 0.6, 0.5)  # 0.75: English prose (syllabus, notebook 01); lower for denser text
INPUT_PRICES = (0.15, 0.25, 0.4, 0.5, 1.0, 1.25, 2.5, 3.0, 5.0, 10.0, 15.0)  # USD per 1M input tokens
REQUESTS_PER_DAY = (1_000, 10_000, 100_000, 1_000_000)


def draw_prompt_tokens(rng: random.Random) -> Draft:
    turns = rng.randint(0, 2)  # earlier user/assistant exchanges
    roles = ["system"] + ["user", "assistant"] * turns + ["user"]
    n_messages = len(roles)
    words = [30 * rng.randint(1, 60) for _ in range(n_messages)]  # 30 to 1,800 words each
    ratio = rng.choice(WORDS_PER_TOKEN)
    answer = prompt_tokens_from_words(words, ratio)
    listing = "; ".join(f"{role} {num(w)} words" for role, w in zip(roles, words))
    question = (f"A chat request carries {n_messages} messages: {listing}.\n"
                f"This text averages {num(ratio)} words per token, and the chat template adds "
                f"{MESSAGE_OVERHEAD_TOKENS} tokens around each message.\n"
                f"About how many prompt tokens is the request?\nAnswer in tokens.")
    content = [w / ratio for w in words]
    steps = [
        "tokens = sum(words / words per token) + template tokens per message x messages",
        "content: " + " + ".join(f"{num(w)} / {num(ratio)}" for w in words) + " = "
        + " + ".join(sig(c) for c in content) + f" = {sig(sum(content))}",
        f"template: {MESSAGE_OVERHEAD_TOKENS} x {n_messages} = {MESSAGE_OVERHEAD_TOKENS * n_messages}",
        f"total = {sig(sum(content))} + {MESSAGE_OVERHEAD_TOKENS * n_messages} = {sig(answer)}",
        answer_line(answer, "tokens"),
    ]
    params = {"words": words, "words_per_token": ratio, "overhead_per_message": MESSAGE_OVERHEAD_TOKENS}
    return Draft(question, answer, "tokens", "\n".join(steps), params)


def draw_request_cost(rng: random.Random) -> Draft:
    for _ in range(1000):
        input_tokens = 100 * rng.randint(5, 400)
        output_tokens = 50 * rng.randint(1, 40)
        input_price = rng.choice(INPUT_PRICES)
        output_price = round(input_price * rng.choice((4, 5, 8)), 4)
        cached = 100 * rng.randint(1, input_tokens // 100) if rng.random() < 0.5 else 0
        cached_price = round(input_price / 10, 4)
        per_day = rng.choice(REQUESTS_PER_DAY)
        per_request = request_cost_usd(input_tokens, output_tokens, input_usd_per_mtok=input_price,
                                       output_usd_per_mtok=output_price, cached_tokens=cached,
                                       cached_usd_per_mtok=cached_price)
        answer = per_request * per_day
        if 1 <= answer <= 1e7:
            break
    else:
        raise RuntimeError("no request-cost case between $1 and $10M a day in 1,000 draws")
    cache_text = (f", of which the first {num(cached)} are a cached prefix billed at ${num(cached_price)} per 1M tokens"
                  if cached else "")
    question = (f"A request sends {num(input_tokens)} input tokens{cache_text}, and gets {num(output_tokens)} output "
                f"tokens back.\nPrices: ${num(input_price)} per 1M input tokens, ${num(output_price)} per 1M output "
                f"tokens.\nAt {num(per_day)} such requests a day, what is the daily bill?\nAnswer in USD per day.")
    uncached = input_tokens - cached
    parts = [f"{num(uncached)} x ${num(input_price)}"]
    if cached:
        parts.append(f"{num(cached)} x ${num(cached_price)}")
    parts.append(f"{num(output_tokens)} x ${num(output_price)}")
    steps = [
        "cost per request = (uncached input x input price + cached input x cached price + output x output price) / 1M",
        *([f"uncached input = {num(input_tokens)} - {num(cached)} = {num(uncached)} tokens"] if cached else []),
        f"per request = ({' + '.join(parts)}) / 1,000,000 = ${sig(per_request)}",
        f"per day = ${sig(per_request)} x {num(per_day)} = ${sig(answer)}",
        answer_line(answer, "USD per day"),
    ]
    params = {"input_tokens": input_tokens, "output_tokens": output_tokens, "input_usd_per_mtok": input_price,
              "output_usd_per_mtok": output_price, "requests_per_day": per_day}
    if cached:
        params.update(cached_tokens=cached, cached_usd_per_mtok=cached_price)
    return Draft(question, answer, "USD per day", "\n".join(steps), params)


GENERATORS = (
    Generator("prompt_tokens", "tokenization", "A chat's prompt tokens from word counts and template overhead",
              draw_prompt_tokens),
    Generator("request_cost", "tokenization", "The daily bill for requests at per-1M-token prices", draw_request_cost),
)
