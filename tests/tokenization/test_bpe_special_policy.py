"""The special-token policy of BPETokenizer against tiktoken's, variation by variation."""
import pytest

from course_lib.tokenization import get_encoding

TEXTS = [
    "plain text with no specials",
    "hi <|endoftext|> there",
    "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>x<|endofprompt|>",
    "<|endoftext|><|endoftext|>end",
    "almost <|endoftext| and <|endoftext>",
    "hello <|endofprompt|> hello",
]
POLICIES = [
    {},
    {"allowed_special": "all"},
    {"allowed_special": {"<|endoftext|>"}},
    {"allowed_special": {"<|endoftext|>"}, "disallowed_special": ()},
    {"disallowed_special": ()},
    {"disallowed_special": {"<|fim_prefix|>"}},
    {"allowed_special": {"<|endoftext|>"}, "disallowed_special": "all"},
    {"allowed_special": "all", "disallowed_special": "all"},
    {"allowed_special": {"<|endofprompt|>", "<|fim_middle|>"}, "disallowed_special": ()},
    {"allowed_special": {"not a special token"}, "disallowed_special": ()},
    {"disallowed_special": ("hello",)},
]


def outcome(encode, text, policy):
    """IDs, or the exception type and the token it names."""
    try:
        return encode(text, **policy)
    except ValueError as exc:
        named = [t for t in ("<|endoftext|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>",
                             "<|endofprompt|>", "'hello'") if t in str(exc).splitlines()[0]]
        return ("ValueError", named)


def policy_id(policy: dict) -> str:
    """The policy as text with its sets sorted: the same in every process, whatever the hash seed
    (pytest-xdist's workers must collect the same test ids)."""
    shown = {k: sorted(v) if isinstance(v, (set, frozenset)) else v for k, v in policy.items()}
    return str(shown)


@pytest.mark.parametrize("policy", POLICIES, ids=[policy_id(p) for p in POLICIES])
def test_policy_matches_tiktoken(pair, policy):
    tok, enc = pair
    for text in TEXTS:
        assert outcome(tok.encode, text, policy) == outcome(enc.encode, text, policy), text


def test_default_error_names_the_token_and_says_how_to_allow_it(course_tokenizers):
    tok = course_tokenizers["cl100k_base"]
    with pytest.raises(ValueError) as info:
        tok.encode("user says <|endoftext|>")
    message = str(info.value)
    assert "'<|endoftext|>'" in message
    assert "allowed_special" in message and "disallowed_special=()" in message


def test_allowed_special_as_a_bare_string_is_a_type_error(course_tokenizers):
    with pytest.raises(TypeError, match="wrap a single token in a set"):
        course_tokenizers["cl100k_base"].encode("<|endoftext|>", allowed_special="<|endoftext|>")


def test_non_str_text_is_a_type_error(course_tokenizers):
    tok = course_tokenizers["cl100k_base"]
    for bad in (b"bytes", 42, None, ["a"]):
        with pytest.raises(TypeError, match="text must be str"):
            tok.encode(bad)
        with pytest.raises(TypeError, match="text must be str"):
            tok.encode_ordinary(bad)


def test_get_encoding_gives_tiktokens_ids_for_both_encodings(course_tokenizers):
    """get_encoding (offline) against pinned IDs from tiktoken and an Encoding built by hand."""
    import base64

    import tiktoken

    from course_lib.tokenization.offline import encoding_spec, rank_file_bytes

    pinned = {"cl100k_base": ([15339, 1917], [100257]), "o200k_base": ([24912, 2375], [199999])}
    mixed = "Hi! def f(x):\n    return x**2  # 平方 🎉👍🏽 안녕 <|endoftext|>"
    for name, (hello, eot) in pinned.items():
        enc = get_encoding(name)
        assert enc.encode("hello world") == hello
        assert enc.encode("<|endoftext|>", allowed_special="all") == eot
        spec = encoding_spec(name)
        ranks = {}
        for line in rank_file_bytes(name).splitlines():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
        by_hand = tiktoken.Encoding(name=f"{name}-by-hand", pat_str=spec["pat_str"], mergeable_ranks=ranks,
                                    special_tokens=spec["special_tokens"])
        for policy in ({"allowed_special": "all"}, {"disallowed_special": ()}):
            assert enc.encode(mixed, **policy) == by_hand.encode(mixed, **policy)
        course = course_tokenizers[name]
        assert course.encode(mixed, allowed_special="all") == enc.encode(mixed, allowed_special="all")
