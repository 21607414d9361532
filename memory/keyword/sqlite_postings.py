"""Each query term's posting list on SQLite (the rowids of the memories FTS5 matches it in), kept per
process: a list read once is brought up to date at each later search from the rows added above
the rowid it was read to and the rows whose text changed since (memories_fts_changes, filled by
triggers), looked up in a scratch index of those rows alone, so a job's ten facts stop reading
every posting of every term. A list brought up to date equals the list read afresh; a deleted
row or a merge of the index empties the cache (a rowid can be reused only after a delete), and
so do an aged cache, a store that shrank, or one that is not the one the cache was filled from.

Reads inside a transaction never use the cache: they see rows a rollback may take back."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import numpy as np
from django.db import connection

CHANGES_TABLE_SQL = [
    # AUTOINCREMENT: a trimmed log never hands out a sequence number a cache has already seen.
    "CREATE TABLE memories_fts_changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "row INTEGER NOT NULL, deleted INTEGER NOT NULL)",
    # Saves that leave the text as it was (version bumps, flags) are not changes of the index.
    "CREATE TRIGGER memories_fts_changed AFTER UPDATE OF content ON memories "
    "WHEN old.content IS NOT new.content BEGIN "
    "INSERT INTO memories_fts_changes(row, deleted) VALUES (new.rowid, 0); END",
    "CREATE TRIGGER memories_fts_removed AFTER DELETE ON memories BEGIN "
    "INSERT INTO memories_fts_changes(row, deleted) VALUES (old.rowid, 1); END",
]
CHANGES_DROP_SQL = [
    "DROP TRIGGER IF EXISTS memories_fts_removed",
    "DROP TRIGGER IF EXISTS memories_fts_changed",
    "DROP TABLE IF EXISTS memories_fts_changes",
]
# Logged by a merge of the index (before a purge's VACUUM, which may renumber rowids): every
# process's cache is emptied, as after a delete.
EVERYTHING_CHANGED_SQL = "INSERT INTO memories_fts_changes(row, deleted) VALUES (0, 1)"
# The log keeps this many changes; a cache that has not seen the ones trimmed before it is emptied.
CHANGES_KEPT = 10_000

# Smaller stores read every list afresh (cheap, and nothing to keep); read at call time, so tests
# change it here.
MIN_ROWS = 5000
# Rowids kept as 32-bit integers: 64 MiB per process at most (a store of a million memories holds
# about 12 million postings; a job's terms, 2.4 million); more empties the cache.
MAX_POSTINGS = 16_000_000
MAX_CHANGES = 256  # rows changed since the cache was filled: more, and it is filled again
MAX_SECONDS = 300.0
MAX_BEHIND = 5000  # rows added since a list was read past which it is read afresh
# The store's tokenizer (memory.keyword.sqlite builds its index with it), for the scratch index.
TOKENIZER = "porter unicode61 remove_diacritics 2"

_HEAD_SQL = (
    "SELECT 0, (SELECT max(rowid) FROM memories), NULL UNION ALL "
    "SELECT 1, (SELECT min(seq) FROM memories_fts_changes), "
    "(SELECT max(seq) FROM memories_fts_changes) UNION ALL "
    "SELECT * FROM (SELECT 2, seq, row * 2 + deleted FROM memories_fts_changes "
    "WHERE seq > %s ORDER BY seq)"
)
_ABOVE_SQL = (
    "SELECT %s, (SELECT group_concat(rowid) FROM memories_fts WHERE memories_fts MATCH %s "
    "AND rowid > %s AND rowid <= %s)"
)
# The scratch index: in this connection's temporary (in-memory) database, made once, then filled
# and emptied by each search that brings lists up to date; it never touches the store's file or
# its write lock (memory.backend.base: writes to `temp.` take no writer's turn). Contentless (it
# keeps no copy of a text, only its index) and emptied by FTS5's 'delete-all', which frees every
# page of the index at once, zeroed by the temporary database's secure_delete: a DELETE of its
# rows left the words of a purged text in its segments and freed pages (and with FTS5's
# secure-delete on, took 250 ms for 5,000 rows). Not dropped and made again by each search: DDL
# expires every prepared statement of the connection (the job's write then parsed all of its
# statements again: its lock hold doubled).
_RECENT_EXISTS_SQL = "SELECT 1 FROM temp.sqlite_master WHERE name = 'memories_fts_recent'"
_RECENT_MAKE_SQL = [
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.memories_fts_recent USING fts5(content, "
    f"content='', tokenize='{TOKENIZER}')",
    "PRAGMA temp.secure_delete = 1",  # the temporary database exists from here on
]
_RECENT_CLEAR_SQL = (
    "INSERT INTO temp.memories_fts_recent(memories_fts_recent) VALUES ('delete-all')"
)
_RECENT_FILL_SQL = (
    "INSERT INTO temp.memories_fts_recent(rowid, content) SELECT rowid, content FROM "
    "main.memories WHERE (rowid > %s AND rowid <= %s){changed}"
)
_RECENT_SQL = (
    "SELECT %s, (SELECT group_concat(rowid) FROM temp.memories_fts_recent "
    "WHERE memories_fts_recent MATCH %s)"
)


def _rowids(text: str | None) -> np.ndarray:
    """A group_concat of rowids as an array (numpy reads the whole string in one call)."""
    return np.fromstring(text, dtype=np.int64, sep=",") if text else np.zeros(0, np.int64)


def read_afresh(cursor, terms: list[str]) -> dict[str, np.ndarray]:
    """Every term's whole posting list, in one query."""
    if not terms:
        return {}
    cursor.execute(
        " UNION ALL ".join([_ABOVE_SQL] * len(terms)),
        [value for i, term in enumerate(terms) for value in (i, f'"{term}"', 0, 2**62)],
    )
    return {terms[int(i)]: _rowids(text) for i, text in cursor.fetchall()}


@dataclass
class _List:
    rowids: np.ndarray  # ascending, int32
    high: int  # every posting up to this rowid is in `rowids`
    seq: int  # with every change up to this one folded in


class _Cache:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.empty(None)

    def empty(self, key) -> None:
        self.key, self.lists, self.size = key, {}, 0
        self.high = self.seq = 0
        self.changes: list[tuple[int, int]] = []  # (seq, row) of the changed rows seen
        self.filled_at = time.monotonic()

    def is_stale(self, key, high: int, first: int | None, last: int | None) -> bool:
        return (
            key != self.key
            or high < self.high  # rows went away: another store, or one restored from a copy
            or (last or 0) < self.seq
            or (first is not None and first > self.seq + 1 and bool(self.lists))  # trimmed past
            or time.monotonic() - self.filled_at > MAX_SECONDS
            or self.size > MAX_POSTINGS
        )


_CACHE = _Cache()
# A child forked while another thread held the lock would wait on it forever: it starts empty.
os.register_at_fork(after_in_child=_CACHE.__init__)


def postings(cursor, terms: list[str], rows: int) -> dict[str, np.ndarray]:
    """Every term's posting list as the index holds it now: from the process's cache, brought up
    to date (the log's new entries, the scratch index, one lookup of every term), on a store of
    MIN_ROWS or more outside a transaction; read afresh otherwise."""
    if rows < MIN_ROWS or connection.in_atomic_block or not terms:
        return read_afresh(cursor, terms)
    with _CACHE.lock:
        return _up_to_date(cursor, terms)


def _up_to_date(cursor, terms: list[str]) -> dict[str, np.ndarray]:
    cache = _CACHE
    high, first, last, changed = _head(cursor, cache.seq)
    key = connection.settings_dict["NAME"]
    if high >= 2**31:  # rowids past what the kept lists hold
        return read_afresh(cursor, terms)
    if (
        cache.is_stale(key, high, first, last)
        or any(deleted for _, _, deleted in changed)
        or len(cache.changes) + len(changed) > MAX_CHANGES
    ):
        # Every list is read afresh below, up to `high`: the changes so far are in them.
        cache.empty(key)
        changed = []
    cache.changes += [(seq, row) for seq, row, _ in changed]
    cache.seq = max(cache.seq, last or 0)
    for term in terms:  # a list far behind is read afresh rather than caught up row by row
        held = cache.lists.get(term)
        if held is not None and high - held.high > MAX_BEHIND:
            cache.size -= len(cache.lists.pop(term).rowids)
    held = {term: cache.lists[term] for term in terms if term in cache.lists}
    recent = _recent(cursor, cache, held, high)
    statements, params = [], []
    for i, term in enumerate(terms):
        if term in held:
            statements.append(_RECENT_SQL)
            params += [i, f'"{term}"']
        else:
            statements.append(_ABOVE_SQL)
            params += [i, f'"{term}"', 0, high]
    try:
        cursor.execute(" UNION ALL ".join(statements), params)
        read = {terms[i]: _rowids(text) for i, text in cursor.fetchall()}
    finally:
        if recent:
            cursor.execute(_RECENT_CLEAR_SQL)  # its copies of the texts are not kept
    found = {term: _fold(cache, term, read[term], high) for term in terms}
    cache.high = max(cache.high, high)
    return found


def _recent(cursor, cache: _Cache, held: dict[str, _List], high: int) -> bool:
    """Copy into this connection's scratch index the rows the held lists lack: those above the
    lowest list's rowid, and the changed ones. The scratch index tokenizes as the store's does,
    and a term is looked up in its few rows at a fraction of a lookup in the whole index."""
    if not held:
        return False
    low = min(list_.high for list_ in held.values())
    changed = sorted({row for list_ in held.values() for row in _changed_rows(cache, list_)})
    cursor.execute(_RECENT_EXISTS_SQL)
    if cursor.fetchone() is None:
        for sql in _RECENT_MAKE_SQL:
            cursor.execute(sql)
    rows = f" OR rowid IN ({','.join(map(str, changed))})" if changed else ""
    # One statement in autocommit: if it fails, it leaves no row behind.
    cursor.execute(_RECENT_FILL_SQL.format(changed=rows), [low, high])
    return True


def _head(cursor, seq: int) -> tuple[int, int | None, int | None, list[tuple[int, int, bool]]]:
    """The store's highest rowid, the log's first and last change, and the changes after `seq`."""
    cursor.execute(_HEAD_SQL, [seq])
    high, first, last, changed = 0, None, None, []
    for kind, a, b in cursor.fetchall():
        if kind == 0:
            high = a or 0
        elif kind == 1:
            first, last = a, b
        else:
            changed.append((a, b // 2, bool(b % 2)))
    return high, first, last, changed


def _changed_rows(cache: _Cache, held: _List | None) -> list[int]:
    """Rows at or below a cached list's rowid whose text changed after it was read."""
    if held is None:
        return []
    return sorted({row for seq, row in cache.changes if seq > held.seq and row <= held.high})


def _fold(cache: _Cache, term: str, read: np.ndarray, high: int) -> np.ndarray:
    """The term's list now, kept for the next search: read afresh, or what was kept less its
    changed rows, plus those of them and of the rows above it that the scratch index matched."""
    held = cache.lists.get(term)
    if held is None:
        rowids = read.astype(np.int32)
    else:
        rowids = held.rowids
        changed = _changed_rows(cache, held)
        if changed:
            rowids = rowids[~np.isin(rowids, changed)]
            rowids = np.union1d(rowids, read[np.isin(read, changed)].astype(np.int32))
        above = read[(read > held.high) & (read <= high)]
        if len(above):
            rowids = np.concatenate([rowids, np.sort(above).astype(np.int32)])
        cache.size -= len(held.rowids)
    cache.lists[term] = _List(rowids, max(high, held.high if held else 0), cache.seq)
    cache.size += len(rowids)
    return rowids
