"""Visible checks for notebook 04 (sampling and generation control).

The generate loop is compared with the course's own decode loop (``course_lib.generation.generate``:
the serving engine); the processors and the sampler have hand-worked cases and the seeded
uniform stream of ``torch.Generator``.
"""
from __future__ import annotations

import math

import torch

from course_lib.checks.report import expect_close, expect_equal, expect_raises

INF = float("inf")


def _kept(t) -> list[bool]:
    return [not math.isinf(x) for x in torch.as_tensor(t).flatten().tolist()]


def _leaves_input_alone(fn, logits: torch.Tensor, *args, **kwargs) -> bool:
    """True when fn returns a new tensor and the logits it was given are unchanged."""
    given = logits.clone()
    result = fn(given, *args, **kwargs)
    return bool(torch.equal(given, logits)) and result is not given


def apply_temperature(fn) -> None:
    z = torch.tensor([2.0, 1.0, 0.0])
    expect_close("T = 0.5 divides the logits", fn(z, 0.5), [4.0, 2.0, 0.0])
    weights = [math.exp(x / 0.7) for x in z.tolist()]
    expect_close("T = 0.7 gives the worked-example probabilities", torch.softmax(fn(z, 0.7), -1),
                 [w / sum(weights) for w in weights], atol=1e-5, hint="divide the logits by T before the softmax")
    expect_equal("T = 0 keeps only the argmax", _kept(fn(torch.tensor([1.0, 3.0, 2.0]), 0.0)), [False, True, False],
                 hint="set every other logit to -inf")
    expect_equal("T = 0 with a tie keeps the first", _kept(fn(torch.tensor([3.0, 1.0, 3.0]), 0.0)),
                 [True, False, False], hint="torch.argmax returns the first maximal index")
    expect_equal("batched (B, V) rows", _kept(fn(torch.tensor([[0.0, 1.0], [5.0, 4.0]]), 0.0)),
                 [False, True, True, False], hint="work along the last dimension")
    expect_close("a -inf logit stays -inf (T = 0.5)", fn(torch.tensor([1.0, -INF]), 0.5), [2.0, -INF])
    for T in (0.7, 0.0):
        expect_equal(f"returns a new tensor, the input unchanged (T = {T:g})",
                     _leaves_input_alone(fn, torch.tensor([[1.0, 3.0, 2.0], [0.5, -1.0, 4.0]]), T), True,
                     hint="build a new tensor; do not modify the logits you were given")
    expect_raises("negative temperature", lambda: fn(z, -1.0), ValueError)


def top_k_filter(fn) -> None:
    z = torch.tensor([1.0, 4.0, 3.0, 2.0])
    expect_equal("k = 2 keeps the two largest", _kept(fn(z, 2)), [False, True, True, False])
    expect_equal("a tie with the k-th largest is kept", _kept(fn(torch.tensor([3.0, 1.0, 1.0, 0.0]), 2)),
                 [True, True, True, False], hint="keep every logit >= the k-th largest value")
    expect_equal("k larger than the vocabulary keeps all", _kept(fn(z, 10)), [True] * 4)
    expect_equal("k = 0 keeps all (filter off)", _kept(fn(z, 0)), [True] * 4)
    expect_close("kept logits are unchanged", fn(z, 3)[1:], z[1:])
    rows = torch.tensor([[3.0, 2.0, 1.0, 0.0], [10.0, 9.0, 8.0, 7.0]])
    expect_equal("each row of a (B, V) batch keeps its own k largest (k=2)", _kept(fn(rows, 2)),
                 [True, True, False, False] * 2, hint="take the k-th largest per row: topk(..., dim=-1)")
    expect_raises("negative k", lambda: fn(z, -1), ValueError)


def top_p_filter(fn) -> None:
    z = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    expect_equal("p = 0.5: the top token alone reaches it", _kept(fn(z, 0.5)), [True, False, False, False])
    expect_equal("p = 0.6: 0.5 < 0.6, so the next token joins", _kept(fn(z, 0.6)), [True, True, False, False],
                 hint="keep a token while the mass ranked above it is still below p")
    expect_equal("p = 0.9", _kept(fn(z, 0.9)), [True, True, True, False])
    expect_equal("p = 1.0 keeps everything", _kept(fn(z, 1.0)), [True] * 4)
    tie = torch.log(torch.tensor([0.4, 0.2, 0.2, 0.2]))
    expect_equal("ties with the last kept token are kept", _kept(fn(tie, 0.5)), [True, True, True, True])
    expect_equal("order of the vocabulary does not matter", _kept(fn(z.flip(0), 0.6)), [False, False, True, True])
    expect_close("kept logits are returned unchanged (p=0.6)", fn(z, 0.6)[:2], z[:2],
                 hint="return the original logits at the kept positions, not probabilities or log-probabilities")
    rows = torch.stack([z, z + 5.0])  # the same probabilities in both rows, different logits
    expect_equal("each row of a (B, V) batch gets its own nucleus (p=0.6)", _kept(fn(rows, 0.6)),
                 [True, True, False, False] * 2, hint="take the softmax and the cumulative sums along the last dimension")
    expect_equal("a -inf logit stays -inf (p=0.9)", _kept(fn(torch.tensor([1.0, -INF, 0.5]), 0.9)),
                 [True, False, True])
    expect_raises("p = 0 is rejected", lambda: fn(z, 0.0), ValueError)
    expect_raises("p > 1 is rejected", lambda: fn(z, 1.5), ValueError)


def min_p_filter(fn) -> None:
    z = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    expect_equal("min_p = 0.25 keeps p >= 0.125", _kept(fn(z, 0.25)), [True, True, True, False])
    expect_equal("min_p = 0 keeps all", _kept(fn(z, 0.0)), [True] * 4)
    expect_equal("min_p = 1 keeps the top", _kept(fn(z, 1.0)), [True, False, False, False])
    rows = torch.log(torch.tensor([[0.9, 0.08, 0.01, 0.01], [0.4, 0.35, 0.06, 0.19]]))
    expect_equal("each row of a (B, V) batch is cut against its own top probability (min_p=0.1)",
                 _kept(fn(rows, 0.1)), [True, False, False, False, True, True, True, True],
                 hint="the largest probability per row: amax(dim=-1, keepdim=True)")
    expect_close("kept logits are returned unchanged (min_p=0.25)", fn(z, 0.25)[:3], z[:3])
    expect_raises("min_p > 1 is rejected", lambda: fn(z, 1.5), ValueError)


def apply_penalties(fn) -> None:
    z = torch.tensor([2.0, -1.0, 0.5, 1.0])
    ids = [0, 0, 1]
    expect_close("frequency 0.5: minus count x 0.5", fn(z, ids, frequency_penalty=0.5), [1.0, -1.5, 0.5, 1.0])
    expect_close("presence 0.4: minus 0.4 once", fn(z, ids, presence_penalty=0.4), [1.6, -1.4, 0.5, 1.0])
    expect_close("repetition 2.0: divide positive, multiply negative", fn(z, ids, repetition_penalty=2.0),
                 [1.0, -2.0, 0.5, 1.0], hint="a repeated negative logit must get more negative")
    expect_close("no generated tokens: unchanged", fn(z, [], frequency_penalty=1.0, presence_penalty=1.0,
                                                       repetition_penalty=1.5), z)
    expect_close("all three, repetition first", fn(z, ids, frequency_penalty=0.5, presence_penalty=0.4,
                                                    repetition_penalty=2.0), [-0.4, -2.9, 0.5, 1.0])
    expect_equal("returns a new tensor, the input unchanged", _leaves_input_alone(
        fn, z, ids, frequency_penalty=0.5, presence_penalty=0.4, repetition_penalty=2.0), True,
        hint="build a new tensor; do not modify the logits you were given")
    expect_raises("repetition_penalty <= 0 is rejected", lambda: fn(z, ids, repetition_penalty=0.0), ValueError)


def _stream(pieces, consumed):
    """The pieces as a one-pass generator, as a model would yield them, counting what was read."""
    for piece in pieces:
        consumed.append(piece)
        yield piece


def stop_at(fn) -> None:
    expect_equal("a stop split over three pieces", tuple(fn(["The answer is 4.", "\nUs", "er: more"], ["\nUser:"])),
                 ("The answer is 4.", True), hint="search the accumulated text, not each piece")
    expect_equal("no stop: all text", tuple(fn(["a", "b"], ["STOP"])), ("ab", False))
    expect_equal("text after the stop in the same piece is dropped", tuple(fn(["4.END and more"], ["END"])),
                 ("4.", True))
    expect_equal("the earliest of several stops", tuple(fn(["x--y==z"], ["==", "--"])), ("x", True))
    expect_equal("pieces after the stop are never read", tuple(fn(["ab", "ST", "OP", "cd", "STOP"], ["STOP"])),
                 ("ab", True))
    expect_equal("the first stop to complete ends the stream, even one that starts later",
                 tuple(fn(["ab", "c", "d!"], ["abcd", "c"])), ("ab", True),
                 hint="check after every piece; 'c' is complete before 'abcd' is")
    consumed: list[str] = []
    try:
        got = tuple(fn(_stream(["ab", "ST", "OP", "cd", "STOP"], consumed), ["STOP"]))
    except TypeError as exc:
        got = f"TypeError: {exc}"
    expect_equal("pieces given as a generator (iterated once, no len or indexing)", got, ("ab", True),
                 hint="use `for piece in pieces:`")
    expect_equal("reads no piece after the one that completes the stop", len(consumed), 3,
                 hint="return as soon as the stop string appears")


def _uniforms(seed: int, n: int) -> list[float]:
    """The first n float64 uniforms of a generator seeded with `seed`."""
    twin = torch.Generator().manual_seed(seed)
    return [torch.rand((), generator=twin, dtype=torch.float64).item() for _ in range(n)]


def _inverse_cdf(weights: list[float], u: float) -> int:
    cumulative = [sum(weights[:i + 1]) for i in range(len(weights))]
    return next(i for i, c in enumerate(cumulative) if c > u * cumulative[-1])


def sample_token(fn) -> None:
    probs = torch.tensor([0.1, 0.6, 0.3])
    u = _uniforms(0, 1)[0]
    expect_equal(f"seed 0: u = {u:.4f} picks the first token whose cumulative sum exceeds it",
                 fn(probs, torch.Generator().manual_seed(0)), _inverse_cdf(probs.tolist(), u),
                 hint="first index whose cumulative probability exceeds u")
    weights = [0.3, 1.8, 0.9]  # the same distribution, not summing to 1
    expect_equal(f"weights summing to {sum(weights):g}: u = {u:.4f} is scaled by the total",
                 fn(torch.tensor(weights, dtype=torch.float64), torch.Generator().manual_seed(0)),
                 _inverse_cdf(weights, u), hint="compare the cumulative sums with u x total, not with u")
    seed, spread = 3, [0.05, 0.25, 0.1, 0.35, 0.25]
    generator = torch.Generator().manual_seed(seed)
    expect_equal(f"20 draws with seed {seed} follow the one-uniform-per-call rule",
                 [fn(torch.tensor(spread, dtype=torch.float64), generator) for _ in range(20)],
                 [_inverse_cdf(spread, u) for u in _uniforms(seed, 20)],
                 hint="one float64 uniform per call, then inverse-CDF; torch.multinomial consumes the stream differently")
    generator = torch.Generator().manual_seed(seed)
    fn(probs, generator)
    expect_close("one call consumes exactly one uniform from the generator",
                 torch.rand((), generator=generator, dtype=torch.float64).item(), _uniforms(seed, 2)[1],
                 atol=0.0, rtol=0.0, hint="draw once per call, and from the generator you were given")
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    expect_equal("same seed, same sequence", [fn(probs, g1) for _ in range(10)], [fn(probs, g2) for _ in range(10)])
    g = torch.Generator().manual_seed(1)
    draws = [fn(torch.tensor([0.0, 0.5, 0.0, 0.5]), g) for _ in range(200)]
    expect_equal("zero-probability tokens never come up", sorted(set(draws)), [1, 3])
    expect_equal("returns a Python int", type(fn(probs, g)).__name__, "int")


# -- the generate loop --------------------------------------------------------------------------
def _reference_loop(model, tokenizer, prompt_ids, max_new_tokens, temperature=1.0, top_k=0, top_p=1.0, seed=0,
                    stop=()):
    """The course's own decode loop under the exercise's knobs: ``course_lib.generation.generate``,
    which runs the serving engine (KV cache, batched sampler, one float64 uniform per sampled
    token). Its (token ids, text, finish reason), the end token in the ids but not in the text."""
    from course_lib.generation.generate import generate
    from course_lib.sampling import SamplingParams

    end_id = tokenizer.encode("<|end|>", allowed_special="all")[0]
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=max_new_tokens,
                            stop=tuple(stop))
    result = generate(model, tokenizer, list(prompt_ids), params, generator=torch.Generator().manual_seed(seed),
                      eos_ids=[end_id])
    return list(result.token_ids), result.text, result.finish_reason


def generate_text(fn) -> None:
    from course_lib.model import load_model, load_tokenizer
    from course_lib.tokenization.chat_template import render_chat

    model, tokenizer = load_model("tinychat", device="cpu"), load_tokenizer("tinychat")
    cases = [
        ("greedy until the end token: finish reason 'stop', <|end|> in the ids but not the text",
         "What is 2 + 2?", dict(max_new_tokens=16, temperature=0),
         "take the argmax each step; compare the token with <|end|>'s ID; decode the ids before it"),
        ("greedy with a cap of 4 tokens: finish reason 'length'", "What is 2 + 3?", dict(max_new_tokens=4, temperature=0),
         "stop after max_new_tokens tokens and report 'length'"),
        ("a stop string 'is 5' cuts the text before it: finish reason 'stop'", "What is 2 + 3?",
         dict(max_new_tokens=16, temperature=0, stop=("is 5",)), "decode all new ids each step and look for the stops"),
        ("seeded sampling, T=2, top-p 0.5, seed 1: temperature first, then top-p", "What is 7 + 7?",
         dict(max_new_tokens=8, temperature=2.0, top_p=0.5, seed=1),
         "apply_temperature, then top_k_filter, then top_p_filter, then softmax"),
        ("seeded sampling, T=1, seed 0: one uniform per step, by your sample_token", "What is 2 + 2?",
         dict(max_new_tokens=8, temperature=1.0, seed=0),
         "sample with your sample_token (one float64 uniform per step), not torch.multinomial"),
        ("seeded sampling, T=1.5, top-k 20, seed 1: one generator for the whole call", "Tell me a story.",
         dict(max_new_tokens=8, temperature=1.5, top_k=20, seed=1),
         "make the generator once per call, before the loop, not once per step"),
    ]
    for label, question, knobs, advice in cases:
        prompt = tokenizer.encode(render_chat([{"role": "user", "content": question}]), allowed_special="all")
        got = fn(model, list(prompt), tokenizer=tokenizer, **knobs)
        try:
            got = ([int(t) for t in got[0]], got[1], got[2])
        except Exception:  # a wrong kind of value: expect_equal shows what came back
            pass
        expect_equal(label, got, _reference_loop(model, tokenizer, prompt, **knobs), hint=advice)


# Progressive hints, gentlest first; the last one all but gives the method (see checks/hints.py).
HINTS = {
    "apply_temperature": [
        "Handle the three cases in order: a negative temperature, T == 0, then T > 0.",
        "For T > 0 a plain division is all it takes; dividing -inf by a positive number keeps -inf.",
        "For T == 0: `top = logits.argmax(dim=-1, keepdim=True)`, then start from a tensor full of -inf "
        "and put `logits.gather(-1, top)` back at `top` with `scatter`.",
    ],
    "top_k_filter": [
        "Find the k-th largest value of each row; everything below it goes to -inf.",
        "`torch.topk(logits, k, dim=-1).values[..., -1:]` is the k-th largest per row, shaped to broadcast.",
        "Deal with k < 0, k == 0 and k >= V first; then `logits.masked_fill(logits < kth, float('-inf'))` "
        "keeps ties with the k-th.",
    ],
    "top_p_filter": [
        "Work on probabilities (a softmax along the last dimension), but return the original logits.",
        "Sort the probabilities in descending order; the mass ranked above a token is the cumulative sum "
        "minus its own probability.",
        "Mark kept = (mass_before < p); the smallest kept probability per row is the cut-off; every token "
        "whose probability is below it becomes -inf (that keeps ties).",
    ],
    "min_p_filter": [
        "The bound is relative: min_p times the largest probability of the same row.",
        "Compute the softmax along the last dimension and `amax(dim=-1, keepdim=True)` of it.",
        "`logits.masked_fill(probs < min_p * top, float('-inf'))` after checking 0 <= min_p <= 1.",
    ],
    "apply_penalties": [
        "Count how often each token id occurs in `generated_ids` (a tensor of counts of size V helps).",
        "The repetition penalty has two branches: divide where the logit is positive, multiply where it is "
        "negative, and only for tokens with a count above zero.",
        "`torch.where(seen, penalised, logits)`, then subtract `counts * frequency_penalty` and "
        "`seen * presence_penalty`; never write into the tensor you were given.",
    ],
    "stop_at": [
        "Keep one growing string; after adding each piece, search the whole string, not the piece.",
        "Iterate with `for piece in pieces:` and return from inside the loop as soon as a stop appears.",
        "`starts = [text.find(s) for s in stops if s in text]`; if any, return `text[:min(starts)], True`.",
    ],
    "sample_token": [
        "Inverse-CDF sampling: one uniform number u, the cumulative sums, the first index past u x total.",
        "The uniform is `torch.rand((), generator=generator, dtype=torch.float64).item()`: exactly one per call.",
        "`cdf = probs.double().cumsum(0)`; `torch.searchsorted(cdf, u * cdf[-1].item(), right=True)` is the "
        "index; return it as `int(...)`.",
    ],
    "generate_text": [
        "Keep two lists: all ids (prompt plus new, what the model reads) and the new ids (what you return).",
        "Each step: logits of the last position, then apply_temperature, top_k_filter, top_p_filter, "
        "softmax and sample_token, all with the one generator you made before the loop.",
        "After appending a token: if it is <|end|>, return (ids, decode(ids[:-1]), 'stop'); else "
        "`stop_at([tokenizer.decode(new_ids)], stop)`; if stopped, return 'stop'; after the loop, 'length'.",
    ],
}
