"""Hidden tests for 00_orientation, run in the grader's process (see course_lib/pipeline/hidden.py).

Expectations are computed here in plain Python and, for token counts, with tiktoken itself
(the production tokenizer); the learner's functions are reached only through
``learner.function``, which sends and returns plain data.
"""
import math
import random

REFERENCES = ("course_lib.orientation.softmax_with_temperature", "course_lib.orientation.conversation_cost")
NEG_INF = float("-inf")


def _softmax(z, T):
    top = max(x for x in z if x != NEG_INF)
    if T == 0:
        weights = [1.0 if x == top else 0.0 for x in z]
    else:
        weights = [0.0 if x == NEG_INF else math.exp((x - top) / T) for x in z]
    total = sum(weights)
    return [w / total for w in weights]


def softmax_with_temperature(learner, check):
    f = learner.function("softmax_with_temperature")
    rng = random.Random(20261129)
    cases = [([2.0, 1.0, 0.0], 0.7, "the worked example"),
             ([5.0, 5.0, 1.0], 0.0, "T = 0 with a tie for the top: the mass is shared equally"),
             ([7.0], 0.0, "T = 0 with a single logit"),
             ([3.0, -1.0, 3.0, 0.5], 1e-12, "a tiny T does not overflow (subtract the largest logit)"),
             ([800.0, 790.0, -800.0], 0.5, "large logits do not overflow"),
             ([-1000.0, -1001.0], 2.0, "very negative logits do not underflow to 0/0"),
             ([0.0, NEG_INF, 1.0], 1.3, "a -inf logit gets probability exactly 0"),
             ([1.0, 2.0, 3.0], 1e6, "a huge T gives a near-uniform distribution")]
    cases += [([rng.uniform(-40, 40) for _ in range(rng.randint(1, 12))],
               rng.choice([0.05, 0.5, 1.0, 3.0, 25.0]), "random logits") for _ in range(20)]
    for z, T, rule in cases:
        check.close(f"{rule} ({len(z)} logits, T={T:g})", lambda: f(list(z), T), _softmax(z, T), atol=1e-6)
    check.that("the result is a float array summing to 1", lambda: f([0.5, 0.25], 1.0),
               lambda p: abs(sum(p) - 1) < 1e-9 and all(isinstance(x, float) for x in list(p)),
               "return probabilities (floats) that sum to 1")
    check.raises("a negative temperature raises ValueError", lambda: f([1.0, 2.0], -0.5), "ValueError")


def _cl100k():
    import tiktoken

    import course_lib.tokenization  # noqa: F401  (tiktoken's rank files, offline; not an answer)

    return tiktoken.get_encoding("cl100k_base")


OVERHEAD = 4  # tokens per message, as the exercise states


def conversation_cost(learner, check):
    f = learner.function("conversation_cost")
    enc = _cl100k()

    def count(message):
        return len(enc.encode(message["content"], disallowed_special=())) + OVERHEAD

    chat = [{"role": "system", "content": "You answer in one short sentence."},
            {"role": "user", "content": "Where is the Eiffel Tower?"},
            {"role": "assistant", "content": "In Paris, France."},
            {"role": "user", "content": "How tall is it, in metres? Кто построил?"},
            {"role": "assistant", "content": "About 330 m; Gustave Eiffel's company built it."},
            {"role": "user", "content": "Thanks! 🙂"}]
    prices = dict(input_usd_per_mtok=2.5, cached_usd_per_mtok=1.25, output_usd_per_mtok=10.0)
    counts = [count(m) for m in chat]
    check.equal("a single message costs its cl100k_base tokens plus the 4-token per-message overhead",
                lambda: f(chat[1:2], 0, **prices)["prompt_tokens"], counts[1])
    check.equal("the per-message overhead is paid for every message of the conversation",
                lambda: f(chat, 0, **prices)["prompt_tokens"], sum(counts))
    check.equal("an empty message still pays the per-message overhead",
                lambda: f([{"role": "user", "content": ""}], 0, **prices)["prompt_tokens"], OVERHEAD)
    special = [{"role": "user", "content": "Ignore <|endoftext|> and <|fim_prefix|>, please."}]
    check.equal("special-token text in a message is counted as ordinary text",
                lambda: f(special, 0, **prices)["prompt_tokens"], count(special[0]))
    for k in (0, 1, 3, 6):
        cached = sum(counts[:k])
        check.equal(f"the cached prefix is the first cached_messages messages (cached_messages={k})",
                    lambda: f(chat, 7, cached_messages=k, **prices)["cached_tokens"], cached)
        usd = (cached * 1.25 + (sum(counts) - cached) * 2.5 + 7 * 10.0) / 1e6
        check.close(f"the bill: cached prefix at the cached price, the rest at the input price, output "
                    f"at the output price, per million (cached_messages={k})",
                    lambda: f(chat, 7, cached_messages=k, **prices)["usd"], usd, atol=1e-12, rtol=1e-9)
    check.close("prices are per million tokens (a large completion)",
                lambda: f(chat[:1], 1_000_000, input_usd_per_mtok=0.0, cached_usd_per_mtok=0.0,
                          output_usd_per_mtok=12.0)["usd"], 12.0, atol=1e-9)
    for bad, rule in ((2.5, "a fractional"), (-3, "a negative"), ("12", "a text"), (1e3, "a float")):
        check.raises(f"{rule} completion token count raises ValueError",
                     lambda: f(chat, bad, **prices), "ValueError")
    for bad in (7, -1, 1.0):
        check.raises(f"cached_messages out of range or not an int ({bad!r} for 6 messages) raises ValueError",
                     lambda: f(chat, 0, cached_messages=bad, **prices), "ValueError")
