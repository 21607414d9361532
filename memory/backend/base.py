"""SQLite backend on sqlean.py that loads sqlite-vec into every new connection.

The stdlib sqlite3 module of this Python cannot load extensions, so Django's own backend is reused
with three things swapped: the DB-API module, the cursor class (it must subclass the connection's
module's Cursor) and the converters/adapters (registered on that module).
"""

from __future__ import annotations

import datetime
import decimal
import re
from collections.abc import Mapping
from itertools import tee

import sqlean as Database
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.backends.sqlite3 import base as sqlite_base
from django.utils.dateparse import parse_date, parse_datetime, parse_time

FORMAT_QMARK_REGEX = re.compile(r"(?<!%)%s")

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

    def execute(self, query, params=None):
        if params is None:
            return super().execute(query)
        param_names = list(params) if isinstance(params, Mapping) else None
        return super().execute(self.convert_query(query, param_names=param_names), params)

    def executemany(self, query, param_list):
        peekable, param_list = tee(iter(param_list))
        first = next(peekable, None)
        param_names = list(first) if first and isinstance(first, Mapping) else None
        return super().executemany(self.convert_query(query, param_names=param_names), param_list)

    def convert_query(self, query, *, param_names=None):
        if param_names is None:
            return FORMAT_QMARK_REGEX.sub("?", query).replace("%%", "%")
        return query % {name: f":{name}" for name in param_names}


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


class DatabaseWrapper(sqlite_base.DatabaseWrapper):
    Database = Database

    def get_new_connection(self, conn_params):
        conn = Database.connect(**conn_params)
        sqlite_base.register_functions(conn)
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA legacy_alter_table = OFF")
        if not self.is_in_memory_db():
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA busy_timeout = 20000")
        for init_command in self.init_commands:
            if init_command := init_command.strip():
                conn.execute(init_command)
        self.sqlite_vec_loaded = load_sqlite_vec(conn)
        return conn

    def create_cursor(self, name=None):
        return self.connection.cursor(factory=SQLiteCursorWrapper)
