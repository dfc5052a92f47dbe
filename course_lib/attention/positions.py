"""Positional information: sinusoidal absolute positions and rotary embeddings (RoPE).

Attention alone ignores order (permute the inputs and the outputs permute the same way), so
position has to be injected. Two schemes live here:

- sinusoidal: a fixed vector per absolute position, added to the token embeddings;
- rotary: rotate each (x_i, x_{i + D/2}) pair of a query or key by an angle proportional to
  its position, so q . k depends only on the *offset* between the two positions.

The rotary layout is the "rotate_half" convention of Hugging Face's Llama code (pairs are
feature i and feature i + D/2, not neighbours 2i and 2i+1), so Llama-family checkpoints load
without permuting weights.
"""
from __future__ import annotations

import math

import torch
from torch import nn

__all__ = [
    "sinusoidal_positions",
    "rope_inverse_frequencies",
    "llama3_frequencies",
    "rope_cos_sin",
    "rotate_half",
    "apply_rotary",
    "RotaryEmbedding",
]


def sinusoidal_positions(n_positions: int, d_model: int, *, base: float = 10000.0, device=None,
                         dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(n_positions, d_model) table with PE[p, 2i] = sin(p / base^(2i/d)), PE[p, 2i+1] = cos(...).

    >>> [round(x, 3) for x in sinusoidal_positions(2, 4)[1].tolist()]  # sin(1), cos(1), sin(.01), cos(.01)
    [0.841, 0.54, 0.01, 1.0]
    """
    if n_positions < 1 or d_model < 2 or d_model % 2:
        raise ValueError(f"need n_positions >= 1 and an even d_model >= 2, got {n_positions}, {d_model}")
    pos = torch.arange(n_positions, device=device, dtype=torch.float64).unsqueeze(1)  # (T, 1)
    rates = base ** (-torch.arange(0, d_model, 2, device=device, dtype=torch.float64) / d_model)  # (d/2,)
    angles = pos * rates  # (T, d/2)
    table = torch.empty(n_positions, d_model, device=device, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table.to(dtype)


def rope_inverse_frequencies(head_dim: int, theta: float = 10000.0, *, device=None) -> torch.Tensor:
    """(head_dim/2,) rotation speeds 1 / theta^(2i/head_dim), computed exactly as HF Llama does.

    >>> rope_inverse_frequencies(4, 100.0).tolist()
    [1.0, 0.10000000149011612]
    """
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"rotary embeddings need an even head_dim >= 2, got {head_dim}")
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim
    return 1.0 / (theta ** exponents)


def llama3_frequencies(inv_freq: torch.Tensor, *, factor: float, low_freq_factor: float,
                       high_freq_factor: float, original_max_position_embeddings: int) -> torch.Tensor:
    """Llama 3's RoPE scaling: dimensions that turn fast (wavelength under the original context
    / high_freq_factor) keep their speed, slow ones (wavelength over context / low_freq_factor)
    turn ``factor`` times slower, and those in between blend the two by where they sit.

    >>> f = llama3_frequencies(torch.tensor([1.0, 1e-3, 1e-5]), factor=8, low_freq_factor=1,
    ...                        high_freq_factor=4, original_max_position_embeddings=8192)
    >>> [round(x, 8) for x in f.tolist()]
    [1.0, 0.00021361, 1.25e-06]
    """
    context = original_max_position_embeddings
    wavelength = 2 * math.pi / inv_freq  # (D/2,) positions per full turn
    slow = inv_freq / factor
    # 0 at the slow edge (wavelength = context / low), 1 at the fast edge (context / high)
    blend = ((context / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)).clamp(0, 1)
    return torch.where(wavelength < context / high_freq_factor, inv_freq,
                       torch.where(wavelength > context / low_freq_factor, slow, (1 - blend) * slow + blend * inv_freq))


def rope_cos_sin(positions: torch.Tensor, head_dim: int, *, theta: float = 10000.0,
                 scaling: float = 1.0, llama3: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables (T, head_dim) in float32 for the given integer positions (T,).

    `scaling` > 1 divides the positions (linear position interpolation), one common way to
    stretch a model trained on n positions to scaling * n positions.

    >>> cos, sin = rope_cos_sin(torch.tensor([0, 1]), 2)
    >>> [round(x, 4) for x in cos[1].tolist()], [round(x, 4) for x in sin[1].tolist()]
    ([0.5403, 0.5403], [0.8415, 0.8415])
    """
    if scaling <= 0:
        raise ValueError(f"rope scaling factor must be positive, got {scaling}")
    # Slowing every rotation by `scaling` is the same as dividing the positions by it.
    inv_freq = rope_inverse_frequencies(head_dim, theta, device=positions.device) / scaling  # (D/2,)
    if llama3 is not None:  # ``llama3``: the four settings of ``llama3_frequencies``
        inv_freq = llama3_frequencies(inv_freq, **llama3)
    angles = positions.float().unsqueeze(1) * inv_freq.unsqueeze(0)  # (T, D/2)
    angles = torch.cat((angles, angles), dim=-1)  # (T, D): pair i and i + D/2 share an angle
    return angles.cos(), angles.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last axis.

    >>> rotate_half(torch.tensor([1., 2., 3., 4.])).tolist()
    [-3.0, -4.0, 1.0, 2.0]
    """
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate queries or keys x (..., T, D) by the angles whose cos/sin (T, D) are given.

    Each pair (x_i, x_{i+D/2}) is rotated in its plane: a rotation keeps lengths, and
    rotating q by angle a and k by angle b makes q . k depend on a - b only.

    >>> cos, sin = rope_cos_sin(torch.tensor([1]), 2)
    >>> [round(v, 4) for v in apply_rotary(torch.tensor([[1., 0.]]), cos, sin)[0].tolist()]
    [0.5403, 0.8415]
    """
    if cos.shape[-1] != x.shape[-1]:
        raise ValueError(f"rotary tables have width {cos.shape[-1]} but x has head_dim {x.shape[-1]}")
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + rotate_half(x) * sin


class RotaryEmbedding(nn.Module):
    """Precomputed cos/sin tables for positions 0..max_positions-1, looked up by position.

    >>> rope = RotaryEmbedding(head_dim=8, max_positions=16)
    >>> cos, sin = rope(torch.arange(3, 5)); tuple(cos.shape)
    (2, 8)
    """

    def __init__(self, head_dim: int, max_positions: int, *, theta: float = 10000.0, scaling: float = 1.0,
                 llama3: dict | None = None):
        super().__init__()
        self.head_dim, self.max_positions = head_dim, max_positions
        self.theta, self.scaling, self.llama3 = theta, scaling, llama3
        cos, sin = rope_cos_sin(torch.arange(max_positions), head_dim, theta=theta, scaling=scaling, llama3=llama3)
        # Not part of the checkpoint: they are a pure function of the config. Kept in float32
        # even when the model is cast to bf16, so positions stay precise.
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def _apply(self, fn, recurse=True):
        # Module.to(dtype) would cast the tables to bf16; recompute them in float32 instead
        # on whatever device the module lands on.
        super()._apply(fn, recurse)
        if self.cos.dtype != torch.float32:
            cos, sin = rope_cos_sin(torch.arange(self.max_positions, device=self.cos.device),
                                    self.head_dim, theta=self.theta, scaling=self.scaling, llama3=self.llama3)
            self.cos, self.sin = cos, sin
        return self

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cos[positions], self.sin[positions]  # (T, D) each

    def slice(self, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Tables for the contiguous positions start..start+length-1 (a view, no copy)."""
        if start < 0 or start + length > self.max_positions:
            raise ValueError(f"positions {start}..{start + length - 1} are outside the rotary table "
                             f"of {self.max_positions} positions")
        return self.cos[start:start + length], self.sin[start:start + length]  # (T, D) each
