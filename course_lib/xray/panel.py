"""The request X-ray in JupyterLab: type a message, press Enter, watch the stages appear.

    xray_panel()                      # any cell: chat with tinychat, X-rayed
    xray_panel("What is 2 + 2?")      # and send a first message at once

The panel drives a course ``Engine`` in the kernel (no server needed) and draws, for each
reply, the same X-ray document as the chat page of ``course serve`` (``xray_document``),
redrawn every few engine steps while the reply grows. Settings: temperature, top-p, top-k
and a seed; "New chat" forgets the conversation.
"""
from __future__ import annotations

from html import escape as _escape

import ipywidgets as widgets

from course_lib.sampling.params import SamplingParams
from course_lib.serving.engine import Engine
from course_lib.serving.xray import RequestXray
from course_lib.xray.document import xray_document
from course_lib.xray.html import xray_html

__all__ = ["XrayPanel", "xray_panel"]

REDRAW_EVERY = 4  # engine steps between redraws while a reply streams
MAX_TOKENS = 96


def xray_panel(message: str | None = None, *, model=None, tokenizer=None, seed: int | None = 0) -> "XrayPanel":
    """An X-ray panel over ``model`` (default: the shipped tinychat on the CPU); ``message``,
    if given, is sent at once so the cell's output already shows one X-ray."""
    if model is None or tokenizer is None:
        from course_lib.model import load_model, load_tokenizer
        model = load_model("tinychat", device="cpu") if model is None else model
        tokenizer = load_tokenizer("tinychat") if tokenizer is None else tokenizer
    panel = XrayPanel(model, tokenizer, seed=seed)
    if message:
        panel.send(message)
    return panel


class XrayPanel(widgets.VBox):
    """A chat box over an in-kernel engine, with the X-ray of the latest reply."""

    def __init__(self, model, tokenizer, *, seed: int | None = 0):
        self.engine = Engine(model, tokenizer, max_num_seqs=1)
        self.tokenizer = tokenizer
        self.messages: list[dict] = []
        self.input = widgets.Text(placeholder="Type a message and press Enter", continuous_update=False,
                                  layout=widgets.Layout(width="60%"))
        self.temperature = widgets.FloatSlider(value=0.7, min=0.0, max=2.0, step=0.1, description="temperature")
        self.top_p = widgets.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.05, description="top_p")
        self.top_k = widgets.IntSlider(value=0, min=0, max=50, description="top_k")
        self.seed = widgets.IntText(value=0 if seed is None else seed, description="seed")
        self.clear = widgets.Button(description="New chat")
        self.chat = widgets.HTML()
        self.xray = widgets.HTML()
        self.status = widgets.HTML()
        self.input.observe(self._on_enter, names="value")
        self.clear.on_click(lambda _: self._reset())
        settings = widgets.HBox([self.temperature, self.top_p, self.top_k, self.seed])
        super().__init__([widgets.HBox([self.input, self.clear]), settings, self.status, self.chat, self.xray])
        self.add_class("course-xray-panel")
        self.document: dict | None = None

    def _on_enter(self, change) -> None:
        text = change["new"]
        if text.strip():
            self.input.value = ""
            self.send(text)

    def _reset(self) -> None:
        self.messages = []
        self.chat.value = self.xray.value = self.status.value = ""

    def send(self, text: str) -> dict:
        """Send ``text`` as the next user turn; returns the finished reply's X-ray document."""
        self.messages.append({"role": "user", "content": text})
        params = SamplingParams(temperature=self.temperature.value, top_p=self.top_p.value, top_k=self.top_k.value,
                                seed=self.seed.value, max_new_tokens=MAX_TOKENS)
        xray = RequestXray()
        try:
            self.engine.add_request(self.messages, params, xray=xray)
        except ValueError as error:  # too long for the window, say: say so and keep the panel
            self.messages.pop()
            self.status.value = f'<span style="color:#b91c1c">{_escape(str(error))}</span>'
            return {}
        self.status.value = ""
        steps = 0
        while self.engine.has_unfinished():
            self.engine.step()
            steps += 1
            if steps % REDRAW_EVERY == 0 and self.engine.has_unfinished():  # the finished one is drawn once, below
                self._draw(xray)
        self.document = self._draw(xray)
        self.messages.append({"role": "assistant", "content": self.document["text"]})
        return self.document

    def _draw(self, xray: RequestXray) -> dict:
        doc = xray_document(xray, self.tokenizer, num_blocks=self.engine.block_manager.num_blocks)
        # self.messages ends with the user's turn here: send() appends the reply after the last draw
        turns = self.messages + [{"role": "assistant", "content": doc["text"] + ("" if xray.finish else " …")}]
        self.chat.value = "".join(
            f'<div style="margin:2px 0;padding:3px 6px;border-radius:6px;white-space:pre-wrap;'
            f'background:{"#dbeafe" if m["role"] == "user" else "#f3f4f6"}"><b>{m["role"]}</b>: '
            f'{_escape(m["content"])}</div>' for m in turns)
        self.xray.value = xray_html(doc)
        return doc
