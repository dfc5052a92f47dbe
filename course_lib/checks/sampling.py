"""Visible checks for notebook 04 (sampling and generation control)."""
from __future__ import annotations

import math

import torch

from course_lib.checks.report import expect_close, expect_equal, expect_raises

INF = float("inf")


def _kept(t) -> list[bool]:
    return [not math.isinf(x) for x in torch.as_tensor(t).flatten().tolist()]


def apply_temperature(fn) -> None:
    z = torch.tensor([2.0, 1.0, 0.0])
    expect_close("T = 0.5 divides the logits", fn(z, 0.5), [4.0, 2.0, 0.0])
    expect_close("T = 0.7 gives the worked-example probabilities", torch.softmax(fn(z, 0.7), -1),
                 [0.7712, 0.1848, 0.0440], atol=5e-4)
    expect_equal("T = 0 keeps only the argmax", _kept(fn(torch.tensor([1.0, 3.0, 2.0]), 0.0)), [False, True, False],
                 hint="set every other logit to -inf")
    expect_equal("T = 0 with a tie keeps the first", _kept(fn(torch.tensor([3.0, 1.0, 3.0]), 0.0)),
                 [True, False, False], hint="torch.argmax returns the first maximal index")
    expect_equal("batched (B, V) rows", _kept(fn(torch.tensor([[0.0, 1.0], [5.0, 4.0]]), 0.0)),
                 [False, True, True, False], hint="work along the last dimension")
    expect_raises("negative temperature", lambda: fn(z, -1.0), ValueError)


def top_k_filter(fn) -> None:
    z = torch.tensor([1.0, 4.0, 3.0, 2.0])
    expect_equal("k = 2 keeps the two largest", _kept(fn(z, 2)), [False, True, True, False])
    expect_equal("a tie with the k-th largest is kept", _kept(fn(torch.tensor([3.0, 1.0, 1.0, 0.0]), 2)),
                 [True, True, True, False], hint="keep every logit >= the k-th largest value")
    expect_equal("k larger than the vocabulary keeps all", _kept(fn(z, 10)), [True] * 4)
    expect_equal("k = 0 keeps all (filter off)", _kept(fn(z, 0)), [True] * 4)
    expect_close("kept logits are unchanged", fn(z, 3)[1:], z[1:])
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
    expect_raises("p = 0 is rejected", lambda: fn(z, 0.0), ValueError)
    expect_raises("p > 1 is rejected", lambda: fn(z, 1.5), ValueError)


def min_p_filter(fn) -> None:
    z = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    expect_equal("min_p = 0.25 keeps p >= 0.125", _kept(fn(z, 0.25)), [True, True, True, False])
    expect_equal("min_p = 0 keeps all", _kept(fn(z, 0.0)), [True] * 4)
    expect_equal("min_p = 1 keeps the top", _kept(fn(z, 1.0)), [True, False, False, False])
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
    expect_raises("repetition_penalty <= 0 is rejected", lambda: fn(z, ids, repetition_penalty=0.0), ValueError)


def stop_at(fn) -> None:
    expect_equal("a stop split over three pieces", tuple(fn(["The answer is 4.", "\nUs", "er: more"], ["\nUser:"])),
                 ("The answer is 4.", True), hint="search the accumulated text, not each piece")
    expect_equal("no stop: all text", tuple(fn(["a", "b"], ["STOP"])), ("ab", False))
    expect_equal("text after the stop in the same piece is dropped", tuple(fn(["4.END and more"], ["END"])),
                 ("4.", True))
    expect_equal("the earliest of several stops", tuple(fn(["x--y==z"], ["==", "--"])), ("x", True))
    expect_equal("pieces after the stop are never read", tuple(fn(["ab", "ST", "OP", "cd", "STOP"], ["STOP"])),
                 ("ab", True))


def sample_token(fn) -> None:
    probs = torch.tensor([0.1, 0.6, 0.3])
    u = torch.rand((), generator=torch.Generator().manual_seed(0), dtype=torch.float64).item()
    expect_equal("seed 0: u = 0.9701 falls in token 2's slice [0.7, 1.0)", fn(probs, torch.Generator().manual_seed(0)),
                 0 if u < 0.1 else 1 if u < 0.7 else 2,
                 hint="first index whose cumulative probability exceeds u")
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    expect_equal("same seed, same sequence", [fn(probs, g1) for _ in range(10)], [fn(probs, g2) for _ in range(10)])
    g = torch.Generator().manual_seed(1)
    draws = [fn(torch.tensor([0.0, 0.5, 0.0, 0.5]), g) for _ in range(200)]
    expect_equal("zero-probability tokens never come up", sorted(set(draws)), [1, 3])
    expect_equal("returns a Python int", type(fn(probs, g)).__name__, "int")
