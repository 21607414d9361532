"""The BM25 scorer gives BM25 written out to the last bit, on its one-pass path for ASCII texts and
on its word-by-word path, for one text or a window of them."""

import random
import re
from collections import Counter

import pytest

from memory.keyword import bm25
from memory.keyword.bm25 import K1, B, _Query, _Stats, normalise_bm25, query_terms, stem

# Words that exercise every rule of the stemmer (plural, -ies, -sses, -ing and -ed with a doubled
# letter, y to i, a final e), words that hold another's stem inside or at their start, digits,
# underscores, one- and two-letter words, and a few non-ASCII ones (those texts take the other path).
VOCABULARY = [
    word
    for line in (
        "policy policies glass glasses run runs running runner stopped stop stops deploy deployed",
        "deploying redeploy deployment make making maker happy happily happiness agreed agree",
        "fizzing fizz the a an is it its 85 8 v2 2024 snake_case x_y q4 team teams steam tea",
        "data date dated day days dayz ok go goes going ye yes caching cache cached naïve café",
        "Ünïcode straße",
    )
    for word in line.split(" ")
]
SEPARATORS = [" ", " ", " ", ", ", ". ", "-", "'", "\n", "\t", "  ", "(", ") ", "/", ": ", "!"]


def _text(rng: random.Random, words: int) -> str:
    parts = []
    for _ in range(words):
        word = rng.choice(VOCABULARY)
        if rng.random() < 0.15:
            word = word.upper() if rng.random() < 0.5 else word.capitalize()
        parts.append(word + rng.choice(SEPARATORS))
    return rng.choice(["", " ", "("]) + "".join(parts)


def _queries(rng: random.Random, count: int) -> list[_Query]:
    queries = []
    for _ in range(count):
        terms = query_terms(_text(rng, rng.randint(1, 8)))
        frequencies = {term: rng.randint(1, 900) for term in terms}
        queries.append(_Query.of(terms, frequencies, _Stats(1000, rng.uniform(3.0, 30.0))))
    return queries


@pytest.mark.parametrize("seed", range(6))
def test_an_ascii_text_scores_the_same_float_on_both_paths(seed):
    rng = random.Random(seed)
    matched = 0
    for query in _queries(rng, 60):
        for _ in range(40):
            text = _text(rng, rng.randint(0, 60)).encode("ascii", "ignore").decode()
            expected = query._score_tokens(text)
            assert query._score_ascii_many(text, 1) == [expected], (query.weights, text)
            if query._word_finder:
                assert query._score_ascii(text) == expected, (query.weights, text)
            assert query.score(text) == expected
            matched += expected > 0
    assert matched > 100  # and many of the texts hold some query word


def test_a_text_with_other_letters_takes_the_word_by_word_path_and_a_one_letter_stem_counts():
    query = _Query.of(["naïve", "deploy"], {"naïve": 3, "deploy": 5}, _Stats(100, 8.0))
    assert query.score("The naive deploy") == query._score_tokens("The naive deploy") > 0
    assert query.score("Naïve deploys, naïvely") == query._score_tokens("Naïve deploys, naïvely")
    one_letter = _Query.of(["8", "deploy"], {"8": 3, "deploy": 5}, _Stats(100, 8.0))
    assert one_letter._word_finder is None  # one text alone: word by word
    assert one_letter.score("deploy 8 times") == one_letter._score_tokens("deploy 8 times")
    assert one_letter.score("deploy 8 times") > one_letter.score("deploy 9 times") > 0


def test_a_word_that_only_holds_a_stem_inside_it_is_not_counted():
    query = _Query.of(["deploy"], {"deploy": 5}, _Stats(100, 8.0))
    assert query.score("redeploy and undeployed") == 0.0
    assert query.score("redeploy and deployed") > 0.0


def _plain_bm25(query: _Query, text: str) -> float:
    """BM25 written out: every token stemmed, the query's terms summed in the query's order."""
    tokens = re.findall(r"\w+", text.lower())
    counts = Counter(stem(token) for token in tokens)
    length = len(tokens) / query.stats.average_length
    raw = 0.0
    for key, idf in query.weights.items():
        tf = counts.get(key, 0)
        if tf:
            raw += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length))
    return normalise_bm25(raw)


@pytest.mark.parametrize("seed", range(4))
def test_a_query_scoring_many_texts_gives_the_float_of_bm25_written_out(seed):
    rng = random.Random(seed)
    matched = 0
    for query in _queries(rng, 40):
        # One query scores many texts, as a search's window: what it keeps between texts (the
        # stems of the words it found) must not change a later text's score.
        for _ in range(40):
            text = _text(rng, rng.randint(0, 60))
            assert query.score(text) == _plain_bm25(query, text), (query.weights, text)
            matched += query.score(text) > 0
    assert matched > 200


@pytest.mark.parametrize("seed", range(4))
def test_a_window_scored_at_once_gives_each_text_the_float_it_gets_alone(seed):
    rng = random.Random(seed)
    matched = batched = 0
    for query in _queries(rng, 40):
        texts = [_text(rng, rng.randint(0, 60)) for _ in range(rng.randint(0, 40))]
        for index, text in enumerate(texts):
            roll = rng.random()
            if roll < 0.5:
                texts[index] = text.encode("ascii", "ignore").decode()  # the one-pass path
            elif roll < 0.55:
                texts[index] = text + "\x01 deploy"  # the separator inside a text
            elif roll < 0.6:
                texts[index] = rng.choice(["", " ", "...", "\x01"])
        scores = query.score_many(texts)
        assert scores == [_plain_bm25(query, text) for text in texts], query.weights
        assert all(type(score) is float for score in scores)
        matched += sum(score > 0 for score in scores)
        batched += sum(text.isascii() and "\x01" not in text for text in texts) > 1
    assert matched > 300 and batched > 20  # most windows took the one-pass path, with matches


def test_a_window_of_long_texts_is_scored_one_by_one_with_the_same_floats(monkeypatch):
    rng = random.Random(9)
    query = _queries(rng, 1)[0]
    texts = [_text(rng, 120).encode("ascii", "ignore").decode() for _ in range(20)]
    assert sum(map(len, texts)) > bm25.BATCH_MAX_MEAN_CHARS * len(texts)
    one_pass = []
    monkeypatch.setattr(
        _Query, "_score_ascii_many", lambda self, *a: one_pass.append(a) or [0.0] * a[1]
    )
    assert query.score_many(texts) == [_plain_bm25(query, text) for text in texts]
    assert not one_pass  # long texts: their own pass each
    query.score_many(texts[:1] + ["deploy"] * 40)  # short on average: one pass for them all
    assert [count for _, count in one_pass] == [41]


def test_a_window_counts_each_text_words_and_length_apart_from_its_neighbours():
    query = _Query.of(["deploy", "cache"], {"deploy": 10, "cache": 40}, _Stats(1000, 6.0))
    texts = ["deploy", "cache cache cache", "", "the deployed caches deploy", "nothing here"]
    assert query.score_many(texts) == [query._score_tokens(text) for text in texts]
    assert query.score_many(texts)[2] == query.score_many(texts)[4] == 0.0
    assert query.score_many(texts[:1]) == [query._score_tokens(texts[0])]
    assert query.score_many([]) == []


def test_the_process_s_kept_stems_are_emptied_when_full_and_scores_stay_the_same(monkeypatch):
    monkeypatch.setattr(bm25, "STEMS_KEPT", 8)
    kept = {f"old{i}".encode(): f"old{i}" for i in range(8)}
    monkeypatch.setattr(bm25, "_STEM_OF", kept)
    query = _Query.of(["deploy", "cache"], {"deploy": 10, "cache": 40}, _Stats(1000, 6.0))
    texts = [f"deployed cache number{i} again and again" for i in range(30)]
    assert query.score_many(texts) == [_plain_bm25(query, text) for text in texts]
    assert b"old0" not in kept and len(kept) <= 8  # emptied whenever full, even within a call
    assert query.score_many(texts) == [_plain_bm25(query, text) for text in texts]
