"""The notebook panel (course_lib.xray.panel) and its HTML: the same X-ray as the chat page."""
from __future__ import annotations

from course_lib.xray.panel import xray_panel


def test_a_message_sent_from_the_panel_is_xrayed_and_drawn(model, tok):
    panel = xray_panel(model=model, tokenizer=tok)
    doc = panel.send("What is 2 + 2?")
    assert doc["finish"]["reason"] == "stop" and doc["finish"]["blocks_held"] == 0
    assert "1 · Prompt" in panel.xray.value and "5 · The end" in panel.xray.value
    assert panel.xray.value.count("<details>") == len(doc["tokens"])
    assert [m["role"] for m in panel.messages] == ["user", "assistant"]
    again = panel.send("And 3 + 3?")  # the conversation goes on: the second prompt holds the first turn
    assert again["prompt"]["count"] > doc["prompt"]["count"] + len(doc["tokens"])


def test_markup_in_a_message_is_shown_as_text(model, tok):
    panel = xray_panel(model=model, tokenizer=tok)
    panel.send("<img src=x onerror=alert(1)>")
    assert "<img" not in panel.chat.value and "&lt;img src=x" in panel.chat.value
    assert "<img" not in panel.xray.value


def test_a_message_too_long_for_the_window_is_refused_and_the_panel_keeps_working(model, tok):
    panel = xray_panel(model=model, tokenizer=tok)
    assert panel.send("word " * 800) == {}
    assert "context window" in panel.status.value and panel.messages == []
    assert panel.send("Hi")["finish"] is not None and panel.status.value == ""


def test_pressing_enter_in_the_text_box_sends_it(model, tok):
    panel = xray_panel(model=model, tokenizer=tok)
    panel.input.value = "What is 2 + 2?"  # what the browser does on Enter (continuous_update off)
    assert panel.input.value == "" and panel.document["text"]
