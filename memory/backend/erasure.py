"""The database files' side of erasure, per engine.

SQLite: every connection zeroes what it frees (`PRAGMA secure_delete`); after a purge commits,
the pages written since the last checkpoint are read from the write-ahead log's frame headers,
the log is checkpointed and truncated, and a file whose freed bytes may predate secure_delete
(a store made before it, `PRAGMA user_version` not yet SECURE_MARK) is vacuumed once. The byte
scan then reads the log, those pages and the free pages: with secure_delete on since the last
VACUUM, a deleted or overwritten value can only survive in a page written since (the log names
them) or in a free page. PostgreSQL: the touched tables are vacuumed after the commit, so dead
row versions (and their index entries, HNSW included) go; its files are out of reach of a scan.
"""

from __future__ import annotations

import contextlib
import os
import struct
import time
from dataclasses import dataclass, field

import sqlean
from django.db import connection

from memory.backend import checkpoint as background
from memory.backend import is_postgres
from memory.threads import process_pool

# In `PRAGMA user_version`: every byte freed in this file since its last VACUUM was zeroed.
SECURE_MARK = 0x70757267  # "purg"
_WAL_HEADER = struct.Struct(">IIIIII")  # magic, version, page size, checkpoint seq, salt 1, salt 2
_FRAME_HEADER = struct.Struct(">IIII")  # page number, size after commit, salt 1, salt 2
_WAL_HEADER_BYTES, _FRAME_HEADER_BYTES = 32, 24


OUT_OF_REACH_POSTGRES = [
    "PostgreSQL's write-ahead log, its WAL archives and replicas",
    "freed space inside PostgreSQL's data pages until it is reused (VACUUM frees dead rows, it "
    "does not overwrite them)",
]


def out_of_reach() -> list[str]:
    """Copies this engine keeps where a purge cannot reach (a receipt lists them)."""
    return OUT_OF_REACH_POSTGRES if is_postgres() else []


def secure(conn) -> None:
    """A new SQLite connection zeroes every byte it frees (the build's default is off)."""
    conn.execute("PRAGMA secure_delete = ON")


@dataclass
class Settled:
    """What happened to the files after a purge's commit."""

    engine: str
    path: str | None = None  # SQLite: the database file (None: an in-memory database)
    pages: set[int] = field(default_factory=set)  # SQLite: pages written since the last checkpoint
    truncated: bool = False  # SQLite: the log was checkpointed and cut to nothing
    vacuumed: bool = False  # SQLite: the one-time VACUUM ran; PostgreSQL: the tables were vacuumed
    problems: list[str] = field(default_factory=list)


def database_path() -> str | None:
    """The SQLite file of the store, or None (PostgreSQL, or an in-memory database)."""
    if is_postgres():
        return None
    name = str(connection.settings_dict["NAME"])
    if name == ":memory:" or "mode=memory" in name:
        return None
    return name


@contextlib.contextmanager
def writer_held():
    """SQLite file: this process keeps the writer's turn from here until the block ends, across
    the commits inside it, so no other writer starts the log over before the pages a purge wrote
    are read from it and checkpointed. Elsewhere: nothing."""
    turn = None if database_path() is None else connection._writer_turn()
    if turn is None:
        yield
        return
    turn.acquire(connection.BUSY_TIMEOUT_SECONDS)
    turn.pins += 1
    try:
        yield
    finally:
        turn.pins -= 1
        turn.release()


def settle(tables: list[str]) -> Settled:
    """After the purge's commit (inside `writer_held`): SQLite gets its log read, checkpointed
    and truncated (and, once, when the file is not yet marked secure, its full-text index merged
    and a VACUUM); PostgreSQL vacuums the tables the purge touched. Problems are reported, not
    raised."""
    if is_postgres():
        return _vacuum_postgres(tables)
    path = database_path()
    settled = Settled("sqlite", path)
    if path is None:
        return settled
    settled.pages = wal_pages(path)
    settled.truncated = checkpoint(settled)
    if not is_marked():
        # Entries deleted before FTS5's secure-delete was on stay in the index's segments behind
        # delete markers until a merge: merged first, then the whole file rewritten.
        from memory import keyword  # the store's index above the backend: at call time

        keyword.merge_index()
        with connection.cursor() as cursor:
            cursor.execute("VACUUM")
            cursor.execute(f"PRAGMA user_version = {SECURE_MARK}")
        settled.vacuumed = True
        settled.pages |= set(range(1, page_count() + 1))  # every page was written again
        settled.truncated = checkpoint(settled)
    return settled


CHECKPOINT_TRIES = 20  # a checkpoint another connection is running makes ours wait its turn
CHECKPOINT_WAIT_MS = 100  # each try waits this long for readers (not the 20 s of a write)


def checkpoint(settled: Settled) -> bool:
    """Copy the whole log into the file and cut it to nothing; False (and a problem) when a
    reader kept it from finishing for about CHECKPOINT_TRIES tries. Another checkpoint in
    progress (a background thread's) answers busy at once: ours tries again a little later."""
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout")
        usual = cursor.fetchone()[0]
        cursor.execute(f"PRAGMA busy_timeout = {CHECKPOINT_WAIT_MS}")
        try:
            for _ in range(CHECKPOINT_TRIES):
                with background.quiet():
                    cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    busy, log_frames, copied = cursor.fetchone()
                if not busy and log_frames == copied:
                    return True
                time.sleep(CHECKPOINT_WAIT_MS / 1000)
        finally:
            cursor.execute(f"PRAGMA busy_timeout = {usual}")
    settled.problems.append(
        f"write-ahead log: not checkpointed to the end ({max(copied, 0)} of {max(log_frames, 0)} "
        "frames copied), a reader held it"
    )
    return False


def _vacuum_postgres(tables: list[str]) -> Settled:
    settled = Settled("postgresql")
    if connection.in_atomic_block:
        settled.problems.append(
            "the tables could not be vacuumed: the purge ran inside a transaction"
        )
        return settled
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for table in sorted(set(tables)):
            cursor.execute(f"VACUUM {quote(table)}")
    settled.vacuumed = True
    return settled


def is_marked() -> bool:
    """SQLite: every byte freed in the file since its last VACUUM was zeroed (SECURE_MARK)."""
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA user_version")
        return cursor.fetchone()[0] == SECURE_MARK


def mark_if_new(schema_editor) -> None:
    """Migration step: a store with no memory and no audit yet was made by connections that zero
    what they free (a fresh database): mark it, so a purge never needs the one-time VACUUM."""
    if schema_editor.connection.vendor != "sqlite":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT COUNT(*) FROM memories) + (SELECT COUNT(*) FROM memory_history)"
        )
        if cursor.fetchone()[0] == 0:
            cursor.execute(f"PRAGMA user_version = {SECURE_MARK}")


def page_count() -> int:
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA page_count")
        return cursor.fetchone()[0]


# --- reading every table for copies --------------------------------------------------------------

SCAN_THREADS = max(1, min(2, os.cpu_count() or 1))


def holding_query(
    table: str, pk: str, columns: list[tuple[str, bool]], probes: tuple[str, ...]
) -> tuple[str, list]:
    """SELECT of the primary key and these columns (JSON ones as text) of every row where one of
    them holds one of the probes, exactly (case and all); every row when no probe is given."""
    quote = connection.ops.quote_name
    postgres = is_postgres()
    shown, tests, params = [], [], []
    for column, is_json in columns:
        value = f"{quote(column)}::text" if postgres and is_json else quote(column)
        shown.append(value)
        find = "strpos({}, %s) > 0" if postgres else "instr({}, %s) > 0"
        for probe in probes:
            tests.append(find.format(value))
            params.append(probe)
    where = " OR ".join(tests) if tests else "1 = 1"
    return f"SELECT {quote(pk)}, {', '.join(shown)} FROM {quote(table)} WHERE {where}", params


SPLIT_ROWS = 20_000  # a table with more rows than this is read in SCAN_THREADS parts


def read_all(queries: list[tuple[str, list]]) -> list[list[tuple]]:
    """The rows of each query (a `holding_query`). On a SQLite file, outside a transaction, they
    run side by side in SCAN_THREADS threads, each part on a read-only connection of its own
    (SQLite lets go of Python while it scans), a big table split in rowid ranges so the threads
    finish together; anywhere else one after the other on the store's connection."""
    path = database_path()
    if path is None or connection.in_atomic_block or SCAN_THREADS == 1:
        with connection.cursor() as cursor:
            results = []
            for sql, params in queries:
                cursor.execute(sql, params)
                results.append(cursor.fetchall())
            return results
    pool = process_pool("erasure-scan", SCAN_THREADS)
    parts = [[pool.submit(_read_only, path, part) for part in _parts(path, q)] for q in queries]
    return [[row for future in futures for row in future.result()] for futures in parts]


def _parts(path: str, query: tuple[str, list]) -> list[tuple[str, list]]:
    """The query as SCAN_THREADS queries over rowid ranges when its table is big."""
    sql, params = query
    table = sql.split(" FROM ", 1)[1].split(" WHERE ", 1)[0]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT MAX(rowid) FROM {table}")
        top = cursor.fetchone()[0] or 0
    if top <= SPLIT_ROWS:
        return [query]
    bounds = [top * i // SCAN_THREADS for i in range(SCAN_THREADS + 1)]
    where = sql.split(" WHERE ", 1)
    return [
        (f"{where[0]} WHERE rowid > %s AND rowid <= %s AND ({where[1]})", [low, high, *params])
        for low, high in zip(bounds[:-1], bounds[1:], strict=True)
    ]


def _read_only(path: str, query: tuple[str, list]) -> list[tuple]:
    sql, params = query
    conn = sqlean.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        return conn.execute(sql.replace("%s", "?"), params).fetchall()
    finally:
        conn.close()


# --- the log and the file as bytes ----------------------------------------------------------------


def wal_pages(path: str) -> set[int]:
    """Numbers of the pages in the current generation of the write-ahead log (its frames whose
    salts are the header's): every page written since the last checkpoint started the log over."""
    try:
        with open(f"{path}-wal", "rb") as log:
            data = log.read()
    except FileNotFoundError:
        return set()
    if len(data) < _WAL_HEADER_BYTES:
        return set()
    _, _, page_size, _, salt1, salt2 = _WAL_HEADER.unpack_from(data, 0)
    pages, at = set(), _WAL_HEADER_BYTES
    while at + _FRAME_HEADER_BYTES + page_size <= len(data):
        number, _, frame_salt1, frame_salt2 = _FRAME_HEADER.unpack_from(data, at)
        if (frame_salt1, frame_salt2) != (salt1, salt2):
            break
        pages.add(number)
        at += _FRAME_HEADER_BYTES + page_size
    return pages


def read_page(number: int) -> bytes:
    """One page of the database file as it is now, read through SQLite (`sqlite_dbpage`): a
    file this process opens and closes itself would drop the locks SQLite holds on it (POSIX
    locks belong to the process and the file, not to a descriptor), and another process could
    then take the database for closed and reset its log."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT data FROM sqlite_dbpage WHERE pgno = %s", [number])
        row = cursor.fetchone()
    return bytes(row[0]) if row else b""


def free_pages(read=read_page) -> list[int]:
    """The file's free pages, from its freelist (trunk pages and the leaves they list)."""
    header = read(1)
    page_size = struct.unpack_from(">H", header, 16)[0] or 65536
    trunk, pages, seen = struct.unpack_from(">I", header, 32)[0], [], set()
    while trunk and trunk not in seen:
        seen.add(trunk)
        data = read(trunk)
        if len(data) < 8:
            break
        following, count = struct.unpack_from(">II", data, 0)
        count = min(count, (page_size - 8) // 4)
        pages += [trunk, *struct.unpack_from(f">{count}I", data, 8)]
        trunk = following
    return pages


@dataclass
class FileScan:
    """What a byte scan read, and where it found copies."""

    found: list[tuple[str, int]] = field(default_factory=list)
    pages: int = 0
    log_bytes: int = 0
    skipped: str | None = None


def checked(settled: Settled, scan: FileScan) -> list[str]:
    """What the files' side of a verification did, in words (a receipt's checks)."""
    if settled.engine == "postgresql":
        done = ["tables vacuumed after the commit: dead rows and their index entries removed"]
        return (done if settled.vacuumed else []) + [f"files not read: {scan.skipped}"]
    if scan.skipped:
        return [f"files not read: {scan.skipped}"]
    return [
        f"database file: {scan.pages} pages read (those written since the last checkpoint and "
        f"the free ones); its log: {scan.log_bytes} bytes"
        + ("; vacuumed once (an older store)" if settled.vacuumed else "")
    ]


def scan_files(settled: Settled, count_in) -> FileScan:
    """SQLite: count copies (`count_in(bytes) -> int`) in the whole log (the `-wal` file, which
    SQLite keeps no lock on), in the pages the log named and in the free pages of the database
    file (every page when those are most of it), read through SQLite. Elsewhere nothing is read."""
    scan = FileScan()
    if settled.path is None:
        scan.skipped = (
            "PostgreSQL keeps its files out of reach of a byte scan"
            if settled.engine == "postgresql"
            else "an in-memory database has no file"
        )
        return scan
    try:
        with open(f"{settled.path}-wal", "rb") as log:
            data = log.read()
    except FileNotFoundError:
        data = b""
    scan.log_bytes = len(data)
    if data and (n := count_in(data)):
        scan.found.append((f"{os.path.basename(settled.path)}-wal", n))
    total = page_count()
    numbers = {n for n in settled.pages | set(free_pages()) if 1 <= n <= total}
    if len(numbers) * 2 > total:  # most of the file: read it through
        found, scan.pages = 0, total
        with connection.cursor() as cursor:
            cursor.execute("SELECT data FROM sqlite_dbpage")
            while rows := cursor.fetchmany(1000):
                found += sum(count_in(bytes(data)) for (data,) in rows)
    else:
        found = sum(count_in(read_page(number)) for number in sorted(numbers))
        scan.pages = len(numbers)
    if found:
        scan.found.append((os.path.basename(settled.path), found))
    return scan
