"""Each query term's posting list on SQLite (the rowids of the memories FTS5 matches it in), kept per
process and brought up to date at each later search: the rows added since the last search and
the rows whose text changed since (memories_fts_changes, filled by triggers) are copied into a
scratch index, and its vocabulary says which of them hold each kept term's token, so a search
copies the few rows that are new since the last one, not every row above its oldest list. A list
brought up to date equals the list read afresh; a deleted row or a merge of the index empties
the cache (a rowid can be reused only after a delete), and so do an aged cache, a store that
shrank, or one that is not the one the cache was filled from.

Reads inside a transaction never use the cache: they see rows a rollback may take back."""

from __future__ import annotations

import bisect
import os
import threading
import time
from dataclasses import dataclass, field

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
MAX_BEHIND = 5000  # rows added since the last search past which every list is read afresh
# A kept list holding at least one rowid in BITS_SHARE is also kept as a bitset (one bit per rowid,
# at most 4 times the list's own bytes; MAX_BIT_BYTES of them in all): the weighing of a big store
# looks up in it whether its candidates hold a common term (memory.keyword.sqlite).
BITS_SHARE = 128
MAX_BIT_BYTES = 64 * 2**20
BITS_SLACK = 4096  # bytes past the highest rowid: rows added later set their bits in place
# Past this many rows to copy, only the kept terms' tokens are read from the scratch index.
FEW_ROWS = 64
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
# statements again: its lock hold doubled). Its vocabulary (fts5vocab, one row per token of each
# row) gives each copied row's tokens, and each new query term's own (a term is copied in too, at
# a negative rowid): the tokens as the store's tokenizer makes them, porter stems included.
_RECENT_EXISTS_SQL = "SELECT 1 FROM temp.sqlite_master WHERE name = 'memories_fts_recent_tokens'"
_RECENT_MAKE_SQL = [
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.memories_fts_recent USING fts5(content, "
    f"content='', tokenize='{TOKENIZER}')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.memories_fts_recent_tokens "
    "USING fts5vocab(temp, memories_fts_recent, instance)",
    "PRAGMA temp.secure_delete = 1",  # the temporary database exists from here on
]
_RECENT_CLEAR_SQL = (
    "INSERT INTO temp.memories_fts_recent(memories_fts_recent) VALUES ('delete-all')"
)
_RECENT_FILL_SQL = (
    "INSERT INTO temp.memories_fts_recent(rowid, content) SELECT rowid, content FROM "
    "main.memories WHERE {rows}"
)
_RECENT_TERMS_SQL = "INSERT INTO temp.memories_fts_recent(rowid, content) VALUES {values}"
_RECENT_TOKENS_SQL = "SELECT doc, term FROM temp.memories_fts_recent_tokens"


def _rowids(text: str | None) -> np.ndarray:
    """A group_concat of rowids as an array (numpy reads the whole string in one call)."""
    return np.fromstring(text, dtype=np.int64, sep=",") if text else np.zeros(0, np.int64)


def read_afresh(cursor, terms: list[str], high: int = 2**62) -> dict[str, np.ndarray]:
    """Every term's whole posting list (up to rowid `high`), in one query."""
    if not terms:
        return {}
    cursor.execute(
        " UNION ALL ".join([_ABOVE_SQL] * len(terms)),
        [value for i, term in enumerate(terms) for value in (i, f'"{term}"', 0, high)],
    )
    return {terms[int(i)]: _rowids(text) for i, text in cursor.fetchall()}


class Postings(dict):
    """term -> its posting list (ascending rowids); `bits` holds some of the lists as bitsets too
    (bit r % 8 of byte r // 8 set for each rowid r, every byte past the list's highest rowid
    zero)."""

    def __init__(self, lists: dict[str, np.ndarray], bits: dict[str, np.ndarray] | None = None):
        super().__init__(lists)
        self.bits = bits or {}


@dataclass
class _List:
    rowids: np.ndarray  # ascending, int32
    token: str  # the term as the index holds it (its one token)
    seq: int  # with every change up to this one folded in
    added: list[int] = field(default_factory=list)  # rows added since, ascending, not yet in rowids
    bits: np.ndarray | None = None  # the rowids as a bitset (Postings.bits), for a big list


class _Cache:
    """The kept lists, each complete up to `high` once its `added` rows and its changes after its
    `seq` are folded in; `changes` holds which kept terms' tokens each changed row held when the
    search that saw the change read it (at most MAX_CHANGES rows)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.empty(None)

    def empty(self, key) -> None:
        self.key, self.lists, self.size, self.bit_bytes = key, {}, 0, 0
        self.high = self.seq = 0
        self.by_token: dict[str, set[str]] = {}  # token -> the kept terms that are it
        self.changes: list[tuple[int, int, frozenset[str]]] = []  # (seq, row, its tokens now)
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

    def keep(self, term: str, token: str, rowids: np.ndarray) -> None:
        self.lists[term] = _List(rowids.astype(np.int32), token, self.seq)
        self.by_token.setdefault(token, set()).add(term)
        self.size += len(rowids)


_CACHE = _Cache()
# A child forked while another thread held the lock would wait on it forever: it starts empty.
os.register_at_fork(after_in_child=_CACHE.__init__)


def postings(cursor, terms: list[str], rows: int, bits: bool = False) -> Postings:
    """Every term's posting list as the index holds it now: from the process's cache, brought up
    to date (the log's new entries, the scratch index's tokens of the new and changed rows), on a
    store of MIN_ROWS or more outside a transaction; read afresh otherwise. With `bits`, the big
    kept lists' bitsets too."""
    if rows < MIN_ROWS or connection.in_atomic_block or not terms:
        return Postings(read_afresh(cursor, terms))
    with _CACHE.lock:
        found = _up_to_date(cursor, terms)
        return Postings(found, _bitsets(_CACHE, found) if bits else None)


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
        or high - cache.high > MAX_BEHIND
    ):
        # Every list is read afresh below, up to `high`: the changes so far are in them.
        cache.empty(key)
    was_kept = bool(cache.lists)
    # A row above the last search's `high` is taken in as new, with the text it has now.
    rows_changed = sorted({row for _, row, _ in changed if row <= cache.high}) if was_kept else []
    new = [term for term in terms if term not in cache.lists]
    low = cache.high if was_kept else high
    tokens = _tokens(cursor, low, high, rows_changed, new, cache.by_token.keys())
    if was_kept:
        # Of a changed row's tokens, only the kept terms' (a list kept later is read afresh): the
        # cache holds no word of a memory that is not a word a search asked for.
        cache.changes += [
            (seq, row, frozenset(cache.by_token.keys() & tokens.get(row, ())))
            for seq, row, _ in changed
        ]
        for row in sorted(row for row in tokens if row > cache.high):
            for token in tokens[row]:
                for term in cache.by_token.get(token, ()):
                    added = cache.lists[term].added
                    if not added or added[-1] != row:  # a token twice in the row: once
                        added.append(row)
                        cache.size += 1
    cache.high = high
    cache.seq = max(cache.seq, last or 0)
    read = read_afresh(cursor, new, high)
    found = {}
    for index, term in enumerate(new):
        own = tokens.get(-1 - index, [])
        if len(own) == 1:  # two tokens ("fraud_check", "knock_knock") are a phrase: read each time
            cache.keep(term, own[0], read[term])
        found[term] = cache.lists[term].rowids if term in cache.lists else read[term]
    for term in terms:
        if term in cache.lists and term not in found:
            found[term] = _fold(cache, cache.lists[term])
    return found


def _tokens(cursor, low: int, high: int, changed: list[int], terms: list[str], kept) -> dict:
    """{rowid: its tokens, a repeated one as often as it occurs} of the rows above `low` up to
    `high`, of the changed rows, and of each term (at rowid -1 - its index), as the scratch
    index's vocabulary gives them. Past FEW_ROWS rows, only the `kept` tokens of the rows are
    read (a process far behind would otherwise take every word of thousands of rows into
    Python), and the terms go through the scratch index first, alone."""
    copied = (high - low if low < high else 0) + len(changed)
    if not copied and not terms:
        return {}
    cursor.execute(_RECENT_EXISTS_SQL)
    if cursor.fetchone() is None:
        for sql in _RECENT_MAKE_SQL:
            cursor.execute(sql)
    if copied <= FEW_ROWS:
        return _scratch(cursor, low, high, changed, terms, None)
    found = _scratch(cursor, 0, 0, [], terms, None) if terms else {}
    found.update(_scratch(cursor, low, high, changed, [], sorted(kept)))
    return found


def _scratch(cursor, low: int, high: int, changed: list[int], terms: list[str], only) -> dict:
    """Fill the scratch index (those rows, those terms), read its tokens (with `only`: those of
    them alone), empty it again."""
    try:
        rows, params = (["(rowid > %s AND rowid <= %s)"], [low, high]) if low < high else ([], [])
        if changed:
            rows.append(f"rowid IN ({','.join(map(str, changed))})")
        if rows:  # one statement in autocommit: if it fails, it leaves no row behind
            cursor.execute(_RECENT_FILL_SQL.format(rows=" OR ".join(rows)), params)
        if terms:
            cursor.execute(
                _RECENT_TERMS_SQL.format(values=",".join(["(%s, %s)"] * len(terms))),
                [value for index, term in enumerate(terms) for value in (-1 - index, term)],
            )
        found: dict[int, list[str]] = {}
        for where, tokens in _token_filters(only):
            cursor.execute(_RECENT_TOKENS_SQL + where, tokens)
            for doc, token in cursor.fetchall():
                found.setdefault(doc, []).append(token)
    finally:
        cursor.execute(_RECENT_CLEAR_SQL)  # its copies of the texts are not kept
    return found


def _token_filters(only: list[str] | None) -> list[tuple[str, list[str]]]:
    """The WHERE clauses (and their parameters) that read only these tokens, 500 at a time; one
    reading every token when `only` is None, none when it is empty."""
    if only is None:
        return [("", [])]
    parts = [only[start : start + 500] for start in range(0, len(only), 500)]
    return [(f" WHERE term IN ({','.join(['%s'] * len(part))})", part) for part in parts]


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


def _fold(cache: _Cache, held: _List) -> np.ndarray:
    """The list now, kept for the next search: the rows added since folded in, then each row
    whose text changed after the list's `seq` taken out, and back in if its text holds the token."""
    rowids, before = held.rowids, len(held.rowids) + len(held.added)
    if held.added:
        rowids = np.concatenate([rowids, np.asarray(held.added, dtype=np.int32)])
        if held.bits is not None:
            _set_bits(cache, held, held.added)
        held.added = []
    since = bisect.bisect_right(cache.changes, held.seq, key=lambda change: change[0])
    latest = {row: tokens for _, row, tokens in cache.changes[since:]}  # the last change wins
    if latest:
        rows = np.fromiter(latest, dtype=np.int32, count=len(latest))
        rowids = rowids[~np.isin(rowids, rows)]
        holding = [row for row, tokens in latest.items() if held.token in tokens]
        if holding:
            rowids = np.union1d(rowids, np.asarray(holding, dtype=np.int32))
        if held.bits is not None:  # a copy: an earlier search may still be reading the bitset
            bits = held.bits.copy()
            inside = rows[rows < len(bits) * 8]
            np.bitwise_and.at(bits, inside >> 3, ~np.left_shift(1, inside & 7).astype(np.uint8))
            held.bits = bits
            if holding:
                _set_bits(cache, held, holding)
    cache.size += len(rowids) - before
    held.rowids, held.seq = rowids, cache.seq
    return rowids


def _bitsets(cache: _Cache, found: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The bitsets of the found lists that are kept and big (made for those that have none yet,
    while MAX_BIT_BYTES allows)."""
    bits = {}
    for term, rowids in found.items():
        held = cache.lists.get(term)
        if held is None or held.rowids is not rowids:  # read afresh, a phrase: not kept
            continue
        if held.bits is None and len(rowids) * BITS_SHARE >= cache.high:
            size = (cache.high >> 3) + 1 + BITS_SLACK
            if cache.bit_bytes + size <= MAX_BIT_BYTES:
                held.bits = _bitset(rowids, size)
                cache.bit_bytes += size
        if held.bits is not None:
            bits[term] = held.bits
    return bits


def _set_bits(cache: _Cache, held: _List, rows: list[int]) -> None:
    """Set the bits of rows added to a list: in place while they fit (a search still reading the
    bitset looks up only rows up to its own highest, which new rows are above; a changed row's
    bits are set in a copy), else in a bigger copy (or, past MAX_BIT_BYTES, in none)."""
    needed = (max(rows) >> 3) + 1
    if needed > len(held.bits):
        grown = needed + BITS_SLACK - len(held.bits)
        if cache.bit_bytes + grown > MAX_BIT_BYTES:  # the list goes on without one
            cache.bit_bytes -= len(held.bits)
            held.bits = None
            return
        bigger = np.zeros(needed + BITS_SLACK, dtype=np.uint8)
        bigger[: len(held.bits)] = held.bits
        cache.bit_bytes += grown
        held.bits = bigger
    bits = held.bits
    for row in rows:  # a job adds a row or a few to a list: one by one beats an array's set-up
        bits[row >> 3] |= 1 << (row & 7)


def _bitset(rowids: np.ndarray, size: int) -> np.ndarray:
    """The rowids as a bitset of `size` bytes (numpy packs a mask of every rowid 7 times faster
    than it sets 300k bits one by one)."""
    held = np.zeros(size * 8, dtype=bool)
    held[rowids] = True
    return np.packbits(held, bitorder="little")
