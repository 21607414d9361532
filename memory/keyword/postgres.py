"""All SQL of the keyword index on PostgreSQL: a generated `tsvector` over memories.content with a
GIN index. It plays the part FTS5 plays on SQLite: store statistics, document frequencies and the
candidates: the memories holding the most query weight (summed IDF of the terms they hold, as
SQLite weighs them), found over the GIN index with MaxScore's pruning so common words are read
only when they can matter. memory.keyword.bm25 scores the candidates from their text (BM25, its
own stemmer), so a memory gets the same score on both engines.
"""

from __future__ import annotations

import threading
import time

from django.db import connection

from memory import expiry
from memory.keyword.bm25 import (
    CACHE_DRIFT,
    CACHE_MIN_ROWS,
    CACHE_SECONDS,
    _FrequencyCache,
    _Query,
    _Stats,
    query_terms,
    stem,
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


def memories_holding_words(texts: list[str]) -> list[tuple[str, str, str]]:
    """(id, content, normalized content) of every memory whose tsvector holds the words of one
    of the texts in a row (a phrase): the candidates a copy of a text can only be among."""
    query = " || ".join([f"phraseto_tsquery('{TEXT_CONFIG}', %s)"] * len(texts))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, content, normalized_content FROM memories WHERE search_vector @@ ({query})",
            texts,
        )
        return cursor.fetchall()


def merge_index() -> None:
    """Nothing: the GIN index drops a purged row's entries when the table is vacuumed."""


def trim_changes() -> int:
    """Nothing: no process keeps posting lists of the GIN index."""
    return 0


def still_indexed(memory_ids: list[str], terms: list[str]) -> int:
    """How many of these memories the tsvector still finds by one of these words."""
    query = " || ".join([_TERM] * len(terms))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COUNT(*) FROM memories WHERE id = ANY(%s) AND search_vector @@ ({query})",
            [memory_ids, *terms],
        )
        return cursor.fetchone()[0]


class _StatsCache:
    """N and the average length, kept for a while on big stores (counting them scans the table).

    On a big store the planner's row count (reltuples, which only VACUUM and ANALYZE change) is
    read again at most every CHECK_SECONDS, not by every search."""

    CHECK_SECONDS = 5.0

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.key: str | None = None
        self.stats: _Stats | None = None
        self.filled_at = 0.0
        self.checked_at = 0.0

    def get(self, cursor) -> _Stats:
        key = connection.settings_dict["NAME"]
        with self.lock:
            cached = self.stats
            if (
                cached is not None
                and self.key == key
                and cached.rows >= CACHE_MIN_ROWS
                and time.monotonic() - self.checked_at < self.CHECK_SECONDS
                and time.monotonic() - self.filled_at < CACHE_SECONDS
            ):
                return cached
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = 'memories'::regclass")
        estimate = float(cursor.fetchone()[0])
        with self.lock:
            if (
                cached is not None
                and estimate >= CACHE_MIN_ROWS
                and self.key == key
                and abs(estimate - cached.rows) <= cached.rows * CACHE_DRIFT
                and time.monotonic() - self.filled_at < CACHE_SECONDS
            ):
                self.checked_at = time.monotonic()
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
            now = time.monotonic()
            self.key, self.stats, self.filled_at, self.checked_at = key, stats, now, now
        return stats


class _CommonLexemes:
    """The column's most common lexemes with the share of memories holding each, as ANALYZE
    (autovacuum) recorded them: read from pg_stats once per CACHE_SECONDS per process, because
    planning and reading that view costs more than the rest of a keyword search."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.key: str | None = None
        self.filled_at = 0.0
        self.shares: dict[str, float] = {}

    def get(self, cursor) -> dict[str, float]:
        key = connection.settings_dict["NAME"]
        with self.lock:
            if self.key == key and time.monotonic() - self.filled_at < CACHE_SECONDS:
                return self.shares
        cursor.execute(
            "SELECT most_common_elems::text::text[], most_common_elem_freqs FROM pg_stats "
            "WHERE schemaname = current_schema() AND tablename = 'memories' "
            "AND attname = 'search_vector'"
        )
        row = cursor.fetchone()
        shares = dict(zip(row[0], row[1], strict=False)) if row and row[0] else {}
        with self.lock:
            self.key, self.filled_at, self.shares = key, time.monotonic(), shares
        return shares


_STATS = _StatsCache()
_FREQUENCIES = _FrequencyCache()
_COMMON = _CommonLexemes()


def document_frequencies(cursor, terms: list[str], stats: _Stats) -> dict[str, int]:
    """How many memories (forgotten ones too, as FTS5 counts) each term matches; one query for
    the uncounted, cached per process on big stores. There, a term among the column's most common
    lexemes is estimated from its recorded share (counting it would visit a large part of the
    table); the others are rare, and cheap to count exactly."""
    big = stats.rows >= CACHE_MIN_ROWS
    key = ("postgresql", connection.settings_dict["NAME"])
    found = _FREQUENCIES.lookup(key, stats.rows, terms) if big else {}
    missing = [term for term in terms if term not in found]
    if not missing:
        return found
    common = _COMMON.get(cursor) if big else {}
    cursor.execute(
        "SELECT t.word, l.lexeme, CASE WHEN l.lexeme = ANY(%s::text[]) THEN NULL ELSE "
        f"(SELECT count(*) FROM memories WHERE search_vector @@ plainto_tsquery('{TEXT_CONFIG}', "
        "t.word)) END FROM unnest(%s::text[]) AS t(word) CROSS JOIN LATERAL (SELECT "
        f"(tsvector_to_array(to_tsvector('{TEXT_CONFIG}', t.word)))[1] AS lexeme) l",
        [list(common), missing],
    )
    counted = {
        word: round(common[lexeme] * stats.rows) if count is None else int(count)
        for word, lexeme, count in cursor.fetchall()
    }
    if big:
        _FREQUENCIES.store(counted)
    found.update(counted)
    return found


RARE_DOCUMENT_BUDGET = 2000  # matches of the rarest terms the first candidate query weighs
_EPSILON = 1e-9  # summed in another order, a weight may differ from the server's in its last bits


def _window() -> int:
    """memory.keyword.CANDIDATE_WINDOW as it is now (tests and the benchmark change it there)."""
    from memory import keyword  # the package imports this module: read its knob at call time

    return keyword.CANDIDATE_WINDOW


def _rarest(terms: list[str], frequencies: dict[str, int], limit: int) -> tuple[int, bool]:
    """How many of `terms` (rarest first) the first query weighs: those whose matches add up to
    RARE_DOCUMENT_BUDGET (at least the rarest one), and more while they hold fewer than `limit`;
    and whether it took more. A first stage that cannot fill the limit sets no floor, so the
    second would weigh the matches of every term (a number no other memory holds, beside a
    sentence's common words)."""
    count, total, beyond = 0, 0, False
    for term in terms:
        if count and total + frequencies[term] > RARE_DOCUMENT_BUDGET:
            if total >= limit:
                break
            beyond = True
        count += 1
        total += frequencies[term]
    return count, beyond


class _Plan:
    """One text's candidate query: its terms (one per stem, rarest first) with their weights,
    how many of the rarest the first stage reads, and which of its rows sets the floor."""

    def __init__(
        self, terms: list[str], query: _Query, frequencies: dict[str, int], limit: int, window: int
    ):
        self.terms = sorted(terms, key=lambda t: (frequencies[t], t))
        self.weights = [query.weights[stem(term)] for term in self.terms]
        self.count, beyond = _rarest(self.terms, frequencies, limit)
        # Within the budget the floor is the `limit`-th row: the `limit` heaviest are found. A
        # first stage taken past the budget stands in for one that set no floor, where every
        # match was weighed and the window was the heaviest of all: its floor is the window's
        # last row, so the window stays that (the rows after it are what BM25 re-ranks). A cached
        # frequency that counts too few can take this path where a floor was set: the window is
        # then the heaviest of every match, the exact one.
        self.floor_row = window if beyond else limit
        # needed(floor) = the first n >= count whose terms after it weigh less than the floor
        self.suffixes = [sum(self.weights[n:]) for n in range(self.count, len(self.terms))]


def _stage_sql(plan: _Plan, stage: str, matching: str, options: dict) -> tuple[str, list]:
    """A window of the agent's live memories (that `where` admits) matching `matching` (SQL
    over the plan's tsqueries t.q<i>), the heaviest first by the summed weight of every term they
    hold (ties by id): the GIN index finds them, the server weighs them."""
    queries = ", ".join(f"{_TERM} AS q{i}" for i in range(len(plan.terms)))
    weight = " + ".join(
        f"CASE WHEN m.search_vector @@ t.q{i} THEN {float(w)!r}::float8 ELSE 0::float8 END"
        for i, w in enumerate(plan.weights)
    )
    exclude_id, where = options["exclude_id"], options["where"]
    unexpired, now = options["unexpired"]
    sql = (
        f"SELECT m.id, m.content, {weight} AS weight FROM memories m, (SELECT {queries}) t{stage} "
        f"WHERE {matching} AND m.agent_id = %s AND NOT m.is_deleted AND {unexpired}"
        + (" AND m.id <> %s" if exclude_id else "")
        + (f" AND ({where[0]})" if where else "")
        + " ORDER BY weight DESC, m.id LIMIT %s"
    )
    params = [*plan.terms, options["agent_id"], *now, *([exclude_id] if exclude_id else [])]
    return sql, [*params, *(where[1] if where else []), options["window"]]


def _plan_sql(i: int, plan: _Plan, **options) -> tuple[list[str], str, list]:
    """The CTEs and the final SELECT of text `i`: MaxScore's two stages in SQL.
    1. a<i>: the matches of the rarest terms, weighed; the weight of its `plan.floor_row`-th
       heaviest row is a floor that many heaviest memories of the whole store all reach
       (n<i>.floor);
    2. b<i>, run only when some memory without a rare term could reach the floor (n<i>.needed:
       the terms whose weights add up to the floor or more): the matches of those terms that
       hold no rare term (the first stage weighed those), so the lightest common words are still
       never read.
    The text's window is the heaviest of both stages' rows: the `plan.floor_row` heaviest
    memories (at least `limit`) are always in it, as if every match was weighed."""
    rare = " || ".join(f"t.q{k}" for k in range(plan.count))
    first, first_params = _stage_sql(plan, "", f"m.search_vector @@ ({rare})", options)
    # The second stage's tsquery: the OR of the terms after the rare ones up to `needed`, picked
    # at run time.
    ors = [
        " || ".join(f"t.q{k}" for k in range(plan.count, n))
        for n in range(plan.count + 1, len(plan.terms) + 1)
    ]
    choice = f"(ARRAY[{', '.join(ors)}]::tsquery[])[n.needed - {plan.count}]" if ors else "NULL"
    # The index finds the rows; the rows holding a rare term are then dropped before they are
    # weighed (a GIN bitmap cannot leave them out).
    matching = f"m.search_vector @@ {choice} AND NOT m.search_vector @@ ({rare})"
    second, second_params = _stage_sql(plan, f", n{i} n", matching, options)
    second = second.replace(" WHERE ", f" WHERE n.needed > {plan.count} AND ", 1)
    ctes = [
        f"a{i} AS MATERIALIZED ({first})",
        f"n{i} AS MATERIALIZED (SELECT coalesce((SELECT min(s.k) FROM unnest(%s::float8[], "
        f"%s::int[]) AS s(v, k) WHERE s.v < f.floor - {_EPSILON!r}), {len(plan.terms)}) AS needed "
        f"FROM (SELECT coalesce((SELECT weight FROM a{i} ORDER BY weight DESC, id OFFSET %s "
        "LIMIT 1), 0) AS floor) f)",
        f"b{i} AS MATERIALIZED ({second})",
    ]
    needed_params = [
        plan.suffixes,
        list(range(plan.count, len(plan.terms))),
        plan.floor_row - 1,
    ]
    select = (
        f"(SELECT {i}, id, content FROM (SELECT id, content, weight FROM a{i} UNION ALL "
        f"SELECT id, content, weight FROM b{i}) w{i} ORDER BY weight DESC, id "
        # A number written in: the CTEs' parameters come before every text's SELECT.
        f"LIMIT {int(options['window'])})"
    )
    return ctes, select, [*first_params, *needed_params, *second_params]


def _candidates_many(cursor, plans: dict[int, _Plan], **options) -> dict[int, list[tuple]]:
    """(memory id, content) of each planned text's window (see `_plan_sql`), every text in one
    statement: one round trip and one plan for a job's facts, not two queries each."""
    # One "now" for every stage: a memory expiring meanwhile is out of both or of neither.
    options["unexpired"] = expiry.unexpired_sql("m.expires_at")
    ctes, selects, params = [], [], []
    for i, plan in plans.items():
        plan_ctes, select, plan_params = _plan_sql(i, plan, **options)
        ctes.extend(plan_ctes)
        selects.append(select)
        params.extend(plan_params)
    cursor.execute(f"WITH {', '.join(ctes)} " + " UNION ALL ".join(selects), params)
    found: dict[int, list[tuple]] = {i: [] for i in plans}
    for i, memory_id, content in cursor.fetchall():
        found[i].append((memory_id, content))
    return found


def search(
    text: str,
    *,
    agent_id: str,
    limit: int,
    exclude_id: str | None = None,
    where: tuple[str, list] | None = None,
) -> list[tuple[str, float]]:
    """(memory id, normalised score) of the best keyword matches among the agent's live memories
    (and, with `where`, only those its SQL condition on `m` admits)."""
    return search_many([text], agent_id=agent_id, limit=limit, exclude_id=exclude_id, where=where)[
        0
    ]


def search_many(
    texts: list[str],
    *,
    agent_id: str,
    limit: int,
    exclude_id: str | None = None,
    where: tuple[str, list] | None = None,
) -> list[list[tuple[str, float]]]:
    """`search` of each text, ranked exactly as a search of its own: the statistics and the
    document frequencies of every text's terms in one query at most (none when cached), then
    every text's candidates in one statement, scored here."""
    results: list[list[tuple[str, float]]] = [[] for _ in texts]
    terms_of = [query_terms(text) for text in texts]
    if not any(terms_of):
        return results
    window = max(_window(), limit)
    with connection.cursor() as cursor:
        stats = _STATS.get(cursor)
        frequencies = document_frequencies(
            cursor, sorted({term for terms in terms_of for term in terms}), stats
        )
        queries, plans = {}, {}
        for i, terms in enumerate(terms_of):
            queries[i] = query = _Query.of(terms, frequencies, stats)
            # One term per stem: "deploy" and "deployed" match the same memories.
            by_stem = {stem(t): t for t in reversed(terms) if frequencies.get(t)}
            if by_stem:
                plans[i] = _Plan(list(by_stem.values()), query, frequencies, limit, window)
        if not plans:
            return results
        found = _candidates_many(
            cursor, plans, agent_id=agent_id, exclude_id=exclude_id, where=where, window=window
        )
    for i, rows in found.items():
        scores = queries[i].score_many([content for _, content in rows])
        scored = [(row[0], score) for row, score in zip(rows, scores, strict=True) if score > 0]
        scored.sort(key=lambda hit: (-hit[1], hit[0]))
        results[i] = scored[:limit]
    return results


def scores_for(text: str, memory_ids: list[str]) -> dict[str, float]:
    """Normalised BM25 of specific memories for `text` (0.0 when they do not match at all)."""
    return scores_for_many([text], [memory_ids])[0]


def scores_for_many(texts: list[str], memory_ids: list[list[str]]) -> list[dict[str, float]]:
    """`scores_for` of each text with its own memories: the frequencies of every text's terms
    in one query at most, and every memory's text in one read."""
    found = [dict.fromkeys(ids, 0.0) for ids in memory_ids]
    terms_of = [
        query_terms(text) if ids else [] for text, ids in zip(texts, memory_ids, strict=True)
    ]
    wanted = sorted(
        {mid for terms, ids in zip(terms_of, memory_ids, strict=True) if terms for mid in ids}
    )
    if not wanted:
        return found
    with connection.cursor() as cursor:
        stats = _STATS.get(cursor)
        frequencies = document_frequencies(
            cursor, sorted({term for terms in terms_of for term in terms}), stats
        )
        cursor.execute("SELECT id, content FROM memories WHERE id = ANY(%s)", [wanted])
        contents = dict(cursor.fetchall())
    for scores, terms in zip(found, terms_of, strict=True):
        if not terms:
            continue
        held = [memory_id for memory_id in scores if memory_id in contents]
        query = _Query.of(terms, frequencies, stats)
        scores.update(zip(held, query.score_many([contents[mid] for mid in held]), strict=True))
    return found
