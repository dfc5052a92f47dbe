"""Peak extra memory (and time) of tiled attention against naive attention, side by side.

Naive attention materialises the (T, T) score matrix per head, so its extra memory grows as
T^2; tiled attention (online softmax over key/value blocks) keeps one block x block tile plus
O(T) running statistics, so its extra memory grows as T.

How memory is measured (printed with the results):
- CUDA: torch.cuda.max_memory_allocated() during the call minus the allocation before it
  (exact bytes handed out by PyTorch's caching allocator).
- CPU: each (method, length) runs in a fresh subprocess; the kernel's peak-RSS counter is reset
  (/proc/self/clear_refs) after the inputs exist, and the result is peak RSS minus RSS before
  the call. This counts whole pages the process touched, includes allocator slack, and is
  noisy by a few MiB; the analytic size of one score matrix is printed beside it for scale.

    python benchmarks/bench_attention.py [--lengths 512 1024 2048 4096] [--block 128] [--device cpu|cuda]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import torch

from course_lib.attention import scaled_dot_product_attention, tiled_attention

MiB = 2**20


def make_inputs(length: int, heads: int, dim: int, device) -> tuple[torch.Tensor, ...]:
    g = torch.Generator(device=device).manual_seed(0)
    return tuple(torch.randn(1, heads, length, dim, generator=g, device=device) for _ in range(3))  # (1, H, T, D)


def run(method: str, q, k, v, block: int) -> torch.Tensor:
    if method == "naive":
        return scaled_dot_product_attention(q, k, v, is_causal=True)
    return tiled_attention(q, k, v, block_size=block, is_causal=True)


def _rss_bytes(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def cpu_worker(method: str, length: int, heads: int, dim: int, block: int) -> dict:
    """Runs inside a fresh subprocess: peak RSS growth during one call, and its time."""
    torch.set_num_threads(1)
    q, k, v = make_inputs(length, heads, dim, "cpu")
    run(method, *(t[..., :block, :] for t in (q, k, v)), block)  # warm-up: load kernels at a tiny size
    out = torch.empty_like(q)
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset VmHWM (peak RSS) to the current RSS
    before = _rss_bytes("VmRSS")
    start = time.perf_counter()
    out.copy_(run(method, q, k, v, block))
    seconds = time.perf_counter() - start
    # The returned tensor (T x D) is counted in both methods; it is output, not overhead.
    return {"extra_bytes": _rss_bytes("VmHWM") - before, "seconds": seconds}


def cuda_measure(method: str, length: int, heads: int, dim: int, block: int) -> dict:
    q, k, v = make_inputs(length, heads, dim, "cuda")
    run(method, *(t[..., :block, :] for t in (q, k, v)), block)  # warm-up
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    start = time.perf_counter()
    out = run(method, q, k, v, block)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    del out
    return {"extra_bytes": torch.cuda.max_memory_allocated() - before, "seconds": seconds}


def measure(method: str, length: int, args) -> dict:
    if args.device == "cuda":
        return cuda_measure(method, length, args.heads, args.dim, args.block)
    cmd = [sys.executable, __file__, "--worker", method, str(length), "--heads", str(args.heads),
           "--dim", str(args.dim), "--block", str(args.block)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    parser.add_argument("--block", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--worker", nargs=2, metavar=("METHOD", "LENGTH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(cpu_worker(args.worker[0], int(args.worker[1]), args.heads, args.dim, args.block)))
        return

    method_note = ("torch.cuda.max_memory_allocated minus allocation before the call" if args.device == "cuda"
                   else "peak RSS growth in a fresh process per cell (VmHWM after clear_refs, minus VmRSS)")
    print(f"causal attention, batch 1, {args.heads} heads, head_dim {args.dim}, fp32, block {args.block}, "
          f"device {args.device}, 1 call per cell")
    print(f"memory measured as: {method_note}")
    print(f"{'T':>6} {'one score matrix':>17} {'naive extra':>12} {'tiled extra':>12} {'mem ratio':>10} "
          f"{'naive s':>9} {'tiled s':>9} {'time ratio':>11}")
    for length in args.lengths:
        naive, tiled = measure("naive", length, args), measure("tiled", length, args)
        scores = args.heads * length * length * 4  # bytes of one fp32 (H, T, T) score tensor
        ratio = naive["extra_bytes"] / max(tiled["extra_bytes"], 1)
        print(f"{length:>6} {scores / MiB:>13.1f} MiB {naive['extra_bytes'] / MiB:>8.1f} MiB "
              f"{tiled['extra_bytes'] / MiB:>8.1f} MiB {ratio:>9.1f}x {naive['seconds']:>9.3f} "
              f"{tiled['seconds']:>9.3f} {tiled['seconds'] / naive['seconds']:>9.2f}x")
    print("mem ratio = naive extra / tiled extra (goal: grows with T, since naive is O(T^2) and tiled O(T)); "
          "time ratio = tiled time / naive time, one call each, so treat it as rough")


if __name__ == "__main__":
    main()
