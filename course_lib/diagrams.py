"""Pictures of the course's moving parts, drawn by code so they stay true to the numbers.

    from course_lib.diagrams import request_pipeline, attention_shapes, kv_cache_layout, gqa_head_sharing

    request_pipeline();          # in a notebook: the semicolon shows the picture once
    attention_shapes(batch=1, heads=8, seq=6, head_dim=16);
    kv_cache_layout(layers=4, kv_heads=2, seq=8, head_dim=16, dtype_bytes=2);
    fig = gqa_head_sharing(query_heads=8, kv_heads=2)
    fig.savefig("gqa.png")       # in a script: save it, or call matplotlib.pyplot.show()

Every function returns a ``matplotlib.figure.Figure`` made with ``pyplot.figure`` (so a
notebook's inline backend shows it when the cell ends; end the line with ``;`` or the
picture is shown twice) and drawn with plain patches, arrows and text. Shapes and byte counts
in the pictures are computed from the arguments, and impossible arguments (a non-positive
size, query heads that do not divide evenly among KV heads) raise ValueError.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

__all__ = ["request_pipeline", "attention_shapes", "kv_cache_layout", "gqa_head_sharing"]

NETWORK_COLOR = "#f4a261"  # stages that run the neural network
CODE_COLOR = "#a8dadc"  # stages that are ordinary code
CACHE_COLOR = "#e9c46a"
WIDTH_INCHES = 10  # about the width of a notebook cell at the default DPI


def _require_positive(**sizes: int) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _box(ax, x, y, w, h, text, color, fontsize=10, **kw) -> None:
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                facecolor=color, edgecolor="#333333", linewidth=1.2))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize, **kw)


def _arrow(ax, start, end, **kw) -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14,
                                 color=kw.pop("color", "#333333"), linewidth=1.3, **kw))


def _blank_axes(fig: Figure, xlim, ylim):
    ax = fig.add_subplot(1, 1, 1)
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("auto")
    ax.axis("off")
    return ax


PIPELINE_STAGES = [
    ("messages", "code"),
    ("chat template", "code"),
    ("tokenizer", "code"),
    ("prefill\n(whole prompt)", "network"),
    ("logits", "network"),
    ("decoding rule\n(greedy / sample)", "code"),
    ("decode loop\n+ KV cache", "network"),
    ("stop?\n(end token / cap)", "code"),
    ("detokenize", "code"),
    ("validation /\npost-processing", "code"),
]


def request_pipeline() -> Figure:
    """The stages of one chat request, coloured by whether they run the network or plain code."""
    fig = plt.figure(figsize=(WIDTH_INCHES, 4.2))
    ax = _blank_axes(fig, (0, 10), (0, 4.2))
    w, h = 1.7, 0.9
    top = PIPELINE_STAGES[:5]
    bottom = PIPELINE_STAGES[5:]
    xs = [0.15 + i * 2.0 for i in range(5)]
    centers = {}
    for (label, kind), x in zip(top, xs):
        _box(ax, x, 2.7, w, h, label, NETWORK_COLOR if kind == "network" else CODE_COLOR)
        centers[label] = (x, 2.7)
    # the bottom row runs right to left, so the flow reads as one loop around the page
    for (label, kind), x in zip(bottom, reversed(xs)):
        _box(ax, x, 1.1, w, h, label, NETWORK_COLOR if kind == "network" else CODE_COLOR)
        centers[label] = (x, 1.1)
    for x in xs[:-1]:
        _arrow(ax, (x + w, 3.15), (x + 2.0, 3.15))
    _arrow(ax, (xs[-1] + w / 2, 2.7), (xs[-1] + w / 2, 2.0))
    for x in list(reversed(xs))[:-1]:
        _arrow(ax, (x, 1.55), (x - 2.0 + w, 1.55))
    # the decode loop feeds each new token back until the stop check says otherwise
    loop_x, stop_x = xs[3] + w / 2, xs[2] + w / 2
    _arrow(ax, (stop_x, 1.1), (loop_x, 1.1), connectionstyle="arc3,rad=0.5", color="#9b2226")
    ax.text((loop_x + stop_x) / 2, 0.2, "not done: one more token", ha="center", fontsize=9,
            color="#9b2226")
    ax.add_patch(Rectangle((0.2, 3.75), 0.3, 0.25, facecolor=NETWORK_COLOR, edgecolor="#333333"))
    ax.text(0.6, 3.87, "neural network", va="center", fontsize=10)
    ax.add_patch(Rectangle((2.6, 3.75), 0.3, 0.25, facecolor=CODE_COLOR, edgecolor="#333333"))
    ax.text(3.0, 3.87, "ordinary code", va="center", fontsize=10)
    ax.set_title("One chat request, stage by stage", fontsize=12)
    return fig


def _shape(*dims: str) -> str:
    return "(" + ", ".join(dims) + ")"


def attention_shapes(batch: int = 1, heads: int = 8, seq: int = 6, head_dim: int = 16) -> Figure:
    """Q, K, V, the score matrix, the softmax weights and the output, each labelled with its shape."""
    _require_positive(batch=batch, heads=heads, seq=seq, head_dim=head_dim)
    B, H, T, D = batch, heads, seq, head_dim
    fig = plt.figure(figsize=(WIDTH_INCHES, 4.8))
    ax = _blank_axes(fig, (0, 10), (-0.2, 4.6))
    # matrix sizes on the page follow the true aspect ratio of (T, D) and (T, T), capped to fit
    unit = min(0.3, 1.9 / max(T, D))
    tw, dw = T * unit, D * unit

    def matrix(x, y_mid, cols_w, rows_h, name, dims, color):
        y = y_mid - rows_h / 2
        ax.add_patch(Rectangle((x, y), cols_w, rows_h, facecolor=color, edgecolor="#333333"))
        ax.text(x + cols_w / 2, y + rows_h + 0.1, name, ha="center", fontsize=11, weight="bold")
        ax.text(x + cols_w / 2, y - 0.12, _shape(*dims), ha="center", va="top", fontsize=9)
        return (x, y, cols_w, rows_h)

    btd = (f"B={B}", f"H={H}", f"T={T}", f"D={D}")
    btt = (f"B={B}", f"H={H}", f"T={T}", f"T={T}")
    q = matrix(0.3, 3.1, dw, tw, "Q", btd, "#cdb4db")
    k = matrix(0.3, 1.2, dw, tw, "K", btd, "#bde0fe")
    s = matrix(3.1, 2.15, tw, tw, "scores = Q·Kᵀ/√D", btt, "#ffc8dd")
    wgt = matrix(5.4, 2.15, tw, tw, "weights = softmax", btt, "#ffafcc")
    v = matrix(5.4, 0.55, dw, tw * 0.6 if tw > 0.8 else tw, "V", btd, "#bde0fe")
    out = matrix(7.7, 2.15, dw, tw, "output = weights·V", btd, "#a2d2ff")
    for src in (q, k):
        _arrow(ax, (src[0] + src[2] + 0.05, src[1] + src[3] / 2), (s[0] - 0.05, s[1] + s[3] / 2))
    _arrow(ax, (s[0] + s[2] + 0.05, s[1] + s[3] / 2), (wgt[0] - 0.05, wgt[1] + wgt[3] / 2))
    _arrow(ax, (wgt[0] + wgt[2] + 0.05, wgt[1] + wgt[3] / 2), (out[0] - 0.05, out[1] + out[3] / 2))
    _arrow(ax, (v[0] + v[2] + 0.05, v[1] + v[3] / 2), (out[0] + out[2] / 2, out[1] - 0.45))
    ax.text(5.0, 4.25, f"causal mask: row t may only look at columns 0..t  ·  "
            f"score entries per head: T×T = {T * T}", ha="center", fontsize=9)
    ax.set_title(f"Attention for batch={B}, heads={H}, seq={T}, head_dim={D}", fontsize=12)
    return fig


def kv_cache_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """K and V, every layer, every KV head: the bytes one more cached token costs."""
    _require_positive(layers=layers, kv_heads=kv_heads, head_dim=head_dim, dtype_bytes=dtype_bytes)
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def kv_cache_layout(layers: int = 4, kv_heads: int = 2, seq: int = 8, head_dim: int = 16,
                    dtype_bytes: int = 2) -> Figure:
    """Per layer, a K block and a V block of kv_heads × seq × head_dim, with the bytes per token."""
    _require_positive(layers=layers, kv_heads=kv_heads, seq=seq, head_dim=head_dim,
                      dtype_bytes=dtype_bytes)
    per_token = kv_cache_bytes_per_token(layers, kv_heads, head_dim, dtype_bytes)
    shown_layers = min(layers, 6)  # beyond six the picture only gets smaller, not clearer
    fig = plt.figure(figsize=(WIDTH_INCHES, 1.4 + 0.85 * shown_layers))
    height = 1.4 + 0.85 * shown_layers
    ax = _blank_axes(fig, (0, 10), (0, height))
    cell_w = min(0.3, 3.6 / seq)
    for row in range(shown_layers):
        layer = row if row < shown_layers - 1 or layers == shown_layers else layers - 1
        y = height - 1.1 - row * 0.85
        ax.text(0.1, y + 0.3, f"layer {layer}", va="center", fontsize=10)
        for block, (name, x0) in enumerate((("K", 1.2), ("V", 5.6))):
            for t in range(seq):
                ax.add_patch(Rectangle((x0 + t * cell_w, y), cell_w, 0.6, facecolor=CACHE_COLOR,
                                       edgecolor="#555555", linewidth=0.6))
            ax.text(x0 + seq * cell_w + 0.1, y + 0.3, name, va="center", fontsize=10, weight="bold")
        if row == shown_layers - 2 and layers > shown_layers:
            ax.text(5.0, y - 0.12, f"⋮  ({layers - shown_layers} more layers)", ha="center",
                    va="center", fontsize=9)
    ax.text(1.2, height - 0.35,
            f"each block: kv_heads × seq × head_dim = {kv_heads} × {seq} × {head_dim}  "
            f"(one column per cached token)", fontsize=9)
    ax.text(5.0, 0.2,
            f"bytes per token = 2 (K and V) × {layers} layers × {kv_heads} kv_heads × {head_dim} "
            f"head_dim × {dtype_bytes} bytes = {per_token:,}   ·   {seq} tokens = {per_token * seq:,} bytes",
            ha="center", fontsize=9)
    ax.set_title("KV cache layout", fontsize=12)
    return fig


def gqa_head_sharing(query_heads: int = 8, kv_heads: int = 2) -> Figure:
    """Which query heads read which KV head; MHA (one KV head each) and MQA (one shared) beside it."""
    _require_positive(query_heads=query_heads, kv_heads=kv_heads)
    if kv_heads > query_heads or query_heads % kv_heads:
        raise ValueError(f"query_heads ({query_heads}) must be a multiple of kv_heads ({kv_heads}): "
                         "each KV head serves the same number of query heads")
    fig = plt.figure(figsize=(WIDTH_INCHES, 5.4))
    ax = _blank_axes(fig, (0, 10), (0, 5.4))
    panels = [("MHA", query_heads, query_heads), ("GQA", query_heads, kv_heads),
              ("MQA", query_heads, 1)]
    for p, (name, n_q, n_kv) in enumerate(panels):
        x0 = 0.2 + p * 3.3
        group = n_q // n_kv
        ax.text(x0 + 1.45, 4.95, name, ha="center", fontsize=11, weight="bold")
        ax.text(x0 + 1.45, 4.6, f"{n_q} query heads, {n_kv} KV head{'s' * (n_kv != 1)}",
                ha="center", fontsize=9)
        ax.text(x0 + 1.45, 4.3, f"{group} query head{'s' * (group != 1)} per KV head",
                ha="center", fontsize=9)
        q_w = 2.9 / n_q
        kv_w = 2.9 / n_kv
        palette = ["#e76f51", "#2a9d8f", "#e9c46a", "#264653", "#f4a261", "#8ab17d", "#b5838d",
                   "#6d6875"]
        for i in range(n_q):
            color = palette[(i // group) % len(palette)]
            ax.add_patch(Rectangle((x0 + i * q_w, 3.3), q_w * 0.85, 0.6, facecolor=color,
                                   edgecolor="#333333"))
            if n_q <= 16:
                ax.text(x0 + i * q_w + q_w * 0.425, 3.6, f"q{i}", ha="center", va="center",
                        fontsize=7 if n_q > 8 else 8, color="white")
            kv = i // group
            _arrow(ax, (x0 + i * q_w + q_w * 0.425, 3.3), (x0 + kv * kv_w + kv_w * 0.425, 1.9),
                   color="#777777")
        for j in range(n_kv):
            ax.add_patch(Rectangle((x0 + j * kv_w, 1.3), kv_w * 0.85, 0.6,
                                   facecolor=palette[j % len(palette)], edgecolor="#333333"))
            if n_kv <= 16:
                ax.text(x0 + j * kv_w + kv_w * 0.425, 1.6, f"kv{j}", ha="center", va="center",
                        fontsize=7 if n_kv > 8 else 8, color="white")
        ax.text(x0 + 1.45, 0.8, f"KV cache: {n_kv}/{n_q} of MHA's", ha="center", fontsize=9)
    ax.text(5.0, 0.2, "query heads (top) read the keys and values of the KV head below them",
            ha="center", fontsize=9)
    ax.set_title("Grouped-query attention: sharing KV heads", fontsize=12)
    return fig
