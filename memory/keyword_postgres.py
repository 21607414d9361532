"""All SQL of the keyword index on PostgreSQL: a generated `tsvector` over memories.content with a
GIN index. It plays the part FTS5 plays on SQLite: store statistics, document frequencies and the
candidates that match the query's rarest terms. memory.keyword scores the candidates from their
text (BM25, its own stemmer), so a memory gets the same score on both engines.
"""

from __future__ import annotations

import threading
import time

from django.db import connection

from memory.bm25 import (
    CACHE_DRIFT,
    CACHE_MIN_ROWS,
    CACHE_SECONDS,
    _FrequencyCache,
    _Query,
    _Stats,
    query_terms,
    rarest_terms,
)

# English stemming like FTS5's porter tokenizer, and like FTS5 it keeps stop words: a query made
# of nothing else ("the of and") still matches. (The stock 'english' configuration drops them.)
TEXT_CONFIG = "memory_english"

INDEX_SQL = [
    "CREATE TEXT SEARCH DICTIONARY memory_english_stem (TEMPLATE = snowball, LANGUAGE = english)",
    f"CREATE TEXT SEARCH CONFIGURATION {TEXT_CONFIG} (COPY = english)",
    f"ALTER TEXT SEARCH CONFIGURATION {TEXT_CONFIG} ALTER MAPPING FOR asciiword, asciihword, "
    "hword_asciipart, word, hword, hword_part WITH memory_english_stem",
    # A generated column is kept in step by PostgreSQL itself: no trigger, no missed update.
    "ALTER TABLE memories ADD COLUMN search_vector tsvector GENERATED ALWAYS AS "
    f"(to_tsvector('{TEXT_CONFIG}', content)) STORED",
    "CREATE INDEX memories_search_vector ON memories USING gin (search_vector)",
]
DROP_SQL = [
    "DROP INDEX IF EXISTS memories_search_vector",
    "ALTER TABLE memories DROP COLUMN IF EXISTS search_vector",
    f"DROP TEXT SEARCH CONFIGURATION IF EXISTS {TEXT_CONFIG}",
    "DROP TEXT SEARCH DICTIONARY IF EXISTS memory_english_stem",
]

# plainto_tsquery reads any text as plain words: no user input can raise a syntax error.
_TERM = f"plainto_tsquery('{TEXT_CONFIG}', %s)"
# The memory's length in the scorer's tokens (runs of word characters).
_TOKENS = (
    r"array_length(regexp_split_to_array(btrim(regexp_replace(content, '\W+', ' ', 'g')), ' '), 1)"
)


class _StatsCache:
    """N and the average length, kept for a while on big stores (counting them scans the table)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.key: str | None = None
        self.stats: _Stats | None = None
        self.filled_at = 0.0

    def get(self, cursor) -> _Stats:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = 'memories'::regclass")
        estimate = float(cursor.fetchone()[0])
        key = connection.settings_dict["NAME"]
        with self.lock:
            cached = self.stats
            if (
                cached is not None
                and estimate >= CACHE_MIN_ROWS
                and self.key == key
                and abs(estimate - cached.rows) <= cached.rows * CACHE_DRIFT
                and time.monotonic() - self.filled_at < CACHE_SECONDS
            ):
                return cached
        if estimate >= CACHE_MIN_ROWS:
            # Big store: the planner's row estimate, and the average length of a sample of pages
            # (about 5,000 rows) instead of a scan of every row.
            percent = max(1.0, min(100.0, 100.0 * 5000 / estimate))
            cursor.execute(
                f"SELECT coalesce(avg({_TOKENS}), 1) FROM memories TABLESAMPLE SYSTEM (%s)",
                [percent],
            )
            rows, average = estimate, cursor.fetchone()[0]
        else:
            cursor.execute(f"SELECT count(*), coalesce(avg({_TOKENS}), 1) FROM memories")
            rows, average = cursor.fetchone()
        stats = _Stats(int(rows), max(float(average), 1.0))
        with self.lock:
            self.key, self.stats, self.filled_at = key, stats, time.monotonic()
        return stats


_STATS = _StatsCache()
_FREQUENCIES = _FrequencyCache()


def _common_frequencies(cursor, terms: list[str], rows: int) -> dict[str, int]:
    """Document counts of the terms that ANALYZE (autovacuum) lists among the column's most common
    lexemes, from their recorded frequency: counting those would visit a large share of the table.
    Terms it does not list are rare, and cheap to count exactly."""
    cursor.execute(
        "SELECT t.word, s.freqs[array_position(s.elems, "
        f"(tsvector_to_array(to_tsvector('{TEXT_CONFIG}', t.word)))[1])] "
        "FROM unnest(%s::text[]) AS t(word), (SELECT most_common_elems::text::text[] AS elems, "
        "most_common_elem_freqs AS freqs FROM pg_stats WHERE schemaname = current_schema() "
        "AND tablename = 'memories' AND attname = 'search_vector') s",
        [terms],
    )
    return {word: round(freq * rows) for word, freq in cursor.fetchall() if freq is not None}


def document_frequencies(cursor, terms: list[str], stats: _Stats) -> dict[str, int]:
    """How many memories (forgotten ones too, as FTS5 counts) each term matches; one query for
    the uncounted, cached per process on big stores (where common terms are estimated)."""
    key = ("postgresql", connection.settings_dict["NAME"])
    cached = _FREQUENCIES.lookup(key, stats.rows, terms) if stats.rows >= CACHE_MIN_ROWS else {}
    missing = [term for term in terms if term not in cached]
    if missing and stats.rows >= CACHE_MIN_ROWS:
        estimated = _common_frequencies(cursor, missing, stats.rows)
        _FREQUENCIES.store(estimated)
        cached.update(estimated)
        missing = [term for term in missing if term not in estimated]
    if missing:
        sql = " UNION ALL ".join(
            f"SELECT {i}, (SELECT count(*) FROM memories WHERE search_vector @@ {_TERM})"
            for i in range(len(missing))
        )
        cursor.execute(sql, missing)
        counted = {missing[i]: int(n) for i, n in cursor.fetchall()}
        if stats.rows >= CACHE_MIN_ROWS:
            _FREQUENCIES.store(counted)
        cached.update(counted)
    return cached


def _candidates(cursor, terms, *, agent_id, exclude_id, window) -> list[tuple[str, str]]:
    """(memory id, content) of the agent's live memories matching any of `terms`, the `window`
    best by ts_rank (frequency, shorter memories first) for the scorer to rank exactly."""
    query = " || ".join([_TERM] * len(terms))
    sql = (
        f"SELECT m.id, m.content FROM memories m, (SELECT {query} AS q) t "
        "WHERE m.search_vector @@ t.q AND m.agent_id = %s AND NOT m.is_deleted"
        + (" AND m.id <> %s" if exclude_id else "")
        + " ORDER BY ts_rank('{1,1,1,1}', m.search_vector, t.q, 1) DESC, m.id LIMIT %s"
    )
    cursor.execute(sql, [*terms, agent_id, *([exclude_id] if exclude_id else []), window])
    return cursor.fetchall()


def search(
    text: str, *, agent_id: str, limit: int, exclude_id: str | None = None
) -> list[tuple[str, float]]:
    """(memory id, normalised score) of the best keyword matches among the agent's live memories."""
    terms = query_terms(text)
    if not terms:
        return []
    with connection.cursor() as cursor:
        stats = _STATS.get(cursor)
        frequencies = document_frequencies(cursor, sorted(set(terms)), stats)
        rare = rarest_terms(terms, frequencies)
        if not rare:
            return []
        rows = _candidates(
            cursor, rare, agent_id=agent_id, exclude_id=exclude_id, window=max(limit * 4, 40)
        )
    query = _Query.of(terms, frequencies, stats)
    scored = [(memory_id, query.score(content)) for memory_id, content in rows]
    scored = [hit for hit in scored if hit[1] > 0]
    scored.sort(key=lambda hit: (-hit[1], hit[0]))
    return scored[:limit]


def scores_for(text: str, memory_ids: list[str]) -> dict[str, float]:
    """Normalised BM25 of specific memories for `text` (0.0 when they do not match at all)."""
    found = dict.fromkeys(memory_ids, 0.0)
    terms = query_terms(text)
    if not terms or not memory_ids:
        return found
    with connection.cursor() as cursor:
        stats = _STATS.get(cursor)
        frequencies = document_frequencies(cursor, sorted(set(terms)), stats)
        cursor.execute(
            f"SELECT id, content FROM memories WHERE id IN ({','.join(['%s'] * len(memory_ids))})",
            memory_ids,
        )
        contents = dict(cursor.fetchall())
    query = _Query.of(terms, frequencies, stats)
    for memory_id, content in contents.items():
        found[memory_id] = query.score(content)
    return found
