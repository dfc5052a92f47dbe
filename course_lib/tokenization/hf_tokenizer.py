"""A Hugging Face checkpoint's tokenizer, with the same face as the course's own.

``HFTokenizer.load(directory)`` reads ``tokenizer.json`` with the ``tokenizers`` library, the
chat template from ``chat_template.jinja`` or ``tokenizer_config.json``, and the end tokens
from ``generation_config.json`` (else ``config.json``, else the tokenizer's ``eos_token``). The
engine, the server and the grammar guides then use it as they use ``BPETokenizer``: ``encode``
with tiktoken's special-token rules, ``decode``, ``decode_bytes``, ``special_tokens_set``;
chats go through ``encode_chat``, which renders the checkpoint's own Jinja template as
transformers' ``apply_chat_template`` does (the tests hold the two equal).

One rule is the course's, not transformers': a special token's text inside a message (a
user typing ``<|im_start|>system``) stays text. transformers would encode it as the marker
and let the user forge a turn.
"""
from __future__ import annotations

import json
import re
import threading
from datetime import datetime
from functools import lru_cache
from pathlib import Path

__all__ = ["HFTokenizer"]


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: each of the 256 bytes is spelled as one printable
    character in a byte-level BPE's token strings (printable ASCII and Latin-1 as themselves,
    the rest shifted above 255)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    shifted, chars = 0, {}
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + shifted)] = b
            shifted += 1
    return chars


class HFTokenizer:
    """``tokenizers.Tokenizer`` behind the course tokenizer's methods (see the module docstring)."""

    def __init__(self, tokenizer, *, chat_template: str | None = None, end_ids=(), template_tokens=None,
                 name: str = "hf"):
        self._tok = tokenizer
        self._lock = threading.Lock()  # encode_special_tokens is a setting of the shared object
        self.name = name
        self.chat_template = chat_template
        self.template_tokens = dict(template_tokens or {})  # bos_token, eos_token, ... for the template
        self.special_tokens = {t.content: i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special}
        self.special_tokens_set = set(self.special_tokens)
        self.n_vocab = tokenizer.get_vocab_size(with_added_tokens=True)
        self.end_ids = tuple(end_ids)
        model = json.loads(tokenizer.to_str())
        self._byte_level = "ByteLevel" in json.dumps(model.get("decoder")) or "ByteLevel" in json.dumps(
            model.get("pre_tokenizer"))
        self._specials_pattern = re.compile("|".join(re.escape(s) for s in sorted(self.special_tokens, key=len,
                                                                                  reverse=True))) \
            if self.special_tokens else None
        self.vocab = {i: self._token_bytes(i) for i in range(self.n_vocab) if i not in self.special_tokens.values()}

    @classmethod
    def load(cls, directory: str | Path) -> "HFTokenizer":
        from tokenizers import Tokenizer

        directory = Path(directory).expanduser()
        path = directory / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(f"no tokenizer.json in {directory}; the course reads fast (tokenizers) "
                                    "tokenizers only")
        settings = _read_json(directory / "tokenizer_config.json")
        template = None
        if (directory / "chat_template.jinja").is_file():
            template = (directory / "chat_template.jinja").read_text()
        elif isinstance(settings.get("chat_template"), str):
            template = settings["chat_template"]
        elif isinstance(settings.get("chat_template"), list):  # named templates: the default one
            named = {t["name"]: t["template"] for t in settings["chat_template"]}
            template = named.get("default")
        tok = Tokenizer.from_file(str(path))
        tokens = {k: _token_text(settings.get(k)) for k in ("bos_token", "eos_token", "unk_token", "pad_token")}
        end_ids = _end_ids(directory, tok, tokens.get("eos_token"))
        return cls(tok, chat_template=template, end_ids=end_ids, template_tokens=tokens, name=directory.name)

    # --- the course tokenizer's face -------------------------------------------------------

    def encode(self, text: str, *, allowed_special=(), disallowed_special="all") -> list[int]:
        """Text -> ids. Special tokens' text becomes their id only where ``allowed_special``
        says so ("all", or a set); elsewhere it is refused (``disallowed_special="all"``, as
        tiktoken does) or, with ``disallowed_special=()``, encoded as ordinary text."""
        allowed = self.special_tokens_set if allowed_special == "all" else set(allowed_special) & self.special_tokens_set
        pieces = self._split(text, allowed)
        if disallowed_special == "all":
            for piece, special in pieces:
                found = None if special or self._specials_pattern is None else self._specials_pattern.search(piece)
                if found:
                    raise ValueError(f"text contains the special token {found.group()!r}; pass allowed_special= to "
                                     "encode it as one, or disallowed_special=() to encode it as text")
        ids: list[int] = []
        for piece, special in pieces:
            ids += [self.special_tokens[piece]] if special else self._plain(piece)
        return ids

    def encode_ordinary(self, text: str) -> list[int]:
        return self.encode(text, disallowed_special=())

    def decode(self, ids) -> str:
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def decode_bytes(self, ids) -> bytes:
        return b"".join(self._bytes_of(int(i)) for i in ids)

    def encode_chat(self, messages, *, add_generation_prompt: bool = True) -> list[int]:
        """The checkpoint's chat template, rendered and encoded (markers as special ids, each
        message's content as text)."""
        messages = [dict(m) for m in messages]
        text = self.render_chat(messages, add_generation_prompt=add_generation_prompt)
        contents = [m.get("content") for m in messages if isinstance(m.get("content"), str)]
        if self._specials_pattern is None or not any(self._specials_pattern.search(c) for c in contents):
            return self.encode(text, allowed_special="all")  # exactly what apply_chat_template encodes
        # A message holds a marker's text: render with stand-ins, then encode each content as text.
        stand_ins = [f"\ue000{i}\ue001" for i in range(len(messages))]
        shadow = [dict(m, content=stand_ins[i]) if isinstance(m.get("content"), str) else m
                  for i, m in enumerate(messages)]
        rendered = self.render_chat(shadow, add_generation_prompt=add_generation_prompt)
        ids: list[int] = []
        for part in re.split("(\ue000\\d+\ue001)", rendered):
            if part in stand_ins:
                ids += self.encode(messages[stand_ins.index(part)]["content"], disallowed_special=())
            elif part:
                ids += self.encode(part, allowed_special="all")
        return ids

    def render_chat(self, messages, *, add_generation_prompt: bool = True) -> str:
        """The chat template's text for ``messages``, rendered as transformers renders it."""
        if not self.chat_template:
            raise ValueError(f"the tokenizer of {self.name} has no chat template (no chat_template.jinja, no "
                             "chat_template in tokenizer_config.json); pass token ids or a rendered string")
        return _compiled(self.chat_template).render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                                                    tools=None, documents=None, **self.template_tokens)

    # --- internals ---------------------------------------------------------------------------

    def _split(self, text: str, allowed: set[str]) -> list[tuple[str, bool]]:
        if not allowed:
            return [(text, False)]
        pattern = self._specials_pattern if allowed == self.special_tokens_set else \
            re.compile("|".join(re.escape(s) for s in sorted(allowed, key=len, reverse=True)))
        pieces, at = [], 0
        for match in pattern.finditer(text):
            if match.start() > at:
                pieces.append((text[at:match.start()], False))
            pieces.append((match.group(), True))
            at = match.end()
        if at < len(text):
            pieces.append((text[at:], False))
        return pieces

    def _plain(self, text: str) -> list[int]:
        if not text:
            return []
        with self._lock:
            before = self._tok.encode_special_tokens
            self._tok.encode_special_tokens = True  # special tokens' text is ordinary text here
            try:
                return self._tok.encode(text, add_special_tokens=False).ids
            finally:
                self._tok.encode_special_tokens = before

    def _bytes_of(self, token: int) -> bytes:
        cached = self.vocab.get(token)
        if cached is not None:
            return cached
        text = self._tok.id_to_token(token)
        if text is None:  # a model's embedding table is often padded past its tokenizer: no text
            return b""
        return text.encode("utf-8")  # a special token: its text

    def _token_bytes(self, token: int) -> bytes:
        text = self._tok.id_to_token(token)
        if text is None:
            return b""
        if self._byte_level:
            table = _byte_decoder()
            if all(c in table for c in text):
                return bytes(table[c] for c in text)
            return text.encode("utf-8")  # an added (non-special) token written as plain text
        byte = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", text)  # sentencepiece byte fallback
        if byte:
            return bytes([int(byte.group(1), 16)])
        return text.replace("\u2581", " ").encode("utf-8")  # sentencepiece's word-start marker

    def __repr__(self) -> str:
        return f"HFTokenizer({self.name!r}, {self.n_vocab} tokens, {len(self.special_tokens)} special)"


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError as error:
        raise ValueError(f"{path} is not valid JSON ({error})") from None
    return data if isinstance(data, dict) else {}


def _token_text(value) -> str | None:
    if isinstance(value, dict):  # {"content": "<|endoftext|>", ...}
        return value.get("content")
    return value if isinstance(value, str) else None


def _end_ids(directory: Path, tok, eos_token: str | None) -> tuple[int, ...]:
    for name in ("generation_config.json", "config.json"):
        value = _read_json(directory / name).get("eos_token_id")
        if value is not None:
            return tuple(value) if isinstance(value, list) else (int(value),)
    token = tok.token_to_id(eos_token) if eos_token else None
    return () if token is None else (token,)


@lru_cache(maxsize=8)
def _compiled(template: str):
    """The template compiled as transformers compiles chat templates: a sandbox, trimmed
    blocks, loop controls, and its helpers raise_exception, tojson and strftime_now."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise ValueError(f"the chat template refused the messages: {message}")

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)
