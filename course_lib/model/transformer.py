"""The course transformer: a small Llama-style decoder (RMSNorm, RoPE, GQA, gated SiLU MLP).

    token IDs (B, T) -> embedding (B, T, d_model)
      -> n_layers x [x + attn(rmsnorm(x)); x + mlp(rmsnorm(x))]
      -> rmsnorm -> output head -> logits (B, T, vocab_size)

Module names match Hugging Face's LlamaForCausalLM (without its "model." prefix), so weights
convert by renaming keys, not by reshaping.

>>> from course_lib.model.config import get_config
>>> model = Transformer(get_config("test-gqa"), generator=torch.Generator().manual_seed(0))
>>> tuple(model(torch.tensor([[1, 2, 3]])).shape)
(1, 3, 128)
"""
from __future__ import annotations

import math

import torch
from torch import nn

from course_lib.attention import MultiHeadAttention, RotaryEmbedding
from course_lib.model.config import ModelConfig
from course_lib.model.kv_cache import KVCache

__all__ = ["RMSNorm", "GatedMLP", "Block", "Transformer"]


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight: LayerNorm without the mean subtraction or bias.

    Normalises in float32 and casts back, as Llama does, so bf16 activations stay stable.
    """

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., dim)
        return self.weight * normed.to(x.dtype)


class GatedMLP(nn.Module):
    """down(silu(gate(x)) * up(x)): the gate decides, per hidden unit, how much of up(x) passes."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """One pre-norm transformer block: attention then MLP, each added to the residual stream."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(config.d_model, config.norm_eps)
        self.self_attn = MultiHeadAttention(
            config.d_model, config.n_heads, config.n_kv_heads, head_dim=config.head_dim, qkv_bias=config.qkv_bias,
            qk_norm=(lambda dim: RMSNorm(dim, config.norm_eps)) if config.qk_norm else None)
        self.post_attention_layernorm = RMSNorm(config.d_model, config.norm_eps)
        self.mlp = GatedMLP(config.d_model, config.d_ff)

    def forward(self, x, *, rotary, cache=None, layer_idx=0, return_weights=False, fused=False):
        attn = self.self_attn(self.input_layernorm(x), rotary=rotary, cache=cache, layer_idx=layer_idx,
                              is_causal=True, return_weights=return_weights, fused=fused)
        attn, weights = attn if return_weights else (attn, None)
        x = x + attn  # (B, T, d_model)
        x = x + self.mlp(self.post_attention_layernorm(x))  # (B, T, d_model)
        return (x, weights) if return_weights else x


class Transformer(nn.Module):
    """Decoder-only language model; `model(idx, cache=None)` returns logits (B, T, vocab_size)."""

    def __init__(self, config: ModelConfig, *, generator: torch.Generator | None = None):
        super().__init__()
        if not isinstance(config, ModelConfig):
            raise TypeError(f"Transformer needs a ModelConfig, got {type(config).__name__}; try get_config('tinychat')")
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight  # one matrix, read both ways
        self.rotary = RotaryEmbedding(config.head_dim, config.max_seq_len, theta=config.rope_theta,
                                      scaling=config.rope_scaling, llama3=config.rope_llama3)
        self.init_weights(generator)

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator | None = None) -> None:
        """Normal(0, init_std) weights; the projections that write into the residual stream get
        init_std / sqrt(2 n_layers) so the stream's variance does not grow with depth."""
        std = self.config.init_std
        residual_std = std / math.sqrt(2 * self.config.n_layers)
        for name, param in self.named_parameters():
            if name.endswith(("layernorm.weight", "_norm.weight")) or name == "norm.weight":
                param.fill_(1.0)
            elif name.endswith(".bias"):
                param.zero_()
            elif name.endswith(("o_proj.weight", "down_proj.weight")):
                nn.init.normal_(param, 0.0, residual_std, generator=generator)
            else:
                nn.init.normal_(param, 0.0, std, generator=generator)

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    def num_parameters(self) -> int:
        """Distinct parameters (a tied matrix counts once)."""
        return sum(p.numel() for p in self.parameters())

    def new_cache(self, batch_size: int, max_seq_len: int | None = None) -> KVCache:
        """An empty KV cache for this model, on its device and in its dtype."""
        cfg = self.config
        max_seq_len = cfg.max_seq_len if max_seq_len is None else max_seq_len
        if max_seq_len > cfg.max_seq_len:
            raise ValueError(f"cache length {max_seq_len} exceeds the model's context window "
                             f"max_seq_len={cfg.max_seq_len}")
        return KVCache(cfg.n_layers, batch_size, cfg.n_kv_heads, max_seq_len, cfg.head_dim,
                       device=self.device, dtype=self.dtype)

    def forward(self, idx: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """Token IDs (B, T) -> logits (B, T, vocab_size).

        With a cache, the T tokens sit at positions cache.seq_len..cache.seq_len+T-1: their keys
        and values are written there, they attend to everything cached before them, and the
        cache advances by T.
        """
        return self.lm_head(self.hidden_states(idx, cache))  # (B, T, vocab_size)

    def hidden_states(self, idx: torch.Tensor, cache: KVCache | None = None, *, fused: bool = False) -> torch.Tensor:
        """Token IDs (B, T) -> the final normed states (B, T, d_model) that lm_head reads.

        forward is lm_head of these. Training calls it directly so that it can take logits only
        at the positions it learns (about a fifth of them) and skip the vocabulary projection
        and its softmax everywhere else, and with ``fused=True`` (no cache) so that attention runs
        in torch's fused kernel (``MultiHeadAttention.forward``).
        """
        start = self._check_inputs(idx, cache)
        rotary = self.rotary.slice(start, idx.shape[1])  # (T, D) x2: the new tokens' positions
        x = self.run_layers(self.embed_tokens(idx), rotary, cache, fused=fused)  # (B, T, d_model)
        if cache is not None:
            cache.advance(idx.shape[1])
        return self.norm(x)  # (B, T, d_model)

    def run_layers(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor], cache=None, *,
                   fused: bool = False, weights: list | None = None) -> torch.Tensor:
        """The one loop over the blocks: embeddings x (B, T, d_model) of tokens at the positions
        whose rotary tables (T, D) x2 are given -> the residual stream (B, T, d_model), before the
        final norm. No input checks: hidden_states makes them, and the serving engine's model
        runner, which calls this with its paged cache, has checked its tokens when they arrived.
        ``weights``: a list that receives each layer's attention weights (B, H, T, Tk)."""
        for layer_idx, layer in enumerate(self.layers):
            if weights is None:
                x = layer(x, rotary=rotary, cache=cache, layer_idx=layer_idx, fused=fused)  # (B, T, d_model)
            else:
                x, layer_weights = layer(x, rotary=rotary, cache=cache, layer_idx=layer_idx, return_weights=True)
                weights.append(layer_weights.float())  # (B, H, T, Tk)
        return x

    @torch.no_grad()
    def attention_maps(self, idx: torch.Tensor) -> list[torch.Tensor]:
        """Attention weights of every layer for one uncached pass: a list of (B, n_heads, T, T)."""
        self._check_inputs(idx, None)
        maps: list[torch.Tensor] = []
        self.run_layers(self.embed_tokens(idx), self.rotary.slice(0, idx.shape[1]), weights=maps)
        return maps

    def _check_inputs(self, idx, cache: KVCache | None) -> int:
        """Validate token IDs and cache; return the absolute position of idx[:, 0]."""
        cfg = self.config
        if not isinstance(idx, torch.Tensor):
            raise TypeError(f"token ids must be a torch.Tensor of shape (B, T), got {type(idx).__name__}")
        if idx.dtype == torch.bool or idx.is_floating_point() or idx.is_complex():
            raise TypeError(f"token ids must be an integer tensor (torch.long), got {idx.dtype}; "
                            "did you pass embeddings or probabilities instead of IDs?")
        if idx.dim() != 2 or idx.shape[1] == 0:
            hint = " (use ids.unsqueeze(0) for a single sequence)" if idx.dim() == 1 else ""
            raise ValueError(f"token ids must have shape (B, T) with T >= 1, got {tuple(idx.shape)}{hint}")
        if idx.device != self.device:
            raise ValueError(f"token ids are on {idx.device} but the model is on {self.device}; move one of them")
        lo, hi = (int(x) for x in torch.aminmax(idx))  # one pass; needs a device sync either way
        if lo < 0 or hi >= cfg.vocab_size:
            raise ValueError(f"token ids must lie in [0, {cfg.vocab_size}); got values from {lo} to {hi}")
        n_new = idx.shape[1]
        if cache is not None:
            self._check_cache(cache, idx.shape[0])
            cache.check_room(n_new)
        start = 0 if cache is None else cache.seq_len
        if start + n_new > cfg.max_seq_len:
            raise ValueError(f"sequence of {start + n_new} tokens ({start} cached + {n_new} new) exceeds the "
                             f"context window max_seq_len={cfg.max_seq_len}; truncate the prompt")
        return start

    def _check_cache(self, cache: KVCache, batch_size: int) -> None:
        cfg = self.config
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache (from model.new_cache), got {type(cache).__name__}")
        geometry = (cache.n_layers, cache.n_kv_heads, cache.head_dim)
        if geometry != (cfg.n_layers, cfg.n_kv_heads, cfg.head_dim):
            raise ValueError(f"cache geometry (layers, kv_heads, head_dim) = {geometry} does not match the model's "
                             f"{(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim)}; build it with model.new_cache()")
        if cache.batch_size != batch_size:
            raise ValueError(f"cache was built for batch size {cache.batch_size} but the input has {batch_size} rows")
        if cache.dtype != self.dtype or cache.device != self.device:
            raise ValueError(f"cache is {cache.dtype} on {cache.device} but the model is {self.dtype} on "
                             f"{self.device}; build the cache after moving the model")
