"""Known-wrong answers to notebook 01 fail its hidden tests, each on the rule it breaks."""
from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from course_lib.tokenization import split_text
from course_lib.tokenization.merge import merge_pair
from tests.hidden.conftest import answers, failures, verdict
from tests.hidden.mutants import mutant

A = "01_tokenization"


# ----- get_stats -------------------------------------------------------------------------
def _stats_non_overlapping(ids):  # [2, 2, 2, 2] counts (2, 2) twice, not three times
    counts, i = {}, 0
    while i < len(ids) - 1:
        pair = (ids[i], ids[i + 1])
        counts[pair] = counts.get(pair, 0) + 1
        i += 2 if pair[0] == pair[1] else 1
    return counts


def _stats_once_each(ids):  # a set of pairs: every count is 1
    return {pair: 1 for pair in zip(ids, ids[1:])}


def _stats_unordered(ids):  # (9, 8) and (8, 9) merged into one key
    counts = {}
    for a, b in zip(ids, ids[1:]):
        key = (min(a, b), max(a, b))
        counts[key] = counts.get(key, 0) + 1
    return counts


def _stats_index_error(ids):  # off by one: reads past the end
    counts = {}
    for i in range(len(ids)):
        pair = (ids[i], ids[i + 1])
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def _stats_lists(ids):  # a list of pairs, not a dict of counts
    return [(a, b) for a, b in zip(ids, ids[1:])]


def _stats_defaultdict(ids):
    counts = defaultdict(int)
    for pair in zip(ids, ids[1:]):
        counts[pair] += 1
    return counts


@pytest.mark.parametrize("right", [lambda ids: Counter(zip(ids, ids[1:])), _stats_defaultdict])
def test_get_stats_may_return_a_dict_subclass(right):
    result = verdict(A, "get_stats", get_stats=right)
    assert result.passed, failures(result)


# ----- merge -----------------------------------------------------------------------------
def _merge_in_place(ids, pair, new_id):  # right result, but edits the caller's list
    i = 0
    while i < len(ids) - 1:
        if (ids[i], ids[i + 1]) == tuple(pair):
            ids[i:i + 2] = [new_id]
        i += 1
    return list(ids)


def _merge_no_skip(ids, pair, new_id):  # overlaps: both (5, 5) in [5, 5, 5] become new_id
    out = []
    for i in range(len(ids)):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
        elif i > 0 and (ids[i - 1], ids[i]) == tuple(pair):
            continue
        else:
            out.append(ids[i])
    return out


def _merge_first_only(ids, pair, new_id):
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == tuple(pair):
            return list(ids[:i]) + [new_id] + list(ids[i + 2:])
    return list(ids)


# The loop stops one early and loses the last ID; (2, 1) merged as if it were (1, 2).
_merge_drops_last = mutant(A, "merge", ("while i < len(ids):", "while i < len(ids) - 1:"), label="_merge_drops_last")
_merge_either_order = mutant(A, "merge", ("ids[i] == pair[0] and ids[i + 1] == pair[1]", "{ids[i], ids[i + 1]} == set(pair)"),
                             label="_merge_either_order")


# ----- train_bpe -------------------------------------------------------------------------
_TIE = "best = min(counts, key=lambda pair: (-counts[pair], pair))"  # the solution's tie rule


def _trainer(label, *edits):
    """The notebook's trainer with one thing changed."""
    return mutant(A, "train_bpe", *edits, label=label)


def _as_list(text, vocab_size):
    return list(answers(A)["train_bpe"](text, vocab_size).items())


# ----- encode ----------------------------------------------------------------------------
def _encode_in_dict_order(text, merges):  # one pass over the merges as the dict lists them
    ids = []
    for chunk in split_text(text):
        tokens = list(chunk.encode("utf-8"))
        for pair, new_id in merges.items():
            tokens = merge_pair(tokens, pair, new_id)
        ids.extend(tokens)
    return ids


def _encode_without_split(text, merges):  # merges run across chunk boundaries
    tokens = list(text.encode("utf-8"))
    for pair, new_id in sorted(merges.items(), key=lambda item: item[1]):
        tokens = merge_pair(tokens, pair, new_id)
    return tokens


def _encode_most_frequent(text, merges):  # picks the commonest pair present, as training does
    ids = []
    for chunk in split_text(text):
        tokens = list(chunk.encode("utf-8"))
        while True:
            counts = Counter(p for p in zip(tokens, tokens[1:]) if p in merges)
            if not counts:
                break
            pair = max(counts, key=lambda p: (counts[p], -merges[p]))
            tokens = merge_pair(tokens, pair, merges[pair])
        ids.extend(tokens)
    return ids


def _encode_nested(text, merges):  # a list per chunk instead of one flat list
    out = []
    for chunk in split_text(text):
        tokens = list(chunk.encode("utf-8"))
        for pair, new_id in sorted(merges.items(), key=lambda item: item[1]):
            tokens = merge_pair(tokens, pair, new_id)
        out.append(tokens)
    return out


def _encode_latin1(text, merges):  # bytes from the wrong encoding
    ids = []
    for chunk in split_text(text):
        tokens = list(chunk.encode("latin-1", "replace"))
        for pair, new_id in sorted(merges.items(), key=lambda item: item[1]):
            tokens = merge_pair(tokens, pair, new_id)
        ids.extend(tokens)
    return ids


# ----- decode ----------------------------------------------------------------------------
def _decoder(*, errors="replace", unknown=ValueError, nested=True, as_bytes=False):
    def decode(ids, merges):
        vocab = {i: bytes([i]) for i in range(256)}
        for (a, b), new_id in sorted(merges.items(), key=lambda item: item[1]):
            vocab[new_id] = vocab[a] + vocab[b] if nested else bytes([a % 256, b % 256])
        if unknown is ValueError and any(i not in vocab for i in ids):
            raise ValueError("unknown ID")
        raw = b"".join(vocab[i] for i in ids)
        return raw if as_bytes else raw.decode("utf-8", errors=errors)
    return decode


def _decode_list_vocab(ids, merges):  # a list indexed by ID: -1 quietly reads the last token
    vocab = [bytes([i]) for i in range(256)]
    for (a, b), new_id in sorted(merges.items(), key=lambda item: item[1]):
        vocab.append(vocab[a] + vocab[b])
    if any(i >= len(vocab) for i in ids):
        raise ValueError("unknown ID")
    return b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")


def _decode_per_token(ids, merges):  # decodes each token alone: split characters break
    vocab = {i: bytes([i]) for i in range(256)}
    for (a, b), new_id in sorted(merges.items(), key=lambda item: item[1]):
        vocab[new_id] = vocab[a] + vocab[b]
    if any(i not in vocab for i in ids):
        raise ValueError("unknown ID")
    return "".join(vocab[i].decode("utf-8", errors="replace") for i in ids)



# ----- chat_token_count (content policy folded in from the old safe_encode exercise) ----------
def _chat_counter(*, marker_cost=None, prompt=True, content="ordinary", typecheck=True):
    """The reference counter with one thing changed."""
    def chat_token_count(messages, enc):
        def cost(marker):
            if marker_cost == "one":
                return 1
            return 1 if marker in enc.special_tokens_set else len(enc.encode_ordinary(marker))
        total = 0
        for m in messages:
            text = m["content"]
            if typecheck and not isinstance(text, str):
                raise TypeError("content must be str")
            if content == "special":  # user text may mint special IDs
                body = enc.encode(text, allowed_special="all")
            elif content == "default":  # tiktoken's default: raises on special-token strings
                body = enc.encode(text)
            elif content == "filtered":  # mints special IDs, then drops them: the text is lost
                body = [i for i in enc.encode(text, allowed_special="all") if i not in enc._special_tokens.values()]
            elif content == "str":  # converts whatever it gets instead of rejecting it
                body = enc.encode_ordinary(str(text))
            else:
                body = enc.encode_ordinary(text)
            total += cost(f"<|{m['role']}|>") + len(body) + cost("<|end|>")
        return total + (cost("<|assistant|>") if prompt else 0)
    return chat_token_count


def _chat_rendered(messages, enc):  # encodes the whole rendered chat as one string
    text = "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in messages) + "<|assistant|>"
    return len(enc.encode_ordinary(text))


def _chat_words(messages, enc):  # counts words, not tokens
    return sum(len(m["content"].split()) + 2 for m in messages) + 1


# ----- split_characters ------------------------------------------------------------------
def _splitter(label, *edits):
    """The notebook's answer with one thing changed."""
    return mutant(A, "split_characters", *edits, label=label)


_EVERY_CUT = """        if any(boundary in token_ends for boundary in range(start + 1, end)):
            split.append(index)"""
_TYPECHECK = """    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")"""


def _split_by_decoding(text, enc):  # a token that is not valid UTF-8 on its own marks its characters
    if not isinstance(text, str):
        raise TypeError("text must be str")
    found, index = [], 0
    for token in enc.encode_ordinary(text):
        piece = enc.decode_single_token_bytes(token)
        try:
            index += len(piece.decode("utf-8"))
        except UnicodeDecodeError:
            if index not in found:
                found.append(index)
    return found


# (exercise, replaced names, fragment of the hidden check it breaks): see tests/hidden/test_wrong_answers.py
WRONG_ANSWERS = [
    ("get_stats", {"get_stats": _stats_non_overlapping}, "overlapping pairs count separately"),
    ("get_stats", {"get_stats": _stats_once_each}, "overlapping pairs count separately"),
    ("get_stats", {"get_stats": _stats_unordered}, "a pair and its reverse are different pairs"),
    ("get_stats", {"get_stats": _stats_index_error}, "a single ID has no pairs"),
    ("get_stats", {"get_stats": _stats_lists}, "the worked example"),
    ("merge", {"merge": _merge_in_place}, "is not modified"),
    ("merge", {"merge": _merge_no_skip}, "the left one wins"),
    ("merge", {"merge": _merge_first_only}, "every occurrence is replaced"),
    ("merge", {"merge": _merge_drops_last}, "a pair that is absent leaves the list unchanged"),
    ("merge", {"merge": _merge_either_order}, "the pair's order matters"),
    ("train_bpe", {"train_bpe": _trainer("_train_tie_max", (_TIE, "best = max(counts, key=lambda pair: (counts[pair], pair))"))}, "tie that goes to the smaller pair"),
    ("train_bpe", {"train_bpe": _trainer("_train_tie_first_seen", (_TIE, "best = max(counts, key=counts.get)"))}, "ties between counts go to the smaller (left, right) pair"),
    ("train_bpe", {"train_bpe": _trainer("_train_unsplit", ("for chunk in split_text(text)]", "for chunk in [text]]"))}, "pairs never cross the chunks of split_text"),
    ("train_bpe", {"train_bpe": _trainer("_train_one_extra", ("range(256, vocab_size)", "range(256, vocab_size + 1)"))}, "vocab_size 256 learns nothing"),
    ("train_bpe", {"train_bpe": _trainer("_train_no_size_check", ("if vocab_size < 256:", "if False:"))}, "vocab_size 100 (below 256) raises ValueError"),
    ("train_bpe", {"train_bpe": _trainer("_train_no_early_stop", ("            break", "            raise ValueError('ran out of pairs')"))}, "it stops early when no pair is left"),
    ("train_bpe", {"train_bpe": _trainer("_train_sorted", ("    return merges", "    return dict(sorted(merges.items()))"))}, "the same merges in the order learned"),
    ("train_bpe", {"train_bpe": _as_list}, "the result is a dict"),
    ("encode", {"encode": _encode_in_dict_order}, "the merge with the lowest new ID goes first"),
    ("encode", {"encode": _encode_without_split}, "the same IDs as tiktoken"),
    ("encode", {"encode": _encode_most_frequent}, "the same IDs as tiktoken"),
    ("encode", {"encode": _encode_nested}, "no merges: the UTF-8 bytes"),
    ("encode", {"encode": _encode_latin1}, "no merges: the UTF-8 bytes"),
    ("decode", {"decode": _decoder(errors="strict")}, "a broken character becomes U+FFFD"),
    ("decode", {"decode": _decoder(errors="ignore")}, "a lone lead byte becomes U+FFFD"),
    ("decode", {"decode": _decoder(unknown=KeyError)}, "an ID above the last merge raises ValueError"),
    ("decode", {"decode": _decoder(nested=False)}, "a merge of merges stands for all their bytes"),
    ("decode", {"decode": _decoder(as_bytes=True)}, "the text, as a str"),
    ("decode", {"decode": _decode_list_vocab}, "a negative ID raises ValueError"),
    ("decode", {"decode": _decode_per_token}, "a character split over several tokens is joined before decoding"),
    ("chat_token_count", {"chat_token_count": _chat_counter(marker_cost="one")}, "markers spelled out"),
    ("chat_token_count", {"chat_token_count": _chat_counter(prompt=False)}, "an empty chat is just the generation prompt"),
    ("chat_token_count", {"chat_token_count": _chat_counter(content="special")},
     "a marker typed inside content is ordinary text"),
    ("chat_token_count", {"chat_token_count": _chat_counter(content="default")},
     "<|endoftext|> typed inside content is ordinary text"),
    ("chat_token_count", {"chat_token_count": _chat_counter(content="filtered")},
     "<|endoftext|> typed inside content is ordinary text"),
    ("chat_token_count", {"chat_token_count": _chat_counter(content="str", typecheck=False)},
     "content that is not a str (bytes) raises TypeError"),
    ("chat_token_count", {"chat_token_count": _chat_rendered}, "pieces are encoded one by one, not as one string"),
    ("chat_token_count", {"chat_token_count": _chat_words}, "one user message"),
    ("split_characters", {"split_characters": _splitter("_split_byte_offsets", ("split.append(index)", "split.append(start)"))}, "character indices, not byte offsets"),
    ("split_characters", {"split_characters": _splitter("_split_per_boundary", (_EVERY_CUT, "split += [index for b in range(start + 1, end) if b in token_ends]"))}, "each split character is listed once"),
    ("split_characters", {"split_characters": _splitter("_split_encode_special", ("enc.encode_ordinary(text)", "enc.encode(text)"))},
     "special-token strings are ordinary text"),
    ("split_characters", {"split_characters": _splitter("_split_strict_end", ("range(start + 1, end)", "range(start + 1, end + (end - start > 1))"))},
     "a boundary at a character's end does not split it"),
    ("split_characters", {"split_characters": _splitter("_split_no_typecheck", (_TYPECHECK, "text = str(text)"))}, "instead of a str raises TypeError"),
    ("split_characters", {"split_characters": _splitter("_split_count", ("    return split\n", "    return len(split)\n"))}, "the list of split characters' indices"),
    ("split_characters", {"split_characters": _split_by_decoding}, "the list of split characters' indices"),
]


def test_an_undefined_answer_fails_every_encoding_check_without_crashing():
    result = verdict(A, "chat_token_count", chat_token_count=None)
    assert not result.passed
    assert all(not r.passed for r in result.results)
    assert "is not defined" in failures(result)
