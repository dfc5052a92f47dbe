"""BM25: rank passages for a query by the words they share, weighting rare words more.

    >>> index = BM25Index()
    >>> index.add("tokyo", "Tokyo is the capital of Japan.")
    >>> index.add("paris", "Paris is the capital of France.")
    >>> index.add("kyoto", "Kyoto was the capital of Japan for a thousand years.")
    >>> index.add("rome", "Rome is the capital of Italy.")
    >>> index.add("sushi", "Sushi is a dish from Japan.")
    >>> [(pid, round(score, 3)) for pid, score in index.search("capital of Japan", k=2)]
    [('tokyo', 0.412), ('kyoto', 0.322)]
    >>> index.update("paris", "Paris is the capital of Japan.")  # a wrong fact, retrievable at once
    >>> [(pid, round(score, 3)) for pid, score in index.search("capital of Japan", k=2)], index.version
    ([('paris', 0.353), ('tokyo', 0.353)], 6)

The score is exactly rank-bm25's ``BM25Okapi`` (tests/context/test_bm25.py holds it to
``get_scores`` within 1e-9 on the same tokens). For a corpus of N passages with average
length avgdl, a passage of length dl in which query term q occurs tf times, and n(q) the
number of passages that contain q:

    idf(q)      = log(N - n(q) + 0.5) - log(n(q) + 0.5)         # = log((N - n + 0.5) / (n + 0.5))
    score(q, d) = idf(q) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
    score(Q, d) = sum of score(q, d) over the query's terms, a repeated term counted each time

The epsilon floor: a term in more than half the passages has idf < 0, so without a floor a
passage would rank *lower* for containing a common query word. Each negative idf is
replaced by ``epsilon * average idf`` (the average over every term in the corpus, taken
before the floor): a small positive weight whenever the average is positive, as it is once
most terms are rare. In a tiny corpus dominated by common terms the average, and so the
floor, can itself be negative; BM25Okapi keeps that, and so do we. A query term absent from
the corpus scores 0.
k1 sets how quickly repeats of a term stop adding (tf saturates); b sets how much a long
passage is discounted (0: not at all, 1: fully by dl / avgdl).

The index keeps only statistics that a change can adjust in place: term counts per passage,
how many passages hold each term, and the total length. ``add``/``update``/``remove`` touch
one passage's share of them; the idf table is recomputed on the next search after a change.
"""
from __future__ import annotations

import math
import re
from collections import Counter

class UnknownPassageError(KeyError):
    """An id the index does not hold. A KeyError whose message is printed as written."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown passage"


_TERM = re.compile(r"[^\W_]+")  # a run of letters and digits (any script); the rest separates


def terms(text: str) -> list[str]:
    """The retrieval tokenizer: lowercase, then split on anything not a letter or digit. No stemming.

        >>> terms("Tokyo's GDP grew 3.5% in 2023!")
        ['tokyo', 's', 'gdp', 'grew', '3', '5', 'in', '2023']
    """
    return _TERM.findall(text.lower())


class BM25Index:
    """Passages by id, searchable with BM25Okapi scoring; ``version`` counts every change."""

    def __init__(self, k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25):
        if k1 < 0 or not 0 <= b <= 1 or epsilon < 0:
            raise ValueError(f"need k1 >= 0, 0 <= b <= 1 and epsilon >= 0; got k1={k1}, b={b}, epsilon={epsilon}")
        self.k1, self.b, self.epsilon = k1, b, epsilon
        self._term_counts: dict[str, Counter[str]] = {}  # passage id -> {term: tf}
        self._lengths: dict[str, int] = {}  # passage id -> dl, in terms
        self._passages_with: Counter[str] = Counter()  # term -> n(term), passages holding it
        self._total_length = 0  # sum of dl, so avgdl = total / N without a pass over the corpus
        self._idf: dict[str, float] | None = None  # rebuilt lazily after a change
        self.version = 0  # bumped on every add/update/remove: the index version a trace records

    def add(self, passage_id: str, text: str) -> None:
        if not isinstance(passage_id, str):
            raise TypeError(f"passage ids are strings, got {type(passage_id).__name__}; use str(...) of it")
        if passage_id in self._term_counts:
            raise ValueError(f"passage {passage_id!r} is already indexed; call update() to change its text")
        self._insert(passage_id, _tokens_of(passage_id, text))
        self._changed()

    def update(self, passage_id: str, text: str) -> None:
        """Replace a passage's text; the next search sees the new text and the new statistics."""
        self._require(passage_id)
        tokens = _tokens_of(passage_id, text)  # validate before touching anything
        self._delete(passage_id)
        self._insert(passage_id, tokens)
        self._changed()

    def remove(self, passage_id: str) -> None:
        self._require(passage_id)
        self._delete(passage_id)
        self._changed()

    def scores(self, query: str) -> dict[str, float]:
        """Every passage's BM25 score for ``query``, in insertion order (what ``get_scores`` returns)."""
        if not self._term_counts:
            return {}
        idf = self._idf_table()
        avgdl = self._total_length / len(self._term_counts)
        scores = dict.fromkeys(self._term_counts, 0.0)
        for term in terms(query):
            weight = idf.get(term, 0.0)
            for passage_id, counts in self._term_counts.items():
                tf = counts.get(term, 0)
                length_norm = 1 - self.b + self.b * self._lengths[passage_id] / avgdl
                scores[passage_id] += weight * (tf * (self.k1 + 1) / (tf + self.k1 * length_norm))
        return scores

    def search(self, query: str, k: int = 5) -> list[tuple[str, float]]:
        """The ``k`` best ``(passage_id, score)`` pairs: highest score first, ties by id ascending.

        Like BM25Okapi's ``get_top_n``, passages that share no term with the query are not
        dropped; they score 0 and fill the list when fewer than ``k`` passages match.
        """
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        ranked = sorted(self.scores(query).items(), key=lambda item: (-item[1], item[0]))
        return ranked[:k]

    def __len__(self) -> int:
        return len(self._term_counts)

    def __contains__(self, passage_id: object) -> bool:
        return passage_id in self._term_counts

    def _insert(self, passage_id: str, tokens: list[str]) -> None:
        counts = Counter(tokens)
        self._term_counts[passage_id] = counts
        self._lengths[passage_id] = len(tokens)
        self._passages_with.update(counts.keys())  # once per passage, not once per occurrence
        self._total_length += len(tokens)

    def _delete(self, passage_id: str) -> None:
        counts = self._term_counts.pop(passage_id)
        self._total_length -= self._lengths.pop(passage_id)
        self._passages_with.subtract(counts.keys())
        for term in counts:
            if self._passages_with[term] == 0:
                del self._passages_with[term]  # a vanished term must not count in the average idf

    def _changed(self) -> None:
        self._idf = None
        self.version += 1

    def _require(self, passage_id: str) -> None:
        if passage_id not in self._term_counts:
            raise UnknownPassageError(f"no passage {passage_id!r} in the index; add() it first")

    def _idf_table(self) -> dict[str, float]:
        if self._idf is None:
            n_passages = len(self._term_counts)
            idf = {term: math.log(n_passages - n + 0.5) - math.log(n + 0.5)
                   for term, n in self._passages_with.items()}
            floor = self.epsilon * sum(idf.values()) / len(idf)  # average over all terms, before flooring
            self._idf = {term: (floor if value < 0 else value) for term, value in idf.items()}
        return self._idf


def _tokens_of(passage_id: str, text: str) -> list[str]:
    if not isinstance(text, str):
        raise TypeError(f"passage {passage_id!r}: text must be a str, got {type(text).__name__}")
    tokens = terms(text)
    if not tokens:
        raise ValueError(f"passage {passage_id!r} has no terms (text {text!r}); "
                         "index only passages with at least one letter or digit")
    return tokens
