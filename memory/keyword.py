"""The keyword index: FTS5 over memories.content on SQLite (all of its SQL is here), PostgreSQL
full-text search in memory.keyword_postgres. `search`, `search_many` and `scores_for` pick the
engine's module by the connection's vendor; both engines turn user text into the same plain terms
and score in [0, 1), stronger matches higher, so the hybrid formula is the same on both.

On SQLite, FTS5 finds the candidates and this module scores them (BM25 with an IDF that never
reaches zero, so a match in a store of a handful of memories still counts):
1. document frequencies of the query's terms: one counting query, cached per process on big stores;
2. candidates: FTS5's best matches for the rarest terms only (their posting lists are short, so
   the cost stays small at 100k memories, where an OR of every term scored most of the store);
3. scores: every candidate against every term, from its text, so the same memory gets the same
   score whether the keyword leg or the vector leg found it.
"""

from __future__ import annotations

import functools
import math
import re
import threading
import time
import unicodedata
from collections import Counter
from dataclasses import dataclass

from django.db import connection

from memory.words import NEGATIONS
from memory.words import STOP_WORDS as FUNCTION_WORDS

FTS_TABLE_SQL = [
    "CREATE VIRTUAL TABLE memories_fts USING fts5(content, content='memories', "
    "content_rowid='rowid', tokenize='porter unicode61 remove_diacritics 2')",
    "CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN "
    "INSERT INTO memories_fts(rowid, content) VALUES (new.rowid, new.content); END",
    "CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN "
    "INSERT INTO memories_fts(memories_fts, rowid, content) VALUES ('delete', old.rowid, old.content); END",
    # Only a change of content touches the index: version bumps and flags leave it alone.
    "CREATE TRIGGER memories_fts_au AFTER UPDATE OF content ON memories BEGIN "
    "INSERT INTO memories_fts(memories_fts, rowid, content) VALUES ('delete', old.rowid, old.content); "
    "INSERT INTO memories_fts(rowid, content) VALUES (new.rowid, new.content); END",
    "INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')",
]
FTS_DROP_SQL = [
    "DROP TRIGGER IF EXISTS memories_fts_au",
    "DROP TRIGGER IF EXISTS memories_fts_ad",
    "DROP TRIGGER IF EXISTS memories_fts_ai",
    "DROP TABLE IF EXISTS memories_fts",
]

# Words so common that OR-ing them in would match most of the store and only cost time.
STOP_WORDS = FUNCTION_WORDS | NEGATIONS
_WORD = re.compile(r"\w+", re.UNICODE)
MAX_QUERY_TERMS = 24

# BM25 as FTS5 computes it (k1, b), with the IDF of Lucene: log(1 + (N - n + 0.5) / (n + 0.5)) is
# positive for every term, where FTS5's log((N - n + 0.5) / (n + 0.5)) is zero for a term found
# in half of a two-memory store.
K1, B = 1.2, 0.75
# Candidates come from the rarest terms whose posting lists add up to this many memories (at least
# the rarest one); a store smaller than this always uses every term.
RARE_DOCUMENT_BUDGET = 2000
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


def _quoted(terms: list[str]) -> str:
    return " OR ".join(f'"{term}"' for term in terms)


def match_expression(text: str) -> str | None:
    """An FTS5 MATCH expression from arbitrary user text: each word double-quoted, OR-ed.

    Quoting makes every token a plain string, so operators (AND/OR/NOT/NEAR), column filters
    (':'), prefixes ('*'), groups and stray quotes in the text can never raise a syntax error.
    """
    terms = query_terms(text)
    return _quoted(terms) if terms else None


def _postgres():
    """The PostgreSQL module when the store is on PostgreSQL, else None (SQLite: this module)."""
    if connection.vendor != "postgresql":
        return None
    from memory import keyword_postgres

    return keyword_postgres


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


def _tokens(text: str) -> list[str]:
    """Every token of a memory, as the index counts them (the document length)."""
    return _WORD.findall(text.lower())


# --- store statistics and document frequencies -----------------------------------------------------


@dataclass
class _Stats:
    rows: int  # N: rows in the index (FTS5 counts forgotten memories too)
    average_length: float


def _varints(blob: bytes) -> list[int]:
    """SQLite's variable-length integers (FTS5 writes its records with them)."""
    values, value, count = [], 0, 0
    for byte in blob:
        count += 1
        if count == 9:
            values.append((value << 8) | byte)
            value, count = 0, 0
        elif byte & 0x80:
            value = (value << 7) | (byte & 0x7F)
        else:
            values.append((value << 7) | byte)
            value, count = 0, 0
    return values


def _stats(cursor) -> _Stats:
    """N and the average memory length in tokens, from FTS5's own averages record (one row)."""
    cursor.execute("SELECT block FROM memories_fts_data WHERE id = 1")
    row = cursor.fetchone()
    numbers = _varints(bytes(row[0])) if row and row[0] else []
    if len(numbers) >= 2 and numbers[0] > 0:
        return _Stats(numbers[0], max(numbers[1] / numbers[0], 1.0))
    return _Stats(0, 1.0)


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


_FREQUENCIES = _FrequencyCache()


def document_frequencies(cursor, terms: list[str], stats: _Stats) -> dict[str, int]:
    """How many memories each term matches (as FTS5 matches it); one query for the uncounted."""
    key = (connection.settings_dict["NAME"],)
    cached = _FREQUENCIES.lookup(key, stats.rows, terms) if stats.rows >= CACHE_MIN_ROWS else {}
    missing = [term for term in terms if term not in cached]
    if missing:
        sql = " UNION ALL ".join(
            f"SELECT {i}, (SELECT COUNT(*) FROM memories_fts WHERE memories_fts MATCH %s)"
            for i in range(len(missing))
        )
        cursor.execute(sql, [f'"{term}"' for term in missing])
        counted = {missing[i]: int(n) for i, n in cursor.fetchall()}
        if stats.rows >= CACHE_MIN_ROWS:
            _FREQUENCIES.store(counted)
        cached.update(counted)
    return cached


def rarest_terms(terms: list[str], frequencies: dict[str, int]) -> list[str]:
    """The rarest matching terms whose posting lists add up to RARE_DOCUMENT_BUDGET memories (at
    least the rarest one): FTS5 ranks only these, so common words never make it scan the store."""
    chosen, total = [], 0
    for term in sorted((t for t in terms if frequencies.get(t)), key=lambda t: frequencies[t]):
        if chosen and total + frequencies[term] > RARE_DOCUMENT_BUDGET:
            break
        chosen.append(term)
        total += frequencies[term]
    return chosen


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
        tokens = _tokens(content)
        counts = Counter(stem(token) for token in tokens)
        length = len(tokens) / self.stats.average_length
        raw = 0.0
        for key, idf in self.weights.items():
            tf = counts.get(key, 0)
            if tf:
                raw += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length))
        return normalise_bm25(raw)


# --- the keyword leg --------------------------------------------------------------------------------


def search(
    text: str, *, agent_id: str, limit: int, exclude_id: str | None = None
) -> list[tuple[str, float]]:
    """(memory id, normalised score) of the best keyword matches among the agent's live memories."""
    if engine := _postgres():
        return engine.search(text, agent_id=agent_id, limit=limit, exclude_id=exclude_id)
    return search_many([text], agent_id=agent_id, limit=limit, exclude_id=exclude_id)[0]


def search_many(
    texts: list[str], *, agent_id: str, limit: int, exclude_id: str | None = None
) -> list[list[tuple[str, float]]]:
    """`search` for several texts at once: one frequency query, one candidate query."""
    if engine := _postgres():
        return [
            engine.search(text, agent_id=agent_id, limit=limit, exclude_id=exclude_id)
            for text in texts
        ]
    terms = [query_terms(text) for text in texts]
    with connection.cursor() as cursor:
        stats = _stats(cursor)
        frequencies = document_frequencies(cursor, sorted({t for ts in terms for t in ts}), stats)
        expressions = [_quoted(rarest_terms(ts, frequencies)) for ts in terms]
        window = max(limit * 4, 40)
        found = _candidates(cursor, expressions, window, agent_id, exclude_id)
        for index, expression in enumerate(expressions):
            if expression and len(found[index]) < limit:
                found[index] = _widened(
                    cursor, expression, window, limit, agent_id, exclude_id, found[index]
                )
    results = []
    for index, rows in enumerate(found):
        query = _Query.of(terms[index], frequencies, stats)
        scored = [(memory_id, query.score(content)) for memory_id, content in rows]
        scored = [hit for hit in scored if hit[1] > 0]
        scored.sort(key=lambda hit: (-hit[1], hit[0]))
        results.append(scored[:limit])
    return results


_CANDIDATES_SQL = (
    "SELECT {index}, m.id, m.content FROM (SELECT rowid, bm25(memories_fts) AS s FROM memories_fts "
    "WHERE memories_fts MATCH %s ORDER BY s LIMIT %s) f "
    "CROSS JOIN memories m ON m.rowid = f.rowid WHERE m.is_deleted = 0 AND m.agent_id = %s{exclude}"
)


def _candidate_sql(index: int, expression: str, window: int, agent_id: str, exclude_id):
    sql = _CANDIDATES_SQL.format(index=index, exclude=" AND m.id != %s" if exclude_id else "")
    return sql, [expression, window, agent_id, *([exclude_id] if exclude_id else [])]


def _candidates(cursor, expressions, window, agent_id, exclude_id) -> list[list[tuple[str, str]]]:
    """(memory id, content) of each expression's best `window` index rows that the agent sees."""
    found: list[list[tuple[str, str]]] = [[] for _ in expressions]
    parts, params = [], []
    for index, expression in enumerate(expressions):
        if expression:
            sql, values = _candidate_sql(index, expression, window, agent_id, exclude_id)
            parts.append(f"SELECT * FROM ({sql})")
            params += values
    if parts:
        cursor.execute(" UNION ALL ".join(parts), params)
        for index, memory_id, content in cursor.fetchall():
            found[index].append((memory_id, content))
    return found


def _widened(cursor, expression, window, limit, agent_id, exclude_id, rows):
    """Forgotten memories and other agents' rows filled the window: widen it until `limit` rows
    are left or the index has no more matches."""
    while len(rows) < limit and window < 1_000_000:
        cursor.execute(
            "SELECT COUNT(*) FROM memories_fts WHERE memories_fts MATCH %s", [expression]
        )
        if cursor.fetchone()[0] <= window:
            break
        window *= 8
        sql, params = _candidate_sql(0, expression, window, agent_id, exclude_id)
        cursor.execute(sql, params)
        rows = [(memory_id, content) for _, memory_id, content in cursor.fetchall()]
    return rows


def scores_for(text: str, memory_ids: list[str]) -> dict[str, float]:
    """Normalised BM25 of specific memories for `text` (0.0 when they do not match at all)."""
    if engine := _postgres():
        return engine.scores_for(text, memory_ids)
    return scores_for_many([text], [memory_ids])[0]


def scores_for_many(texts: list[str], memory_ids: list[list[str]]) -> list[dict[str, float]]:
    """`scores_for` of several texts, each with its own memories: two queries in all."""
    if engine := _postgres():
        return [engine.scores_for(t, ids) for t, ids in zip(texts, memory_ids, strict=True)]
    wanted = sorted({memory_id for ids in memory_ids for memory_id in ids})
    results = [dict.fromkeys(ids, 0.0) for ids in memory_ids]
    terms = [query_terms(text) for text in texts]
    if not wanted or not any(terms):
        return results
    with connection.cursor() as cursor:
        stats = _stats(cursor)
        frequencies = document_frequencies(cursor, sorted({t for ts in terms for t in ts}), stats)
        contents: dict[str, str] = {}
        for start in range(0, len(wanted), 500):
            part = wanted[start : start + 500]
            cursor.execute(
                f"SELECT id, content FROM memories WHERE id IN ({','.join(['%s'] * len(part))})",
                part,
            )
            contents.update(cursor.fetchall())
    for index, ids in enumerate(memory_ids):
        query = _Query.of(terms[index], frequencies, stats)
        for memory_id in ids:
            if memory_id in contents:
                results[index][memory_id] = query.score(contents[memory_id])
    return results
