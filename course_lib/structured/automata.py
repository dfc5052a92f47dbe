"""Finite automata over integer intervals: Thompson NFA -> subset construction -> prune -> minimize.

The symbols are integers (code points for text, 0..255 for bytes), and every edge carries an
inclusive interval of them, so ``.`` or ``[^"]`` is one edge, not a million.

>>> from course_lib.structured.regex_parse import parse
>>> dfa = build_dfa(thompson(parse("(a|b)*abb")))
>>> dfa.n_states, dfa.start, sorted(dfa.accepting)
(4, 0, [3])
>>> dfa.transitions[0]                     # (lo, hi, target): 'a' -> 1, 'b' -> 0
((97, 97, 1), (98, 98, 0))
>>> build_dfa(thompson(parse("[^\\x00-\\U0010FFFF]"))) is None     # no string at all
True

``build_dfa`` returns a DFA whose states are numbered in breadth-first order from the start
(start = 0), with no dead state (every state can still reach acceptance) and no two
equivalent states, or ``None`` when the language is empty.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from course_lib.structured.regex_parse import Alt, Chars, Concat, Node, Repeat

Edge = tuple[int, int, int]                       # (lo, hi, target), lo <= hi inclusive


class NFA:
    """States 0..n-1 with epsilon moves and interval edges; one start and one accepting state."""

    def __init__(self):
        self.eps: list[list[int]] = []
        self.edges: list[list[Edge]] = []
        self.start = self.accept = -1

    def add_state(self) -> int:
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def add_eps(self, source: int, target: int) -> None:
        self.eps[source].append(target)

    def add_edge(self, source: int, lo: int, hi: int, target: int) -> None:
        self.edges[source].append((lo, hi, target))


@dataclass(frozen=True)
class IntervalDFA:
    """A deterministic automaton: per state, sorted disjoint (lo, hi, target) edges."""
    start: int
    accepting: frozenset[int]
    transitions: tuple[tuple[Edge, ...], ...]

    @property
    def n_states(self) -> int:
        return len(self.transitions)


def thompson(node: Node) -> NFA:
    """Thompson's construction; counted repeats are written out copy by copy."""
    nfa = NFA()
    nfa.start, nfa.accept = _fragment(nfa, node)
    return nfa


def _fragment(nfa: NFA, node: Node) -> tuple[int, int]:
    """Build ``node`` into ``nfa``; its (entry, exit) states."""
    entry = nfa.add_state()
    if isinstance(node, Chars):
        exit_ = nfa.add_state()
        for lo, hi in node.intervals:
            nfa.add_edge(entry, lo, hi, exit_)
        return entry, exit_
    if isinstance(node, Concat):
        exit_ = entry
        for item in node.items:
            first, last = _fragment(nfa, item)
            nfa.add_eps(exit_, first)
            exit_ = last
        return entry, exit_
    if isinstance(node, Alt):
        exit_ = nfa.add_state()
        for option in node.options:
            first, last = _fragment(nfa, option)
            nfa.add_eps(entry, first)
            nfa.add_eps(last, exit_)
        return entry, exit_
    assert isinstance(node, Repeat), f"not a regex AST node: {node!r}"
    current = entry
    for _ in range(node.min):
        first, last = _fragment(nfa, node.item)
        nfa.add_eps(current, first)
        current = last
    exit_ = nfa.add_state()
    nfa.add_eps(current, exit_)
    if node.max is None:                   # a loop: exit -> item -> exit
        first, last = _fragment(nfa, node.item)
        nfa.add_eps(exit_, first)
        nfa.add_eps(last, exit_)
        return entry, exit_
    # Optional copies nest, (x(x(x)?)?)?, rather than x?x?x?: after reading i copies the NFA is in
    # one place, not in any of i..n, which keeps the subset construction's state sets small.
    for _ in range(node.max - node.min):
        first, last = _fragment(nfa, node.item)
        nfa.add_eps(current, first)
        nfa.add_eps(last, exit_)
        current = last
    return entry, exit_


def determinize(nfa: NFA) -> IntervalDFA:
    """Subset construction over intervals; DFA states are sets of NFA states (reachable only).

    A set keeps only the states that matter after an epsilon closure, those with edges and the
    accepting one, so closures that differ only in pass-through states become one DFA state.
    """
    important = [bool(nfa.edges[q]) or q == nfa.accept for q in range(len(nfa.eps))]
    closures: dict[int, frozenset[int]] = {}

    def closure(q: int) -> frozenset[int]:
        found = closures.get(q)
        if found is None:
            seen, stack = {q}, [q]
            while stack:
                for r in nfa.eps[stack.pop()]:
                    if r not in seen:
                        seen.add(r)
                        stack.append(r)
            found = closures[q] = frozenset(r for r in seen if important[r])
        return found

    start = closure(nfa.start)
    ids: dict[frozenset[int], int] = {start: 0}
    sets = [start]
    by_targets: dict[frozenset[int], int] = {}     # raw move targets -> DFA state, skips closures
    transitions: list[tuple[Edge, ...]] = []
    for members in sets:                           # `sets` grows while we walk it
        events = []
        for q in members:
            for lo, hi, target in nfa.edges[q]:
                events.append((lo, 1, target))
                events.append((hi + 1, -1, target))
        events.sort()
        active: dict[int, int] = {}                # target -> number of edges now covering
        out: list[list[int]] = []
        i, n_events = 0, len(events)
        while i < n_events:
            at = events[i][0]
            while i < n_events and events[i][0] == at:
                _, delta, target = events[i]
                count = active.get(target, 0) + delta
                if count:
                    active[target] = count
                else:
                    del active[target]
                i += 1
            if not active:
                continue
            key = frozenset(active)
            state = by_targets.get(key)
            if state is None:
                closed = frozenset().union(*map(closure, key))
                state = ids.get(closed)
                if state is None:
                    state = ids[closed] = len(sets)
                    sets.append(closed)
                by_targets[key] = state
            end = events[i][0] - 1                 # active is non-empty, so an event follows
            if out and out[-1][2] == state and out[-1][1] == at - 1:
                out[-1][1] = end
            else:
                out.append([at, end, state])
        transitions.append(tuple(map(tuple, out)))
    accepting = frozenset(s for s, members in enumerate(sets) if nfa.accept in members)
    return IntervalDFA(0, accepting, tuple(transitions))


def prune(dfa: IntervalDFA) -> IntervalDFA | None:
    """Drop the states that cannot reach acceptance (and edges into them); None if the start is one."""
    incoming: list[list[int]] = [[] for _ in dfa.transitions]
    for source, edges in enumerate(dfa.transitions):
        for _, _, target in edges:
            incoming[target].append(source)
    live = set(dfa.accepting)
    queue = deque(live)
    while queue:
        for source in incoming[queue.popleft()]:
            if source not in live:
                live.add(source)
                queue.append(source)
    if dfa.start not in live:
        return None
    kept = sorted(live)
    new_id = {old: new for new, old in enumerate(kept)}
    transitions = tuple(tuple((lo, hi, new_id[t]) for lo, hi, t in dfa.transitions[old] if t in live)
                        for old in kept)
    return IntervalDFA(new_id[dfa.start], frozenset(new_id[s] for s in dfa.accepting), transitions)


def minimize(dfa: IntervalDFA) -> IntervalDFA:
    """Hopcroft's partition refinement, then renumber breadth-first from the start.

    The DFA must be pruned. It stays partial (no sink state): with every state live, a missing
    edge is the only way to die, and starting with *both* blocks (accepting and not) on the
    worklist keeps Hopcroft's "process the smaller half" rule correct for partial DFAs
    (Valmari & Lehtinen, 2008). A splitter block A splits by every symbol at once: states stay
    together only if the same symbols lead them into A. Those symbols are a union of intervals,
    so the work follows the number of edges, never the size of the alphabet.
    """
    incoming: list[list[tuple[int, int, int]]] = [[] for _ in dfa.transitions]   # (source, lo, hi)
    for source, edges in enumerate(dfa.transitions):
        for lo, hi, target in edges:
            incoming[target].append((source, lo, hi))
    blocks = [b for b in (set(dfa.accepting), set(range(dfa.n_states)) - dfa.accepting) if b]
    block_of = [0] * dfa.n_states
    for b, members in enumerate(blocks):
        for q in members:
            block_of[q] = b
    worklist, waiting = list(range(len(blocks))), set(range(len(blocks)))
    while worklist:
        splitter = worklist.pop()
        waiting.discard(splitter)
        into: dict[int, list[tuple[int, int]]] = {}     # source -> symbol intervals leading into A
        for target in blocks[splitter]:
            for source, lo, hi in incoming[target]:
                into.setdefault(source, []).append((lo, hi))
        groups: dict[int, dict[tuple, list[int]]] = {}  # block -> signature -> its states
        for source, spans in into.items():
            groups.setdefault(block_of[source], {}).setdefault(_canonical(spans), []).append(source)
        for b, by_signature in groups.items():
            parts = sorted(by_signature.values(), key=len)
            if sum(map(len, parts)) == len(blocks[b]):
                parts.pop()                             # every state was touched: the largest stays
            pieces = [b]
            for part in parts:                          # the rest (untouched states too) stays in b
                blocks[b].difference_update(part)
                pieces.append(len(blocks))
                blocks.append(set(part))
                for q in part:
                    block_of[q] = pieces[-1]
            if len(pieces) == 1:
                continue
            largest = -1 if b in waiting else max(pieces, key=lambda x: len(blocks[x]))
            for piece in pieces:                        # the largest is implied by the others
                if piece != largest and piece not in waiting:
                    worklist.append(piece)
                    waiting.add(piece)
    return _quotient(dfa, blocks, block_of)


def _canonical(spans: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Disjoint spans, sorted with adjacent ones merged, so equal symbol sets compare equal."""
    if len(spans) == 1:
        return tuple(spans)
    spans.sort()
    merged = [spans[0]]
    for lo, hi in spans[1:]:
        if lo == merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return tuple(merged)


def _quotient(dfa: IntervalDFA, blocks: list[set[int]], block_of: list[int]) -> IntervalDFA:
    """One state per block, numbered breadth-first from the start; adjacent edges merged."""
    order = {block_of[dfa.start]: 0}
    queue, transitions = deque([block_of[dfa.start]]), []
    while queue:
        representative = next(iter(blocks[queue.popleft()]))
        out: list[list[int]] = []
        for lo, hi, target in dfa.transitions[representative]:
            b = block_of[target]
            if b not in order:
                order[b] = len(order)
                queue.append(b)
            if out and out[-1][2] == order[b] and out[-1][1] == lo - 1:
                out[-1][1] = hi
            else:
                out.append([lo, hi, order[b]])
        transitions.append(tuple(map(tuple, out)))
    accepting = frozenset(order[block_of[q]] for q in dfa.accepting)
    return IntervalDFA(0, accepting, tuple(transitions))


def build_dfa(nfa: NFA) -> IntervalDFA | None:
    """The minimal DFA without dead states for ``nfa``'s language; None if that language is empty."""
    pruned = prune(determinize(nfa))
    return None if pruned is None else minimize(pruned)
