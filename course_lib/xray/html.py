"""An X-ray document (``xray_document``) as one block of HTML for a notebook: the same five
stages as the chat page, drawn without JavaScript (a token's distribution opens under a
``<details>``). Every text from the user or the model is escaped.

>>> doc = {"prompt": {"tokens": [{"id": 1, "text": "<b>", "special": False}], "count": 1, "cached": 0},
...        "timing": {"ttft_ms": 5.0, "decode_tokens_per_s": None, "elapsed_ms": 5.0}, "steps": [],
...        "tokens": [], "params": {"temperature": 0, "seed": None, "top_k": 0, "top_p": 1, "min_p": 0,
...        "structured": False}, "finish": None, "pool": {"num_blocks": 8}, "validation": None, "text": ""}
>>> "&lt;b&gt;" in xray_html(doc) and "<b>" not in xray_html(doc).split("</style>")[1]
True
"""
from __future__ import annotations

import html

__all__ = ["xray_html"]

STYLE = """<style>
.xr{font:13px/1.45 system-ui,sans-serif;color:#1f2937}.xr h4{margin:.8em 0 .2em;font-size:13px}
.xr .chips{display:flex;flex-wrap:wrap;gap:3px;font-family:ui-monospace,monospace;font-size:12px}
.xr .chip{border:1px solid #d1d5db;border-radius:4px;padding:0 4px;white-space:pre;background:#fff}
.xr .special{background:#e0e7ff;border-color:#818cf8;color:#3730a3}.xr .cached{border-style:dashed;border-color:#10b981}
.xr .p{color:#6b7280;font-size:10px;margin-left:3px}.xr .muted{color:#6b7280}
.xr details{display:inline-block;vertical-align:top}.xr details[open]{display:block;border:1px solid #e5e7eb;padding:4px;margin:3px 0}
.xr summary{list-style:none;cursor:pointer}.xr table{border-collapse:collapse;font-size:12px;margin-right:1em;display:inline-table}
.xr td{padding:0 6px;font-family:ui-monospace,monospace;white-space:pre}.xr .chosen td{font-weight:bold}
.xr .masked td{text-decoration:line-through;color:#b91c1c}.xr .bars{display:flex;align-items:flex-end;gap:2px;height:50px;border-bottom:1px solid #9ca3af}
.xr .bar{flex:1 1 0;max-width:14px;background:#a7f3d0}.xr .bar.shared{background:#fbbf24}.xr .bar.prefill{background:#34d399}
</style>"""


def _e(value) -> str:
    return html.escape(str(value))


def _p(p: float) -> str:
    return "1.00" if p >= 0.995 else (f"{p:.2f}" if p >= 0.01 else f"{p:.0e}")


def _chip(token: dict, extra: str = "", label: str = "") -> str:
    cls = "chip" + (" special" if token["special"] else "") + extra
    return f'<span class="{cls}" title="token {token["id"]}">{_e(token["text"])}{label}</span>'


def _table(title: str, rows: list[dict], chosen: int, cls: str = "") -> str:
    body = "".join(f'<tr class="{"chosen" if a["id"] == chosen else cls}"><td>{_e(a["text"])}</td>'
                   f'<td>{_p(a["p"])}</td></tr>' for a in rows) or '<tr><td class="muted">none</td></tr>'
    return f'<table><tr><th colspan="2">{_e(title)}</th></tr>{body}</table>'


def _token(t: dict, index: int, params: dict) -> str:
    draw = ("argmax, no draw" if t["uniform"] is None
            else f"uniform u = {t['uniform']:.6f} from the request's generator (seed {params['seed']})")
    tables = [_table("the model", t["raw"], t["id"]), _table("after the rules", t["tempered"], t["id"]),
              _table("drawn from", t["final"], t["id"])]
    if t["masked"]:
        tables.append(_table("removed by the grammar", t["masked"], -1, "masked"))
    label = f'<span class="p">{_p(t["p"])}</span>'
    return (f'<details><summary>{_chip(t, label=label)}</summary>'
            f'<div class="muted">token {index + 1}, id {t["id"]}, step {t["step"]}: {_e(draw)}</div>'
            f'{"".join(tables)}</details>')


def xray_html(doc: dict) -> str:
    """HTML for one X-ray document (one choice of ``xray_document``'s output)."""
    prompt, timing, params = doc["prompt"], doc["timing"], doc["params"]
    chips = "".join(_chip(t, " cached" if i < prompt["cached"] else "") for i, t in enumerate(prompt["tokens"]))
    ttft = "–" if timing["ttft_ms"] is None else f"{timing['ttft_ms']:.1f} ms"
    rate = "" if not timing["decode_tokens_per_s"] else f" · {timing['decode_tokens_per_s']:.0f} tokens/s decoding"
    steps = doc["steps"]
    most = max([1] + [s["blocks_held"] for s in steps])
    bars = "".join(f'<span class="bar {s["kind"]}{" shared" if s["batch_requests"] > 1 else ""}" '
                   f'style="height:{100 * s["blocks_held"] / most:.0f}%" title="step {s["step"]}: '
                   f'{s["blocks_held"]} blocks, batch of {s["batch_requests"]}"></span>' for s in steps)
    largest = max([0] + [s["batch_requests"] for s in steps])
    finish = doc["finish"]
    if finish is None:
        end = "still generating…"
    else:
        what = finish["token"]["text"] if finish.get("token") else finish["detail"]
        end = (f"finish reason <b>{_e(finish['reason'])}</b>, decided by {_e(finish['cause'])} "
               f"({_e(what)}); KV blocks held after the end: {finish['blocks_held']}")
    if doc.get("validation"):
        end += f"<br>schema check: {_e(doc['validation']['message'])}"
    tokens = "".join(_token(t, i, params) for i, t in enumerate(doc["tokens"]))
    return (f'{STYLE}<div class="xr">'
            f'<h4>1 · Prompt <span class="muted">{prompt["count"]} tokens, {prompt["cached"]} from the prefix cache'
            f'</span></h4><div class="chips">{chips}</div>'
            f'<h4>2 · Prefill and decode <span class="muted">time to first token {ttft}{rate} · '
            f'{timing["elapsed_ms"]:.1f} ms in all</span></h4>'
            f'<h4>3 · Generated tokens <span class="muted">(click one: the distribution it was drawn from)</span></h4>'
            f'<div class="chips">{tokens}</div>'
            f'<h4>4 · Memory and scheduling <span class="muted">{len(steps)} steps, largest batch {largest}, '
            f'up to {most} KV blocks of {doc["pool"]["num_blocks"]}</span></h4><div class="bars">{bars}</div>'
            f'<h4>5 · The end</h4><div>{end}</div></div>')
