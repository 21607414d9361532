"""All SQL of the keyword index on SQLite: FTS5 over memories.content. It finds the candidates and
memory.keyword.bm25 scores them (BM25 with an IDF that never reaches zero, so a match in a store of
a handful of memories still counts):
1. document frequencies of the query's terms: one counting query, cached per process on big stores;
2. every term's posting list (memory.keyword.sqlite_postings: kept per process and brought up to
   date, on big stores), from which every memory holding a
   query term is weighed by the IDF of the terms it holds; nothing is cut before it is weighed
   (the rarest-terms tiers this replaced held 0.40 of the exhaustive ranking's top 10 at
   100k memories, and could miss the one memory holding every query word), except, on a store
   of PRUNE_ROWS or more, memories shown unable to reach the window (MaxScore's bound);
3. scores: the best-weighed memories the agent sees, against every term, from their text, so the
   same memory gets the same score whether the keyword leg or the vector leg found it.
"""

from __future__ import annotations

import numpy as np
from django.db import connection

from memory import expiry
from memory.keyword import sqlite_postings
from memory.keyword.bm25 import (
    CACHE_MIN_ROWS,
    _FrequencyCache,
    _Query,
    _Stats,
    query_terms,
    stem,
)
from memory.threads import process_pool

FTS_TABLE_SQL = [
    "CREATE VIRTUAL TABLE memories_fts USING fts5(content, content='memories', "
    f"content_rowid='rowid', tokenize='{sqlite_postings.TOKENIZER}')",
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


# Deleting a row removes its entries from the index's pages at once (FTS5's secure-delete, kept in
# the index's config) instead of leaving them behind a delete marker until a merge: a purged
# text's words leave the file with the row (memory migration 0011).
FTS_SECURE_DELETE_SQL = "INSERT INTO memories_fts(memories_fts, rank) VALUES ('secure-delete', 1)"


def merge_index() -> None:
    """Merge every segment of the index into one: entries deleted before secure-delete was on
    (a store older than it) are rewritten away. A purge runs it once, before its one VACUUM."""
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO memories_fts(memories_fts) VALUES ('optimize')")
        cursor.execute(sqlite_postings.EVERYTHING_CHANGED_SQL)


def trim_changes() -> int:
    """Drop all but the last CHANGES_KEPT entries of the log of changed texts; how many went."""
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM memories_fts_changes WHERE seq <= "
            "(SELECT max(seq) FROM memories_fts_changes) - %s",
            [sqlite_postings.CHANGES_KEPT],
        )
        return cursor.rowcount


def still_indexed(memory_ids: list[str], terms: list[str]) -> int:
    """How many of these memories the index still finds by one of these words."""
    marks = ",".join(["%s"] * len(memory_ids))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM memories_fts WHERE memories_fts MATCH %s AND rowid IN "
            f"(SELECT rowid FROM memories WHERE id IN ({marks}))",
            [_quoted(terms), *memory_ids],
        )
        return cursor.fetchone()[0]


def memories_holding_words(texts: list[str]) -> list[tuple[str, str, str]]:
    """(id, content, normalized content) of every memory whose indexed text holds the words of
    one of the texts in a row (a phrase): the candidates a copy of a text can only be among."""
    phrases = " OR ".join('"' + text.replace('"', '""') + '"' for text in texts)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, content, normalized_content FROM memories WHERE rowid IN "
            "(SELECT rowid FROM memories_fts WHERE memories_fts MATCH %s)",
            [phrases],
        )
        return cursor.fetchall()


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


def _window() -> int:
    """memory.keyword.CANDIDATE_WINDOW as it is now (tests and the benchmark change it there)."""
    from memory import keyword  # the package imports this module: read its knob at call time

    return keyword.CANDIDATE_WINDOW


# The unary + keeps SQLite on the rowids: with the (agent, ...) index it scanned the agent's rows
# (and with the expiry index, the memories that expire).
_ROWS_SQL = (
    "SELECT m.rowid, m.id, m.content FROM memories m WHERE m.rowid IN ({marks}) "
    "AND +m.is_deleted = 0 AND +m.agent_id = %s AND {unexpired}{exclude}{where}"
)


class _ByWeight:
    """Every rowid matching a term, best first by the summed IDF of the query's terms it holds
    (ties by rowid), no memory that could be in the part read cut before it is weighed. Only as
    much of the order as is read gets sorted.

    A memory's weight depends only on which of the query's terms it holds: each posting sets its
    term's bit in the memory's code, the distinct codes (a few dozen) are weighed once, and the
    order is found from how many memories hold each weight, without a float per memory or a
    partition of them (the cost that grew with the store).

    With `enough` (on a big store), only the memories holding one of the heaviest terms are
    weighed when that proves the first `enough` of the order (see _heaviest); reading further
    proves as many more the same way, or weighs every posting."""

    def __init__(
        self,
        query: _Query,
        terms: list[str],
        postings: dict[str, np.ndarray],
        enough: int | None = None,
    ):
        self.lists, self.weights, self.bits, seen = [], [], [], set()
        bitsets = getattr(postings, "bits", {})
        for term in terms:
            key = stem(term)
            if key in seen or key not in query.weights:  # "deploy", "deployed": one posting list
                continue
            seen.add(key)
            if len(postings[term]):
                self.lists.append(postings[term])
                self.weights.append(query.weights[key])
                self.bits.append(bitsets.get(term))
        self._prove(enough)

    def _prove(self, n: int | None) -> None:
        """Weigh for the first n rowids (None: all of them): only the heaviest terms' memories
        where they prove those n, else every posting. `enough` says how many are proven."""
        found = _heaviest(self.lists, self.weights, self.bits, n) if n else None
        self.enough = None if found is None else n
        self._weigh(*(self._every_posting() if found is None else found))

    def _every_posting(self) -> tuple[np.ndarray, np.ndarray]:
        """(every memory holding a term, its code), from a dense array of the store's rowids."""
        lists = self.lists
        if not lists:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint8)
        # The terms' bits of every memory holding one (a list holds a rowid once). Indexes are
        # given to numpy as intp: with the lists' int32 it takes a slower path (at 1M memories,
        # 31 against 19-23 ms of a job's scatters).
        codes = np.zeros(max(int(ids.max()) for ids in lists) + 1, dtype=_code_type(len(lists)))
        for bit, ids in enumerate(lists):
            codes[ids.astype(np.intp)] |= codes.dtype.type(1 << bit)
        held = np.flatnonzero(codes != 0)  # a bool mask: numpy finds its set bytes 6x faster
        return held, codes[held]

    def _weigh(self, held: np.ndarray, held_codes: np.ndarray) -> None:
        self.held, self.sorted = held, 0
        self.order = held[:0]
        if not len(held):
            self.rank = np.zeros(0, dtype=np.int64)
            self.below = np.zeros(0)
            return
        present, counts, weight = _code_weights(held_codes, self.weights)
        levels, level_of = np.unique(-weight, return_inverse=True)  # best weight first
        # Each held memory's weight, as its rank among the weights.
        self.rank = _rank_of(held_codes, present, level_of, len(self.lists))
        self.below = np.cumsum(np.bincount(level_of, weights=counts, minlength=len(levels)))

    def __bool__(self) -> bool:
        return bool(self.lists)

    def __len__(self) -> int:
        """How many memories hold a term (every posting weighed, if not yet)."""
        if self.enough is not None:
            self._prove(None)
        return len(self.held)

    def has_more_than(self, read: int) -> bool:
        """Whether more than `read` memories hold a term: every posting is weighed only when the
        memories weighed so far are read through."""
        if self.enough is not None and read >= len(self.held):
            self._prove(None)
        return read < len(self.held)

    def first(self, n: int) -> np.ndarray:
        """The first n rowids of the order."""
        if self.enough is not None and n > self.enough:
            self._prove(n)
        if n > self.sorted:
            held, rank = self.held, self.rank
            if n >= len(held):
                self.order = held[np.lexsort((held, rank))]
            else:
                # Every weight above the n-th one, sorted, then its ties in rowid order.
                cut = int(np.searchsorted(self.below, n))
                better = rank < cut
                above, above_rank = held[better], rank[better]
                above = above[np.lexsort((above, above_rank))]
                ties = held[rank == cut][: n - len(above)]
                self.order = np.concatenate([above, ties])
            self.sorted = len(self.order)
        return self.order[:n]


def _code_weights(codes: np.ndarray, weights: list[float]):
    """(the distinct codes, how many memories hold each, each one's weight)."""
    bits = len(weights)
    present, counts = _distinct(codes, bits)
    # A code's weight, summed term by term in the terms' order: the float a sum over the
    # postings in that order gives. add.accumulate adds along a row left to right, one term
    # after another (never pairwise), in a few numpy calls instead of four per term (seven
    # terms at 100k memories: 461 us a weighing before, 441 after; one process, alternating).
    held_bits = (present[:, None] >> np.arange(bits, dtype=present.dtype)) & 1
    terms = np.where(held_bits.astype(bool), np.asarray(weights), 0.0)
    return present, counts, np.add.accumulate(terms, axis=1)[:, -1]


# Weighing only the memories that hold a heavy term pays from about this many rows on: a job's
# ten weighings took 13 ms against 24 on one thread at 1M memories (the lists of 20 of the
# benchmark's jobs), 5.5 against 4.2 at 100k, about even at 200k (the 100k lists doubled).
PRUNE_ROWS = 200_000
# The weights' sums are floats: a memory outside is left out only when the terms it could hold
# weigh less than the n-th by more than their rounding could add.
_ROUNDING = 1e-9


def _heaviest(lists, weights, bits, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(rowids, codes) of the memories holding one of the heaviest terms, with as many of those
    terms that the other terms together weigh less than the n-th best of these memories: no
    memory holding none of them can then be among the first n (MaxScore's bound). None when
    that takes most of the postings, where weighing every posting costs less.

    The other terms' bits are looked up: in a term's bitset (Postings.bits), else by finding the
    term's rowids among the memories (binary search)."""
    if len(lists) < 2 or len(lists) > 31:  # a code's bit must fit a rowid's 5 low tag bits
        return None
    heavy = sorted(range(len(lists)), key=lambda i: -weights[i])
    held_by = np.cumsum([len(lists[i]) for i in heavy])  # postings of the k heaviest: [k - 1]

    def too_many(k: int) -> bool:  # every term, or most of the postings
        return k == len(lists) or 2 * held_by[k - 1] > held_by[-1]

    used = min(int(np.searchsorted(held_by, n)) + 1, len(lists))  # enough for an n-th at all
    while True:
        if too_many(used):
            return None
        held, codes = _codes_of(heavy[:used], lists, bits)
        if len(held) >= n:
            break
        used += 1
    present, counts, weight = _code_weights(codes, weights)
    best = np.argsort(-weight, kind="stable")
    nth = weight[best[int(np.searchsorted(np.cumsum(counts[best]), n))]]
    rest = sum(weights[i] for i in heavy[used:])
    needed = used
    while rest * (1 + _ROUNDING) >= nth:
        if needed == len(lists) - 1:
            return None
        rest -= weights[heavy[needed]]
        needed += 1
    if needed == used:
        return held, codes
    return None if too_many(needed) else _codes_of(heavy[:needed], lists, bits)


def _codes_of(chosen: list[int], lists, bits) -> tuple[np.ndarray, np.ndarray]:
    """(every rowid of the chosen terms' lists, its code over every term)."""
    # Each posting tagged with its term's bit in its 5 low bits: the lists are ascending, so the
    # sort merges runs, and a memory's bits are its run's bits or-ed together.
    tagged = [(lists[i].astype(np.int64) << 5) | i for i in chosen]
    merged = np.sort(np.concatenate(tagged), kind="stable") if len(tagged) > 1 else tagged[0]
    rowids = merged >> 5
    starts = np.flatnonzero(np.concatenate([[True], rowids[1:] != rowids[:-1]]))
    code_type = _code_type(len(lists))
    own = np.left_shift(1, merged & 31).astype(code_type)
    codes = np.bitwise_or.reduceat(own, starts)
    held = rowids[starts]
    byte, shift = held >> 3, (held & 7).astype(np.uint8)
    for bit, ids in enumerate(lists):
        if bit in chosen:
            continue
        bitset = bits[bit]
        if bitset is not None:
            # A bitset reaches its list's highest rowid: a memory past its end does not hold it.
            inside = int(np.searchsorted(byte, len(bitset)))
            hit = (bitset[byte[:inside]] >> shift[:inside]) & 1
            codes[:inside] |= hit.astype(code_type) << code_type(bit)
        elif len(ids) < len(held):  # each of the term's few rowids found among the memories
            at = np.searchsorted(held, ids)
            inside = at < len(held)
            at = at[inside]
            codes[at[held[at] == ids[inside]]] |= code_type(1 << bit)
        else:  # each memory found in the term's list
            at = np.minimum(np.searchsorted(ids, held), len(ids) - 1)
            codes[ids[at] == held] |= code_type(1 << bit)
    return held, codes


def _code_type(bits: int):
    return np.uint8 if bits <= 8 else np.uint16 if bits <= 16 else np.uint32


def _distinct(codes: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct codes, in order, how many hold each), counted without a sort while the codes
    fit a small table."""
    if bits > 16:
        return np.unique(codes, return_counts=True)
    counts = np.bincount(codes, minlength=1 << bits)
    present = np.flatnonzero(counts)
    return present, counts[present]


def _rank_of(codes: np.ndarray, present: np.ndarray, level_of: np.ndarray, bits: int) -> np.ndarray:
    """Each code's level (`level_of` the level of each of the distinct codes `present`): one look
    up in a table of every code while the codes fit a small one."""
    if bits > 16:
        return level_of[np.searchsorted(present, codes)]
    table = np.zeros(1 << bits, dtype=np.int64)
    table[present] = level_of
    return table[codes.astype(np.intp)]


def search_many(
    texts: list[str],
    *,
    agent_id: str,
    limit: int,
    exclude_id: str | None = None,
    where: tuple[str, list] | None = None,
) -> list[list[tuple[str, float]]]:
    """(memory id, normalised score) of each text's best keyword matches among the agent's live
    memories (and, with `where`, only those its SQL condition on `m` admits).

    Every memory that holds a query term is weighed by the summed IDF of the terms it holds, from
    the terms' posting lists (one query for all texts); the best CANDIDATE_WINDOW of those the
    agent sees are scored exactly (BM25 from their text). A window that the agent's rows or
    `where` thinned out widens until it is full or every matching memory was looked at, so a
    filter never hides a match. Each text's ranking depends on that text alone."""
    terms = [query_terms(text) for text in texts]
    window = max(_window(), limit)
    results: list[list[tuple[str, float]]] = []
    with connection.cursor() as cursor:
        stats = _stats(cursor)
        distinct = sorted({t for ts in terms for t in ts})
        frequencies = document_frequencies(cursor, distinct, stats)
        pruned = stats.rows >= PRUNE_ROWS
        postings = sqlite_postings.postings(
            cursor, [t for t in distinct if frequencies.get(t)], stats.rows, bits=pruned
        )
        queries = [_Query.of(text_terms, frequencies, stats) for text_terms in terms]
        # A job's own raw memory, which its searches exclude, is among each fact's best-weighed:
        # one row more in the first slice spares every order a second read for the place it takes.
        first = window + 1 if exclude_id else window
        orders = _weighed(queries, terms, postings, first, pruned)
        rows = _Rows(cursor, agent_id, exclude_id, where)
        for query, visible in zip(queries, _visible(rows, orders, window, first), strict=True):
            scores = query.score_many([rows.content_of(r) for r in visible])
            scored = [
                (rows.id_of(r), score)
                for r, score in zip(visible, scores, strict=True)
                if score > 0
            ]
            scored.sort(key=lambda hit: (-hit[1], hit[0]))
            results.append(scored[:limit])
    return results


# A batch whose texts' posting lists hold more postings than this is weighed on two threads (a
# job's terms hold about 220k at 100k memories, 2.4 million at 1M).
PARALLEL_POSTINGS = 500_000


def _weighed(queries, terms, postings, first: int, pruned: bool = False) -> list[_ByWeight]:
    """Each text's order, its `first` rowids sorted (`pruned`: weighing only the memories that
    hold a heavy term, where that proves them). With many postings, the texts are split in two
    halves of about as many postings, weighed side by side (numpy lets go of the interpreter in
    these loops: at 1M memories a job's ten weighings took 51 ms on one thread, 32 on two)."""
    enough = first if pruned else None

    def weigh(indexes: list[int]) -> list[_ByWeight]:
        orders = [_ByWeight(queries[i], terms[i], postings, enough) for i in indexes]
        for order in orders:
            order.first(first)
        return orders

    sizes = [sum(len(postings.get(term, ())) for term in text) for text in terms]
    if len(queries) < 2 or sum(sizes) < PARALLEL_POSTINGS:
        return weigh(list(range(len(queries))))
    halves: tuple[list[int], list[int]] = ([], [])
    held = [0, 0]
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):  # the bigger first, to the lighter
        lighter = 0 if held[0] <= held[1] else 1
        halves[lighter].append(i)
        held[lighter] += sizes[i]
    beside = process_pool("keyword-weigh", 1).submit(weigh, halves[1])
    orders = dict(zip(halves[0], weigh(halves[0]), strict=True))
    orders.update(zip(halves[1], beside.result(), strict=True))
    return [orders[i] for i in range(len(queries))]


class _Rows:
    """The rows one search reads, each once however many texts' windows hold it: the id and text
    of those the agent sees and `where` admits (None for the others)."""

    def __init__(self, cursor, agent_id: str, exclude_id: str | None, where) -> None:
        self.cursor = cursor
        self.agent_id, self.exclude_id, self.where = agent_id, exclude_id, where
        self.seen: dict[int, tuple[str, str] | None] = {}

    def read(self, rowids: list[int]) -> None:
        """Look up the rows not looked up yet."""
        wanted = [rowid for rowid in dict.fromkeys(rowids) if rowid not in self.seen]
        exclude = " AND m.id != %s" if self.exclude_id else ""
        condition = f" AND ({self.where[0]})" if self.where else ""
        unexpired, now = expiry.unexpired_sql("+m.expires_at")
        for chunk in range(0, len(wanted), 900):  # under SQLite's bound on parameters
            piece = wanted[chunk : chunk + 900]
            sql = _ROWS_SQL.format(
                marks=",".join(["%s"] * len(piece)),
                unexpired=unexpired,
                exclude=exclude,
                where=condition,
            )
            params = [*piece, self.agent_id, *now, *([self.exclude_id] if self.exclude_id else [])]
            self.cursor.execute(sql, params + (list(self.where[1]) if self.where else []))
            self.seen.update(dict.fromkeys(piece))
            self.seen.update(
                (rowid, (memory_id, content))
                for rowid, memory_id, content in self.cursor.fetchall()
            )

    def visible(self, rowid: int) -> bool:
        return self.seen.get(rowid) is not None

    def id_of(self, rowid: int) -> str:
        return self.seen[rowid][0]

    def content_of(self, rowid: int) -> str:
        return self.seen[rowid][1]


def _visible(
    rows: _Rows, orders: list[_ByWeight], window: int, first: int | None = None
) -> list[list[int]]:
    """Each order's first `window` rowids that the agent sees and `where` admits, reading the
    orders in growing slices (the first of `first` rowids, `window` unless given); the rows of
    every order's next slice are read together."""
    found: list[list[int]] = [[] for _ in orders]
    start, size = [0] * len(orders), [first or window] * len(orders)
    pending = [i for i, order in enumerate(orders) if order]
    while pending:
        parts = {
            i: [int(r) for r in orders[i].first(start[i] + size[i])[start[i] :]] for i in pending
        }
        rows.read([rowid for part in parts.values() for rowid in part])
        pending = []
        for i, part in parts.items():
            start[i] += len(part)
            for rowid in part:
                if rows.visible(rowid):
                    found[i].append(rowid)
                    if len(found[i]) == window:
                        break
            if len(found[i]) < window and orders[i].has_more_than(start[i]):
                size[i] = _next_slice(window - len(found[i]), len(found[i]), start[i])
                pending.append(i)
    return found


def _next_slice(missing: int, seen: int, read: int) -> int:
    """How many more rowids of the order to read for `missing` more visible memories, when `seen`
    of the `read` so far were visible: the excluded source alone takes one place, and a reread of
    eight windows for it cost more than the whole search. When few rows are visible (an agent with
    few of the store's memories, a thin filter) it at least quadruples what was read: the order
    may run to the whole store, and each slice sorts the order up to its end again."""
    rate = seen / read if read else 1.0
    wanted = max(missing * 2, int(missing / max(rate, 1 / 64) * 1.25) + 8)
    return max(wanted, read * 3) if rate < 1 / 8 else wanted


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
        held = [memory_id for memory_id in ids if memory_id in contents]
        query = _Query.of(terms[index], frequencies, stats)
        scores = query.score_many([contents[memory_id] for memory_id in held])
        results[index].update(zip(held, scores, strict=True))
    return results
