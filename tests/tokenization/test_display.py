"""Token-boundary display: one coloured span per token, split characters flagged, HTML escaped."""
import re

import pytest

from course_lib.tokenization.display import token_boundaries_html, token_pieces


def test_pieces_are_the_tokens(tiktoken_encodings):
    enc = tiktoken_encodings["cl100k_base"]
    text = "def f(x):\n    return x  # hi"
    assert token_pieces(text, enc) == [enc.decode([i]) for i in enc.encode(text)]
    assert "".join(token_pieces(text, enc)) == text


def test_one_span_per_token_for_ascii(pair):
    tok, enc = pair
    text = "The cat sat on the mat, didn't it?"
    for encoding in (tok, enc):
        html = token_boundaries_html(text, encoding)
        assert html.count("<span") == len(enc.encode(text))
        titles = [int(t) for t in re.findall(r'title="token (\d+)"', html)]
        assert titles == enc.encode(text)


def test_split_characters_are_flagged_and_text_is_escaped(tiktoken_encodings):
    enc = tiktoken_encodings["cl100k_base"]
    html = token_boundaries_html("<b>&</b> 🤷🏽", enc)
    body = html.split("<br>", 1)[1]  # after the header line
    assert "&lt;" in body and "&amp;" in body
    assert "<b>" not in body  # the user's markup never becomes markup
    assert "split over" in html
    assert token_boundaries_html("", enc).count("<span") == 0


def test_bad_text(tiktoken_encodings):
    with pytest.raises(TypeError):
        token_boundaries_html(b"bytes", tiktoken_encodings["cl100k_base"])
