"""RegexGuide / JSONGuide: the token mask is exact (neither too tight nor too loose).

Oracles: on tiny vocabularies, a brute force over every string of the language up to a
length; on cl100k_base and the tinychat vocabulary, llguidance's own mask at every prefix of
many sample strings of many regexes.

One documented difference: where the grammar forces the next bytes (after "y" in yes|no,
"es" is forced), llguidance deliberately allows only the canonical tokenization of those
bytes (llguidance issue #263, guidance issue #1352), while the course guide allows every
token that keeps the output a live prefix ("e" as well as "es"). There the test checks that
llguidance's mask is contained in ours and that each extra token spells a piece of the
forced bytes; everywhere else the masks must be equal.
"""
from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest
import torch

from course_lib.model import load_tokenizer
from course_lib.structured.errors import UnsupportedPattern
from course_lib.structured.guide import JSONGuide, RegexGuide
from course_lib.structured.vocabulary import TokenVocabulary
from course_lib.tokenization import get_encoding

# ------------------------------------------------------------------ tiny vocabularies, brute force
# Every character the tokens below can spell, partial tokens combined: \xc3 + \xac is "ì" and
# \xe2\x82 + \xa9 is "₩", so both belong to the oracle's alphabet.
ALPHABET = ("a", "b", "é", "€", "1", "-", "ì", "₩")
TINY_TOKENS = [c.encode() for c in ALPHABET] + [
    b"ab", b"ba", b"aa", b"\xc3", b"\xa9", b"\xe2\x82", b"\xac", b"\xa9a", b"1-", b"-1", "é€".encode(),
    b"\xff", b"a\xc3",
]
TINY_EOS = len(TINY_TOKENS)
TINY_PATTERNS = ["ab|ba", "[aé]{1,3}", "(?:ab|é€)?1{1,2}", "a?b?é?", "€-?1|aa", "[^a]{2}", "(?:a|é)(?:b|€)?",
                 ".{0,2}1", "[a-é]{2}"]


def _language(pattern: str, max_len: int = 4) -> list[bytes]:
    """Every string over ALPHABET up to max_len that the pattern fullmatches, UTF-8 encoded."""
    return [("".join(chars)).encode() for n in range(max_len + 1)
            for chars in itertools.product(ALPHABET, repeat=n) if re.fullmatch(pattern, "".join(chars))]


def _brute_force_allowed(language: list[bytes], prefix: bytes) -> list[int]:
    allowed = [t for t, tb in enumerate(TINY_TOKENS) if any(s.startswith(prefix + tb) for s in language)]
    return allowed + ([TINY_EOS] if prefix in language else [])


@pytest.mark.parametrize("pattern", TINY_PATTERNS)
def test_tiny_vocabulary_masks_equal_the_brute_force_oracle(pattern):
    vocab = TokenVocabulary.from_token_bytes(TINY_TOKENS, eos_id=TINY_EOS)
    guide = RegexGuide(pattern, vocab)
    language = _language(pattern)
    # Walk every token path of up to 4 tokens that the guide allows, comparing at each prefix.
    frontier, checked = [(guide.initial_state, b"")], 0
    for _ in range(4):
        nxt = []
        for state, prefix in frontier:
            assert guide.allowed_tokens(state) == _brute_force_allowed(language, prefix), (pattern, prefix)
            assert guide.is_accepting(state) == (prefix in language)
            checked += 1
            nxt += [(guide.next_state(state, t), prefix + TINY_TOKENS[t]) for t in guide.allowed_tokens(state)
                    if t != TINY_EOS]
        frontier = nxt
    assert checked > 3


def test_a_token_that_ends_inside_a_character_is_allowed_only_when_the_character_can_finish():
    vocab = TokenVocabulary.from_token_bytes(TINY_TOKENS, eos_id=TINY_EOS)
    guide = RegexGuide("é+", vocab)
    first_half = TINY_TOKENS.index(b"\xc3")
    state = guide.next_state(guide.initial_state, first_half)
    assert guide.allowed_tokens(state) == [TINY_TOKENS.index(b"\xa9")]  # only the rest of "é"
    assert not guide.is_accepting(state)
    assert not guide.is_allowed(guide.initial_state, TINY_TOKENS.index(b"\xa9"))  # a lone continuation byte
    assert not guide.is_allowed(guide.initial_state, TINY_TOKENS.index(b"\xff"))   # never valid UTF-8


def test_mask_and_allowed_tokens_agree_and_eos_only_in_accepting_states():
    vocab = TokenVocabulary.from_token_bytes(TINY_TOKENS, eos_id=TINY_EOS)
    guide = RegexGuide("a{1,2}", vocab)
    for state in range(guide.n_states):
        mask = guide.mask(state)
        assert mask.dtype == torch.bool and mask.shape == (vocab.size,)
        assert mask.nonzero().flatten().tolist() == guide.allowed_tokens(state)
        assert bool(mask[TINY_EOS]) == guide.is_accepting(state)
    assert guide.masks([0, 0]).shape == (2, vocab.size)


def test_next_state_refuses_a_forbidden_token_and_a_bad_state():
    vocab = TokenVocabulary.from_token_bytes(TINY_TOKENS, eos_id=TINY_EOS)
    guide = RegexGuide("ab", vocab)
    with pytest.raises(ValueError, match="not allowed"):
        guide.next_state(guide.initial_state, TINY_TOKENS.index(b"b"))
    with pytest.raises(ValueError, match="not allowed"):
        guide.next_state(guide.initial_state, TINY_EOS)  # "" is not in the language
    with pytest.raises(ValueError, match="state must be"):
        guide.allowed_tokens(99)
    with pytest.raises(TypeError):
        guide.next_state(guide.initial_state, "a")


def test_a_vocabulary_that_cannot_spell_a_required_character_is_refused():
    vocab = TokenVocabulary.from_token_bytes([b"a", b"b"], eos_id=2)
    with pytest.raises(ValueError, match="cannot spell"):
        RegexGuide("a€", vocab)
    RegexGuide("a|€", vocab)  # "a" alone is spellable: the € branch is simply never allowed


def test_an_unsupported_pattern_is_named():
    vocab = TokenVocabulary.from_token_bytes(TINY_TOKENS, eos_id=TINY_EOS)
    with pytest.raises(UnsupportedPattern):
        RegexGuide(r"(?=a)a", vocab)


# ------------------------------------------------------------------ llguidance on real vocabularies
llguidance = pytest.importorskip("llguidance")
import llguidance.numpy  # noqa: E402
import llguidance.tiktoken  # noqa: E402

# (regex, sample strings it matches). Written without \d \w \s: llguidance's are Unicode classes.
ORACLE_CASES = [
    (r"(?:yes|no|maybe)", ["yes", "no", "maybe"]),
    (r"-?(?:0|[1-9][0-9]{0,6})(?:\.[0-9]{1,3})?", ["0", "-12.5", "1234567", "3.141"]),
    (r"[A-Z]{3}-[0-9]{4}", ["ABC-1234", "ZZZ-0000"]),
    (r"\{\"name\": \"[a-zA-Z ]{1,20}\", \"age\": [0-9]{1,3}\}", ['{"name": "Ada Lovelace", "age": 36}']),
    (r"[^\"\\]{0,12}", ["héllo wörld", "日本語のテキスト", "emoji 😀!", ""]),
    (r"(?:Paris|Zürich|Kraków|東京)", ["Zürich", "Kraków", "東京", "Paris"]),
    (r"[a-z]+(?:, [a-z]+)*", ["apples, pears, plums"]),
    (r"(?:café|naïve|😀+)", ["café", "naïve", "😀😀"]),
    (r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}", ["2026-11-29T23:59"]),
    (r"(?:true|false|null)", ["true", "false", "null"]),
    (r"(?:a|b)*abb", ["abb", "babababb"]),
    (r"(?: ?[A-Za-z]{1,8}){1,4}\.", [" Hello there you.", "Ok."]),
]


def _llguidance_tokenizer(tokenizer, vocab: TokenVocabulary):
    if hasattr(tokenizer, "_mergeable_ranks"):
        return llguidance.tiktoken.lltokenizer_from_encoding(tokenizer)
    ranks = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    specials = {s: i for s, i in tokenizer.special_tokens.items()}
    return llguidance.LLTokenizer.from_tiktoken(encoder=ranks, special_tokens=specials, pattern=tokenizer.pattern,
                                               eos_token=vocab.eos_id, n_vocab=vocab.size)


@pytest.fixture(scope="module", params=["tinychat", "cl100k_base"])
def real_tokenizer(request):
    tokenizer = load_tokenizer("tinychat") if request.param == "tinychat" else get_encoding("cl100k_base")
    vocab = TokenVocabulary.of(tokenizer)
    return tokenizer, vocab, _llguidance_tokenizer(tokenizer, vocab)


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text) if text else []


@pytest.mark.parametrize("pattern,samples", ORACLE_CASES, ids=[c[0][:24] for c in ORACLE_CASES])
def test_masks_equal_llguidance_at_every_prefix(real_tokenizer, pattern, samples):
    tokenizer, vocab, ll_tokenizer = real_tokenizer
    guide = RegexGuide(pattern, tokenizer)
    bitmask = llguidance.numpy.allocate_token_bitmask(1, ll_tokenizer.vocab_size)
    compared = exact = 0
    for sample in samples:
        assert re.fullmatch(pattern, sample)
        matcher = llguidance.LLMatcher(ll_tokenizer, llguidance.LLMatcher.grammar_from_regex(pattern))
        assert not matcher.is_error(), matcher.get_error()
        state = guide.initial_state
        for token in [*_encode(tokenizer, sample), vocab.eos_id]:
            llguidance.numpy.fill_next_token_bitmask(matcher, bitmask, 0)
            theirs = np.unpackbits(bitmask[0].view(np.uint8), bitorder="little")[:vocab.size].astype(bool)
            ours = guide.mask(state).numpy()
            forced = matcher.compute_ff_bytes()
            where = f"{pattern!r} in {sample!r} before token {token}"
            if not forced:
                assert np.array_equal(ours, theirs), (
                    f"{where}: only ours {np.flatnonzero(ours & ~theirs)[:8]}, "
                    f"only llguidance {np.flatnonzero(theirs & ~ours)[:8]}")
                exact += 1
            else:
                assert not (theirs & ~ours).any(), f"{where}: llguidance allows {np.flatnonzero(theirs & ~ours)[:8]}"
                for extra in np.flatnonzero(ours & ~theirs):
                    spelled = vocab.token_bytes[extra]
                    assert forced.startswith(spelled) or spelled.startswith(forced), (where, spelled, forced)
            compared += 1
            state = guide.next_state(state, token)
            assert matcher.consume_token(token)
        assert guide.is_accepting(state)
    assert compared >= len(samples) * 2 and exact >= 1


def test_json_guide_accepts_a_tokenized_instance_and_tracks_validity():
    tokenizer = get_encoding("cl100k_base")
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                               "days": {"type": "integer", "minimum": 1, "maximum": 14}},
              "required": ["city", "days"], "additionalProperties": False}
    guide = JSONGuide(schema, tokenizer)
    text = json.dumps({"city": "Kraków", "days": 7}, ensure_ascii=False)
    state = guide.initial_state
    for token in tokenizer.encode(text):
        state = guide.next_state(state, token)
    assert guide.is_accepting(state)
    assert guide.parse(text) == {"city": "Kraków", "days": 7}
    assert not guide.is_allowed(guide.initial_state, tokenizer.encode(" [")[0])
