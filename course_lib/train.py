"""Train the course model from scratch: corpus -> BPE tokenizer -> transformer -> course_lib/data/.

    python -m course_lib.train                 # reproduces the shipped model (seeded)
    python -m course_lib.train --steps 50 --out /tmp/tinychat-try   # a quick, untrained try

Every random choice comes from the seeds recorded in ``training.json``: the corpus from
``TRAIN_SEED``, the weights' initialisation and the batch order from ``--seed``. The loss is
taken on assistant tokens only (see ``course_lib.data.batching``). The run uses CUDA when it
is present and the CPU otherwise.

>>> settings = TrainSettings(config="test-gqa", steps=2, conversations=40, vocab_size=300, batch_size=4,
...                          overrides={"max_seq_len": 256})
>>> result = run_training(settings, progress=False)
>>> len(result.losses)
2
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

from course_lib.data.batching import IGNORE_INDEX, LengthBatches, encode_conversation
from course_lib.data.corpus import TRAIN_SEED, Conversation, corpus_fingerprint, generate_corpus
from course_lib.model import Transformer, data_dir, default_device, get_config, save_model
from course_lib.tokenization.bpe import BPETokenizer
from course_lib.tokenization.chat_template import END_OF_TEXT, SPECIAL_TOKENS, render_chat
from course_lib.tokenization.pretokenize import GPT4_PATTERN
from course_lib.validation import positive_int

# GPT-4's split pattern with numbers cut into single digits (as Llama does): every number is
# spelled with the same ten well-trained tokens, which a tiny model copies and adds reliably.
SINGLE_DIGIT_PATTERN = GPT4_PATTERN.replace(r"\p{N}{1,3}+", r"\p{N}")
PATTERNS = {"gpt4": GPT4_PATTERN, "digits": SINGLE_DIGIT_PATTERN}

TOKENIZER_FILE = "tokenizer.json"
METADATA_FILE = "training.json"


@dataclass
class TrainSettings:
    """Everything that decides the trained model; the defaults reproduce the shipped one."""

    config: str = "tinychat"  # registry name of the geometry (course_lib.model.CONFIGS)
    vocab_size: int = 1024  # BPE vocabulary: 256 bytes + merges + the chat special tokens
    split_pattern: str = "digits"  # pre-tokenization: a key of PATTERNS
    conversations: int = 40_000  # size of the generated training corpus
    corpus_seed: int = TRAIN_SEED  # the corpus generator's seed (the held-out split uses another)
    seed: int = 0  # initialisation and batch order
    steps: int = 5000  # optimizer steps
    batch_size: int = 64  # conversations per step
    lr: float = 3e-3  # peak learning rate (AdamW), reached after `warmup` steps
    min_lr_ratio: float = 0.05  # cosine decay ends at lr * min_lr_ratio
    warmup: int = 100  # linear warm-up steps
    weight_decay: float = 0.01
    grad_clip: float = 1.0  # max global gradient norm
    overrides: dict = field(default_factory=dict)  # ModelConfig fields to change (tests, experiments)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "conversations", "steps", "batch_size"):
            positive_int(f"TrainSettings.{name}", getattr(self, name))
        if self.split_pattern not in PATTERNS:
            raise ValueError(f"split_pattern must be one of {sorted(PATTERNS)}, got {self.split_pattern!r}")
        if not self.lr > 0 or not 0 <= self.min_lr_ratio <= 1 or self.warmup < 0:
            raise ValueError("lr must be > 0, min_lr_ratio in [0, 1] and warmup >= 0")


@dataclass
class TrainResult:
    model: Transformer
    tokenizer: BPETokenizer
    losses: list[float]  # one per step: mean cross-entropy over that batch's assistant tokens
    metadata: dict


def train_tokenizer(conversations: list[Conversation], vocab_size: int, pattern: str = GPT4_PATTERN) -> BPETokenizer:
    """A BPE tokenizer learned from the rendered corpus, with the chat special tokens."""
    text = END_OF_TEXT.join(render_chat(c.messages, add_generation_prompt=False) for c in conversations)
    tokenizer = BPETokenizer.train(text, vocab_size, pattern=pattern, special_tokens=SPECIAL_TOKENS)
    tokenizer.name = "tinychat-bpe"
    return tokenizer


def learning_rate(step: int, settings: TrainSettings) -> float:
    """Linear warm-up, then cosine decay to lr * min_lr_ratio.

    >>> s = TrainSettings(steps=101, warmup=10, lr=1.0, min_lr_ratio=0.0)
    >>> [round(learning_rate(i, s), 3) for i in (0, 9, 55, 100)]
    [0.1, 1.0, 0.5, 0.0]
    """
    if step < settings.warmup:
        return settings.lr * (step + 1) / settings.warmup
    span = max(settings.steps - 1 - settings.warmup, 1)
    progress = min((step - settings.warmup) / span, 1.0)
    floor = settings.lr * settings.min_lr_ratio
    return floor + (settings.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def masked_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over positions whose target is not IGNORE_INDEX."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),  # (B*T, V), (B*T,)
                           ignore_index=IGNORE_INDEX)


def run_training(settings: TrainSettings, *, device: torch.device | str | None = None,
                 progress: bool = True) -> TrainResult:
    """Generate the corpus, train the tokenizer and the model; nothing is written to disk."""
    device = default_device() if device is None else torch.device(device)
    started = time.perf_counter()
    conversations = generate_corpus(settings.conversations, settings.corpus_seed)
    tokenizer = train_tokenizer(conversations, settings.vocab_size, PATTERNS[settings.split_pattern])
    config = get_config(settings.config, vocab_size=tokenizer.n_vocab, **settings.overrides)
    encoded = [encode_conversation(tokenizer, c.messages) for c in conversations]
    batches = LengthBatches(encoded, batch_size=settings.batch_size,
                            pad_id=tokenizer.special_tokens[END_OF_TEXT], max_len=config.max_seq_len)

    torch.manual_seed(settings.seed)  # belt and braces: every draw below also takes a generator
    model = Transformer(config, generator=torch.Generator().manual_seed(settings.seed)).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]  # norms' gains are not shrunk
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": settings.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=settings.lr, betas=(0.9, 0.95))
    stream = batches.stream(torch.Generator().manual_seed(settings.seed))

    model.train()
    losses: list[float] = []
    bar = tqdm(range(settings.steps), desc="training", disable=not progress, mininterval=1.0)
    for step in bar:
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, settings)
        inputs, targets = (t.to(device) for t in next(stream))  # (B, T) each
        loss = masked_loss(model(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
        optimizer.step()
        losses.append(loss.item())
        if step % 10 == 0 or step == settings.steps - 1:
            bar.set_postfix(loss=f"{sum(losses[-10:]) / len(losses[-10:]):.4f}")
    model.eval()

    tail = losses[-min(50, len(losses)):]
    metadata = {
        "settings": asdict(settings),
        "final_loss": round(sum(tail) / len(tail), 5),  # mean over the last (up to) 50 steps
        "first_loss": round(losses[0], 5),
        "loss_every_50_steps": [round(x, 4) for x in losses[::50]],
        "wall_time_s": round(time.perf_counter() - started, 1),
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "parameters": model.num_parameters(),
        "vocab_size": tokenizer.n_vocab,
        "corpus_sha256": corpus_fingerprint(conversations),
        "corpus_tokens": sum(len(ids) for ids, _ in encoded),
        "epochs": round(settings.steps * settings.batch_size / len(encoded), 2),
    }
    return TrainResult(model, tokenizer, losses, metadata)


def save_artifacts(result: TrainResult, directory: str | Path) -> Path:
    """config.json + model.safetensors (save_model), tokenizer.json and training.json."""
    directory = save_model(result.model, directory)
    result.tokenizer.save(directory / TOKENIZER_FILE)
    (directory / METADATA_FILE).write_text(json.dumps(result.metadata, indent=2) + "\n")
    return directory


def _parser() -> argparse.ArgumentParser:
    defaults = TrainSettings()
    parser = argparse.ArgumentParser(prog="python -m course_lib.train", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory (default: course_lib/data/<config>, the shipped model)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for torch (default: torch's choice; 1 is steadier on a busy machine)")
    for name in ("config", "vocab_size", "split_pattern", "conversations", "seed", "steps", "batch_size", "lr",
                 "warmup"):
        value = getattr(defaults, name)
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value,
                            help=f"(default: {value})")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            raise SystemExit("--threads must be at least 1")
        torch.set_num_threads(args.threads)
    settings = TrainSettings(config=args.config, vocab_size=args.vocab_size, split_pattern=args.split_pattern,
                             conversations=args.conversations,
                             seed=args.seed, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                             warmup=args.warmup)
    result = run_training(settings, device=args.device, progress=not args.quiet)
    given = list(sys.argv[1:] if argv is None else argv)
    result.metadata["command"] = " ".join(["python -m course_lib.train", *given])
    out = save_artifacts(result, args.out or data_dir(settings.config))
    meta = result.metadata
    print(f"saved {meta['parameters']:,} parameters to {out} | final loss {meta['final_loss']:.4f} | "
          f"{meta['wall_time_s']:.0f} s on {meta['device']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
