"""Memory of a few real accelerators, for capacity planning.

Representative figures: the memory and bandwidth vendors publish for each part, read as
decimal units (80 GB = 80e9 bytes). What the driver reports as usable differs a little
(firmware, ECC, context), so treat the numbers as planning figures, not measurements.

>>> get_accelerator("H100-80GB").memory_bytes
80000000000
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from course_lib.validation import positive_number


@dataclass(frozen=True)
class Accelerator:
    name: str
    memory_gb: float          # published memory capacity, decimal GB
    bandwidth_gb_s: float     # published peak memory bandwidth, decimal GB/s
    representative: bool = True  # vendor figures, not measured here
    note: str = ""

    def __post_init__(self) -> None:
        positive_number("memory_gb", self.memory_gb)
        positive_number("bandwidth_gb_s", self.bandwidth_gb_s)

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gb * 10**9)


_ACCELERATORS = (
    Accelerator("A100-40GB", 40, 1555, note="NVIDIA A100 SXM, HBM2"),
    Accelerator("A100-80GB", 80, 2039, note="NVIDIA A100 SXM, HBM2e"),
    Accelerator("H100-80GB", 80, 3350, note="NVIDIA H100 SXM, HBM3"),
    Accelerator("H200-141GB", 141, 4800, note="NVIDIA H200 SXM, HBM3e"),
    Accelerator("L4-24GB", 24, 300, note="NVIDIA L4, GDDR6, inference card"),
    Accelerator("MI300X-192GB", 192, 5300, note="AMD Instinct MI300X, HBM3"),
)

ACCELERATORS: Mapping[str, Accelerator] = MappingProxyType({a.name: a for a in _ACCELERATORS})


def get_accelerator(name: str | Accelerator) -> Accelerator:
    """Registry lookup, case-insensitive; ``"h100"`` finds ``"H100-80GB"`` when unambiguous."""
    if isinstance(name, Accelerator):
        return name
    if not isinstance(name, str):
        raise TypeError(f"accelerator name must be a str, got {type(name).__name__}")
    wanted = name.strip().upper().replace(" ", "-").replace("_", "-")
    if wanted in ACCELERATORS:
        return ACCELERATORS[wanted]
    matches = [key for key in ACCELERATORS if key.startswith(wanted + "-") or key == wanted]
    if len(matches) == 1:
        return ACCELERATORS[matches[0]]
    hint = f" ({' or '.join(matches)}?)" if matches else ""
    raise ValueError(f"unknown accelerator {name!r}{hint}; known: {', '.join(ACCELERATORS)}")
