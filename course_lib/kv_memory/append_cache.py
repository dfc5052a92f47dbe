"""A one-layer KV cache with append: the smallest honest version of what a model keeps.

Memory is reserved once, for ``max_seq_len`` positions; ``append`` copies the new keys and
values into the next free slots and returns views of everything stored so far. Nothing is
reallocated or concatenated while decoding, which is why the cache's size is known (and
plannable) before the first token.

>>> cache = LayerKVCache(batch_size=1, n_kv_heads=2, max_seq_len=8, head_dim=4)
>>> k, v = cache.append(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4))   # a 3-token prompt
>>> tuple(k.shape), cache.length
((1, 2, 3, 4), 3)
>>> k, v = cache.append(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))  # one decode step
>>> tuple(k.shape), cache.nbytes()      # 2 x 2 heads x 8 positions x 4 dims x 4 bytes
((1, 2, 4, 4), 512)
"""
from __future__ import annotations

import torch

from course_lib.validation import positive_int


class LayerKVCache:
    def __init__(self, batch_size: int, n_kv_heads: int, max_seq_len: int, head_dim: int, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None):
        for name, value in (("batch_size", batch_size), ("n_kv_heads", n_kv_heads),
                            ("max_seq_len", max_seq_len), ("head_dim", head_dim)):
            positive_int(name, value)
        shape = (batch_size, n_kv_heads, max_seq_len, head_dim)  # (B, H_kv, S, D)
        self._keys = torch.zeros(shape, dtype=dtype, device=device)
        self._values = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0

    @property
    def max_seq_len(self) -> int:
        return self._keys.shape[2]

    @property
    def keys(self) -> torch.Tensor:
        return self._keys[:, :, : self.length]  # (B, H_kv, length, D), a view

    @property
    def values(self) -> torch.Tensor:
        return self._values[:, :, : self.length]  # (B, H_kv, length, D), a view

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v of shape (B, H_kv, T_new, D) after what is there; return all keys and values."""
        expected = (self._keys.shape[0], self._keys.shape[1], self._keys.shape[3])
        for name, t in (("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor) or t.dim() != 4 or (t.shape[0], t.shape[1], t.shape[3]) != expected:
                got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"{name} must have shape (B={expected[0]}, H_kv={expected[1]}, T_new, "
                                 f"D={expected[2]}), got {got}")
        if k.shape != v.shape:
            raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
        n_new = k.shape[2]
        if self.length + n_new > self.max_seq_len:
            raise ValueError(f"cache full: {self.length} of {self.max_seq_len} positions used, {n_new} more "
                             "requested; allocate a longer cache or start a new sequence")
        self._keys[:, :, self.length: self.length + n_new] = k
        self._values[:, :, self.length: self.length + n_new] = v
        self.length += n_new
        return self.keys, self.values

    def nbytes(self) -> int:
        """Bytes reserved by the two preallocated tensors (full length, used or not)."""
        return self._keys.nbytes + self._values.nbytes
