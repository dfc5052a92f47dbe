"""How many sequences fit: memory left after the weights and a reserve, over KV bytes each.

    max sequences = floor((memory - weights - reserve) / KV bytes per sequence)

>>> max_concurrent_sequences(80 * 10**9, 16 * 10**9, 2 * 10**9, reserve_bytes=8 * 10**9)
28
>>> plan = plan_capacity("llama-3-8b", 8192, accelerator="H100-80GB")
>>> plan.max_sequences      # bf16 weights and cache, 10% reserve
52
"""
from __future__ import annotations

from dataclasses import dataclass

from course_lib.validation import non_negative_int, non_negative_number, positive_int
from course_lib.kv_memory.accelerators import Accelerator, get_accelerator
from course_lib.kv_memory.formula import format_bytes
from course_lib.kv_memory.geometries import ModelGeometry, get_geometry


def max_concurrent_sequences(
    memory_bytes: int, weight_bytes: int, kv_bytes_per_sequence: int, *, reserve_bytes: int = 0
) -> int:
    """Whole sequences whose caches fit beside the weights and the reserve (0 if none do)."""
    positive_int("memory_bytes", memory_bytes)
    non_negative_int("weight_bytes", weight_bytes)
    positive_int("kv_bytes_per_sequence", kv_bytes_per_sequence)
    non_negative_int("reserve_bytes", reserve_bytes)
    free = memory_bytes - weight_bytes - reserve_bytes
    return max(0, free // kv_bytes_per_sequence)


@dataclass(frozen=True)
class CapacityPlan:
    model: str
    seq_len: int
    memory_bytes: int          # total across the devices that share the model
    weight_bytes: int
    reserve_bytes: int         # activations, workspace, fragmentation, runtime
    kv_bytes_per_sequence: int
    max_sequences: int

    @property
    def kv_budget_bytes(self) -> int:
        """Memory left for the KV cache (negative when the weights alone do not fit)."""
        return self.memory_bytes - self.weight_bytes - self.reserve_bytes

    @property
    def fits_weights(self) -> bool:
        return self.kv_budget_bytes > 0

    @property
    def max_tokens_in_cache(self) -> int:
        """Tokens the KV budget holds in total, however they are split across sequences."""
        per_token = self.kv_bytes_per_sequence // self.seq_len
        return max(0, self.kv_budget_bytes) // per_token

    def summary(self) -> str:
        lines = [
            f"{self.model}, {self.seq_len:,} tokens per sequence",
            f"  memory        {format_bytes(self.memory_bytes)}",
            f"  - weights     {format_bytes(self.weight_bytes)}",
            f"  - reserve     {format_bytes(self.reserve_bytes)}",
            f"  = KV budget   {format_bytes(max(0, self.kv_budget_bytes))}",
            f"  KV / sequence {format_bytes(self.kv_bytes_per_sequence)}",
            f"  -> {self.max_sequences} concurrent sequences",
        ]
        if not self.fits_weights:
            lines.append("  (the weights and reserve alone exceed the memory: add devices or quantize)")
        return "\n".join(lines)


def plan_capacity(
    model: str | ModelGeometry,
    seq_len: int,
    *,
    accelerator: str | Accelerator | None = None,
    memory_bytes: int | None = None,
    n_devices: int = 1,
    weight_dtype: object = "bf16",
    kv_dtype: object = "bf16",
    reserve_fraction: float = 0.10,
    reserve_bytes: int | None = None,
) -> CapacityPlan:
    """Capacity of ``n_devices`` accelerators (weights and cache split evenly across them).

    Give either ``accelerator`` (a name from ``ACCELERATORS``) or ``memory_bytes`` per device.
    The reserve defaults to 10% of memory, the slack serving engines such as vLLM leave by
    default; pass ``reserve_bytes`` to set it exactly.
    """
    geometry = get_geometry(model)
    positive_int("seq_len", seq_len)
    positive_int("n_devices", n_devices)
    if (accelerator is None) == (memory_bytes is None):
        raise ValueError("give exactly one of accelerator= (a name such as 'H100-80GB') or memory_bytes=")
    per_device = get_accelerator(accelerator).memory_bytes if accelerator is not None else memory_bytes
    positive_int("memory_bytes", per_device)
    total = per_device * n_devices
    if reserve_bytes is None:
        non_negative_number("reserve_fraction", reserve_fraction)
        if reserve_fraction >= 1:
            raise ValueError(f"reserve_fraction must be below 1 (a share of memory), got {reserve_fraction}")
        reserve = int(total * reserve_fraction)
    else:
        reserve = non_negative_int("reserve_bytes", reserve_bytes)
    weights = geometry.weight_bytes(weight_dtype)
    kv_per_sequence = geometry.kv_cache_bytes(seq_len, kv_dtype)
    count = max_concurrent_sequences(total, weights, kv_per_sequence, reserve_bytes=reserve)
    return CapacityPlan(geometry.name, seq_len, total, weights, reserve, kv_per_sequence, count)
