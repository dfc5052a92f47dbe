"""What a grammar mask costs, measured side by side with llguidance in one run (CPU).

Three measurements, each printed with its ratio:
  lookup   per generated token, over cl100k_base: the course guide (next_state + mask) vs
           llguidance (consume_token + fill_next_token_bitmask), walking the same token
           sequences through the same regexes, including one compiled from a 10-field JSON
           Schema. Goal: course <= 2x llguidance. The course guide built its whole index up
           front; llguidance computes each mask when asked, so its per-token time includes
           work the course did at compile time.
  compile  the 10-field schema over cl100k_base: the course index build (regex -> DFA ->
           byte DFA -> a mask per state) vs llguidance's matcher construction. Goal: course
           under 10 s. Tokenizer preparation (the trie, llguidance's LLTokenizer) is timed
           separately: it is paid once per tokenizer, not per schema.
  decode   tinychat, greedy, the same number of tokens with and without the mask.
           Goal: <= 1.3x.
Each timing is the median of --repeats runs.

    python benchmarks/bench_structured.py [--repeats 5] [--threads 1]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import llguidance
import llguidance.numpy
import llguidance.tiktoken
import torch

from course_lib.model import load_model, load_tokenizer
from course_lib.sampling import SamplingParams
from course_lib.generation import generate
from course_lib.structured.guide import JSONGuide, RegexGuide
from course_lib.structured.schema import schema_to_regex
from course_lib.structured.vocabulary import TokenVocabulary
from course_lib.timing import median_seconds
from course_lib.tokenization import get_encoding

TICKET_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 1, "maximum": 999999},
        "title": {"type": "string", "maxLength": 40},
        "priority": {"enum": ["low", "medium", "high", "urgent"]},
        "open": {"type": "boolean"},
        "assignee": {"anyOf": [{"type": "string", "maxLength": 20}, {"type": "null"}]},
        "estimate_hours": {"type": "integer", "minimum": 0, "maximum": 200},
        "tags": {"type": "array", "items": {"enum": ["bug", "ui", "api", "docs"]}, "maxItems": 4},
        "customer": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                                      "tier": {"enum": ["free", "pro"]}},
                     "required": ["name", "tier"], "additionalProperties": False},
        "score": {"type": "number"},
        "status": {"const": "new"},
    },
    "required": ["id", "title", "priority", "open", "assignee", "estimate_hours", "tags", "customer",
                 "score", "status"],
    "additionalProperties": False,
}
TICKET = {"id": 4821, "title": "Login page fails on Safari", "priority": "high", "open": True,
          "assignee": None, "estimate_hours": 6, "tags": ["bug", "ui"],
          "customer": {"name": "Kraków Foods", "tier": "pro"}, "score": 7.5, "status": "new"}

LOOKUP_CASES = [  # (name, regex, text that it accepts)
    ("enum", r"(?:yes|no|maybe)", "maybe"),
    ("date", r"[0-9]{4}-[0-9]{2}-[0-9]{2}", "2026-11-29"),
    ("free text", r"[^\"\\]{0,60}", "The quick brown fox jumps over the lazy dog, twice."),
    ("ticket schema", schema_to_regex(TICKET_SCHEMA), json.dumps(TICKET, ensure_ascii=False, separators=(", ", ": "))),
]


def lookup_section(enc, ll_tokenizer, repeats: int) -> None:
    print("\nmask lookup per generated token, cl100k_base (walk a fixed token sequence)")
    print(f"{'regex':<15}{'tokens':>7}{'course us':>11}{'llguidance us':>15}{'ratio':>8}")
    bitmask = llguidance.numpy.allocate_token_bitmask(1, ll_tokenizer.vocab_size)
    for name, pattern, text in LOOKUP_CASES:
        guide = RegexGuide(pattern, enc)
        tokens = [*enc.encode(text), guide.eos_id]
        grammar = llguidance.LLMatcher.grammar_from_regex(pattern)

        def course():
            state = guide.initial_state
            for token in tokens:
                guide.mask(state)
                state = guide.next_state(state, token)

        def theirs():
            matcher = llguidance.LLMatcher(ll_tokenizer, grammar)
            for token in tokens:
                llguidance.numpy.fill_next_token_bitmask(matcher, bitmask, 0)
                matcher.consume_token(token)

        matcher_build = median_seconds(lambda: llguidance.LLMatcher(ll_tokenizer, grammar), repeats, warm_up=False)
        ours = median_seconds(course, repeats, warm_up=False) / len(tokens) * 1e6
        other = max(median_seconds(theirs, repeats, warm_up=False) - matcher_build, 1e-9) / len(tokens) * 1e6
        print(f"{name:<15}{len(tokens):>7}{ours:>11.1f}{other:>15.1f}{ours / other:>7.2f}x")


def compile_section(enc, repeats: int) -> None:
    print("\ncompile the 10-field ticket schema over cl100k_base")
    start = time.perf_counter()
    vocabulary = TokenVocabulary.of(enc)
    trie_s = time.perf_counter() - start
    start = time.perf_counter()
    ll_tokenizer = llguidance.tiktoken.lltokenizer_from_encoding(enc)
    ll_tok_s = time.perf_counter() - start
    print(f"  once per tokenizer: course byte trie {trie_s:.2f} s ({vocabulary.n_nodes} nodes), "
          f"llguidance LLTokenizer {ll_tok_s:.2f} s")
    pattern = schema_to_regex(TICKET_SCHEMA)
    grammar = llguidance.LLMatcher.grammar_from_regex(pattern)
    guides = []
    ours = median_seconds(lambda: guides.append(JSONGuide(TICKET_SCHEMA, enc)), max(1, repeats // 2), warm_up=False)
    theirs = median_seconds(lambda: llguidance.LLMatcher(ll_tokenizer, grammar), repeats, warm_up=False)
    print(f"  course index: {ours:.2f} s for {guides[0].n_states} byte-DFA states (goal < 10 s); "
          f"llguidance matcher: {theirs * 1e3:.1f} ms; ratio {ours / theirs:.0f}x")
    return ll_tokenizer


def decode_section(repeats: int) -> None:
    print("\ntinychat greedy decode, the same number of tokens with and without the mask")
    model, tokenizer = load_model("tinychat", device="cpu"), load_tokenizer("tinychat")
    messages = [{"role": "user", "content": "Extract the booking as JSON: Reservation for Okafor: 4 guests, "
                                            "Friday, 19:30."}]
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30},
                                               "party_size": {"type": "integer", "minimum": 1, "maximum": 20},
                                               "day": {"type": "string", "maxLength": 12},
                                               "time": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"}},
              "required": ["name", "party_size", "day", "time"], "additionalProperties": False}
    guide = JSONGuide(schema, tokenizer)
    params = SamplingParams(temperature=0, max_new_tokens=64)
    constrained = generate(model, tokenizer, messages, params, guide=guide)
    n = len(constrained.token_ids)
    free_params = SamplingParams(temperature=0, max_new_tokens=n)
    masked, free = [], []
    for _ in range(repeats):  # contenders interleaved, so drift in the machine hits both
        masked.append(median_seconds(lambda: generate(model, tokenizer, messages, params, guide=guide), 1))
        free.append(median_seconds(lambda: generate(model, tokenizer, messages, free_params, eos_ids=()), 1))
    masked, free = statistics.median(masked), statistics.median(free)
    print(f"  {n} tokens: with mask {masked / n * 1e3:.2f} ms/token, without {free / n * 1e3:.2f} ms/token; "
          f"ratio {masked / free:.2f}x (goal <= 1.3x)")
    print(f"  constrained output: {constrained.text}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{args.threads} thread(s); median of {args.repeats}")
    enc = get_encoding("cl100k_base")
    ll_tokenizer = compile_section(enc, args.repeats)
    lookup_section(enc, ll_tokenizer, args.repeats)
    decode_section(args.repeats)


if __name__ == "__main__":
    main()
