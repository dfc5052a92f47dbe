"""generate(): the model engineer's prefill/decode_step loop with a real decoding rule.

    prompt -> token IDs -> prefill -> [process logits -> sample -> decode_step] until
    an end token, a stop string or a stop token (all "stop", as OpenAI's API names them) or
    the token cap ("length").

``generate_many`` runs n copies of one prompt as one batch: n independent samples for the
price of one forward pass per step (how the notebooks count answers over hundreds of runs).
Rows are independent but share one generator, so row 0 of a batch of 8 does not see the same
random numbers as a run of one; a seed fixes the whole batch's stream, not each row's.

    >>> result = generate(model, tokenizer, "<|user|>What is 2 + 2?<|end|><|assistant|>",
    ...                   SamplingParams(temperature=0))                  # doctest: +SKIP
    >>> result.finish_reason                                             # doctest: +SKIP
    'stop'
"""
from __future__ import annotations

import codecs
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from course_lib.model.generate import decode_step, prefill
from course_lib.sampling.params import SamplingParams
from course_lib.sampling.processors import token_counts
from course_lib.sampling.sampler import sample_next_token
from course_lib.sampling.stops import StopSequenceMatcher
from course_lib.tokenization.chat_template import END, END_OF_TEXT, encode_chat
from course_lib.validation import positive_int



@dataclass(frozen=True)
class GenerationResult:
    text: str                    # decoded output, stop string and end token removed
    token_ids: tuple[int, ...]   # every sampled token, including the one that ended generation
    finish_reason: str           # "stop" (end token, stop string or stop token) or "length" (cap)
    prompt_ids: tuple[int, ...]
    stop_sequence: str | None = None  # which stop string matched, when one did


def encode_prompt(tokenizer, prompt) -> list[int]:
    """A rendered chat string, a list of chat messages, or token IDs -> token IDs.

    A string is taken as already-rendered template text, so its role markers become special
    IDs. Render user content with the chat template first (which is where untrusted text must
    be kept from smuggling in markers), never paste it raw into a prompt string.
    """
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt, allowed_special="all")
    elif isinstance(prompt, torch.Tensor):
        ids = prompt.flatten().tolist()
    elif isinstance(prompt, Sequence) and prompt and all(isinstance(m, Mapping) for m in prompt):
        ids = encode_chat(tokenizer, prompt)  # content stays text: no forged turns
    elif isinstance(prompt, Sequence) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        ids = list(prompt)
    else:
        raise TypeError("prompt must be a str, a list of chat messages or a sequence of token IDs, "
                        f"got {type(prompt).__name__}")
    if not ids:
        raise ValueError("the prompt encodes to zero tokens; give at least one token")
    return ids


def default_eos_ids(tokenizer) -> tuple[int, ...]:
    """IDs of the course's end tokens (<|end|>, <|endoftext|>) that this tokenizer knows."""
    specials = getattr(tokenizer, "special_tokens", None) or getattr(tokenizer, "_special_tokens", {})
    return tuple(specials[t] for t in (END, END_OF_TEXT) if t in specials)


def _token_bytes(tokenizer, token_id: int) -> bytes:
    if hasattr(tokenizer, "decode_bytes"):
        return tokenizer.decode_bytes([token_id])
    return tokenizer.decode([token_id]).encode("utf-8")


class _Row:
    """One sequence's output state: its tokens, its text decoder and its stop matcher."""

    def __init__(self, stops: tuple[str, ...]):
        self.ids: list[int] = []
        # Incremental UTF-8 decoding: a token may end in the middle of a character, and the
        # decoder holds those bytes back until the character is complete.
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.matcher = StopSequenceMatcher(stops)
        self.finish_reason: str | None = None

    def finish(self, reason: str) -> None:
        if reason != "stop":
            tail = self.decoder.decode(b"", final=True)
            if tail:
                self.matcher.feed(tail)
        self.finish_reason = "stop" if self.matcher.stopped else reason


def _check_model(model) -> None:
    for attribute in ("config", "new_cache", "device"):
        if not hasattr(model, attribute):
            raise TypeError(f"model must be a course Transformer (it has no .{attribute}); "
                            "build one with Transformer(get_config(...)) or load_model('tinychat')")


@torch.no_grad()
def _guide_masks(guide, states: list[int], vocab: int, device) -> torch.Tensor:
    """(B, V) bool: each row's grammar mask, padded with False up to the model's vocabulary."""
    masks = guide.masks(states)  # (B, V_tokenizer)
    if masks.shape[-1] < vocab:
        masks = torch.nn.functional.pad(masks, (0, vocab - masks.shape[-1]), value=False)  # (B, V)
    return masks.to(device)


def _generate_rows(model, tokenizer, prompt, params, n_rows, generator, eos_ids, guide=None) -> list[GenerationResult]:
    _check_model(model)
    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
    if generator is None and not params.greedy:
        generator = torch.Generator()
        if params.seed is not None:
            generator.manual_seed(params.seed)
        else:
            generator.seed()  # fresh entropy: unseeded sampling is meant to vary
    prompt_ids = encode_prompt(tokenizer, prompt)
    eos = set(default_eos_ids(tokenizer) if eos_ids is None else (int(i) for i in eos_ids))
    stop_ids = set(params.stop_token_ids)
    if guide is not None:
        if guide.vocab_size > model.config.vocab_size:
            raise ValueError(f"the guide covers {guide.vocab_size} token IDs but the model has only "
                             f"{model.config.vocab_size}; build the guide over the model's own tokenizer")
        eos = {guide.eos_id}  # the grammar says when the output may end, and with which token
        states = [guide.initial_state] * n_rows
    window = model.config.max_seq_len
    if len(prompt_ids) >= window:
        raise ValueError(f"the prompt has {len(prompt_ids)} tokens and fills the context window "
                         f"({window}); shorten it to leave room for an answer")
    budget = min(params.max_new_tokens, window - len(prompt_ids))  # the window also caps length
    vocab = model.config.vocab_size
    device = model.device

    ids = torch.tensor([prompt_ids] * n_rows, dtype=torch.long, device=device)  # (B, T)
    cache = model.new_cache(n_rows, max_seq_len=len(prompt_ids) + budget)
    output_counts = torch.zeros(n_rows, vocab, dtype=torch.long, device=device)  # (B, V)
    prompt_counts = token_counts(prompt_ids, vocab, device=device).expand(n_rows, -1)  # (B, V)
    rows = [_Row(params.stop) for _ in range(n_rows)]

    logits = prefill(model, ids, cache)  # (B, V)
    for step in range(budget):
        allowed = None if guide is None else _guide_masks(guide, states, vocab, device)  # (B, V)
        tokens = sample_next_token(logits.float(), params, generator, output_counts=output_counts,
                                   seen_counts=prompt_counts + output_counts, allowed=allowed)  # (B,)
        output_counts.scatter_add_(1, tokens[:, None], torch.ones_like(tokens[:, None]))
        for b, (row, token) in enumerate(zip(rows, tokens.tolist())):
            if row.finish_reason is not None:
                continue  # finished rows still ride along in the batch; their tokens are ignored
            row.ids.append(token)
            if guide is not None:
                states[b] = guide.next_state(states[b], token)
            if token in eos:
                row.finish("stop")
            elif token in stop_ids:
                row.finish("stop")
            else:
                row.matcher.feed(row.decoder.decode(_token_bytes(tokenizer, token)))
                if row.matcher.stopped:
                    row.finish("stop")
                elif step == budget - 1:
                    row.finish("length")
        if all(row.finish_reason is not None for row in rows):
            break
        logits = decode_step(model, tokens[:, None], cache)  # (B, V)
    return [GenerationResult(row.matcher.text, tuple(row.ids), row.finish_reason, tuple(prompt_ids),
                             row.matcher.matched) for row in rows]


def generate(model, tokenizer, prompt, params: SamplingParams | None = None, *,
             generator: torch.Generator | None = None,
             eos_ids: Sequence[int] | None = None, guide=None) -> GenerationResult:
    """Generate one completion of ``prompt`` under ``params``.

    ``generator`` drives every random draw; without one, ``params.seed`` seeds a fresh CPU
    generator, and without a seed the run is deliberately unrepeatable. Greedy decoding
    (temperature 0) draws nothing. ``eos_ids`` defaults to the tokenizer's <|end|> and
    <|endoftext|>. Generation also stops at the model's context window ("length").
    ``guide`` (a ``course_lib.structured`` guide) masks every step to its grammar and decides
    the end token; ``course_lib.structured.generate_structured`` is the friendlier entry.
    """
    params = SamplingParams() if params is None else params
    return _generate_rows(model, tokenizer, prompt, params, 1, generator, eos_ids, guide)[0]


def generate_many(model, tokenizer, prompt, params: SamplingParams | None = None, n: int = 1, *,
                  generator: torch.Generator | None = None,
                  eos_ids: Sequence[int] | None = None, guide=None) -> list[GenerationResult]:
    """``n`` independent completions of one prompt, decoded together as a batch of n rows."""
    positive_int("n", n)
    params = SamplingParams() if params is None else params
    return _generate_rows(model, tokenizer, prompt, params, n, generator, eos_ids, guide)
