"""Known-wrong answers to notebook 03 fail its hidden tests, each on the rule it breaks."""
from __future__ import annotations

import math

import torch

from course_lib.model import decode_step, prefill

from tests.hidden.conftest import failures, verdict

A = "03_kv_cache"


# -- plan_kv_capacity -------------------------------------------------------------------------
def _plan(geometry, *, accelerator_bytes, weights_bytes, reserve_fraction, seq_len, seq_lens, block_size,
          dtype_bytes=2, factor=2, heads="n_kv_heads", reserve_of="memory", subtract_weights=True,
          subtract_reserve=True, clamp=True, round_up=False, blocks=lambda n, b: -(-n // b), waste_per_block=False,
          check_fraction=True, check_block=True, check_lengths=True, allow_zero_length=False, as_float=False):
    """The right plan, with switches for the mistakes below."""
    sizes = [geometry["n_layers"], geometry["n_kv_heads"], geometry["head_dim"], seq_len]
    if any(n < 1 for n in sizes) or (check_block and block_size < 1):
        raise ValueError("sizes")
    if check_fraction and not 0 <= reserve_fraction < 1:
        raise ValueError("reserve_fraction")
    lengths = list(seq_lens)
    if check_lengths and any(n > seq_len or n < (0 if allow_zero_length else 1) for n in lengths):
        raise ValueError("length")
    per_token = factor * geometry["n_layers"] * geometry[heads] * geometry["head_dim"] * dtype_bytes
    per_token = float(per_token) if as_float else int(per_token)
    base = accelerator_bytes if reserve_of == "memory" else accelerator_bytes - weights_bytes
    reserve = int(base * reserve_fraction)
    cache = accelerator_bytes - (weights_bytes if subtract_weights else 0) - (reserve if subtract_reserve else 0)
    cache = max(0, cache) if clamp else cache
    per_sequence = per_token * seq_len
    count = -(-cache // per_sequence) if round_up else cache // per_sequence
    n_blocks = sum(blocks(n, block_size) for n in lengths)
    waste = (sum(1 for n in lengths if n % block_size) if waste_per_block
             else n_blocks * block_size - sum(lengths))
    return {"kv_bytes_per_token": per_token, "reserve_bytes": reserve, "cache_bytes": cache,
            "max_sequences": count, "paged_blocks": n_blocks, "paged_waste_tokens": waste,
            "contiguous_waste_tokens": len(lengths) * seq_len - sum(lengths)}


def _plan_with(name, **mistake):
    def wrong(geometry, **kwargs):
        return _plan(geometry, **kwargs, **mistake)
    wrong.__name__ = name
    return wrong


_no_factor_two = _plan_with("_no_factor_two", factor=1)                    # K only, or V only
_query_heads = _plan_with("_query_heads", heads="n_heads")                 # caches every query head
_reserve_of_free = _plan_with("_reserve_of_free", reserve_of="free")       # reserve taken from what weights leave
_reserve_ignored = _plan_with("_reserve_ignored", subtract_reserve=False)
_weights_ignored = _plan_with("_weights_ignored", subtract_weights=False)
_negative_room = _plan_with("_negative_room", clamp=False)                 # no max(0, ...)
_sequences_round_up = _plan_with("_sequences_round_up", round_up=True)
_floor_blocks = _plan_with("_floor_blocks", blocks=lambda n, b: n // b)     # drops the partial last block
_always_extra_block = _plan_with("_always_extra_block", blocks=lambda n, b: n // b + 1)
_waste_in_blocks = _plan_with("_waste_in_blocks", waste_per_block=True)     # counts partly filled blocks, not slots
_fraction_unchecked = _plan_with("_fraction_unchecked", check_fraction=False)
_block_unchecked = _plan_with("_block_unchecked", check_block=False)      # ZeroDivisionError instead
_lengths_unchecked = _plan_with("_lengths_unchecked", check_lengths=False)
_zero_length_allowed = _plan_with("_zero_length_allowed", allow_zero_length=True)
_float_bytes = _plan_with("_float_bytes", as_float=True)


def _plan_as_tuple(geometry, **kwargs):
    return tuple(_plan(geometry, **kwargs).values())


# -- SimpleKVCache ----------------------------------------------------------------------------
class _Preallocated:
    """The right cache, with hooks the wrong ones below override."""

    def __init__(self, batch_size, n_kv_heads, max_seq_len, head_dim, dtype=torch.float32):
        shape = (batch_size, n_kv_heads, max_seq_len, head_dim)
        self.k_store = torch.zeros(shape, dtype=dtype)
        self.v_store = torch.zeros(shape, dtype=dtype)
        self.max_seq_len = max_seq_len
        self.length = 0

    def full(self, n_new):
        return self.length + n_new > self.max_seq_len

    def append(self, k, v):
        n_new = k.shape[2]
        if self.full(n_new):
            raise ValueError("cache full")
        self.k_store[:, :, self.length:self.length + n_new] = k
        self.v_store[:, :, self.length:self.length + n_new] = v
        self.length += n_new
        return self.k_store[:, :, :self.length], self.v_store[:, :, :self.length]

    def nbytes(self):
        return self.k_store.nbytes + self.v_store.nbytes


class _Concatenating:  # grows by torch.cat: no preallocation, a new tensor every step
    def __init__(self, batch_size, n_kv_heads, max_seq_len, head_dim, dtype=torch.float32):
        self.k = torch.zeros(batch_size, n_kv_heads, 0, head_dim, dtype=dtype)
        self.v = torch.zeros(batch_size, n_kv_heads, 0, head_dim, dtype=dtype)
        self.shape, self.max_seq_len, self.length = (batch_size, n_kv_heads, max_seq_len, head_dim), max_seq_len, 0
        self.dtype = dtype

    def append(self, k, v):
        if self.length + k.shape[2] > self.max_seq_len:
            raise ValueError("cache full")
        self.k, self.v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        self.length += k.shape[2]
        return self.k, self.v

    def nbytes(self):
        return 2 * math.prod(self.shape) * torch.empty(0, dtype=self.dtype).element_size()


class _Clones(_Preallocated):  # copies instead of views
    def append(self, k, v):
        keys, values = super().append(k, v)
        return keys.clone(), values.clone()


class _FilledBytes(_Preallocated):  # counts only the filled part
    def nbytes(self):
        return 2 * self.k_store[:, :, :self.length].nbytes


class _OffByOne(_Preallocated):  # refuses to fill the last slot
    def full(self, n_new):
        return self.length + n_new >= self.max_seq_len


class _Unchecked(_Preallocated):  # no overflow check: torch's shape error surfaces instead
    def full(self, n_new):
        return False


class _WholeStore(_Preallocated):  # returns the whole preallocation, unused tail included
    def append(self, k, v):
        super().append(k, v)
        return self.k_store, self.v_store


class _AlwaysFloat32(_Preallocated):  # ignores the dtype argument
    def __init__(self, batch_size, n_kv_heads, max_seq_len, head_dim, dtype=torch.float32):
        super().__init__(batch_size, n_kv_heads, max_seq_len, head_dim)


class _Overwrites(_Preallocated):  # writes every chunk at position 0
    def append(self, k, v):
        n_new = k.shape[2]
        if self.full(n_new):
            raise ValueError("cache full")
        self.k_store[:, :, :n_new] = k
        self.v_store[:, :, :n_new] = v
        self.length += n_new
        return self.k_store[:, :, :self.length], self.v_store[:, :, :self.length]


class _Interleaved:  # one (S, 2, ...) tensor for keys and values together: not the two tensors asked for
    def __init__(self, batch_size, n_kv_heads, max_seq_len, head_dim, dtype=torch.float32):
        self.store = torch.zeros(batch_size, n_kv_heads, max_seq_len, 2, head_dim, dtype=dtype)
        self.max_seq_len, self.length = max_seq_len, 0

    def append(self, k, v):
        n_new = k.shape[2]
        if self.length + n_new > self.max_seq_len:
            raise ValueError("cache full")
        self.store[:, :, self.length:self.length + n_new, 0] = k
        self.store[:, :, self.length:self.length + n_new, 1] = v
        self.length += n_new
        return self.store[:, :, :self.length, 0], self.store[:, :, :self.length, 1]

    def nbytes(self):
        return self.store.nbytes


def test_right_cache_passes():
    result = verdict(A, "simple_kv_cache", SimpleKVCache=_Preallocated)
    assert result.passed, failures(result)


def test_cache_without_length_fails_every_reading():
    class NoLength(_Preallocated):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            del self.length

    result = verdict(A, "simple_kv_cache", SimpleKVCache=NoLength)
    assert "raised AttributeError" in failures(result), failures(result)


# -- cached_greedy_logits ---------------------------------------------------------------------
def _decode(model, prompt_ids, steps, chunk_size=None, *, fresh_cache_per_piece=False, fresh_cache_per_step=False,
            rows_after_feeding=False, check_window=True, drop_short_piece=False, check_steps=True):
    """The right answer, with switches for the mistakes below."""
    prompt = list(prompt_ids)
    piece = len(prompt) if chunk_size is None else chunk_size
    if not prompt or (check_steps and steps < 1) or piece < 1:
        raise ValueError("bad arguments")
    if check_window and len(prompt) + steps > model.config.max_seq_len:
        raise ValueError("too long")
    ids = torch.tensor([prompt])
    cache = model.new_cache(1)
    stop = len(prompt) - len(prompt) % piece if drop_short_piece and len(prompt) % piece else len(prompt)
    with torch.no_grad():
        for start in range(0, stop, piece):
            if fresh_cache_per_piece:
                cache = model.new_cache(1)
            logits = prefill(model, ids[:, start:start + piece], cache)
        rows = [] if rows_after_feeding else [logits[0]]
        while len(rows) < steps:
            step_cache = model.new_cache(1) if fresh_cache_per_step else cache
            logits = decode_step(model, logits.argmax(-1, keepdim=True), step_cache)
            rows.append(logits[0])
    return torch.stack(rows) if rows else torch.zeros(0, model.config.vocab_size)


def _fresh_cache_per_piece(model, prompt_ids, steps, chunk_size=None):  # each piece restarts at position 0
    return _decode(model, prompt_ids, steps, chunk_size, fresh_cache_per_piece=True)


def _fresh_cache_per_step(model, prompt_ids, steps, chunk_size=None):  # decodes without the prefix
    return _decode(model, prompt_ids, steps, chunk_size, fresh_cache_per_step=True)


def _rows_after_feeding(model, prompt_ids, steps, chunk_size=None):  # off by one: skips the prompt's logits
    return _decode(model, prompt_ids, steps, chunk_size, rows_after_feeding=True)


def _no_window_check(model, prompt_ids, steps, chunk_size=None):
    return _decode(model, prompt_ids, steps, chunk_size, check_window=False)


def _drops_short_piece(model, prompt_ids, steps, chunk_size=None):  # range() that stops before the last piece
    return _decode(model, prompt_ids, steps, chunk_size, drop_short_piece=True)


def _zero_steps_allowed(model, prompt_ids, steps, chunk_size=None):
    return _decode(model, prompt_ids, steps, chunk_size, check_steps=False)


# (exercise, replaced names, fragment of the hidden check it breaks): see test_wrong_answers.py
WRONG_ANSWERS = [
    ("plan_kv_capacity", {"plan_kv_capacity": _no_factor_two}, "kv_bytes_per_token = 2 x n_layers"),
    ("plan_kv_capacity", {"plan_kv_capacity": _query_heads}, "only n_kv_heads count"),
    ("plan_kv_capacity", {"plan_kv_capacity": _reserve_of_free}, "a share of the whole memory"),
    ("plan_kv_capacity", {"plan_kv_capacity": _reserve_ignored}, "cache_bytes = accelerator_bytes - weights_bytes"),
    ("plan_kv_capacity", {"plan_kv_capacity": _weights_ignored}, "cache_bytes = accelerator_bytes - weights_bytes"),
    ("plan_kv_capacity", {"plan_kv_capacity": _negative_room}, "never negative"),
    ("plan_kv_capacity", {"plan_kv_capacity": _sequences_round_up}, "max_sequences = floor("),
    ("plan_kv_capacity", {"plan_kv_capacity": _floor_blocks}, "paged_blocks = sum of ceil("),
    ("plan_kv_capacity", {"plan_kv_capacity": _floor_blocks}, "one token past a block boundary"),
    ("plan_kv_capacity", {"plan_kv_capacity": _always_extra_block}, "exact multiples of the block"),
    ("plan_kv_capacity", {"plan_kv_capacity": _waste_in_blocks}, "paged_waste_tokens = paged_blocks x block_size"),
    ("plan_kv_capacity", {"plan_kv_capacity": _fraction_unchecked}, "reserve_fraction=1.0 raises ValueError"),
    ("plan_kv_capacity", {"plan_kv_capacity": _fraction_unchecked}, "reserve_fraction=-0.1 raises ValueError"),
    ("plan_kv_capacity", {"plan_kv_capacity": _block_unchecked}, "block_size=0 raises ValueError"),
    ("plan_kv_capacity", {"plan_kv_capacity": _lengths_unchecked}, "a length above seq_len in seq_lens raises"),
    ("plan_kv_capacity", {"plan_kv_capacity": _zero_length_allowed}, "a length of 0 in seq_lens raises"),
    ("plan_kv_capacity", {"plan_kv_capacity": _float_bytes}, "every value is an int"),
    ("plan_kv_capacity", {"plan_kv_capacity": _plan_as_tuple}, "kv_bytes_per_token = 2 x n_layers"),
    ("simple_kv_cache", {"SimpleKVCache": _Concatenating}, "__init__ allocates the two"),
    ("simple_kv_cache", {"SimpleKVCache": _Concatenating}, "append returns views of the tensors allocated in __init__"),
    ("simple_kv_cache", {"SimpleKVCache": _Clones}, "append returns views of the tensors allocated in __init__"),
    ("simple_kv_cache", {"SimpleKVCache": _FilledBytes}, "nbytes() counts both preallocated tensors at full length"),
    ("simple_kv_cache", {"SimpleKVCache": _OffByOne}, "fills the cache exactly to max_seq_len is allowed"),
    ("simple_kv_cache", {"SimpleKVCache": _OffByOne}, "a prompt of exactly max_seq_len positions fits"),
    ("simple_kv_cache", {"SimpleKVCache": _Unchecked}, "an append past max_seq_len raises ValueError"),
    ("simple_kv_cache", {"SimpleKVCache": _WholeStore}, "shape (B, H_kv, length, D)"),
    ("simple_kv_cache", {"SimpleKVCache": _AlwaysFloat32}, "of the given dtype"),
    ("simple_kv_cache", {"SimpleKVCache": _AlwaysFloat32}, "nbytes() counts"),
    ("simple_kv_cache", {"SimpleKVCache": _Overwrites}, "the appended chunks, in order"),
    ("simple_kv_cache", {"SimpleKVCache": _Interleaved}, "__init__ allocates the two"),
    ("cached_greedy_logits", {"cached_greedy_logits": _fresh_cache_per_piece}, "RoPE offsets after a prefix"),
    ("cached_greedy_logits", {"cached_greedy_logits": _fresh_cache_per_step}, "equals full recomputation, every row"),
    ("cached_greedy_logits", {"cached_greedy_logits": _rows_after_feeding}, "row 0 is the logits at the last prompt"),
    ("cached_greedy_logits", {"cached_greedy_logits": _no_window_check}, "above max_seq_len raises ValueError"),
    ("cached_greedy_logits", {"cached_greedy_logits": _drops_short_piece}, "the last one shorter"),
    ("cached_greedy_logits", {"cached_greedy_logits": _zero_steps_allowed}, "steps=0 (below 1) raises ValueError"),
]


def test_a_cache_free_answer_passes():
    """Recomputing everything gives the right logits too: the exercise grades equality, not speed."""
    def recompute(model, prompt_ids, steps, chunk_size=None):
        if not prompt_ids or steps < 1 or (chunk_size is not None and chunk_size < 1) \
                or len(prompt_ids) + steps > model.config.max_seq_len:
            raise ValueError("bad arguments")
        ids, rows = list(prompt_ids), []
        with torch.no_grad():
            for _ in range(steps):
                rows.append(model(torch.tensor([ids]))[0, -1])
                ids.append(int(rows[-1].argmax()))
        return torch.stack(rows)

    result = verdict(A, "cached_greedy_logits", cached_greedy_logits=recompute)
    assert result.passed, failures(result)


def test_right_plan_passes():
    result = verdict(A, "plan_kv_capacity", plan_kv_capacity=_plan_with("_right"))
    assert result.passed, failures(result)
