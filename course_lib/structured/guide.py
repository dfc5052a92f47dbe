"""Token-level guides: which tokens keep the output a live prefix of a regex's language.

A DFA reads characters; a model emits tokens, which are byte strings that may stop in the
middle of a UTF-8 character ("é" is two bytes, and a vocabulary may hold just the first).
So the guide walks the UTF-8 *byte* DFA (``DFA.to_bytes()``): a token is allowed in a state
when walking its bytes never leaves the live states. A state halfway through a character is
an ordinary state of that DFA, so partial characters need no special case.

    >>> from course_lib.structured.vocabulary import TokenVocabulary
    >>> vocab = TokenVocabulary.from_token_bytes([b"y", b"es", b"no", b"yes", b"n", b"o"], eos_id=6)
    >>> guide = RegexGuide("yes|no", vocab)
    >>> s = guide.initial_state
    >>> guide.allowed_tokens(s)                 # "es" is not a prefix of yes|no
    [0, 2, 3, 4]
    >>> s = guide.next_state(s, 0)              # "y"
    >>> guide.allowed_tokens(s), guide.is_accepting(s)
    ([1], False)
    >>> s = guide.next_state(s, 1)              # "yes": now only the end token
    >>> guide.allowed_tokens(s), guide.is_accepting(s)
    ([6], True)

Every state's mask is computed when the guide is built (the "index"), by walking the
vocabulary's byte trie through the DFA for all states at once, one array gather per trie
level; afterwards a lookup is one row of a table.
"""
from __future__ import annotations

import json
from collections import deque

import numpy as np
import torch

from course_lib.structured.dfa import compile_regex
from course_lib.structured.schema import schema_to_regex
from course_lib.structured.vocabulary import TokenVocabulary

_STATES_PER_PASS = 32  # bounds one pass to ~7 M live (state, trie node) pairs for cl100k_base


def _as_vocabulary(tokenizer) -> TokenVocabulary:
    return tokenizer if isinstance(tokenizer, TokenVocabulary) else TokenVocabulary.of(tokenizer)


def token_masks(byte_dfa, vocab: TokenVocabulary) -> np.ndarray:
    """(n_states, vocab.size) bool: token t is allowed in state s.

    A walk of the vocabulary's byte trie from every start state at once, one trie level per
    step. The frontier holds only live (start state, trie node, DFA state) triples: a node
    whose bytes already left the language is dropped with all its descendants, so a state
    that admits a handful of tokens costs a handful of steps, and a shared prefix is walked
    once for every token that starts with it. Every node still on the frontier spells a live
    prefix, so the token it spells (if any) is allowed. The end token is allowed in
    accepting states.
    """
    n_states = byte_dfa.n_states
    table = byte_dfa.table                                                       # (S, 256), -1 = dead
    masks = np.zeros((n_states, vocab.size), dtype=bool)                         # (S, V)
    roots = np.arange(vocab.level_starts[0], vocab.level_starts[1], dtype=np.int32)  # 1-byte prefixes
    for first in range(0, n_states, _STATES_PER_PASS):
        starts = np.arange(first, min(first + _STATES_PER_PASS, n_states), dtype=np.int32)
        rows = np.repeat(starts, len(roots))                                     # (F,) start state
        nodes = np.tile(roots, len(starts))                                      # (F,) trie node
        states = table[rows, vocab.node_byte[nodes]]                             # (F,) DFA state after it
        while True:
            live = states >= 0
            rows, nodes, states = rows[live], nodes[live], states[live]
            spelled = vocab.node_token[nodes]
            masks[rows[spelled >= 0], spelled[spelled >= 0]] = True
            first_child = vocab.child_lo[nodes]
            counts = vocab.child_hi[nodes] - first_child                         # (F,) children each
            total = int(counts.sum())
            if total == 0:
                break
            # Expand every node into its run of children (a vectorised "for child in children").
            offsets = np.arange(total, dtype=np.int32) - np.repeat(np.cumsum(counts, dtype=np.int32) - counts, counts)
            nodes = np.repeat(first_child, counts) + offsets
            rows, states = np.repeat(rows, counts), np.repeat(states, counts)
            states = table[states, vocab.node_byte[nodes]]
    has_bytes = vocab.token_node >= 0
    duplicates = np.flatnonzero(has_bytes & (vocab.node_token[np.maximum(vocab.token_node, 0)] != np.arange(vocab.size)))
    for token in duplicates:  # an ID whose bytes another ID also spells shares its column
        masks[:, token] = masks[:, vocab.node_token[vocab.token_node[token]]]
    for state in byte_dfa.accepting:
        masks[state, vocab.eos_id] = True
    return masks


class RegexGuide:
    """The token mask for one regex over one vocabulary; see the module docstring.

    ``tokenizer`` is a course ``BPETokenizer``, a tiktoken ``Encoding`` or a
    ``TokenVocabulary``. States are ints; the end token leaves the state unchanged (the
    text does not change) and ends generation.
    """

    def __init__(self, pattern: str, tokenizer):
        if not isinstance(pattern, str):
            raise TypeError(f"pattern must be a str, got {type(pattern).__name__}")
        self.pattern = pattern
        self.vocabulary = _as_vocabulary(tokenizer)
        self.dfa = compile_regex(pattern).to_bytes()
        self._masks = token_masks(self.dfa, self.vocabulary)
        if not self.vocabulary.has_every_byte:
            self._check_spellable()

    # ----- the API a decoder uses, once per token ---------------------------------------------
    @property
    def initial_state(self) -> int:
        return self.dfa.start

    @property
    def eos_id(self) -> int:
        return self.vocabulary.eos_id

    @property
    def vocab_size(self) -> int:
        return self.vocabulary.size

    @property
    def n_states(self) -> int:
        return self.dfa.n_states

    def is_accepting(self, state: int) -> bool:
        return state in self.dfa.accepting

    def allowed_tokens(self, state: int) -> list[int]:
        """Sorted IDs of the tokens allowed in ``state`` (the end token only if accepting)."""
        return np.flatnonzero(self._masks[self._check_state(state)]).tolist()

    def is_allowed(self, state: int, token_id: int) -> bool:
        return 0 <= token_id < self.vocabulary.size and bool(self._masks[self._check_state(state), token_id])

    def mask(self, state: int) -> torch.Tensor:
        """Bool tensor (vocab_size,): True where the token is allowed."""
        return torch.from_numpy(self._masks[self._check_state(state)].copy())

    def masks(self, states) -> torch.Tensor:
        """Bool tensor (B, vocab_size) for a batch of states (one gather, no Python loop)."""
        return torch.from_numpy(self._masks[np.asarray(states, dtype=np.int64)])

    def next_state(self, state: int, token_id: int) -> int:
        """The state after emitting ``token_id``; ``ValueError`` if the mask forbids it."""
        if isinstance(token_id, bool) or not isinstance(token_id, (int, np.integer)):
            raise TypeError(f"token_id must be an int, got {type(token_id).__name__}")
        if not self.is_allowed(state, int(token_id)):
            spelled = self.vocabulary.token_bytes[token_id] if 0 <= token_id < self.vocabulary.size else None
            raise ValueError(f"token {token_id} ({spelled!r}) is not allowed in state {state} of {self.pattern!r}; "
                             "pick one of allowed_tokens(state)")
        if token_id == self.vocabulary.eos_id:
            return state
        return self.dfa.walk(state, self.vocabulary.token_bytes[token_id])

    def _check_state(self, state) -> int:
        if isinstance(state, bool) or not isinstance(state, (int, np.integer)) or not 0 <= state < self.dfa.n_states:
            raise ValueError(f"state must be an int in 0..{self.dfa.n_states - 1} (from initial_state or "
                             f"next_state), got {state!r}")
        return int(state)

    # ----- a vocabulary that lacks some bytes can paint itself into a corner ------------------
    def _check_spellable(self) -> None:
        """Every state reachable by tokens must allow some token; otherwise say which text is stuck."""
        seen = {self.initial_state: b""}
        queue = deque([self.initial_state])
        while queue:
            state = queue.popleft()
            allowed = self.allowed_tokens(state)
            if not allowed:
                raise ValueError(
                    f"the tokenizer cannot spell what {self.pattern!r} requires after {seen[state]!r}: no token "
                    "continues it (its vocabulary lacks the bytes needed); use a byte-level tokenizer")
            for token in allowed:
                if token != self.vocabulary.eos_id:
                    target = self.next_state(state, token)
                    if target not in seen:
                        seen[target] = seen[state] + self.vocabulary.token_bytes[token]
                        queue.append(target)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.pattern[:40]!r}: {self.n_states} states over {self.vocabulary.size} tokens>"


class JSONGuide(RegexGuide):
    """A ``RegexGuide`` for the regex that ``schema_to_regex`` compiles from a JSON Schema.

    ``parse(text)`` turns finished output into a value and validates it with ``jsonschema``,
    the independent check that the guide kept its promise.
    """

    def __init__(self, schema: dict, tokenizer, *, whitespace: str = r"[ ]?"):
        self.schema = schema
        super().__init__(schema_to_regex(schema, whitespace=whitespace), tokenizer)

    def parse(self, text: str):
        import jsonschema

        value = json.loads(text)
        jsonschema.validate(value, self.schema)
        return value
