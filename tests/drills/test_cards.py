"""The probe bank: one source for every notebook's interview probes and the drills' probe cards."""
from __future__ import annotations

import re
import textwrap
import tomllib
from pathlib import Path

import pytest

from course_lib.drills.cards import (CARD_TOPICS, MAX_POINTS, MIN_POINTS, CardBankError, ProbeCard, cards_for,
                                     follow_ups_of, get_card, load_cards, render_markdown, show_probes)

REPO = Path(__file__).resolve().parents[2]
PROBED = ["00_orientation", "01_tokenization", "02_attention", "03_kv_cache", "04_sampling", "05_structured_output",
          "06_serving", "08_operations"]

GOOD = """
[[card]]
id = "06.first"
notebook = "06_serving"
topic = "serving"
question = "First question?"
strong_points = ["Point one.", "Point two.", "Point three."]
weak_answer = "a weak answer."
follow_ups = ["06.second"]

[[card]]
id = "06.second"
notebook = "06_serving"
topic = "serving"
question = "Second question?"
strong_points = ["Point A.", "Point B.", "Point C."]
weak_answer = "another weak answer."
"""


def bank(tmp_path, text: str) -> Path:
    path = tmp_path / "probes.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_the_course_bank_loads_and_keeps_its_own_rules():
    cards = load_cards()
    assert cards and all(isinstance(card, ProbeCard) for card in cards)
    assert len({card.id for card in cards}) == len(cards)
    for card in cards:
        assert card.id.startswith(card.notebook[:2] + "."), card.id
        assert card.topic in CARD_TOPICS, card.id
        assert MIN_POINTS <= len(card.strong_points) <= MAX_POINTS, card.id
        assert card.question and card.weak_answer and all(point.strip() for point in card.strong_points)
    assert load_cards() is load_cards()  # read once per process


@pytest.mark.parametrize("notebook", PROBED)
def test_every_notebook_has_at_least_three_cards(notebook):
    cards = cards_for(notebook)
    assert len(cards) >= 3, f"{notebook} has {len(cards)} probe cards; give it at least three"
    assert all(card.notebook == notebook for card in cards)


def test_follow_ups_resolve_and_every_chain_ends():
    cards = load_cards()
    ids = {card.id for card in cards}
    assert any(card.follow_ups for card in cards)

    def walk(card, asked):  # an interview that follows every follow-up never asks a card twice
        assert card.id not in asked, f"follow-ups lead back to {card.id}: {asked}"
        for follow_up in follow_ups_of(card):
            walk(follow_up, asked + (card.id,))

    for card in cards:
        assert set(card.follow_ups) <= ids, card.id
        assert [c.id for c in follow_ups_of(card)] == list(card.follow_ups)
        walk(card, ())


def test_get_card_finds_a_card_by_id_and_names_an_unknown_one():
    assert get_card("06.p99-latency").notebook == "06_serving"
    with pytest.raises(KeyError, match="06.nope"):
        get_card("06.nope")


@pytest.mark.parametrize("notebook", PROBED)
def test_render_markdown_shows_every_question_point_weak_answer_and_follow_up(notebook):
    cards = cards_for(notebook)
    text = render_markdown(cards)
    for card in cards:
        assert f'**"{card.question}"**' in text
        for point in card.strong_points:
            assert f"- {point}\n" in text
        assert f"*Typical weak answer:* {card.weak_answer}" in text
        for follow_up in follow_ups_of(card):
            assert f'"{follow_up.question}" (`{follow_up.id}`)' in text
    assert text.count("Strong answer makes these points:") == len(cards)
    assert text.count("Typical weak answer:") == len(cards)


def test_render_markdown_names_a_follow_up_outside_the_bank_by_id(tmp_path):
    first, second = load_cards(bank(tmp_path, GOOD))
    assert '*Follow-up:* "Second question?" (`06.second`)' in render_markdown([first], bank=[first, second])
    assert "*Follow-up:* `06.second`" in render_markdown([first], bank=[])
    assert "Follow-up" not in render_markdown([second], bank=[first, second])


def test_show_probes_displays_the_notebooks_cards_as_markdown(monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objects: shown.extend(objects))
    assert show_probes("06_serving") is None
    (markdown,) = shown
    assert isinstance(markdown, IPython.display.Markdown)
    assert markdown.data == render_markdown(cards_for("06_serving"))
    with pytest.raises(ValueError, match="no probe cards for notebook '99_nothing'.*06_serving"):
        show_probes("99_nothing")


def test_a_good_bank_loads_from_a_path(tmp_path):
    first, second = load_cards(bank(tmp_path, GOOD))
    assert first == ProbeCard("06.first", "06_serving", "serving", "First question?",
                              ("Point one.", "Point two.", "Point three."), "a weak answer.", ("06.second",))
    assert second.follow_ups == ()
    assert cards_for("06_serving", [first, second]) == (first, second) and cards_for("05_x", [first]) == ()


def test_wrapped_text_is_read_as_one_line(tmp_path):
    text = GOOD.replace('"Point one."', '"""Point\n    one."""').replace('question = "First question?"',
                                                                        'question = """First\nquestion?"""')
    first, _ = load_cards(bank(tmp_path, text))
    assert first.strong_points[0] == "Point one." and first.question == "First question?"


SECOND_CARD = GOOD.split("[[card]]")[2]


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('question = "First question?"\n', ""), r"card '06.first': missing field\(s\) question"),
    (lambda t: t.replace('weak_answer = "a weak answer."\n', "").replace('topic = "serving"\nquestion = "First',
                                                                         'question = "First'),
     r"card '06.first': missing field\(s\) topic, weak_answer"),
    (lambda t: t.replace('id = "06.first"\n', ""), r"card 1: missing field\(s\) id"),
    (lambda t: t + "\n[[card]]" + SECOND_CARD.replace("Second question?", "Third question?"),
     r"card '06.second': duplicate id \(cards 2 and 3\)"),
    (lambda t: t.replace("Second question?", "First question?"),
     r"card '06.second': asks the same question as card '06.first'"),
    (lambda t: t.replace('follow_ups = ["06.second"]', 'follow_ups = ["06.third"]'),
     r"card '06.first': follow-up '06.third' is not a card in the bank"),
    (lambda t: t + 'follow_ups = ["06.first"]\n',
     r"card '06.first': follow-ups form a cycle: 06.first -> 06.second -> 06.first"),
    (lambda t: t.replace('follow_ups = ["06.second"]', 'follow_ups = ["06.first"]'),
     r"card '06.first': follow-ups form a cycle: 06.first -> 06.first"),
    (lambda t: t.replace('follow_ups = ["06.second"]', 'follow_ups = ["06.second", "06.second"]'),
     r"card '06.first': follow_ups names a card twice"),
    (lambda t: t.replace('strong_points = ["Point one.", "Point two.", "Point three."]', 'strong_points = ["Only."]'),
     r"card '06.first': strong_points has 1 point\(s\); give 3 to 6"),
    (lambda t: t.replace('"Point three."', '"Point one."'), r"card '06.first': strong_points repeats a point"),
    (lambda t: t.replace('"Point three."', '""'), r"card '06.first': strong_points must be a list of non-empty"),
    (lambda t: t.replace('strong_points = ["Point one.", "Point two.", "Point three."]', 'strong_points = "Point."'),
     r"card '06.first': strong_points must be a list"),
    (lambda t: t.replace('question = "First question?"', 'question = "  "'), r"card '06.first': question must be a non"),
    (lambda t: t.replace('topic = "serving"', 'topic = "astrology"', 1), r"card '06.first': unknown topic 'astrology'"),
    (lambda t: t.replace('id = "06.first"', 'id = "05.first"'), r"card '05.first': id must start with .*'06'"),
    (lambda t: t.replace('id = "06.first"', 'id = "First Card"'), r"card 'First Card': id must be the notebook's"),
    (lambda t: t.replace('notebook = "06_serving"', 'notebook = "serving"', 1), r"card '06.first': notebook 'serving'"),
    (lambda t: t.replace("weak_answer =", "strong_point = 'x'\nweak_answer =", 1),
     r"card '06.first': unknown field\(s\) strong_point"),
    (lambda t: "title = 'probes'\n" + t, r"unexpected top-level key\(s\) 'title'"),
    (lambda t: "# nothing here\n", r"no cards"),
    (lambda t: t.replace('id = "06.first"', 'id = "06.first'), r"not valid TOML"),
])
def test_a_bad_bank_is_refused_with_a_message_naming_the_card(tmp_path, edit, message):
    path = bank(tmp_path, edit(textwrap.dedent(GOOD)))
    with pytest.raises(CardBankError, match=message) as error:
        load_cards(path)
    assert str(path) in str(error.value)


def test_a_missing_bank_file_is_a_card_bank_error(tmp_path):
    with pytest.raises(CardBankError, match="cannot read the probe bank"):
        load_cards(tmp_path / "absent.toml")


def _prose(path: Path) -> str:
    """An authoring file's text as a reader sees it: comment markers, emphasis and line breaks gone."""
    text = re.sub(r"^# ?", "", path.read_text(encoding="utf-8"), flags=re.M)
    return " ".join(text.replace("*", "").split())


def test_the_probe_text_lives_only_in_the_bank():
    authoring = {path.name: _prose(path) for path in sorted((REPO / "grading" / "authoring").glob("*.py"))}
    assert authoring
    for card in load_cards():
        for text in (card.question, card.weak_answer, *card.strong_points):
            copies = [name for name, prose in authoring.items() if " ".join(text.replace("*", "").split()) in prose]
            assert not copies, f"{card.id}: {text!r} is also written in {copies}; keep it only in probes.toml"


def test_the_bank_ships_with_the_package():
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["course_lib"]
    bank_file = REPO / "course_lib" / "drills" / "probes.toml"
    assert any(bank_file in set((REPO / "course_lib").glob(p)) for p in patterns), \
        "list drills/probes.toml under [tool.setuptools.package-data] course_lib in pyproject.toml"
