"""The BM25 scorer's fast path for ASCII text gives the very float the word-by-word path gives."""

import random

import pytest

from memory.keyword.bm25 import _Query, _Stats, query_terms

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
    queries = [q for q in _queries(rng, 60) if q._word_finder]
    assert len(queries) > 30  # most queries take the fast path: the comparison is not empty
    matched = 0
    for query in queries:
        for _ in range(40):
            text = _text(rng, rng.randint(0, 60))
            if not text.isascii():
                text = text.encode("ascii", "ignore").decode()
            expected = query._score_tokens(text)
            assert query._score_ascii(text) == expected, (query.weights, text)
            assert query.score(text) == expected
            matched += expected > 0
    assert matched > 100  # and many of the texts hold some query word


def test_a_text_with_other_letters_and_a_one_letter_stem_take_the_word_by_word_path():
    query = _Query.of(["naïve", "deploy"], {"naïve": 3, "deploy": 5}, _Stats(100, 8.0))
    assert query.score("The naive deploy") == query._score_tokens("The naive deploy") > 0
    assert query.score("Naïve deploys, naïvely") == query._score_tokens("Naïve deploys, naïvely")
    one_letter = _Query.of(["8", "deploy"], {"8": 3, "deploy": 5}, _Stats(100, 8.0))
    assert one_letter._word_finder is None
    assert one_letter.score("deploy 8 times") == one_letter._score_tokens("deploy 8 times") > 0


def test_a_word_that_only_holds_a_stem_inside_it_is_not_counted():
    query = _Query.of(["deploy"], {"deploy": 5}, _Stats(100, 8.0))
    assert query.score("redeploy and undeployed") == 0.0
    assert query.score("redeploy and deployed") > 0.0
