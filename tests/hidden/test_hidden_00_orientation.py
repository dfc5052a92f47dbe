"""Known-wrong answers to notebook 00, each with the rule it breaks (run by test_wrong_answers.py)."""
from __future__ import annotations

import numpy as np


def _argmax_one_hot(logits, temperature=1.0):  # T = 0 puts all mass on the first top logit only
    z = np.asarray(logits, dtype=np.float64)
    if temperature < 0:
        raise ValueError("negative")
    if temperature == 0:
        return np.eye(len(z))[int(np.argmax(z))]
    w = np.exp((z - z.max()) / temperature)
    return w / w.sum()


def _no_max_shift(logits, temperature=1.0):  # overflows on large logits or small T
    if temperature < 0:
        raise ValueError("negative")
    z = np.asarray(logits, dtype=np.float64) / max(temperature, 1e-300)
    with np.errstate(all="ignore"):
        return np.exp(z) / np.exp(z).sum()


def _accepts_negative_t(logits, temperature=1.0):
    z = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        w = (z == z.max()).astype(float)
        return w / w.sum()
    w = np.exp((z - z.max()) / abs(temperature))
    return w / w.sum()


def _plain_division(logits, temperature=1.0):  # ignores the temperature entirely
    z = np.asarray(logits, dtype=np.float64)
    w = np.exp(z - z.max())
    return w / w.sum()


def _multiplies_by_t(logits, temperature=1.0):  # z * T instead of z / T
    z = np.asarray(logits, dtype=np.float64)
    if temperature < 0:
        raise ValueError("negative")
    if temperature == 0:
        w = (z == z.max()).astype(float)
        return w / w.sum()
    w = np.exp((z - z.max()) * temperature)
    return w / w.sum()


def _t0_not_special(logits, temperature=1.0):  # divides by T = 0: NaN at the top logit
    z = np.asarray(logits, dtype=np.float64)
    if temperature < 0:
        raise ValueError("negative")
    with np.errstate(all="ignore"):
        w = np.exp((z - z.max()) / temperature)
        return w / w.sum()


def _cost(messages, completion_tokens, cached_messages, prices, *, count, cached_from_end=False,
          per=1_000_000, check_ints=True, check_range=True, overhead_per_message=True):
    """A configurable conversation bill; each wrong answer below turns one rule off."""
    if check_ints and (not isinstance(completion_tokens, int) or completion_tokens < 0):
        raise ValueError("bad completion count")
    if not check_ints and completion_tokens < 0:
        raise ValueError("negative")
    if check_range and (not isinstance(cached_messages, int) or not 0 <= cached_messages <= len(messages)):
        raise ValueError("bad cached_messages")
    counts = [count(m["content"]) + (4 if overhead_per_message else 0) for m in messages]
    prompt = sum(counts) + (0 if overhead_per_message else 4)
    cached = sum(counts[len(counts) - cached_messages:]) if cached_from_end and cached_messages else sum(counts[:cached_messages])
    usd = (cached * prices["cached_usd_per_mtok"] + (prompt - cached) * prices["input_usd_per_mtok"]
           + completion_tokens * prices["output_usd_per_mtok"]) / per
    return {"prompt_tokens": prompt, "cached_tokens": cached, "usd": usd}


def _tokens(text):
    import tiktoken

    import course_lib.tokenization  # noqa: F401

    return len(tiktoken.get_encoding("cl100k_base").encode(text, disallowed_special=()))


def _wrong_cost(**rules):
    def conversation_cost(messages, completion_tokens, *, cached_messages=0, **prices):
        return _cost(messages, completion_tokens, cached_messages, prices, **{"count": _tokens, **rules})
    return conversation_cost


def _strict_special_tokens(text):  # tiktoken's default: raises on "<|endoftext|>" in user text
    import tiktoken

    import course_lib.tokenization  # noqa: F401

    return len(tiktoken.get_encoding("cl100k_base").encode(text))


def _ignores_cache_price(messages, completion_tokens, *, cached_messages=0, input_usd_per_mtok,
                         cached_usd_per_mtok, output_usd_per_mtok):
    bill = _wrong_cost()(messages, completion_tokens, cached_messages=cached_messages,
                         input_usd_per_mtok=input_usd_per_mtok, cached_usd_per_mtok=input_usd_per_mtok,
                         output_usd_per_mtok=output_usd_per_mtok)
    return bill


def _cost_accepts_floats(*args, **kwargs):
    return _wrong_cost(check_ints=False)(*args, **kwargs)


def _cost_per_thousand(*args, **kwargs):
    return _wrong_cost(per=1_000)(*args, **kwargs)


def _counts_words(*args, **kwargs):
    return _wrong_cost(count=lambda text: len(text.split()))(*args, **kwargs)


def _counts_characters(*args, **kwargs):
    return _wrong_cost(count=len)(*args, **kwargs)


def _overhead_once(*args, **kwargs):
    return _wrong_cost(overhead_per_message=False)(*args, **kwargs)


def _no_overhead(*args, **kwargs):
    def bill(messages, completion_tokens, *, cached_messages=0, **prices):
        return _cost(messages, completion_tokens, cached_messages, prices,
                     count=lambda text: _tokens(text) - 4)  # net effect: content tokens only
    return bill(*args, **kwargs)


def _caches_the_end(*args, **kwargs):
    return _wrong_cost(cached_from_end=True)(*args, **kwargs)


def _no_range_check(*args, **kwargs):
    return _wrong_cost(check_range=False)(*args, **kwargs)


def _raises_on_special_text(*args, **kwargs):
    return _wrong_cost(count=_strict_special_tokens)(*args, **kwargs)


def _text_answer(logits, temperature=1.0):
    return "0.77, 0.18, 0.04"


def _uniform(logits, temperature=1.0):
    return [1.0 / len(logits)] * len(logits)


# (exercise, replaced names, fragment of the hidden check it breaks): see test_wrong_answers.py
WRONG_ANSWERS = [
    ("softmax_with_temperature", {"softmax_with_temperature": _argmax_one_hot}, "tie for the top"),
    ("softmax_with_temperature", {"softmax_with_temperature": _no_max_shift}, "overflow"),
    ("softmax_with_temperature", {"softmax_with_temperature": _accepts_negative_t}, "negative temperature"),
    ("softmax_with_temperature", {"softmax_with_temperature": _plain_division}, "worked example"),
    ("softmax_with_temperature", {"softmax_with_temperature": _uniform}, "worked example"),
    ("softmax_with_temperature", {"softmax_with_temperature": _text_answer}, "worked example"),
    ("softmax_with_temperature", {"softmax_with_temperature": _multiplies_by_t}, "worked example"),
    ("softmax_with_temperature", {"softmax_with_temperature": _t0_not_special}, "T = 0 with a tie"),
    ("conversation_cost", {"conversation_cost": _cost_accepts_floats}, "fractional completion"),
    ("conversation_cost", {"conversation_cost": _cost_per_thousand}, "per million"),
    ("conversation_cost", {"conversation_cost": _counts_words}, "cl100k_base tokens"),
    ("conversation_cost", {"conversation_cost": _counts_characters}, "cl100k_base tokens"),
    ("conversation_cost", {"conversation_cost": _overhead_once}, "overhead is paid for every message"),
    ("conversation_cost", {"conversation_cost": _no_overhead}, "per-message overhead"),
    ("conversation_cost", {"conversation_cost": _caches_the_end}, "first cached_messages"),
    ("conversation_cost", {"conversation_cost": _ignores_cache_price}, "cached prefix at the cached price"),
    ("conversation_cost", {"conversation_cost": _no_range_check}, "cached_messages out of range"),
    ("conversation_cost", {"conversation_cost": _raises_on_special_text}, "special-token text"),
]
