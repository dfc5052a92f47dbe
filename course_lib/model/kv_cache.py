"""A preallocated key/value cache, filled in place as the model reads tokens.

Per layer it holds keys and values of shape (B, n_kv_heads, max_seq_len, head_dim). Positions
0..seq_len-1 are filled; a forward pass over T new tokens writes positions seq_len..seq_len+T-1
in every layer and then advances seq_len by T. Nothing is reallocated while decoding.

>>> cache = KVCache(n_layers=2, batch_size=1, n_kv_heads=2, max_seq_len=8, head_dim=4)
>>> cache.nbytes()      # 2 (K and V) x 2 layers x 2 heads x 4 dims x 8 positions x 4 bytes x 1
1024
>>> k, v = cache.update(0, torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4)); tuple(k.shape)
(1, 2, 3, 4)
>>> cache.advance(3); cache.seq_len
3
"""
from __future__ import annotations

import torch
from course_lib.validation import positive_int

__all__ = ["KVCache", "CacheOverflowError"]


class CacheOverflowError(ValueError):
    """Raised when tokens would be written past the end of a cache."""


class KVCache:
    """Per-layer key/value tensors, preallocated, with a shared fill level `seq_len`."""

    def __init__(self, n_layers: int, batch_size: int, n_kv_heads: int, max_seq_len: int, head_dim: int,
                 *, device=None, dtype: torch.dtype = torch.float32):
        for name, value in (("n_layers", n_layers), ("batch_size", batch_size), ("n_kv_heads", n_kv_heads),
                            ("max_seq_len", max_seq_len), ("head_dim", head_dim)):
            positive_int(f"KVCache {name}", value)
        self.n_layers, self.batch_size, self.n_kv_heads = n_layers, batch_size, n_kv_heads
        self.max_seq_len, self.head_dim = max_seq_len, head_dim
        shape = (batch_size, n_kv_heads, max_seq_len, head_dim)  # (B, Hkv, S, D)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.seq_len = 0

    @property
    def device(self) -> torch.device:
        return self.keys[0].device

    @property
    def dtype(self) -> torch.dtype:
        return self.keys[0].dtype

    @property
    def free(self) -> int:
        """Positions still available."""
        return self.max_seq_len - self.seq_len

    def check_room(self, n_new: int) -> None:
        """Raise CacheOverflowError unless n_new more positions fit."""
        if n_new > self.free:
            raise CacheOverflowError(
                f"KV cache overflow: it holds {self.seq_len} of {self.max_seq_len} positions and "
                f"{n_new} more were requested; allocate a larger cache (new_cache(..., max_seq_len=...)) "
                "or reset() it"
            )

    def update(self, layer_idx: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (B, Hkv, T, D) at positions seq_len..seq_len+T-1 of one layer.

        Returns views (B, Hkv, seq_len+T, D) of everything stored in that layer so far. Does
        not advance seq_len: every layer writes the same positions, and the model advances the
        cache once after the last layer.
        """
        n_new = k.shape[-2]
        self.check_room(n_new)
        start, stop = self.seq_len, self.seq_len + n_new
        self.keys[layer_idx][:, :, start:stop] = k
        self.values[layer_idx][:, :, start:stop] = v
        return self.keys[layer_idx][:, :, :stop], self.values[layer_idx][:, :, :stop]  # (B, Hkv, stop, D)

    def advance(self, n_new: int) -> None:
        """Mark n_new more positions as filled (called once per forward pass)."""
        self.check_room(n_new)
        self.seq_len += n_new

    def reset(self) -> None:
        """Forget every stored position; the memory stays allocated for reuse."""
        self.seq_len = 0

    def nbytes(self) -> int:
        """Bytes held by all key and value tensors (the full preallocation, not just the filled part)."""
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def __repr__(self) -> str:
        return (f"KVCache(layers={self.n_layers}, batch={self.batch_size}, kv_heads={self.n_kv_heads}, "
                f"filled={self.seq_len}/{self.max_seq_len}, head_dim={self.head_dim}, dtype={self.dtype}, "
                f"device={self.device})")
