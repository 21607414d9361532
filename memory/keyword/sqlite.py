"""All SQL of the keyword index on SQLite: FTS5 over memories.content. It finds the candidates and
memory.keyword.bm25 scores them (BM25 with an IDF that never reaches zero, so a match in a store of
a handful of memories still counts):
1. document frequencies of the query's terms: one counting query, cached per process on big stores;
2. candidates, every text of a batch in one query (`_Plan`): the index's bm25 best of the rarest
   terms (only as many as memory.keyword.RARE_DOCUMENT_BUDGET postings: ranking costs about a
   microsecond a row), the memories holding both of the next two rarest terms (an intersection,
   not ranked), and the next terms alone only when those came up short. (Ranking an OR of every
   term scored most of the store at 100k memories; ranking the rarest term alone brought back the
   thousand memories that share a name with the query and little else, and took 17 ms for a job of
   ten facts.)
3. scores: every candidate against every term, from its text, so the same memory gets the same
   score whether the keyword leg or the vector leg found it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from memory.keyword.bm25 import CACHE_MIN_ROWS, _FrequencyCache, _Query, _Stats, query_terms

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


def _quoted(terms: list[str]) -> str:
    return " OR ".join(f'"{term}"' for term in terms)


def match_expression(text: str) -> str | None:
    """An FTS5 MATCH expression from arbitrary user text: each word double-quoted, OR-ed.

    Quoting makes every token a plain string, so operators (AND/OR/NOT/NEAR), column filters
    (':'), prefixes ('*'), groups and stray quotes in the text can never raise a syntax error.
    """
    terms = query_terms(text)
    return _quoted(terms) if terms else None


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


def _budget() -> int:
    """memory.keyword.RARE_DOCUMENT_BUDGET as it is now: the benchmark raises it there."""
    from memory import keyword  # the package imports this module: read its knob at call time

    return keyword.RARE_DOCUMENT_BUDGET


@dataclass(frozen=True)
class _Plan:
    """Where one query's candidates come from, as FTS5 expressions (None or empty: no such tier).
    The scorer then ranks every candidate on all of the query's terms.

    ranked: the rarest terms within the budget, OR-ed; the index's best `window` by bm25.
    both:   memories with both of the next two rarest terms (FTS5 intersects the two posting
            lists, so a few dozen memories that share two words with the query come back, not a
            thousand that share one); the first `window` in index order.
    fills:  the next rarest term alone, then the terms after it OR-ed, in index order, each
            asked only while the query is still short of `limit` candidates (few memories have
            both terms, or the term's memories are forgotten or another agent's), and for just
            enough rows to reach it; without a `both` the first is asked at once.
    """

    ranked: str | None
    both: str | None
    fills: tuple[str, ...]


def _plan(terms: list[str], frequencies: dict[str, int], budget: int) -> _Plan:
    matching = sorted((t for t in terms if frequencies.get(t)), key=lambda t: frequencies[t])
    ranked, total = [], 0
    for term in matching:
        if total + frequencies[term] > budget:
            break
        ranked.append(term)
        total += frequencies[term]
    rest = matching[len(ranked) :]
    return _Plan(
        ranked=_quoted(ranked) if ranked else None,
        both=f'"{rest[0]}" AND "{rest[1]}"' if len(rest) > 1 else None,
        fills=tuple(_quoted(part) for part in (rest[:1], rest[1:]) if part),
    )


def search_many(
    texts: list[str], *, agent_id: str, limit: int, exclude_id: str | None = None
) -> list[list[tuple[str, float]]]:
    """(memory id, normalised score) of each text's best keyword matches among the agent's live
    memories: one frequency query, one candidate query (and one more for the texts whose candidates
    came up short). Each text's plan, rounds and ranking depend on that text alone, so a batch ranks
    every text exactly as a search of its own does."""
    terms = [query_terms(text) for text in texts]
    with connection.cursor() as cursor:
        stats = _stats(cursor)
        frequencies = document_frequencies(cursor, sorted({t for ts in terms for t in ts}), stats)
        budget = _budget()
        plans = [_plan(ts, frequencies, budget) for ts in terms]
        found = _candidates(cursor, plans, max(limit * 4, 40), limit, agent_id, exclude_id)
    results = []
    for index, rows in enumerate(found):
        query = _Query.of(terms[index], frequencies, stats)
        scored = [(memory_id, query.score(content)) for memory_id, content in rows]
        scored = [hit for hit in scored if hit[1] > 0]
        scored.sort(key=lambda hit: (-hit[1], hit[0]))
        results.append(scored[:limit])
    return results


_IN_INDEX_ORDER = "SELECT rowid FROM memories_fts WHERE memories_fts MATCH %s LIMIT %s"
_TIER_SQL = {
    "ranked": "SELECT rowid FROM memories_fts WHERE memories_fts MATCH %s "
    "ORDER BY bm25(memories_fts) LIMIT %s",
    "both": _IN_INDEX_ORDER,
    "fill": _IN_INDEX_ORDER,
}
_TIER_ORDER = {kind: order for order, kind in enumerate(_TIER_SQL)}
# Every row a tier gave comes back, its content only when the agent sees the memory: a tier whose
# rows were forgotten memories or other agents' is told from one the index ran out of. (No
# "SELECT * FROM (...)" around a part: the LIMIT sits in the subquery already, and that wrapper
# made compiling the statement cost as much as running it.)
_TIER_ROWS_SQL = (
    "SELECT %s, %s, m.id, CASE WHEN m.is_deleted = 0 AND m.agent_id = %s{exclude} "
    "THEN m.content END FROM ({rows}) f CROSS JOIN memories m ON m.rowid = f.rowid"
)


def _candidates(cursor, plans, window, limit, agent_id, exclude_id) -> list[list[tuple[str, str]]]:
    """(memory id, content) of each plan's candidates that the agent sees, in tier order.

    Round one asks every text's ranked and both tiers in one query. A text left with fewer than
    `limit` candidates asks for its next fill; one still short once the fills are spent, while a
    tier came back full (the filter dropped rows), asks all its tiers again in windows eight times
    wider.
    """
    found: list[dict[str, str]] = [{} for _ in plans]
    full = [False] * len(plans)
    fills = [0 if plan.both else min(1, len(plan.fills)) for plan in plans]  # fills asked so far
    widen = [1] * len(plans)

    def tiers(i: int) -> list[tuple[str, str, int]]:
        plan, size = plans[i], window * widen[i]
        asked = [("ranked", plan.ranked), ("both", plan.both)]
        asked += [("fill", fill) for fill in plan.fills[: fills[i]]]
        return [(kind, expression, size) for kind, expression in asked if expression]

    asking = {i: tiers(i) for i, plan in enumerate(plans) if plan.ranked or plan.fills}
    while asking:
        fetched = _fetch(cursor, asking, agent_id, exclude_id)
        again = {}
        for i, (rows, tier_full) in fetched.items():
            for memory_id, content in rows:
                found[i].setdefault(memory_id, content)
            full[i] = full[i] or tier_full
            if len(found[i]) >= limit:
                continue
            if fills[i] < len(plans[i].fills):
                # Just enough to reach `limit`: the rows found so far may come back again.
                again[i] = [("fill", plans[i].fills[fills[i]], limit + len(found[i]))]
                fills[i] += 1
            elif full[i] and window * widen[i] < 1_000_000:
                widen[i] *= 8
                found[i], full[i] = {}, False
                again[i] = tiers(i)
        asking = again
    return [list(rows.items()) for rows in found]


def _fetch(cursor, asking, agent_id, exclude_id) -> dict[int, tuple[list, bool]]:
    """One UNION ALL over the asked tiers: per text, (memory id, content) of the rows the agent
    sees, and whether any tier came back with as many rows as it asked for."""
    parts, params = [], []
    exclude = " AND m.id != %s" if exclude_id else ""
    asked = [
        (kind, i, tier) for i, tiers in asking.items() for tier, (kind, _, _) in enumerate(tiers)
    ]
    # Grouped by kind, with the numbers as parameters: batches of the same shape share one SQL
    # text, which SQLite then compiles once per connection.
    for kind, i, tier in sorted(asked, key=lambda part: _TIER_ORDER[part[0]]):
        parts.append(_TIER_ROWS_SQL.format(exclude=exclude, rows=_TIER_SQL[kind]))
        _, expression, size = asking[i][tier]
        params += [i, tier, agent_id, *([exclude_id] if exclude_id else []), expression, size]
    cursor.execute(" UNION ALL ".join(parts), params)
    fetched: dict[int, tuple[list, bool]] = {i: ([], False) for i in asking}
    counts: dict[tuple[int, int], int] = {}
    for i, tier, memory_id, content in cursor.fetchall():
        counts[i, tier] = counts.get((i, tier), 0) + 1
        if content is not None:
            fetched[i][0].append((memory_id, content))
    for (i, tier), count in counts.items():
        if count >= asking[i][tier][2]:
            fetched[i] = (fetched[i][0], True)
    return fetched


def scores_for_many(texts: list[str], memory_ids: list[list[str]]) -> list[dict[str, float]]:
    """Normalised BM25 of each text's own memories (0.0 where a memory does not match at all):
    two queries in all."""
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
