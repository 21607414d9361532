"""PostgreSQL backend: Django's own, plus a check on every new connection that the server offers
the pgvector extension (`vector`), and session settings for filtered HNSW searches.

Without the extension the store cannot keep vectors, so the process fails at its first query
with a message naming the extension instead of failing later inside a migration or a search.
"""

from __future__ import annotations

import re

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.postgresql import base as postgres_base
from django.db.backends.postgresql import schema as postgres_schema
from psycopg.types.json import Jsonb, JsonbBinaryDumper, JsonbDumper
from psycopg.types.string import StrDumperUnknown

EXTENSION = "vector"

# Filtered KNN (one embedding model among several) must still return k rows: pgvector 0.8 keeps
# scanning the HNSW graph until LIMIT rows pass the filter. relaxed_order may return rows slightly
# out of order; the vector module re-sorts them. Setting these before the extension's library is
# loaded in a session is allowed: PostgreSQL keeps them as placeholders until it loads.
SESSION_SETTINGS = {"hnsw.iterative_scan": "relaxed_order", "hnsw.ef_search": "100"}


def prepare_session(cursor, name: str = EXTENSION) -> str | None:
    """Apply SESSION_SETTINGS; return why the server cannot give this database the extension, or
    None when it can (one round trip when the extension is installed, the usual case)."""
    settings_sql = ", ".join("set_config(%s, %s, false)" for _ in SESSION_SETTINGS)
    cursor.execute(
        f"SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = %s), {settings_sql}",
        [name, *(part for item in SESSION_SETTINGS.items() for part in item)],
    )
    if cursor.fetchone()[0]:
        return None
    return extension_problem(cursor, name)


def extension_problem(cursor, name: str = EXTENSION) -> str | None:
    """Why the server cannot give this database the extension, or None when it can."""
    cursor.execute("SELECT installed_version FROM pg_available_extensions WHERE name = %s", [name])
    if cursor.fetchone() is None:
        cursor.execute("SELECT current_setting('server_version')")
        version = cursor.fetchone()[0]
        return (
            f"PostgreSQL {version} does not offer the '{name}' extension (pgvector), which the "
            "memory store needs for its vector index. Install pgvector 0.8 or later on the "
            "database server (then `CREATE EXTENSION vector;`), or unset DATABASE_URL to use "
            "the embedded SQLite store."
        )
    return None


# psycopg prepares a server-bound statement on the server after this many runs (0: at once).
# Only the batched statements of bulk_cursor are server-bound; an executemany runs once per row
# of a write: prepared, the server skips parsing and planning every row, which was a third of
# the job write's time. Behind PgBouncer in transaction mode, prepared statements need 1.22 or
# later with `max_prepared_statements` above 0 (its default from 1.24); otherwise turn them off
# with DATABASE_URL's `?prepare_threshold=none` (Django's default, which this one replaces).
BULK_PREPARE_THRESHOLD = 0


# A JSON "\u0000" escape: its backslash not itself escaped (preceded by an even run of them).
_JSON_NUL = re.compile(rb"(?<!\\)((?:\\\\)*)\\u0000")


def _json_without_nul(data) -> bytes:
    """jsonb cannot hold U+0000 either: the escape becomes U+FFFD, as NUL does in text."""
    data = bytes(data)
    return _JSON_NUL.sub(rb"\1\\ufffd", data) if b"\\u0000" in data else data


class NulSafeJsonbDumper(JsonbDumper):
    def dump(self, obj):
        return _json_without_nul(super().dump(obj))


class NulSafeJsonbBinaryDumper(JsonbBinaryDumper):
    def dump(self, obj):
        return _json_without_nul(super().dump(obj))


class NulSafeStrDumper(StrDumperUnknown):
    """PostgreSQL text cannot hold NUL (0x00), which SQLite stores: U+FFFD takes its place, so
    a model reply or a memory with a stray NUL is kept instead of failing the whole write."""

    def dump(self, obj: str):
        # One Python call per value (the job's write dumps ~500 strings): no super().dump().
        if "\x00" in obj:
            obj = obj.replace("\x00", "\ufffd")
        return obj.encode(self._encoding)


class DatabaseSchemaEditor(postgres_schema.DatabaseSchemaEditor):
    def _create_like_index_sql(self, model, field):
        """No second index with a pattern operator class for every indexed text column: Django
        adds one so LIKE 'abc%' can use an index under a non-C collation, but the store only
        compares its ids, hashes and names with `=` (which the plain index serves), and each
        twin was one more index entry to write for every row of a job's write."""
        return None


class DatabaseWrapper(postgres_base.DatabaseWrapper):
    SchemaEditorClass = DatabaseSchemaEditor

    def get_connection_params(self):
        params = super().get_connection_params()
        if "prepare_threshold" not in self.settings_dict["OPTIONS"]:
            params["prepare_threshold"] = BULK_PREPARE_THRESHOLD
        return params

    def bulk_cursor(self):
        """A cursor whose parameters the server binds (sent apart from the SQL) instead of
        psycopg quoting them into it, for the job write's batched statements: a ten-row insert
        of proposals took twice as long with its JSON and text quoted in Python and parsed back
        by the server. The server also keeps each statement prepared (BULK_PREPARE_THRESHOLD).
        Django's own cursors keep client-side binding (its default, which every ORM query is
        written for, and which never prepares)."""
        # As Django's own `cursor()`, with the server-binding cursor class instead.
        self.close_if_health_check_failed()
        self.ensure_connection()
        with self.wrap_database_errors:
            return self._prepare_cursor(postgres_base.ServerBindingCursor(self.connection))

    def get_new_connection(self, conn_params):
        connection = super().get_new_connection(conn_params)
        connection.adapters.register_dumper(str, NulSafeStrDumper)
        connection.adapters.register_dumper(Jsonb, NulSafeJsonbDumper)
        connection.adapters.register_dumper(Jsonb, NulSafeJsonbBinaryDumper)
        return connection

    def init_connection_state(self):
        super().init_connection_state()
        with self.connection.cursor() as cursor:
            problem = prepare_session(cursor, EXTENSION)
        if not self.get_autocommit():
            self.connection.commit()
        if problem is not None:
            self.connection.close()
            self.connection = None
            raise ImproperlyConfigured(problem)
