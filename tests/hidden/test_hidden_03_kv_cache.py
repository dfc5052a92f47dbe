"""Known-wrong answers to notebook 03 fail its hidden tests, each on the rule it breaks."""
from __future__ import annotations

import math

import pytest
import torch

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


@pytest.mark.parametrize("wrong, broken_rule", [
    (_no_factor_two, "2 x layers x KV heads"),
    (_no_factor_two, "the worked figure"),
    (_returns_float, "the result is an int"),
    (_unvalidated, "zero layers raises ValueError"),
    (_negatives_only, "a zero seq_len raises ValueError"),
    (_fp32_default, "bytes_per_element defaults to 2"),
    (_ignores_batch, "x batch ("),
    (_batch_unchecked, "batch=0 raises ValueError"),
])
def test_wrong_kv_cache_bytes_fails_on_the_rule_it_breaks(wrong, broken_rule):
    result = verdict(A, "kv_cache_bytes", kv_cache_bytes=wrong)
    assert not result.passed
    assert broken_rule in failures(result), failures(result)


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


@pytest.mark.parametrize("wrong, broken_rule", [
    (_negative_allowed, "never a negative count"),
    (_rounds_up, "a partial sequence does not count"),
    (_rounds_up, "floor((memory - weights - reserve)"),
    (_forgets_reserve, "floor((memory - weights - reserve)"),
    (_float_count, "the count is an int"),
    (_no_check, "kv_bytes_per_sequence=0 raises ValueError"),
    (_no_check, "kv_bytes_per_sequence=-10 raises ValueError"),
])
def test_wrong_capacity_fails_on_the_rule_it_breaks(wrong, broken_rule):
    result = verdict(A, "max_concurrent_sequences", max_concurrent_sequences=wrong)
    assert not result.passed
    assert broken_rule in failures(result), failures(result)


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


@pytest.mark.parametrize("wrong, broken_rule", [
    (_Concatenating, "__init__ allocates the two"),
    (_Concatenating, "append returns views of the tensors allocated in __init__"),
    (_Clones, "append returns views of the tensors allocated in __init__"),
    (_FilledBytes, "nbytes() counts both preallocated tensors at full length"),
    (_OffByOne, "fills the cache exactly to max_seq_len is allowed"),
    (_OffByOne, "a prompt of exactly max_seq_len positions fits"),
    (_Unchecked, "an append past max_seq_len raises ValueError"),
    (_WholeStore, "shape (B, H_kv, length, D)"),
    (_AlwaysFloat32, "of the given dtype"),
    (_AlwaysFloat32, "nbytes() counts"),
    (_Overwrites, "the appended chunks, in order"),
    (_Interleaved, "__init__ allocates the two"),
])
def test_wrong_cache_fails_on_the_rule_it_breaks(wrong, broken_rule):
    result = verdict(A, "simple_kv_cache", SimpleKVCache=wrong)
    assert not result.passed
    assert broken_rule in failures(result), failures(result)


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


@pytest.mark.parametrize("wrong, broken_rule", [
    (lambda s, b, m: _waste(s, b, m, blocks=lambda n, k: n // k), "the unused tail of the last block"),
    (lambda s, b, m: _waste(s, b, m, blocks=lambda n, k: n // k + 1), "exact multiples of the block waste nothing"),
    (lambda s, b, m: _waste(s, b, m, swap=True), "(contiguous, paged) waste"),
    (lambda s, b, m: _waste(s, b, m, too_long=lambda n, k: n >= k), "exactly max_seq_len is allowed"),
    (lambda s, b, m: _waste(s, b, m, too_long=lambda n, k: False), "a length above max_seq_len raises ValueError"),
    (lambda s, b, m: _waste(s, b, m, too_long=lambda n, k: False), "a length one above max_seq_len"),
    (lambda s, b, m: _waste(s, b, m, check_block=False), "block_size 0 raises ValueError"),
    (lambda s, b, m: _waste(s, b, m, check_block=False), "a negative block_size raises ValueError"),
    (lambda s, b, m: {"contiguous": _waste(s, b, m)[0], "paged": _waste(s, b, m)[1]}, "the result is a pair"),
])
def test_wrong_paging_waste_fails_on_the_rule_it_breaks(wrong, broken_rule):
    result = verdict(A, "paging_waste", paging_waste=wrong)
    assert not result.passed
    assert broken_rule in failures(result), failures(result)
