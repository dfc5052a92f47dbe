"""The chat page of `course serve` in a real browser: type, press Enter, watch the X-ray.

One server for the module (the shipped model; two running slots and no waiting room, so a
third request at once gets 429; every engine step paced to at least STEP_S, so a long reply
outlasts the clicks that start the next one on a machine of any speed). Each test drives the
page as a person would and reads what the page shows; the numbers behind it are checked
against the engine in tests/api/test_xray_api.py.
"""
from __future__ import annotations

import time

import httpx
import pytest

from course_lib.api.server import create_app
from course_lib.model import load_model, load_tokenizer
from tests.api.conftest import _serve
from tests.conftest import slow_fixture

LONG = {"max_tokens": "480", "ignore_eos": True}  # a reply that runs to max_tokens (nearly the window)
STEP_S = 0.02  # a LONG reply then lasts >= 9.6 s: unpaced, a fast CPU finished one before the next began


def pace(runner, seconds: float) -> None:
    """Make each of ``runner``'s passes take at least ``seconds`` (the model's math unchanged)."""
    run = runner.run

    def paced(*args, **kwargs):
        start = time.monotonic()
        logits = run(*args, **kwargs)
        time.sleep(max(0.0, seconds - (time.monotonic() - start)))
        return logits
    runner.run = paced


@slow_fixture(scope="module")
def chat_url(tmp_path_factory):
    app = create_app(load_model("tinychat", device="cpu"), load_tokenizer("tinychat"), max_num_seqs=2, max_waiting=0,
                     trace_log=tmp_path_factory.mktemp("trace") / "trace.jsonl")
    pace(app.state.async_engine.engine.runner, STEP_S)
    with _serve(app) as url:
        yield url


def used_blocks(url: str) -> int:
    return httpx.get(f"{url}/course/pool", timeout=10).json()["num_used_blocks"]


def wait_until_running(url: str, count: int, timeout_s: float = 60) -> None:
    """Until the engine reports ``count`` running requests (both slots taken)."""
    deadline = time.monotonic() + timeout_s
    while httpx.get(f"{url}/course/pool", timeout=10).json()["num_running"] != count:
        assert time.monotonic() < deadline, f"the engine never had {count} requests running"
        time.sleep(0.05)


def open_chat(page, url: str, settings: dict | None = None):
    page.goto(url + "/")
    if settings:
        page.click("#settings summary")
        for name, value in settings.items():
            if value is True:
                page.check(f"#{name}")
            else:
                page.fill(f"#{name}", value)
    return page


def ask(page, text: str) -> None:
    page.fill("#input", text)
    page.press("#input", "Enter")


def wait_for_reply(page) -> None:
    """Until the reply has finished (Send is enabled again) and its X-ray says how it ended."""
    page.wait_for_function("() => !document.querySelector('#send').disabled"
                           " && document.querySelector('#finish').textContent.includes('finish reason')")


def test_a_message_streams_its_reply_and_every_stage_of_its_xray(page, chat_url, artifacts):
    open_chat(page, chat_url, {"temperature": "0.7", "seed": "3", "top_k": "5"})
    ask(page, "What is 2 + 2?")
    page.wait_for_selector(".message.assistant")
    wait_for_reply(page)
    reply = page.inner_text(".message.assistant")
    assert "4" in reply
    chips = page.locator("#prompt-tokens .chip")
    assert chips.count() > 4 and page.locator("#prompt-tokens .chip.special").count() >= 3
    generated = page.locator("#reply-tokens .chip.generated")
    assert generated.count() >= 3
    assert all(0 <= float(generated.nth(i).locator(".p").inner_text()) <= 1 for i in range(generated.count()))
    generated.nth(1).click()
    box = page.locator("#distribution")
    assert box.is_visible() and box.locator(".stage").count() == 3
    assert box.locator(".alt.chosen").count() >= 2  # the chosen token in the raw and the drawn-from stages
    assert "seed 3" in box.inner_text() and "uniform u =" in box.inner_text()
    assert "top_k 5" in box.inner_text()
    page.click("#show-attention")
    page.wait_for_selector("#attention .heat")
    assert page.locator("#attention .layer").count() == 4  # tinychat's layers
    assert "second pass of the reference transformer" in page.inner_text("#attention")
    assert "time to first token" in page.inner_text("#timing-summary")
    assert page.get_attribute("#steps", "data-blocks-after") == "0"
    assert "end token: <|end|>" in page.inner_text("#finish")
    assert "trace record (redacted)" in page.inner_text("#finish") and '"final_state": "answered"' in page.inner_text("#finish")
    assert used_blocks(chat_url) == 0
    page.screenshot(path=str(artifacts / "chat-xray.png"), full_page=True)


def test_a_schema_reply_shows_what_the_grammar_mask_removed(page, chat_url, artifacts):
    open_chat(page, chat_url, {"temperature": "0", "max_tokens": "40"})
    page.fill("#schema", '{"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}')
    ask(page, "Is the sky blue?")
    wait_for_reply(page)
    page.locator("#reply-tokens .chip.generated").first.click()  # "{": the model wanted words
    masked = page.locator("#distribution .alt.masked")
    assert masked.count() >= 1
    assert "parses and fits the schema" in page.inner_text("#finish")
    page.screenshot(path=str(artifacts / "chat-schema-mask.png"), full_page=True)


def test_two_pages_share_a_batch_and_a_third_is_told_the_queue_is_full(browser, chat_url, artifacts):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(60_000)
    try:
        first, second, third = (open_chat(context.new_page(), chat_url, LONG) for _ in range(3))
        ask(first, "Tell me a long story about the sea.")
        first.wait_for_selector("#reply-tokens .chip.generated")
        ask(second, "Tell me a long story about the sky.")
        second.wait_for_selector("#reply-tokens .chip.generated")
        wait_until_running(chat_url, 2)  # both slots taken, and no waiting room: the third is refused
        ask(third, "And one more?")
        third.wait_for_selector(".message.error")
        assert "busy" in third.inner_text(".message.error") and "429" in third.inner_text(".message.error")
        third.screenshot(path=str(artifacts / "chat-queue-full.png"))
        for page in (first, second):
            wait_for_reply(page)
        assert max(int(p.get_attribute("#steps", "data-largest-batch")) for p in (first, second)) == 2
        second.screenshot(path=str(artifacts / "chat-batch-of-two.png"), full_page=True)
    finally:
        context.close()
    assert used_blocks(chat_url) == 0


def test_stop_aborts_the_request_and_frees_its_blocks(page, chat_url):
    open_chat(page, chat_url, LONG)
    ask(page, "Tell me a long story about the mountains.")
    page.wait_for_selector("#reply-tokens .chip.generated")
    page.click("#stop")
    page.wait_for_function("() => !document.querySelector('#send').disabled")
    assert "[stopped]" in page.inner_text(".message.assistant")
    page.wait_for_function("() => document.querySelector('#finish').textContent.includes('abort')")
    assert used_blocks(chat_url) == 0


@pytest.mark.parametrize("text", [
    "<img src=x onerror=alert(1)>",
    "<script>document.title = 'owned'</script>",
    "مرحبا، ما هو 2 + 2؟ 🎉👩‍👩‍👧",
])
def test_markup_emoji_and_right_to_left_text_arrive_as_text(page, chat_url, text):
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    open_chat(page, chat_url, {"temperature": "0", "max_tokens": "24"})
    ask(page, text)
    wait_for_reply(page)
    assert page.inner_text(".message.user") == text
    assert page.locator("#messages img, #messages script").count() == 0
    assert dialogs == [] and page.title() != "owned"


def test_a_message_longer_than_the_window_gets_a_message_and_the_page_keeps_working(page, chat_url):
    open_chat(page, chat_url, {"temperature": "0", "max_tokens": "16"})
    ask(page, "word " * 800)  # 4,000 characters: more tokens than tinychat's window
    page.wait_for_selector(".message.error")
    assert "maximum context length" in page.inner_text(".message.error")
    ask(page, "What is 2 + 2?")
    wait_for_reply(page)
    assert page.locator(".message.assistant").count() == 1
