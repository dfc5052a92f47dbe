"""course export-hf: write a course model as a Hugging Face Llama directory.

    $ course export-hf /tmp/tinychat-hf
    $ vllm serve /tmp/tinychat-hf --served-model-name tinychat     # or transformers' from_pretrained

The network is LlamaForCausalLM already, so the weights only change names (``hf.py``), except
that heads narrower than 32 are widened to 32 with zero dimensions (``head_padding``, exact):
vLLM's CPU attention takes no head size below 32, and tinychat's heads are 16 wide. The
tokenizer is the course byte-level BPE written in the ``tokenizers`` JSON format: the same split
regex, then each byte spelled as one character of GPT-2's byte alphabet, so every token keeps
its id and every merge its rank:

    >>> byte_level_text(" hi\\n".encode())
    'ĠhiĊ'

Nothing here imports transformers or tokenizers: the files are plain JSON and safetensors, and
the tests load them with the real libraries.

    DIR/config.json              LlamaForCausalLM fields (hf.hf_llama_config), eos = the end tokens
    DIR/generation_config.json   eos_token_id = [<|end|>, <|endoftext|>], so generation stops there
    DIR/model.safetensors        the weights under Hugging Face names (a tied head stored once)
    DIR/tokenizer.json           BPE model, Split(pattern) + ByteLevel pre-tokenizer, special tokens
    DIR/tokenizer_config.json    the chat template (Jinja, same text as render_chat), eos/pad
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from course_lib.model.config import CONFIGS
from course_lib.model.head_padding import pad_heads
from course_lib.model.hf import hf_llama_config, hf_llama_state_dict
from course_lib.model.weights import WeightsNotFoundError, data_dir, load_model, load_tokenizer
from course_lib.tokenization.chat_template import END, END_OF_TEXT, ROLES, TOOL_CALL, end_token_ids, role_marker

__all__ = ["BYTE_TO_CHAR", "byte_level_text", "chat_template", "export_hf", "hf_tokenizer_json", "main",
           "served_head_dim"]

FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
SMALLEST_SERVED_HEAD = 32  # vLLM's CPU attention: head sizes 32, 64, 80, 96, ...


def served_head_dim(head_dim: int) -> int:
    """The head width the export writes: ``head_dim``, or its smallest multiple that vLLM serves.

    >>> served_head_dim(16), served_head_dim(64)
    (32, 64)
    """
    return head_dim * max(1, -(-SMALLEST_SERVED_HEAD // head_dim))


def _gpt2_byte_alphabet() -> tuple[str, ...]:
    """GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other 68 bytes
    (controls, space, ...) are shifted to U+0100 upward, so every token is visible text."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, shifted = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + shifted)
            shifted += 1
    return tuple(chars[b] for b in range(256))


BYTE_TO_CHAR: tuple[str, ...] = _gpt2_byte_alphabet()  # byte value -> its character in ByteLevel


def byte_level_text(data: bytes) -> str:
    """A token's bytes as Hugging Face's ByteLevel writes them (one character per byte)."""
    return "".join(BYTE_TO_CHAR[b] for b in data)


def hf_tokenizer_json(tokenizer) -> dict:
    """The course BPETokenizer as a ``tokenizers`` Tokenizer (tokenizer.json), ids unchanged.

    Merges are listed in rank order (the course merges the lowest new id first, HF the earliest
    merge), and special tokens become added tokens, cut out of the text before the regex runs,
    as the course's ``encode(allowed_special="all")`` does.
    """
    specials = tokenizer.special_tokens
    vocab: dict[str, int] = {}
    for token_id in sorted(tokenizer.vocab):
        if token_id in specials.values():
            continue
        text = byte_level_text(tokenizer.vocab[token_id])
        if text in vocab:  # HF's vocabulary is text -> id: two ids for one string cannot be written
            raise ValueError(f"tokens {vocab[text]} and {token_id} both spell {tokenizer.vocab[token_id]!r}; "
                             "Hugging Face's BPE needs one id per string; retrain the tokenizer")
        vocab[text] = token_id
    merges = [f"{byte_level_text(tokenizer.vocab[left])} {byte_level_text(tokenizer.vocab[right])}"
              for (left, right), _ in sorted(tokenizer.merges.items(), key=lambda kv: kv[1])]
    added = [{"id": token_id, **_added_token(text)}
             for text, token_id in sorted(specials.items(), key=lambda kv: kv[1])]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        # The course regex, then bytes -> alphabet characters; use_regex=False because the
        # split already happened (ByteLevel's own regex is GPT-2's, not ours).
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": tokenizer.pattern}, "behavior": "Isolated", "invert": False},
            byte_level,
        ]},
        "post_processor": byte_level,  # offsets only: the course adds no BOS or EOS when encoding
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": merges},
    }


def chat_template() -> str:
    """render_chat as a Jinja template (what apply_chat_template and vLLM's chat endpoint run).

    Same text for the same messages, and the same refusal of an unknown role.
    """
    roles = ", ".join(ROLES)
    return (
        "{%- for message in messages -%}"
        f"{{%- if message['role'] not in {list(ROLES)!r} -%}}"
        f"{{{{- raise_exception(\"unknown role '\" + message['role'] + \"'; a message's role is one of {roles}\") -}}}}"
        "{%- endif -%}"
        f"{{{{- '<|' + message['role'] + '|>' + message['content'] + '{END}' -}}}}"
        "{%- endfor -%}"
        f"{{%- if add_generation_prompt -%}}{{{{- '{role_marker('assistant')}' -}}}}{{%- endif -%}}"
    )


def _added_token(text: str) -> dict:
    """One course special token as a Hugging Face added token.

    <|tool_call|> is added but not "special" (as Qwen's <tool_call>): servers decode replies with
    skip_special_tokens=True, and the course's replies keep the marker that tool parsing needs.
    """
    return {"content": text, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
            "special": text != TOOL_CALL}


def _tokenizer_config(tokenizer, max_length: int) -> dict:
    added = {str(token_id): _added_token(text)
             for text, token_id in sorted(tokenizer.special_tokens.items(), key=lambda kv: kv[1])}
    return {
        # The generic fast tokenizer: LlamaTokenizerFast would swap in a SentencePiece pipeline.
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "bos_token": None,  # the course never prepends a BOS token
        "add_bos_token": False,
        "add_eos_token": False,
        "eos_token": END,  # a reply ends with <|end|>
        "pad_token": END_OF_TEXT,
        "clean_up_tokenization_spaces": False,  # would turn "2 ." into "2." and break decode(encode(s)) == s
        "model_max_length": max_length,
        "chat_template": chat_template(),
    }


def _check_exportable(model, tokenizer) -> tuple[int, ...]:
    ends = end_token_ids(tokenizer)
    if not ends:
        raise ValueError(f"the tokenizer {tokenizer.name!r} has neither {END} nor {END_OF_TEXT}; "
                         "export needs the chat template's end tokens to know where replies stop")
    if tokenizer.n_vocab > model.config.vocab_size:
        raise ValueError(f"the tokenizer has ids up to {tokenizer.n_vocab - 1} but the model's vocab_size is "
                         f"{model.config.vocab_size}; export a model trained with this tokenizer")
    return ends


def export_hf(model, tokenizer, directory: str | Path, *, force: bool = False, head_dim: int | None = None) -> Path:
    """Write the five files of a Hugging Face Llama directory; return the directory.

    An existing non-empty directory is refused unless ``force`` (then the five files are
    overwritten and anything else there is left alone). ``head_dim``: the head width to write,
    a multiple of the model's (default ``served_head_dim``); the logits stay the same.
    """
    from safetensors.torch import save

    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise FileExistsError(f"{directory} is a file; give a directory to export into")
    if directory.is_dir() and any(directory.iterdir()) and not force:
        raise FileExistsError(f"{directory} is not empty; choose a new directory or pass --force to overwrite "
                              f"{', '.join(FILES)} there")
    ends = _check_exportable(model, tokenizer)
    model = pad_heads(model, served_head_dim(model.config.head_dim) if head_dim is None else head_dim)
    tokenizer_json = hf_tokenizer_json(tokenizer)
    pad = tokenizer.special_tokens.get(END_OF_TEXT, ends[0])
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              **hf_llama_config(model.config),
              "bos_token_id": None, "eos_token_id": list(ends), "pad_token_id": pad,
              "torch_dtype": str(model.dtype).removeprefix("torch."), "use_cache": True}
    state = hf_llama_state_dict(model)
    if model.config.tie_embeddings:
        state.pop("lm_head.weight")  # the same matrix as embed_tokens; tie_word_embeddings restores it
    state = {k: v.to("cpu").contiguous() for k, v in state.items()}

    directory.mkdir(parents=True, exist_ok=True)

    def write_json(name: str, value: dict) -> None:
        (directory / name).write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    write_json("config.json", config)
    write_json("generation_config.json", {"bos_token_id": None, "eos_token_id": list(ends), "pad_token_id": pad})
    write_json("tokenizer.json", tokenizer_json)
    write_json("tokenizer_config.json", _tokenizer_config(tokenizer, model.config.max_seq_len))
    # save() + write_bytes rather than save_file, which creates the file readable by its owner only
    (directory / "model.safetensors").write_bytes(save(state, metadata={"format": "pt"}))
    return directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course export-hf", description=__doc__.split("\n")[0])
    parser.add_argument("directory", type=Path, help="where to write the Hugging Face files (new or empty)")
    parser.add_argument("--model", default="tinychat", help="a shipped course model (default: tinychat)")
    parser.add_argument("--force", action="store_true", help="overwrite the files in a non-empty directory")
    parser.add_argument("--head-dim", type=int, default=None,
                        help=f"attention head width to write, a multiple of the model's (default: the model's, "
                             f"widened to {SMALLEST_SERVED_HEAD} if smaller, which vLLM needs; the logits do not change)")
    args = parser.parse_args(argv)
    shipped = [name for name in CONFIGS if (data_dir(name) / "model.safetensors").is_file()]
    if args.model not in shipped:
        parser.error(f"unknown model {args.model!r}; models with shipped weights: {', '.join(shipped)}")

    try:
        model = load_model(args.model, device="cpu")
        tokenizer = load_tokenizer(args.model)
        directory = export_hf(model, tokenizer, args.directory, force=args.force, head_dim=args.head_dim)
    except (WeightsNotFoundError, FileExistsError, ValueError) as exc:
        print(f"course export-hf: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {directory}: {', '.join(FILES)}")
    print(f"load it with transformers.AutoModelForCausalLM.from_pretrained({str(directory)!r}), "
          f"or serve it with: vllm serve {directory} --served-model-name {args.model}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
