"""All SQL of the keyword index (FTS5 over memories.content). Swap this module for another engine."""

from __future__ import annotations

import re

from django.db import connection

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
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "from",
        "has",
        "have",
        "he",
        "her",
        "his",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "no",
        "nor",
        "not",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "too",
        "us",
        "was",
        "we",
        "were",
        "what",
        "when",
        "which",
        "who",
        "will",
        "with",
        "you",
        "your",
    ]
)
_WORD = re.compile(r"\w+", re.UNICODE)
MAX_QUERY_TERMS = 24


def match_expression(text: str) -> str | None:
    """An FTS5 MATCH expression from arbitrary user text: each word double-quoted, OR-ed.

    Quoting makes every token a plain string, so operators (AND/OR/NOT/NEAR), column filters
    (':'), prefixes ('*'), groups and stray quotes in the text can never raise a syntax error.
    """
    # One-letter pieces ("t" from "doesn't") match nearly every memory and only add noise.
    words = [w for w in _WORD.findall(text.lower()) if len(w.strip("_")) > 1 or w.isdigit()]
    meaningful = [w for w in words if w not in STOP_WORDS]
    terms = list(dict.fromkeys(meaningful or words))[:MAX_QUERY_TERMS]
    if not terms:
        return None
    return " OR ".join(f'"{term}"' for term in terms)


def normalise_bm25(raw: float) -> float:
    """FTS5's bm25() is more negative for better matches: |s|/(1+|s|) keeps 'stronger is higher'."""
    magnitude = abs(raw)
    return magnitude / (1.0 + magnitude)


def search(
    text: str, *, agent_id: str, limit: int, exclude_id: str | None = None
) -> list[tuple[str, float]]:
    """(memory id, normalised score) of the best keyword matches among the agent's live memories."""
    expression = match_expression(text)
    if expression is None:
        return []
    # Rank inside FTS5 first (it keeps only the best `window` rows), then filter by agent and
    # liveness; widen the window when filtered-out rows leave fewer than `limit`.
    sql = (
        "SELECT m.id, f.s FROM (SELECT rowid, bm25(memories_fts) AS s FROM memories_fts "
        "WHERE memories_fts MATCH %s ORDER BY s LIMIT %s) f "
        "CROSS JOIN memories m ON m.rowid = f.rowid WHERE m.is_deleted = 0 AND m.agent_id = %s"
    )
    if exclude_id:
        sql += " AND m.id != %s"
    sql += " ORDER BY f.s LIMIT %s"
    window = max(limit * 4, 40)
    while True:
        params: list = (
            [expression, window, agent_id] + ([exclude_id] if exclude_id else []) + [limit]
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        if len(rows) >= limit or window >= 1_000_000:
            break
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT COUNT(*) FROM memories_fts WHERE memories_fts MATCH %s", [expression]
            )
            if cursor.fetchone()[0] <= window:
                break
        window *= 8
    return [(memory_id, normalise_bm25(raw)) for memory_id, raw in rows]


def scores_for(text: str, memory_ids: list[str]) -> dict[str, float]:
    """Normalised BM25 of specific memories for `text` (0.0 when they do not match at all)."""
    expression = match_expression(text)
    if expression is None or not memory_ids:
        return dict.fromkeys(memory_ids, 0.0)
    marks = ",".join(["%s"] * len(memory_ids))
    sql = (
        "SELECT m.id, bm25(memories_fts) FROM memories_fts "
        "JOIN memories m ON m.rowid = memories_fts.rowid "
        f"WHERE memories_fts MATCH %s AND m.id IN ({marks})"
    )
    found = dict.fromkeys(memory_ids, 0.0)
    with connection.cursor() as cursor:
        cursor.execute(sql, [expression, *memory_ids])
        for memory_id, raw in cursor.fetchall():
            found[memory_id] = normalise_bm25(raw)
    return found
