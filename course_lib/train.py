"""Train the course model from scratch: corpus -> BPE tokenizer -> transformer -> course_lib/data/.

    python -m course_lib.train                 # reproduces the shipped model (seeded)
    python -m course_lib.train --config tinychat-draft   # then its draft for speculative decoding
    python -m course_lib.train --steps 50 --out /tmp/tinychat-try   # a quick, untrained try

Each config trains with its own defaults (``DEFAULTS``; options given on the command line win).
The draft, ``tinychat-draft``, does not learn a tokenizer: it reuses tinychat's
``tokenizer.json`` (copied beside its weights, its SHA-256 recorded in ``training.json``) so
that both models give every token the same ID, which speculative decoding needs; train tinychat
first.

Every random choice comes from the seeds recorded in ``training.json``: the corpus from
``TRAIN_SEED``, the weights' initialisation and the batch order from ``--seed``. A rerun repeats
the recorded one bit for bit on a CPU with the same vector instructions; on another kind (AVX-512
against AVX2) float rounding differs, and after about 100 steps it is another draw of the recipe. The loss is
taken on assistant tokens only (see ``course_lib.data.batching``). The run uses CUDA when it
is present and the CPU otherwise.

>>> settings = TrainSettings(config="test-gqa", steps=2, conversations=40, vocab_size=300, batch_size=4,
...                          overrides={"max_seq_len": 320})
>>> result = run_training(settings, progress=False)
>>> len(result.losses)
2
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import sys
import time
from dataclasses import asdict, dataclass, field, fields as dataclass_fields, replace
from pathlib import Path

import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

from course_lib.data.batching import IGNORE_INDEX, LengthBatches, encode_conversation
from course_lib.data.corpus import TRAIN_SEED, Conversation, absent_twins, corpus_fingerprint, generate_corpus
from course_lib.model import (CONFIGS, ModelConfig, Transformer, WeightsNotFoundError, data_dir, default_device,
                              get_config, save_model)
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
    """Everything that decides the trained model. The defaults are a plain one-phase run;
    ``default_settings(name)`` adds what the shipped model ``name`` was trained with."""

    config: str = "tinychat"  # registry name of the geometry (course_lib.model.CONFIGS)
    vocab_size: int = 1024  # BPE vocabulary: 256 bytes + merges + the chat special tokens
    split_pattern: str = "digits"  # pre-tokenization: a key of PATTERNS
    # Reuse a saved tokenizer instead of learning one: a registered model's name (its
    # course_lib/data/<name>/tokenizer.json) or a path to a tokenizer.json or its directory.
    # It must agree with vocab_size and split_pattern above. None: train a BPE tokenizer.
    tokenizer: str | None = None
    conversations: int = 40_000  # size of the generated training corpus
    # Minimal pairs added to it: this fraction of the answered grounded conversations gets a twin
    # whose supporting passage is about another entity, answered "The passages do not say."
    # (course_lib.data.corpus.absent_twins). The tokenizer is learned before they are added.
    absent_twins: float = 0.0
    # A finishing phase (a curriculum): the last `finish_steps` steps draw their batches from the
    # same corpus re-weighted so grounded conversations make up `finish_grounded_share` of them;
    # the other tasks stay in it as replay. 0 steps: one phase, the corpus as drawn.
    finish_steps: int = 0
    finish_grounded_share: float = 0.85
    # A leading phase, the other way round: the first `lead_steps` steps draw from the corpus
    # re-weighted so grounded conversations make up `lead_grounded_share` of them (1.0: those
    # alone). The lookup a grounded reply needs (which passage names the asked entity) forms late
    # and by chance beside five easier tasks; taught first, it forms while the learning rate is
    # high (the README measures what that gains, and what the later tasks lose). 0: no such phase.
    lead_steps: int = 0
    lead_grounded_share: float = 1.0
    # The main phase (the steps between lead and finish) re-weighted the same way: grounded
    # conversations `main_grounded_share` of its batches, below the corpus's own 45% by sampling
    # them and keeping every other one. After a lead has taught the grounded task, a low share
    # gives the other tasks back the batches the lead took. None: the corpus as drawn.
    main_grounded_share: float | None = None
    # The loss weight of the first DECISION_TOKENS tokens of each grounded reply, where the reply
    # commits to answering ("The capital of", "A bee") or declining ("The passages"); every other
    # learned token weighs 1. 1.0: a plain mean over the learned tokens.
    decision_weight: float = 1.0
    # Learn the question's second copy in every grounded prompt (the question, the passages, the
    # question again; passages.user_with_passages) with this loss weight: copying it from the far
    # side of the passages is a lookup like the one a grounded answer makes, and every grounded
    # prompt has one. 0: the loss is on the replies alone (the README measures 1: worse).
    question_copy_weight: float = 0.0
    corpus_seed: int = TRAIN_SEED  # the corpus generator's seed (the held-out split uses another)
    seed: int = 0  # initialisation and batch order
    steps: int = 6000  # optimizer steps
    batch_size: int = 64  # conversations per step
    lr: float = 3e-3  # peak learning rate (AdamW), reached after `warmup` steps
    min_lr_ratio: float = 0.05  # cosine decay ends at lr * min_lr_ratio
    warmup: int = 100  # linear warm-up steps
    # Start the schedule again at this step: from it on, a new warm-up to `lr` and a cosine over
    # the remaining steps, as if a new run began there (the steps before it keep the whole run's
    # schedule). Set where a lead ends, it lets the main phase learn the other tasks at the full
    # learning rate, as a run without a lead does (the README measures what that buys). 0: one schedule.
    lr_restart_step: int = 0
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
        if not 0 <= self.lr_restart_step < self.steps:
            raise ValueError(f"lr_restart_step must be in [0, steps={self.steps}), got {self.lr_restart_step!r}")
        if not 0 <= self.finish_steps <= self.steps:
            raise ValueError(f"finish_steps must be in [0, steps={self.steps}], got {self.finish_steps!r}")
        if not 0 <= self.lead_steps <= self.steps - self.finish_steps:
            raise ValueError(f"lead_steps must be in [0, steps - finish_steps = {self.steps - self.finish_steps}], "
                             f"got {self.lead_steps!r}")
        for name in ("finish_grounded_share", "lead_grounded_share", "main_grounded_share"):
            if name == "main_grounded_share" and self.main_grounded_share is None:
                continue
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"{name} is a fraction in (0, 1], got {getattr(self, name)!r}")
        if not self.decision_weight > 0:
            raise ValueError(f"decision_weight must be > 0, got {self.decision_weight!r}")
        if not self.question_copy_weight >= 0:
            raise ValueError(f"question_copy_weight must be >= 0, got {self.question_copy_weight!r}")
        if not 0.0 <= self.absent_twins <= 1.0:
            raise ValueError(f"absent_twins is a fraction in [0, 1], got {self.absent_twins!r}")
        if self.tokenizer is not None and (not isinstance(self.tokenizer, str) or not self.tokenizer):
            raise ValueError(f"tokenizer must be a model name or a path, got {self.tokenizer!r}")


# What `python -m course_lib.train --config NAME` trains when no other option is given: the
# recipe of the shipped model NAME (TrainSettings' own defaults plus these). The draft learns
# from the same corpus with tinychat's tokenizer; its steps cost about a third of tinychat's on one
# CPU thread, so it takes more of them in less time (each training.json records its wall time).
DEFAULTS: dict[str, dict] = {
    # A leading phase of grounded conversations alone, then the other tasks get their batches back
    # (the README's table of recipes measures this one beside the others it was chosen from).
    # Whether the lookup a grounded reply needs forms in the lead is a draw of seed and machine;
    # seed 0 on two threads of the AVX-512 machine drew a poor one (48.5% grounded), seed 1 the
    # model that ships. The schedule starts again where the lead ends: without the restart the
    # other tasks are learned from nothing on a cosine already at 75% of its peak and falling,
    # and arithmetic, fact and tool calls finish a few points lower.
    "tinychat": {"steps": 8500, "lead_steps": 3000, "main_grounded_share": 0.2, "seed": 1,
                 "lr_restart_step": 3000},
    "tinychat-draft": {"tokenizer": "tinychat", "steps": 8000},
}


def default_settings(config: str = "tinychat", **changes) -> TrainSettings:
    """The settings that reproduce the shipped model `config`, with `changes` applied.

    >>> default_settings("tinychat-draft").tokenizer
    'tinychat'
    >>> default_settings("tinychat").lead_steps, TrainSettings().lead_steps
    (3000, 0)
    >>> default_settings("tinychat").lr_restart_step
    3000
    """
    return TrainSettings(**{"config": config, **DEFAULTS.get(config, {}), **changes})


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


def tokenizer_path(source: str) -> Path:
    """The tokenizer.json that TrainSettings.tokenizer names (a model name, a file or a directory)."""
    path = data_dir(source) if source in CONFIGS else Path(source)
    return path / TOKENIZER_FILE if path.is_dir() or source in CONFIGS else path


def reuse_tokenizer(settings: TrainSettings) -> tuple[BPETokenizer, dict]:
    """The saved tokenizer named by settings.tokenizer, checked against the settings, and a
    record of where it came from (for training.json). Refuses when the file is missing."""
    path = tokenizer_path(settings.tokenizer)
    if not path.is_file():
        first = (f"course train --config {settings.tokenizer}" if settings.tokenizer in CONFIGS
                 else "course train")
        raise WeightsNotFoundError(
            f"{settings.config} reuses the tokenizer of {settings.tokenizer!r} so that token IDs match, but "
            f"{path} is missing; train that model first (`{first}`)")
    tokenizer = BPETokenizer.load(path)
    if tokenizer.n_vocab != settings.vocab_size:
        raise ValueError(f"the reused tokenizer {path} has {tokenizer.n_vocab} tokens but vocab_size is "
                         f"{settings.vocab_size}; set vocab_size={tokenizer.n_vocab}")
    if tokenizer.pattern != PATTERNS[settings.split_pattern]:
        named = [k for k, v in PATTERNS.items() if v == tokenizer.pattern]
        raise ValueError(f"the reused tokenizer {path} splits with {named[0] if named else 'another'!r} pattern, "
                         f"not split_pattern={settings.split_pattern!r}")
    package = Path(__file__).resolve().parent
    resolved = path.resolve()
    shown = resolved.relative_to(package.parent) if resolved.is_relative_to(package) else resolved
    record = {"reused_from": settings.tokenizer, "file": str(shown),
              "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    return tokenizer, record


def training_corpus(settings: TrainSettings) -> tuple[list[Conversation], list[Conversation]]:
    """The conversations a run trains on: the generated corpus (which a learned tokenizer is
    trained on) and its absent twins (``settings.absent_twins``), both pure functions of the seed.

    >>> corpus, twins = training_corpus(TrainSettings(conversations=200, absent_twins=1.0))
    >>> len(corpus), {t.task for t in twins}
    (200, {'grounded'})
    """
    corpus = generate_corpus(settings.conversations, settings.corpus_seed)
    return corpus, absent_twins(corpus, settings.absent_twins, settings.corpus_seed)


def grounded_subset(conversations: list[Conversation], share: float, seed: int) -> list[int]:
    """Indices of the conversations a curriculum phase draws from, sized so grounded ones are
    ``share`` of them: every grounded one and a seeded sample of the others when ``share`` is at
    least the corpus's own (1.0: grounded only), every other one and a seeded sample of the
    grounded ones when it is below.

    >>> convos = generate_corpus(200, seed=3)
    >>> picked = grounded_subset(convos, 0.5, seed=0)
    >>> grounded = sum(convos[i].task == "grounded" for i in picked)
    >>> grounded == sum(c.task == "grounded" for c in convos) == len(picked) - grounded
    True
    >>> all(convos[i].task == "grounded" for i in grounded_subset(convos, 1.0, seed=0))
    True
    >>> picked = grounded_subset(convos, 0.2, seed=0)
    >>> others = sum(convos[i].task != "grounded" for i in picked)
    >>> others == sum(c.task != "grounded" for c in convos), round(1 - others / len(picked), 2)
    (True, 0.2)
    """
    grounded = [i for i, c in enumerate(conversations) if c.task == "grounded"]
    others = [i for i, c in enumerate(conversations) if c.task != "grounded"]
    if share * len(conversations) >= len(grounded):  # at or above the corpus's share: sample the others
        kept, sampled, keep = grounded, others, round(len(grounded) * (1 - share) / share)
    else:  # below it: keep every other conversation and sample the grounded ones
        kept, sampled, keep = others, grounded, round(len(others) * share / (1 - share))
    picked = torch.randperm(len(sampled), generator=torch.Generator().manual_seed(seed))[:keep]
    return sorted(kept + [sampled[i] for i in picked.tolist()])


DECISION_TOKENS = 2  # "A bee" decides at its first token, "The capital" / "The passages" at its second


def weigh_decisions(encoded: list[tuple[list[int], list[int]]], conversations: list[Conversation],
                    weight: float) -> list[tuple[list[int], list[float]]]:
    """The encoded corpus with the first DECISION_TOKENS learned tokens of every grounded reply
    weighted ``weight`` in the loss (the mask's 1s elsewhere); unchanged when weight is 1.

    >>> convos = generate_corpus(40, seed=3)
    >>> encoded = [([1, 2, 3, 4, 5], [0, 0, 1, 1, 1]) for _ in convos]
    >>> weighted = weigh_decisions(encoded, convos, 3.0)
    >>> [w for (_, w), c in zip(weighted, convos) if c.task == "grounded"][0]
    [0, 0, 3.0, 3.0, 1]
    >>> {tuple(w) for (_, w), c in zip(weighted, convos) if c.task != "grounded"}
    {(0, 0, 1, 1, 1)}
    """
    if weight == 1:
        return encoded
    weighted = []
    for (ids, mask), convo in zip(encoded, conversations):
        if convo.task == "grounded":
            first = mask.index(1)  # the reply is the conversation's only assistant message
            mask = mask[:first] + [weight] * DECISION_TOKENS + mask[first + DECISION_TOKENS:]
        weighted.append((ids, mask))
    return weighted


def asked(convo: Conversation) -> str:
    """The question of a grounded conversation: its user message's text after the last blank line."""
    return convo.messages[convo.reply_index - 1]["content"].rsplit("\n\n", 1)[1]


def learn_question_copies(encoded: list[tuple[list[int], list]], conversations: list[Conversation], tokenizer,
                          weight: float) -> list[tuple[list[int], list]]:
    """The encoded corpus with the tokens of the question's second copy in every grounded user
    message learned, weighted ``weight``; unchanged when weight is 0.

    The second copy ends the user message, just before its ``<|end|>`` and the reply's role
    marker.

    >>> convos = [c for c in generate_corpus(40, seed=3) if c.task == "grounded"]
    >>> tok = train_tokenizer(convos, 400)
    >>> (ids, mask), = learn_question_copies([encode_conversation(tok, convos[0].messages)], convos[:1], tok, 1.0)
    >>> tok.decode([i for i, m in zip(ids, mask) if m]) == asked(convos[0]) + convos[0].messages[-1]["content"] + "<|end|>"
    True
    """
    if not weight:
        return encoded
    copied = []
    for (ids, mask), convo in zip(encoded, conversations):
        if convo.task == "grounded":
            question = asked(convo)
            q = tokenizer.encode(question)
            end = next(i for i, m in enumerate(mask) if m) - 2  # the user's <|end|>, before the reply's role marker
            if ids[end - len(q):end] != q:
                raise ValueError(f"the grounded prompt does not end with its question {question!r} as tokens")
            mask = mask[:end - len(q)] + [weight] * len(q) + mask[end:]
        copied.append((ids, mask))
    return copied


def _phases(*phases):
    """One batch stream from (stream, steps) pairs: each stream's first ``steps`` batches in turn.

    >>> list(_phases((iter("abc"), 2), (iter("xyz"), 3)))
    ['a', 'b', 'x', 'y', 'z']
    """
    for stream, steps in phases:
        for _ in range(steps):
            yield next(stream)


def learning_rate(step: int, settings: TrainSettings) -> float:
    """Linear warm-up, then cosine decay to lr * min_lr_ratio; from ``settings.lr_restart_step``
    on (when set), the same shape again over the steps that remain.

    >>> s = TrainSettings(steps=101, warmup=10, lr=1.0, min_lr_ratio=0.0)
    >>> [round(learning_rate(i, s), 3) for i in (0, 9, 55, 100)]
    [0.1, 1.0, 0.5, 0.0]
    >>> r = TrainSettings(steps=201, warmup=10, lr=1.0, min_lr_ratio=0.0, lr_restart_step=100)
    >>> [round(learning_rate(i, r), 3) for i in (99, 100, 109, 155, 200)]
    [0.55, 0.1, 1.0, 0.5, 0.0]
    """
    if settings.lr_restart_step and step >= settings.lr_restart_step:
        # the remaining steps as a run of their own (its phases do not bear on the schedule)
        rest = replace(settings, steps=settings.steps - settings.lr_restart_step, lr_restart_step=0,
                       lead_steps=0, finish_steps=0)
        return learning_rate(step - settings.lr_restart_step, rest)
    if step < settings.warmup:
        return settings.lr * (step + 1) / settings.warmup
    span = max(settings.steps - 1 - settings.warmup, 1)
    progress = min((step - settings.warmup) / span, 1.0)
    floor = settings.lr * settings.min_lr_ratio
    return floor + (settings.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def masked_loss(model: Transformer, inputs: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None,
                *, fused: bool = False) -> torch.Tensor:
    """Mean cross-entropy over positions whose target is not IGNORE_INDEX (weighted by
    ``weights`` (B, T) when given: sum(w * loss) / sum(w) over those positions).

    Logits are computed only at those positions: the same loss as taking cross_entropy of
    model(inputs) with ignore_index, without projecting the ~80% of positions that are ignored.
    ``fused=True`` runs attention in torch's fused kernel (the same values up to float rounding;
    ``benchmarks/bench_train.py`` times the two). The shipped recipe keeps the course's own
    attention, so that `make train` reproduces the recorded run.

    >>> from course_lib.model import get_config
    >>> model = Transformer(get_config("test-gqa"), generator=torch.Generator().manual_seed(0))
    >>> x = torch.randint(0, 128, (2, 6), generator=torch.Generator().manual_seed(1))
    >>> y = torch.full((2, 6), IGNORE_INDEX); y[0, 3:] = x[0, 3:]; y[1, 5] = 7
    >>> full = F.cross_entropy(model(x).reshape(-1, 128), y.reshape(-1), ignore_index=IGNORE_INDEX)
    >>> torch.allclose(masked_loss(model, x, y), full)
    True
    """
    learned = targets != IGNORE_INDEX  # (B, T)
    states = model.hidden_states(inputs, fused=fused)[learned]  # (N, d_model): the N learned positions
    if weights is None:
        return F.cross_entropy(model.lm_head(states), targets[learned])  # (N, V), (N,)
    losses = F.cross_entropy(model.lm_head(states), targets[learned], reduction="none")  # (N,)
    w = weights[learned]  # (N,)
    return (losses * w).sum() / w.sum()


def run_training(settings: TrainSettings, *, device: torch.device | str | None = None,
                 progress: bool = True) -> TrainResult:
    """Generate the corpus, train (or reuse) the tokenizer and train the model; nothing is written to disk."""
    device = default_device() if device is None else torch.device(device)
    started = time.perf_counter()
    reused = reuse_tokenizer(settings) if settings.tokenizer is not None else None  # first: fail fast
    conversations, twins = training_corpus(settings)
    if reused is not None:
        tokenizer, tokenizer_record = reused
    else:
        tokenizer = train_tokenizer(conversations, settings.vocab_size, PATTERNS[settings.split_pattern])
        tokenizer_record = {"trained": True}
    config = get_config(settings.config, vocab_size=tokenizer.n_vocab, **settings.overrides)
    conversations = conversations + twins  # after the tokenizer: it learns from the generated corpus alone
    encoded = weigh_decisions([encode_conversation(tokenizer, c.messages) for c in conversations], conversations,
                              settings.decision_weight)
    encoded = learn_question_copies(encoded, conversations, tokenizer, settings.question_copy_weight)
    pad_id = tokenizer.special_tokens[END_OF_TEXT]
    batches = LengthBatches(encoded, batch_size=settings.batch_size, pad_id=pad_id, max_len=config.max_seq_len)

    def curriculum_stream(share: float, stream_seed: int):  # a phase's batches, from grounded_subset(share)
        picked = grounded_subset(conversations, share, settings.seed)
        return LengthBatches([encoded[i] for i in picked], batch_size=settings.batch_size, pad_id=pad_id,
                             max_len=config.max_seq_len).stream(torch.Generator().manual_seed(stream_seed))

    # Attention weights and gradients soon hold many values below float32's normal range; x86 CPUs
    # do arithmetic on such subnormals far more slowly, and flushing them to zero changes nothing
    # the loss can see. Set before the model's first parallel op: torch's worker threads take the
    # floating-point mode of the thread that starts them. This thread's mode is restored afterwards.
    flushed = torch.set_flush_denormal(True)
    try:
        torch.manual_seed(settings.seed)  # belt and braces: every draw below also takes a generator
        model = Transformer(config, generator=torch.Generator().manual_seed(settings.seed)).to(device)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]  # norms' gains are not shrunk
        optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": settings.weight_decay},
                                       {"params": no_decay, "weight_decay": 0.0}],
                                      lr=settings.lr, betas=(0.9, 0.95))
        # The phases in order (lead, main, finish), each from its own seeded stream; without a lead
        # or a finish the main stream alone draws exactly the batches the one-phase recipe always has.
        main_steps = settings.steps - settings.lead_steps - settings.finish_steps
        main = (batches.stream(torch.Generator().manual_seed(settings.seed)) if settings.main_grounded_share is None
                else curriculum_stream(settings.main_grounded_share, settings.seed))
        phases = [(main, main_steps)]
        if settings.lead_steps:
            phases.insert(0, (curriculum_stream(settings.lead_grounded_share, settings.seed + 2), settings.lead_steps))
        if settings.finish_steps:
            phases.append((curriculum_stream(settings.finish_grounded_share, settings.seed + 1), settings.finish_steps))
        stream = _phases(*phases)
        losses = _optimize(model, optimizer, stream, settings, device, progress)
    finally:
        if flushed:
            torch.set_flush_denormal(False)

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
        "tokenizer": tokenizer_record,
        "corpus_sha256": corpus_fingerprint(conversations),
        "corpus_tokens": sum(len(ids) for ids, _ in encoded),
        "conversations_trained": len(conversations),  # the generated corpus and its absent twins
        "epochs": round(settings.steps * settings.batch_size / len(encoded), 2),
    }
    return TrainResult(model, tokenizer, losses, metadata)


def _optimize(model: Transformer, optimizer: torch.optim.Optimizer, stream, settings: TrainSettings,
              device: torch.device, progress: bool) -> list[float]:
    """settings.steps AdamW steps on the batch stream; the loss of each step. Leaves the model in eval mode."""
    model.train()
    losses: list[float] = []
    bar = tqdm(range(settings.steps), desc="training", disable=not progress, mininterval=1.0)
    for step in bar:
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, settings)
        inputs, targets, *weights = (t.to(device) for t in next(stream))  # (B, T) each
        loss = masked_loss(model, inputs, targets, *weights)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
        optimizer.step()
        losses.append(loss.item())
        if step % 10 == 0 or step == settings.steps - 1:
            bar.set_postfix(loss=f"{sum(losses[-10:]) / len(losses[-10:]):.4f}")
    model.eval()
    return losses


def save_artifacts(result: TrainResult, directory: str | Path) -> Path:
    """config.json + model.safetensors (save_model), tokenizer.json and training.json."""
    directory = save_model(result.model, directory)
    result.tokenizer.save(directory / TOKENIZER_FILE)
    (directory / METADATA_FILE).write_text(json.dumps(result.metadata, indent=2) + "\n")
    return directory


_OPTIONS = ("vocab_size", "split_pattern", "tokenizer", "conversations", "absent_twins", "lead_steps",
            "lead_grounded_share", "main_grounded_share", "finish_steps", "finish_grounded_share",
            "decision_weight", "question_copy_weight", "seed", "steps", "batch_size", "lr", "warmup",
            "lr_restart_step")
# The options whose default is None: their command-line type and what None does (the others
# take their default's type and show it).
_NONE_DEFAULTS = {"tokenizer": (str, "learn one"), "main_grounded_share": (float, "the corpus as drawn")}


def _parser() -> argparse.ArgumentParser:
    defaults = TrainSettings()
    parser = argparse.ArgumentParser(prog="python -m course_lib.train", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory (default: course_lib/data/<config>, the shipped model)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for torch (default: torch's choice; 1 is steadier on a busy machine)")
    parser.add_argument("--config", default=defaults.config, choices=sorted(CONFIGS),
                        help=f"model geometry; the other defaults follow it (default: {defaults.config})")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                        help="change one field of the model geometry, e.g. --set n_heads=4 (repeatable; "
                             "an experiment, not the shipped model)")
    for name in _OPTIONS:
        value = getattr(defaults, name)
        per_config = ", ".join(f"{c}: {d[name]}" for c, d in DEFAULTS.items() if name in d)
        kind, shown = _NONE_DEFAULTS.get(name, (type(value), value))
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None,
                            help=f"(default: {shown}"
                                 f"{'; ' + per_config if per_config else ''})")
    return parser


def parse_overrides(pairs: list[str], config: str) -> dict:
    """``["n_heads=4", ...]`` as ModelConfig field overrides, checked against ``config`` now rather
    than after the corpus is built.

    >>> parse_overrides(["n_heads=4", "rope_theta=500000.0"], "tinychat")
    {'n_heads': 4, 'rope_theta': 500000.0}
    """
    fields = {f.name for f in dataclass_fields(ModelConfig)}
    overrides: dict = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or name not in fields or name in ("name", "vocab_size"):
            settable = ", ".join(sorted(set(fields) - {"name", "vocab_size"}))
            raise ValueError(f"--set takes FIELD=VALUE with FIELD one of {settable}; got {pair!r} "
                             "(the vocabulary size is --vocab-size)")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise ValueError(f"--set {name}: {text!r} is not a number (or true/false)") from None
        if isinstance(value, bool) != (name == "tie_embeddings") or not isinstance(value, (int, float)):
            raise ValueError(f"--set {name}: {text!r} is not a value of the right kind for {name}")
        overrides[name] = value
    get_config(config, **overrides)  # raises ValueError for a geometry that cannot be built
    return overrides


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            raise SystemExit("--threads must be at least 1")
        torch.set_num_threads(args.threads)
    given = {name: getattr(args, name) for name in _OPTIONS if getattr(args, name) is not None}
    try:
        if args.overrides:
            given["overrides"] = parse_overrides(args.overrides, args.config)
        settings = default_settings(args.config, **given)
        if settings.tokenizer is not None:
            reuse_tokenizer(settings)  # refuse before any work when it is missing or does not fit
    except (WeightsNotFoundError, ValueError) as err:
        print(f"course train: {err}", file=sys.stderr)
        return 2
    result = run_training(settings, device=args.device, progress=not args.quiet)
    argv_given = list(sys.argv[1:] if argv is None else argv)
    result.metadata["command"] = " ".join(["python -m course_lib.train", *argv_given])
    out = save_artifacts(result, args.out or data_dir(settings.config))
    meta = result.metadata
    print(f"saved {meta['parameters']:,} parameters to {out} | final loss {meta['final_loss']:.4f} | "
          f"{meta['wall_time_s']:.0f} s on {meta['device']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
