"""SQLite backend on sqlean.py that loads sqlite-vec into every new connection.

The stdlib sqlite3 module of this Python cannot load extensions, so Django's own backend is reused
with three things swapped: the DB-API module, the cursor class (it must subclass the connection's
module's Cursor) and the converters/adapters (registered on that module).
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import fcntl
import functools
import os
import re
import time
from collections.abc import Mapping
from itertools import tee

import sqlean as Database
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.backends.sqlite3 import base as sqlite_base
from django.utils.dateparse import parse_date, parse_datetime, parse_time

from memory.backend import checkpoint, erasure
from memory.backend.collector import COLLECTOR_PAUSE

FORMAT_QMARK_REGEX = re.compile(r"(?<!%)%s")
AUTOCOMMIT_WRITE = re.compile(r"\s*(INSERT|UPDATE|DELETE|REPLACE)\b", re.IGNORECASE)
# A write to the connection's own temporary database (the keyword leg's scratch index) locks
# nothing in the store's file: it never waits for, or holds up, the store's writers.
TEMP_WRITE = re.compile(
    r"\s*(INSERT(\s+OR\s+\w+)?\s+INTO|REPLACE\s+INTO|DELETE\s+FROM|UPDATE(\s+OR\s+\w+)?)\s+temp\.",
    re.IGNORECASE,
)

Database.register_converter("bool", b"1".__eq__)
Database.register_converter("date", lambda s: parse_date(s.decode()))
Database.register_converter("time", lambda s: parse_time(s.decode()))
Database.register_converter("datetime", lambda s: parse_datetime(s.decode()))
Database.register_converter("timestamp", lambda s: parse_datetime(s.decode()))
Database.register_adapter(decimal.Decimal, str)
Database.register_adapter(datetime.date, lambda v: v.isoformat())
Database.register_adapter(datetime.datetime, lambda v: v.isoformat(" "))


class SQLiteCursorWrapper(Database.Cursor):
    """Django's "format"/"pyformat" parameter styles on top of sqlean's qmark/named styles."""

    # Set by DatabaseWrapper.create_cursor: a write outside any transaction (an autocommit
    # INSERT, such as django-q2's hand-off) takes the writer's turn for its one statement.
    turn = None

    def execute(self, query, params=None):
        with self._turn_for(query):
            if params is None:
                return super().execute(query)
            param_names = list(params) if isinstance(params, Mapping) else None
            return super().execute(self.convert_query(query, param_names=param_names), params)

    def executemany(self, query, param_list):
        peekable, param_list = tee(iter(param_list))
        first = next(peekable, None)
        param_names = list(first) if first and isinstance(first, Mapping) else None
        with self._turn_for(query):
            return super().executemany(
                self.convert_query(query, param_names=param_names), param_list
            )

    def _turn_for(self, query: str):
        if self.turn is None or not AUTOCOMMIT_WRITE.match(query) or TEMP_WRITE.match(query):
            return contextlib.nullcontext()
        return self.turn()

    def convert_query(self, query, *, param_names=None):
        if param_names is None:
            return _qmark(query)
        return query % {name: f":{name}" for name in param_names}


def _qmark(query: str) -> str:
    """The query with SQLite's placeholders for Django's %s (and % for %%)."""
    # Most statements come again and again: a keyword leg's read of 900 rowids took 118 us of
    # regex each time, a lookup of the kept text 0.2 us. Texts longer than a kept one may be
    # (bulk statements, mostly one-offs) are converted each time: 512 kept, 64 kB each at most.
    if len(query) > _KEPT_QUERY_CHARS:
        return _converted(query)
    return _kept(query)


_KEPT_QUERY_CHARS = 65_536


def _converted(query: str) -> str:
    return FORMAT_QMARK_REGEX.sub("?", query).replace("%%", "%")


_kept = functools.lru_cache(maxsize=512)(_converted)


def vector_backend() -> str:
    return getattr(settings, "MEMORY_VECTOR_BACKEND", "sqlite-vec")


def load_sqlite_vec(conn) -> bool:
    """Load sqlite-vec; fail loudly unless the numpy vector backend was chosen explicitly."""
    try:
        import sqlite_vec

        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
        return True
    except Exception as exc:
        if vector_backend() == "numpy":
            return False
        raise ImproperlyConfigured(
            f"sqlite-vec could not be loaded into SQLite ({type(exc).__name__}: {exc}). "
            "Install the pinned 'sqlite-vec' and 'sqlean.py' packages, or set "
            "MEMORY_VECTOR_BACKEND=numpy to run without the extension."
        ) from exc


class WriterTurn:
    """Whose turn it is to write a database file: an exclusive flock on `<database>-writer.lock`,
    taken before BEGIN IMMEDIATE and given back at COMMIT or ROLLBACK.

    SQLite's own wait for its write lock sleeps on a fixed schedule (1, 2, 5, 10, 15, 20 ms...),
    so a remember call that found a job's 8 ms write in progress came back after 8, 18 or 33 ms;
    behind a busy queue worker, its p99 was 60-110 ms. The flock is polled every millisecond
    instead, so the next writer starts within about a millisecond of the last one's commit. After
    the busy timeout the transaction begins anyway and SQLite's own timeout decides."""

    POLL_SECONDS = 0.001

    def __init__(self, path: str):
        self.path = path
        self.pid = os.getpid()
        self.fd: int | None = None
        self.held = False
        # Kept past the commits of the transactions inside (memory.backend.erasure.writer_held).
        self.pins = 0

    def acquire(self, timeout: float) -> None:
        if self.held:
            return
        if self.fd is None:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.held = True
                COLLECTOR_PAUSE.enter()
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return
                time.sleep(self.POLL_SECONDS)

    def release(self) -> None:
        if not self.held or self.pins:
            return
        self.held = False
        if self.pid != os.getpid():
            return  # a forked child's copy: the flock (shared with the parent) is the parent's
        try:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            COLLECTOR_PAUSE.leave()

    def close(self) -> None:
        self.release()
        if self.fd is not None:
            os.close(self.fd)  # a child's close of its copy leaves the parent's flock in place
            self.fd = None


class DatabaseWrapper(sqlite_base.DatabaseWrapper):
    Database = Database
    BUSY_TIMEOUT_SECONDS = 20.0
    writer_turn: WriterTurn | None = None

    def bulk_cursor(self):
        """The cursor for batched statements (see the PostgreSQL backend's): SQLite binds every
        parameter itself, so it is the usual one."""
        return self.cursor()

    # Every atomic() on a database file takes the writer's turn before its BEGIN IMMEDIATE and
    # gives it back when the transaction ends (see WriterTurn).
    def _start_transaction_under_autocommit(self):
        turn = self._writer_turn()
        if turn is not None:
            turn.acquire(self.BUSY_TIMEOUT_SECONDS)
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            if turn is not None:
                turn.release()
            raise

    def _commit(self):
        try:
            return super()._commit()
        finally:
            self._end_turn()

    def _rollback(self):
        try:
            return super()._rollback()
        finally:
            self._end_turn()

    def _close(self):
        try:
            return super()._close()
        finally:
            if self.writer_turn is not None:
                self.writer_turn.close()
                self.writer_turn = None

    def _writer_turn(self) -> WriterTurn | None:
        if self.is_in_memory_db():
            return None
        path = f"{self.settings_dict['NAME']}-writer.lock"
        turn = self.writer_turn
        # A forked process opens a file of its own: a flock belongs to the open file, which a
        # child shares with its parent, so an inherited one would not keep the two apart.
        if turn is None or turn.path != path or turn.pid != os.getpid():
            if turn is not None and turn.pid == os.getpid():
                turn.close()
            self.writer_turn = turn = WriterTurn(path)
        return turn

    def _end_turn(self) -> None:
        if self.writer_turn is not None:
            self.writer_turn.release()

    def get_new_connection(self, conn_params):
        conn = Database.connect(**conn_params)
        sqlite_base.register_functions(conn)
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA legacy_alter_table = OFF")
        erasure.secure(conn)  # freed bytes are zeroed: a purged text leaves no copy behind
        if not self.is_in_memory_db():
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            # Checkpoints run in a background thread, not inside somebody's COMMIT.
            conn.execute(f"PRAGMA wal_autocheckpoint = {checkpoint.FALLBACK_PAGES}")
            # A log a bulk load grew is cut back when the next writer starts it over. Not to
            # CHECKPOINT_BYTES: cutting a few MiB off the file took 20-30 ms inside that writer's
            # transaction, every few checkpoints.
            conn.execute(f"PRAGMA journal_size_limit = {checkpoint.BUSY_CHECKPOINT_BYTES}")
            checkpoint.ensure_checkpointer(conn_params["database"])
        conn.execute(f"PRAGMA busy_timeout = {int(self.BUSY_TIMEOUT_SECONDS * 1000)}")
        for init_command in self.init_commands:
            if init_command := init_command.strip():
                conn.execute(init_command)
        self.sqlite_vec_loaded = load_sqlite_vec(conn)
        return conn

    def create_cursor(self, name=None):
        cursor = self.connection.cursor(factory=SQLiteCursorWrapper)
        if not self.is_in_memory_db():
            cursor.turn = self._autocommit_turn
        return cursor

    @contextlib.contextmanager
    def _autocommit_turn(self):
        """The writer's turn around one write statement run outside a transaction; inside one,
        the transaction already holds it."""
        turn = None if self.in_atomic_block else self._writer_turn()
        if turn is None or turn.held:
            yield
            return
        turn.acquire(self.BUSY_TIMEOUT_SECONDS)
        try:
            yield
        finally:
            turn.release()
