"""Known-wrong answers to notebook 03 fail its hidden tests, each on the rule it breaks."""
from __future__ import annotations

import math

import torch

from course_lib.model import decode_step, prefill

from tests.hidden.conftest import failures, verdict

A = "03_kv_cache"


# -- kv_cache_bytes ---------------------------------------------------------------------------
def _validate(*sizes):
    if any(n <= 0 for n in sizes):
        raise ValueError("sizes must be positive")


def _no_factor_two(n_layers, n_kv_heads, head_dim, seq_len, bytes_per_element=2, batch=1):
    _validate(n_layers, n_kv_heads, head_dim, seq_len, batch)
    return int(n_layers * n_kv_heads * head_dim * seq_len * bytes_per_element * batch)


def _returns_float(n_layers, n_kv_heads, head_dim, seq_len, bytes_per_element=2, batch=1):
    _validate(n_layers, n_kv_heads, head_dim, seq_len, batch)
    return 2.0 * n_layers * n_kv_heads * head_dim * seq_len * bytes_per_element * batch


def _unvalidated(n_layers, n_kv_heads, head_dim, seq_len, bytes_per_element=2, batch=1):
    return int(2 * n_layers * n_kv_heads * head_dim * seq_len * bytes_per_element * batch)


def _negatives_only(n_layers, n_kv_heads, head_dim, seq_len, bytes_per_element=2, batch=1):  # zero slips through
    if min(n_layers, n_kv_heads, head_dim, seq_len, batch) < 0:
        raise ValueError("negative")
    return int(2 * n_layers * n_kv_heads * head_dim * seq_len * bytes_per_element * batch)


def _fp32_default(n_layers, n_kv_heads, head_dim, seq_len, bytes_per_element=4, batch=1):
    _validate(n_layers, n_kv_heads, head_dim, seq_len, batch)
    return int(2 * n_layers * n_kv_heads * head_dim * seq_len * bytes_per_element * batch)


def _ignores_batch(n_layers, n_kv_heads, head_dim, seq_len, bytes_per_element=2, batch=1):
    _validate(n_layers, n_kv_heads, head_dim, seq_len, batch)
    return int(2 * n_layers * n_kv_heads * head_dim * seq_len * bytes_per_element)


def _batch_unchecked(n_layers, n_kv_heads, head_dim, seq_len, bytes_per_element=2, batch=1):
    _validate(n_layers, n_kv_heads, head_dim, seq_len)
    return int(2 * n_layers * n_kv_heads * head_dim * seq_len * bytes_per_element * batch)


# -- max_concurrent_sequences -----------------------------------------------------------------
def _negative_allowed(memory_bytes, weight_bytes, kv_bytes_per_sequence, reserve_bytes=0):
    if kv_bytes_per_sequence <= 0:
        raise ValueError("kv bytes")
    return (memory_bytes - weight_bytes - reserve_bytes) // kv_bytes_per_sequence


def _rounds_up(memory_bytes, weight_bytes, kv_bytes_per_sequence, reserve_bytes=0):
    if kv_bytes_per_sequence <= 0:
        raise ValueError("kv bytes")
    return max(0, math.ceil((memory_bytes - weight_bytes - reserve_bytes) / kv_bytes_per_sequence))


def _forgets_reserve(memory_bytes, weight_bytes, kv_bytes_per_sequence, reserve_bytes=0):
    if kv_bytes_per_sequence <= 0:
        raise ValueError("kv bytes")
    return max(0, (memory_bytes - weight_bytes) // kv_bytes_per_sequence)


def _float_count(memory_bytes, weight_bytes, kv_bytes_per_sequence, reserve_bytes=0):
    if kv_bytes_per_sequence <= 0:
        raise ValueError("kv bytes")
    return max(0.0, float((memory_bytes - weight_bytes - reserve_bytes) // kv_bytes_per_sequence))


def _no_check(memory_bytes, weight_bytes, kv_bytes_per_sequence, reserve_bytes=0):
    return max(0, (memory_bytes - weight_bytes - reserve_bytes) // kv_bytes_per_sequence)


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


# -- paging_waste -----------------------------------------------------------------------------
def _waste(seq_lens, block_size, max_seq_len, *, blocks=lambda n, b: -(-n // b), too_long=lambda n, m: n > m,
           check_block=True, swap=False):
    if check_block and block_size < 1:
        raise ValueError("block_size")
    contiguous = paged = 0
    for n in seq_lens:
        if too_long(n, max_seq_len):
            raise ValueError("too long")
        contiguous += max_seq_len - n
        paged += blocks(n, block_size) * block_size - n
    return (paged, contiguous) if swap else (contiguous, paged)


def _floor_blocks(s, b, m):  # drops the partial last block
    return _waste(s, b, m, blocks=lambda n, k: n // k)


def _always_extra_block(s, b, m):  # one block too many when n is a multiple of the block
    return _waste(s, b, m, blocks=lambda n, k: n // k + 1)


def _swapped(s, b, m):
    return _waste(s, b, m, swap=True)


def _rejects_full_length(s, b, m):
    return _waste(s, b, m, too_long=lambda n, k: n >= k)


def _accepts_too_long(s, b, m):
    return _waste(s, b, m, too_long=lambda n, k: False)


def _block_unchecked(s, b, m):
    return _waste(s, b, m, check_block=False)


def _waste_dict(s, b, m):
    contiguous, paged = _waste(s, b, m)
    return {"contiguous": contiguous, "paged": paged}


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
    ("kv_cache_bytes", {"kv_cache_bytes": _no_factor_two}, "2 x layers x KV heads"),
    ("kv_cache_bytes", {"kv_cache_bytes": _no_factor_two}, "the worked figure"),
    ("kv_cache_bytes", {"kv_cache_bytes": _returns_float}, "the result is an int"),
    ("kv_cache_bytes", {"kv_cache_bytes": _unvalidated}, "zero layers raises ValueError"),
    ("kv_cache_bytes", {"kv_cache_bytes": _negatives_only}, "a zero seq_len raises ValueError"),
    ("kv_cache_bytes", {"kv_cache_bytes": _fp32_default}, "bytes_per_element defaults to 2"),
    ("kv_cache_bytes", {"kv_cache_bytes": _ignores_batch}, "x batch ("),
    ("kv_cache_bytes", {"kv_cache_bytes": _batch_unchecked}, "batch=0 raises ValueError"),
    ("max_concurrent_sequences", {"max_concurrent_sequences": _negative_allowed}, "never a negative count"),
    ("max_concurrent_sequences", {"max_concurrent_sequences": _rounds_up}, "a partial sequence does not count"),
    ("max_concurrent_sequences", {"max_concurrent_sequences": _rounds_up}, "floor((memory - weights - reserve)"),
    ("max_concurrent_sequences", {"max_concurrent_sequences": _forgets_reserve}, "floor((memory - weights - reserve)"),
    ("max_concurrent_sequences", {"max_concurrent_sequences": _float_count}, "the count is an int"),
    ("max_concurrent_sequences", {"max_concurrent_sequences": _no_check}, "kv_bytes_per_sequence=0 raises ValueError"),
    ("max_concurrent_sequences", {"max_concurrent_sequences": _no_check}, "kv_bytes_per_sequence=-10 raises ValueError"),
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
    ("paging_waste", {"paging_waste": _floor_blocks}, "the unused tail of the last block"),
    ("paging_waste", {"paging_waste": _always_extra_block}, "exact multiples of the block waste nothing"),
    ("paging_waste", {"paging_waste": _swapped}, "(contiguous, paged) waste"),
    ("paging_waste", {"paging_waste": _rejects_full_length}, "exactly max_seq_len is allowed"),
    ("paging_waste", {"paging_waste": _accepts_too_long}, "a length above max_seq_len raises ValueError"),
    ("paging_waste", {"paging_waste": _accepts_too_long}, "a length one above max_seq_len"),
    ("paging_waste", {"paging_waste": _block_unchecked}, "block_size 0 raises ValueError"),
    ("paging_waste", {"paging_waste": _block_unchecked}, "a negative block_size raises ValueError"),
    ("paging_waste", {"paging_waste": _waste_dict}, "the result is a pair"),
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
