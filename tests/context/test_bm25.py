"""BM25Index against the production oracle, rank-bm25's BM25Okapi, on seeded random corpora."""
from __future__ import annotations

import random

import pytest
from rank_bm25 import BM25Okapi

from course_lib.context.bm25 import BM25Index, UnknownPassageError, terms

TOLERANCE = 1e-9


def _random_corpus(rng: random.Random) -> tuple[list[str], list[str], dict[str, float]]:
    """Passages over a small vocabulary (so terms repeat, within and across passages) and its parameters."""
    vocabulary = [f"w{i}" for i in range(rng.randint(1, 30))]
    passages = [" ".join(rng.choices(vocabulary, k=rng.randint(1, 20))) for _ in range(rng.randint(1, 25))]
    tuned = {"k1": rng.uniform(0.0, 3.0), "b": rng.uniform(0.0, 1.0), "epsilon": rng.uniform(0.0, 1.0)}
    params = rng.choice([{}, tuned])
    return vocabulary, passages, params


def _random_query(rng: random.Random, vocabulary: list[str]) -> str:
    """Corpus terms, repeats allowed, mixed with terms that occur nowhere."""
    pool = vocabulary + [f"absent{i}" for i in range(3)]
    return " ".join(rng.choices(pool, k=rng.randint(1, 8)))


def _oracle_scores(corpus: dict[str, str], query: str, **params) -> dict[str, float]:
    ids = list(corpus)
    oracle = BM25Okapi([terms(corpus[pid]) for pid in ids], **params)
    return dict(zip(ids, oracle.get_scores(terms(query)).tolist()))


def _assert_close(ours: dict[str, float], expected: dict[str, float]) -> None:
    assert ours.keys() == expected.keys()
    for pid in expected:
        assert ours[pid] == pytest.approx(expected[pid], abs=TOLERANCE, rel=0), pid


@pytest.mark.parametrize("seed", range(300))
def test_scores_equal_bm25okapi_on_random_corpora(seed):
    rng = random.Random(seed)
    vocabulary, passages, params = _random_corpus(rng)
    index = BM25Index(**params)
    corpus = {}
    for number, text in enumerate(passages):
        corpus[f"p{number:02d}"] = text
        index.add(f"p{number:02d}", text)
    for _ in range(4):
        query = _random_query(rng, vocabulary)
        _assert_close(index.scores(query), _oracle_scores(corpus, query, **params))


def test_scores_equal_bm25okapi_on_prose_with_punctuation_and_case():
    corpus = {
        "a": "The KV cache stores keys and values; the cache grows with every token.",
        "b": "Paged attention splits the KV cache into fixed-size blocks.",
        "c": "Speculative decoding drafts tokens with a small model, then verifies them.",
        "d": "BM25 ranks passages: rare terms weigh more than common ones.",
        "e": "The scheduler admits requests while blocks remain free.",
    }
    index = BM25Index()
    for pid, text in corpus.items():
        index.add(pid, text)
    for query in ("KV cache blocks", "the THE the", "rare terms, common terms!", "nothing-matches-here"):
        _assert_close(index.scores(query), _oracle_scores(corpus, query))


def test_the_epsilon_floor_lifts_a_term_in_most_passages_above_zero():
    corpus = {"a": "cat dog", "b": "cat fish", "c": "cat bird", "d": "cow horse", "e": "goat pig"}
    index = BM25Index()
    for pid, text in corpus.items():
        index.add(pid, text)
    # "cat" is in 3 of 5 passages: its raw idf log(2.5 / 3.5) is negative; the floor,
    # 0.25 * (average idf over all terms), is positive here, so containing "cat" helps.
    scores = index.scores("cat")
    assert scores["a"] > 0 and scores["d"] == 0
    _assert_close(scores, _oracle_scores(corpus, "cat"))


def test_the_floor_is_negative_when_the_average_idf_is_as_in_the_oracle():
    corpus = {"a": "cat dog", "b": "cat fish", "c": "cat bird"}
    index = BM25Index()
    for pid, text in corpus.items():
        index.add(pid, text)
    # Most of the vocabulary's idf mass is "cat"'s large negative one, so the average and the floor are < 0.
    assert all(score < 0 for score in index.scores("cat").values())
    _assert_close(index.scores("cat"), _oracle_scores(corpus, "cat"))


def test_terms_lowercases_and_splits_on_non_alphanumerics():
    assert terms("Hello, WORLD! key_value 3.14 café") == ["hello", "world", "key", "value", "3", "14", "café"]
    assert terms("  ...  ") == []


def test_search_ranks_by_score_then_id_and_cuts_at_k():
    rng = random.Random(7)
    vocabulary, passages, _ = _random_corpus(rng)
    index = BM25Index()
    for number, text in enumerate(passages):
        index.add(f"p{number:02d}", text)
    query = _random_query(rng, vocabulary)
    scores = index.scores(query)
    expected = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    assert index.search(query, k=len(index)) == expected
    assert index.search(query, k=3) == expected[:3]
    assert index.search(query, k=1000) == expected


def test_ties_are_broken_by_id_not_by_insertion_order():
    index = BM25Index()
    for pid in ("zeta", "alpha", "mid"):
        index.add(pid, "same words here")
    for number in range(4):
        index.add(f"other{number}", f"unrelated text {number}")
    assert [pid for pid, _ in index.search("words", k=3)] == ["alpha", "mid", "zeta"]


def test_changes_take_effect_on_the_next_search_and_match_a_fresh_oracle():
    rng = random.Random(2024)
    vocabulary = [f"w{i}" for i in range(12)]
    index, corpus = BM25Index(), {}
    next_id = 0
    for _ in range(400):
        operation = rng.choice(["add", "add", "update", "remove"]) if corpus else "add"
        text = " ".join(rng.choices(vocabulary, k=rng.randint(1, 15)))
        if operation == "add":
            pid, next_id = f"p{next_id:03d}", next_id + 1
            index.add(pid, text)
            corpus[pid] = text
        elif operation == "update":
            pid = rng.choice(sorted(corpus))
            index.update(pid, text)
            corpus[pid] = text
        else:
            pid = rng.choice(sorted(corpus))
            index.remove(pid)
            del corpus[pid]
        assert len(index) == len(corpus)
        if corpus:
            query = _random_query(rng, vocabulary)
            _assert_close(index.scores(query), _oracle_scores(corpus, query))
        else:
            assert index.scores("w1") == {} and index.search("w1") == []


def test_a_changed_fact_is_found_and_the_old_one_is_gone():
    index = BM25Index()
    index.add("capital", "The capital of Australia is Sydney.")
    index.add("river", "The longest river is the Nile.")
    index.add("moon", "The moon orbits the earth.")
    assert index.search("canberra", k=1)[0][1] == 0.0
    index.update("capital", "The capital of Australia is Canberra.")
    assert index.search("canberra", k=1)[0][0] == "capital" and index.search("canberra", k=1)[0][1] > 0
    assert index.scores("sydney") == {"capital": 0.0, "river": 0.0, "moon": 0.0}
    index.remove("capital")
    assert "capital" not in index and index.scores("canberra") == {"river": 0.0, "moon": 0.0}


def test_version_bumps_on_every_change_and_not_on_reads_or_failures():
    index = BM25Index()
    assert index.version == 0
    index.add("a", "one two")
    index.add("b", "two three")
    assert index.version == 2
    index.search("two")
    index.scores("two")
    assert index.version == 2
    index.update("a", "one one")
    assert index.version == 3
    index.remove("b")
    assert index.version == 4
    for failing in (lambda: index.add("a", "again"), lambda: index.update("zzz", "x"),
                    lambda: index.remove("zzz"), lambda: index.update("a", "")):
        with pytest.raises((ValueError, KeyError)):
            failing()
    assert index.version == 4


def test_errors_name_the_problem_and_leave_the_index_unchanged():
    index = BM25Index()
    index.add("a", "alpha beta")
    before = index.scores("alpha beta")
    with pytest.raises(ValueError, match="already indexed.*update"):
        index.add("a", "gamma")
    with pytest.raises(UnknownPassageError, match="no passage 'nope'.*add"):
        index.update("nope", "gamma")
    with pytest.raises(KeyError, match="no passage 'nope'"):
        index.remove("nope")
    for empty in ("", "   ", "?!. --"):
        with pytest.raises(ValueError, match="has no terms"):
            index.add("b", empty)
        with pytest.raises(ValueError, match="has no terms"):
            index.update("a", empty)
    for bad_k in (0, -1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="k must be an int >= 1"):
            index.search("alpha", k=bad_k)
    with pytest.raises(TypeError, match="passage ids are strings"):
        index.add(3, "gamma")
    with pytest.raises(ValueError, match="k1"):
        BM25Index(b=1.5)
    assert len(index) == 1 and "b" not in index and index.scores("alpha beta") == before
