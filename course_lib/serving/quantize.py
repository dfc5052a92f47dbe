"""Weight-only int8: each nn.Linear keeps int8 weights and one float32 scale per output channel.

Symmetric per-channel quantisation maps row r of W (out, in) onto the integers -127..127 with
scale_r = max|W_r| / 127, so q = round(W / scale) and W ~ q * scale, off by at most scale / 2
per element. A row of zeros gets scale 1 (any scale reproduces it; 1 avoids dividing by 0).

>>> w = torch.tensor([[0.5, -1.27, 0.0], [0.0, 0.0, 0.0]])   # (out=2, in=3); row 1 is all zeros
>>> q, scale = quantize_per_channel(w)
>>> q.tolist(), [round(s, 6) for s in scale.tolist()]
([[50, -127, 0], [0, 0, 0]], [0.01, 1.0])
>>> torch.allclose(dequantize(q, scale), w)
True
>>> from course_lib.model import Transformer, get_config
>>> model = Transformer(get_config("test-gqa"), generator=torch.Generator().manual_seed(0))
>>> small = quantize_int8(model)                 # a quantised copy; `model` keeps its fp32 weights
>>> type(small.layers[0].mlp.up_proj).__name__, type(model.layers[0].mlp.up_proj).__name__
('Int8Linear', 'Linear')
>>> round(weight_bytes(small) / weight_bytes(model), 2)    # the fp32 embedding and norms remain
0.35

The matmul runs on dequantised values: forward is (x @ q.T) * scale (+ bias), the int8 matrix
converted to the activations' dtype on the fly and the scale applied to the (much smaller)
output. This saves memory (a quarter of fp32), not arithmetic: the course runs on CPUs and GPUs
without int8 matmul kernels.
"""
from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["Int8Linear", "quantize_per_channel", "dequantize", "quantize_int8", "weight_bytes"]

_QMAX = 127  # symmetric: -128 is left unused so that q and -q are both representable


def quantize_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """weight (out, in) float -> (q (out, in) int8, scale (out,) float32), symmetric per output row.

    |weight - dequantize(q, scale)| <= scale / 2 for every element (up to float32 rounding of the
    product), because q is rounded against the float32 scale that is actually stored.
    """
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or not weight.is_floating_point():
        got = f"{weight.dtype} of shape {tuple(weight.shape)}" if isinstance(weight, torch.Tensor) else \
            type(weight).__name__
        raise ValueError(f"quantize_per_channel takes a float matrix (out, in), got {got}")
    if not torch.isfinite(weight).all():
        raise ValueError("weight holds inf or NaN; a scale cannot cover it: fix the weights before quantising")
    w = weight.detach().double()  # (out, in): float64 so the rounding below is against exact ratios
    amax = w.abs().amax(dim=1)  # (out,)
    scale = torch.where(amax > 0, amax / _QMAX, torch.ones_like(amax)).float()  # (out,)
    q = torch.round(w / scale.double()[:, None]).clamp(-_QMAX, _QMAX).to(torch.int8)  # (out, in)
    return q, scale


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """q (out, in) int8, scale (out,) -> float32 weights (out, in) = q * scale per row."""
    if q.dim() != 2 or scale.shape != (q.shape[0],):
        raise ValueError(f"dequantize needs q (out, in) and scale (out,), got {tuple(q.shape)} and "
                         f"{tuple(scale.shape)}")
    return q.float() * scale.float()[:, None]  # (out, in)


class Int8Linear(nn.Module):
    """A drop-in nn.Linear replacement holding int8 weights (out, in) and float32 scales (out,).

    Weights and scales are buffers, not parameters: they are for inference and have no gradient.
    Build one from a trained layer with ``Int8Linear.from_linear(linear)``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = False, device=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight_int8", torch.zeros(out_features, in_features, dtype=torch.int8, device=device))
        self.register_buffer("scale", torch.ones(out_features, dtype=torch.float32, device=device))
        self.register_buffer("bias", torch.zeros(out_features, device=device) if bias else None)

    @classmethod
    @torch.no_grad()
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        """Quantise a float nn.Linear's weight (its bias stays float); `linear` is not modified."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear takes an nn.Linear, got {type(linear).__name__}")
        layer = cls(linear.in_features, linear.out_features, bias=linear.bias is not None,
                    device=linear.weight.device)
        layer.weight_int8, layer.scale = quantize_per_channel(linear.weight)
        if linear.bias is not None:
            layer.bias = linear.bias.detach().float().clone()
        return layer

    def dequantized_weight(self) -> torch.Tensor:
        """The float32 weight (out, in) this layer effectively multiplies by."""
        return dequantize(self.weight_int8, self.scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The scale is per output column of the result, so it can wait until after the matmul:
        # out multiplies per row instead of out * in.
        out = F.linear(x, self.weight_int8.to(x.dtype)) * self.scale.to(x.dtype)  # (..., out)
        return out if self.bias is None else out + self.bias.to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


@torch.no_grad()
def quantize_int8(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every nn.Linear replaced by an Int8Linear; ``model`` is untouched.

    Tied embeddings (``Transformer`` with ``tie_embeddings``: ``lm_head.weight`` *is*
    ``embed_tokens.weight``): the output head gets its own int8 copy of the matrix with one
    scale per vocabulary row, and the embedding stays float32. A lookup reads one row per token,
    so its precision costs nothing at decode time, and the model's ``dtype`` and ``device`` (which
    size its KV cache) are read from it. The tie is therefore broken in the copy: quantise a
    model after loading it, not before saving it. Linears that share one weight with each other
    share one Int8Linear.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"quantize_int8 takes an nn.Module, got {type(model).__name__}")
    quantized = copy.deepcopy(model)
    by_weight: dict[int, Int8Linear] = {}  # id(weight) -> its Int8Linear, so shared matrices stay shared
    targets = [(parent, name, child) for parent in quantized.modules()
               for name, child in parent.named_children() if type(child) is nn.Linear]
    for parent, name, linear in targets:
        key = id(linear.weight)
        if key not in by_weight:
            by_weight[key] = Int8Linear.from_linear(linear)
        setattr(parent, name, by_weight[key])
    return quantized


def weight_bytes(module: nn.Module) -> int:
    """Bytes held by a module's parameters and buffers (int8 = 1 byte, float32 = 4).

    Each tensor counts once even when shared (a tied head is not counted twice). Buffers
    include derived tables such as RoPE's cos/sin, because they occupy memory too.
    """
    tensors = {id(t): t for t in (*module.parameters(), *module.buffers())}
    return sum(t.numel() * t.element_size() for t in tensors.values())
