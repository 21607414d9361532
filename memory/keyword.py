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

from django.db import connection

from memory import keyword_postgres
from memory.bm25 import (  # noqa: F401 (re-exported: callers use keyword.stem, keyword.query_terms)
    _WORD,
    CACHE_DRIFT,
    CACHE_MIN_ROWS,
    CACHE_SECONDS,
    K1,
    MAX_QUERY_TERMS,
    RARE_DOCUMENT_BUDGET,
    STOP_WORDS,
    B,
    _fold,
    _FrequencyCache,
    _has_vowel,
    _Query,
    _Stats,
    _tokens,
    normalise_bm25,
    query_terms,
    rarest_terms,
    stem,
)

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
    return keyword_postgres


# --- store statistics and document frequencies -----------------------------------------------------


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
