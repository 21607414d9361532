"""BM25 over plain words, the same on every engine: query terms, the light stemmer, document
statistics and the scorer. The engines' keyword modules find candidates and
counts; this module scores them, so a memory scores the same on SQLite and PostgreSQL."""

from __future__ import annotations

import functools
import math
import re
import threading
import time
import unicodedata
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from memory.words import NEGATIONS
from memory.words import STOP_WORDS as FUNCTION_WORDS

STOP_WORDS = FUNCTION_WORDS | NEGATIONS
_WORD = re.compile(r"\w+", re.UNICODE)
MAX_QUERY_TERMS = 24

# BM25 as FTS5 computes it (k1, b), with the IDF of Lucene: log(1 + (N - n + 0.5) / (n + 0.5)) is
# positive for every term, where FTS5's log((N - n + 0.5) / (n + 0.5)) is zero for a term found
# in half of a two-memory store.
K1, B = 1.2, 0.75
# Stores this big cache document frequencies per process (smaller ones count them afresh: cheap,
# and exact); the cache empties when the store grew or shrank by more than CACHE_DRIFT, or aged.
CACHE_MIN_ROWS = 5000
CACHE_DRIFT = 0.02
CACHE_SECONDS = 300.0


def query_terms(text: str) -> list[str]:
    """The distinct plain words of arbitrary user text worth searching for (stop words dropped
    unless nothing else is left); no operator or punctuation survives."""
    # One-letter pieces ("t" from "doesn't") match nearly every memory and only add noise.
    words = [w for w in _WORD.findall(text.lower()) if len(w.strip("_")) > 1 or w.isdigit()]
    meaningful = [w for w in words if w not in STOP_WORDS]
    return list(dict.fromkeys(meaningful or words))[:MAX_QUERY_TERMS]


def normalise_bm25(raw: float) -> float:
    """|s|/(1+|s|): in [0, 1), higher for stronger matches (FTS5's bm25() is negative, ours not)."""
    magnitude = abs(raw)
    return magnitude / (1.0 + magnitude)


# --- matching words the way the index does --------------------------------------------------------


def _fold(word: str) -> str:
    """Diacritics removed, as the index's tokenizer does (remove_diacritics 2)."""
    decomposed = unicodedata.normalize("NFKD", word)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _has_vowel(word: str) -> bool:
    return any(c in "aeiouy" for c in word)


@functools.lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A light suffix stripper (the first steps of Porter's): enough to match the inflections the
    index's porter tokenizer matches; applied to query and memory words alike."""
    word = _fold(word)
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith(("sses", "ies")):  # glasses -> glass, policies -> polici (as policy)
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]) and len(word) > 4:
            word = word[: -len(suffix)]
            if len(word) > 2 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]
            break
    if word.endswith("y") and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    if word.endswith("e") and len(word) > 4:
        word = word[:-1]
    return word


# ASCII bytes: a word character (\w) kept, or turned into "a"; any other byte turned into a space.
_ASCII_WORD = [chr(b).isalnum() or chr(b) == "_" for b in range(128)]
_WORDS_KEPT = bytes(b if _ASCII_WORD[b] else 32 for b in range(128)) + b" " * 128
_WORD_RUNS = bytes(97 if _ASCII_WORD[b] else 32 for b in range(128)) + b" " * 128

# Joins the texts one query scores at once (`_Query.score_many`): kept by their table, a token of
# its own between the texts (and its own stem).
_SEPARATOR = "\x01"
_SEPARATOR_BYTE = b"\x01"
_WORDS_KEPT_MANY = _WORDS_KEPT[:1] + _SEPARATOR_BYTE + _WORDS_KEPT[2:]
_SEPARATOR_CODE, _NOT_A_TERM = -1, -2
# The stem of each ASCII token scored lately, shared by every query of the process: a window's
# words recur from search to search. Emptied when it holds STEMS_KEPT (a few MB).
_STEM_OF: dict[bytes, str] = {}
STEMS_KEPT = 50_000
# Texts this long on average are scored one by one (`_Query.score_many`): the one pass looks up
# every token, where a text's own pass (a regex for the words a query stem can count) skips the
# others, which long texts hold more of. The same windows of a 100k store, lengthened with other
# notes, took 0.27 / 0.46 / 0.62 / 0.98 / 1.35 ms at once against 0.54 / 0.62 / 0.74 / 0.89 /
# 1.06 ms one by one, at 85 / 153 / 222 / 360 / 498 characters.
BATCH_MAX_MEAN_CHARS = 300


def _stems_of(tokens: list[bytes], keys: list[str | None]) -> list[str]:
    """`keys` (the stems of `tokens` found in _STEM_OF, None where not) with the missing ones
    stemmed and kept."""
    for index, key in enumerate(keys):
        if key is None:
            if len(_STEM_OF) >= STEMS_KEPT:  # checked at each word: one call may bring many
                _STEM_OF.clear()
            token = tokens[index]
            keys[index] = _STEM_OF[token] = stem(token.decode())
    return keys  # type: ignore[return-value]


def _tokens(text: str) -> list[str]:
    """Every token of a memory, as the index counts them (the document length)."""
    return _WORD.findall(text.lower())


@dataclass
class _Stats:
    rows: int  # N: rows in the index (FTS5 counts forgotten memories too)
    average_length: float


class _FrequencyCache:
    """Document frequencies of recently searched words, for stores too big to count them often."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.key: tuple | None = None
        self.rows = 0
        self.filled_at = 0.0
        self.counts: dict[str, int] = {}

    def lookup(self, key: tuple, rows: int, terms: list[str]) -> dict[str, int]:
        with self.lock:
            stale = (
                self.key != key
                or abs(rows - self.rows) > self.rows * CACHE_DRIFT
                or time.monotonic() - self.filled_at > CACHE_SECONDS
                or len(self.counts) > 100_000
            )
            if stale:
                self.key, self.rows, self.filled_at, self.counts = key, rows, time.monotonic(), {}
            return {term: self.counts[term] for term in terms if term in self.counts}

    def store(self, counts: dict[str, int]) -> None:
        with self.lock:
            self.counts.update(counts)


# --- scoring ----------------------------------------------------------------------------------------


@dataclass
class _Query:
    """The terms of one query, stemmed, with their IDF."""

    weights: dict[str, float]  # stem -> idf
    stats: _Stats

    @classmethod
    def of(cls, terms: list[str], frequencies: dict[str, int], stats: _Stats) -> _Query:
        rows = max(stats.rows, 1)
        weights: dict[str, float] = {}
        for term in terms:
            n = min(frequencies.get(term, 0), rows)
            if n:  # a term no memory contains cannot match one
                idf = math.log(1.0 + (rows - n + 0.5) / (n + 0.5))
                key = stem(term)
                weights[key] = max(weights.get(key, 0.0), idf)
        return cls(weights, stats)

    def score(self, content: str) -> float:
        """Normalised BM25 of one memory's text for this query (0.0 when no term matches)."""
        if not self.weights:
            return 0.0
        if content.isascii() and self._word_finder:
            return self._score_ascii(content)
        return self._score_tokens(content)

    def score_many(self, contents: list[str]) -> list[float]:
        """`score` of each text, the same floats: short ASCII texts (nearly every memory) in one
        pass over them all, the others one by one."""
        if not self.weights:
            return [0.0] * len(contents)
        if sum(map(len, contents)) > BATCH_MAX_MEAN_CHARS * len(contents):
            return [self.score(content) for content in contents]
        scores = [
            None if content.isascii() and _SEPARATOR not in content else self._score_tokens(content)
            for content in contents
        ]
        plain = [content for content, score in zip(contents, scores, strict=True) if score is None]
        if not plain:
            return scores  # type: ignore[return-value]
        found = iter(self._score_ascii_many(_SEPARATOR.join(plain), len(plain)))
        return [next(found) if score is None else score for score in scores]

    @functools.cached_property
    def _word_finder(self) -> re.Pattern[bytes] | None:
        """What finds every ASCII word the query's stems can count, in text whose words stand
        between spaces: a space, a stem less its last letter (the stemmer only cuts a word's end,
        or turns a last y into i), the rest of the word. None when a one-letter stem would make
        every word one."""
        if any(len(key) < 2 for key in self.weights):
            return None
        prefixes = sorted({key[:-1] for key in self.weights if key.isascii()}, key=len)
        shortest: list[str] = []  # none the start of another: each word is found once
        for prefix in prefixes:
            if not any(prefix.startswith(other) for other in shortest):
                shortest.append(prefix)
        if not shortest:
            return None
        starts = b"|".join(re.escape(prefix.encode()) for prefix in shortest)
        return re.compile(b" (?:" + starts + b")[^ ]*")

    @functools.cached_property
    def _stems(self) -> dict[bytes, str]:
        """The stem of each word `_word_finder` found (as found: its leading space too), kept for
        this query: a search's window repeats its words from text to text."""
        return {}

    def _score_ascii(self, content: str) -> float:
        """`_score_tokens` of an ASCII text, the same float: the words a query stem can count are
        found in one regex pass instead of stemming every word (most of a search's scoring time)."""
        weights, stems = self.weights, self._stems
        text = content.lower().encode()
        words = b" " + text.translate(_WORDS_KEPT) + b" "  # each word between spaces
        counts: dict[str, int] = {}
        for word in self._word_finder.findall(words):  # type: ignore[union-attr]
            key = stems.get(word)
            if key is None:
                key = stems[word] = stem(word[1:].decode())
            if key in weights:
                counts[key] = counts.get(key, 0) + 1
        if not counts:
            return 0.0
        runs = text.translate(_WORD_RUNS)
        return self._bm25(counts, runs.count(b" a") + runs.startswith(b"a"))

    def _score_ascii_many(self, joined: str, count: int) -> list[float]:
        """`_score_tokens` of `count` ASCII texts joined by _SEPARATOR, the same floats, without a
        Python step per text: every token of every text is split out at once (its ASCII word
        characters are \\w's), looked up in the process's stems, and counted in its text's row
        of an array of term frequencies; each term's BM25 is then added to every row at once,
        term by term in the query's order (a term a text lacks adds +0.0: no sum changes)."""
        text = joined.lower().encode().translate(_WORDS_KEPT_MANY)
        # The separator between spaces: a token of its own, never part of a word.
        tokens = text.replace(_SEPARATOR_BYTE, b" \x01 ").split()
        keys = list(map(_STEM_OF.get, tokens))
        if None in keys:
            keys = _stems_of(tokens, keys)
        columns = self._columns
        code = np.fromiter(
            map(columns.get, keys, repeat(_NOT_A_TERM)), dtype=np.int64, count=len(keys)
        )
        # Each text's tokens: those between its separators.
        ends = np.flatnonzero(code == _SEPARATOR_CODE)
        # np.diff with prepend and append took 30 us of each window, this 2.5.
        bounds = np.empty(len(ends) + 2, dtype=np.int64)
        bounds[0], bounds[1:-1], bounds[-1] = -1, ends, len(code)
        lengths = bounds[1:] - bounds[:-1] - 1
        held = np.flatnonzero(code >= 0)
        if not len(held):
            return [0.0] * count
        text_of = np.searchsorted(ends, held)  # the separators before a token: its text
        terms = len(self.weights)
        frequencies = np.bincount(text_of * terms + code[held], minlength=count * terms)
        frequencies = frequencies.reshape(count, terms)
        length = lengths / self.stats.average_length
        norm = K1 * (1 - B + B * length)
        raw = np.zeros(count)
        for index, idf in enumerate(self.weights.values()):
            tf = frequencies[:, index]
            raw = raw + idf * tf * (K1 + 1) / (tf + norm)
        magnitude = np.abs(raw)
        return (magnitude / (1.0 + magnitude)).tolist()

    @functools.cached_property
    def _columns(self) -> dict[str, int]:
        """Each query stem's place in the query's order, and the separator's code."""
        return {**self._position, _SEPARATOR: _SEPARATOR_CODE}

    def _score_tokens(self, content: str) -> float:
        """The score from every word of the text, stemmed (any text)."""
        weights = self.weights
        tokens = _tokens(content)
        # Only the query's stems are counted: candidates are scored by the hundred per search, and
        # counting every stem of every candidate was most of the time spent here.
        counts: dict[str, int] = {}
        for key in map(stem, tokens):
            if key in weights:
                counts[key] = counts.get(key, 0) + 1
        if not counts:
            return 0.0
        return self._bm25(counts, len(tokens))

    def _bm25(self, counts: dict[str, int], tokens: int) -> float:
        """The normalised score of a text of `tokens` words holding the query's stems `counts`
        times each."""
        length = tokens / self.stats.average_length
        norm = K1 * (1 - B + B * length)
        raw = 0.0
        weights = self.weights
        # The same terms in the same order (the query's): the same float sum on every path and
        # engine. A text holds a few of them: only those are visited.
        for key in sorted(counts, key=self._position.__getitem__) if len(counts) > 1 else counts:
            tf = counts[key]
            raw += weights[key] * tf * (K1 + 1) / (tf + norm)
        return normalise_bm25(raw)

    @functools.cached_property
    def _position(self) -> dict[str, int]:
        """Each stem's place in the query's order."""
        return {key: index for index, key in enumerate(self.weights)}
