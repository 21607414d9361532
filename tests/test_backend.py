"""The sqlean backend: sqlite-vec on every connection, WAL, IMMEDIATE transactions, foreign keys."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, connection, transaction

from memory.backend import base

pytestmark = pytest.mark.sqlite_only(
    reason="the sqlean/sqlite-vec backend itself (PRAGMAs, WAL, IMMEDIATE); the PostgreSQL "
    "backend is tested in tests/test_postgres.py"
)


@pytest.mark.django_db
def test_it_loads_sqlite_vec_into_the_connection():
    with connection.cursor() as cursor:
        cursor.execute("SELECT vec_version(), sqlite_version()")
        vec_version, sqlite_version = cursor.fetchone()
    assert vec_version.startswith("v0.")
    assert tuple(int(x) for x in sqlite_version.split(".")[:2]) >= (3, 41)


@pytest.mark.django_db(transaction=True)
def test_it_enforces_foreign_keys_and_uses_immediate_transactions():
    # Django declares SQLite foreign keys DEFERRABLE: the check fires at COMMIT.
    assert connection.transaction_mode == "IMMEDIATE"
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA foreign_keys")
        assert cursor.fetchone()[0] == 1
    from memory.models import MemoryHistory

    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO memory_history (id, memory_id, event, changed_by, actor_type, metadata, created_at) "
            "VALUES ('h1', 'no-such-memory', 'created', 'x', 'agent', '{}', '2026-01-01')"
        )
    assert MemoryHistory.objects.count() == 0


def test_it_fails_with_a_clear_message_when_sqlite_vec_cannot_load(settings, monkeypatch):
    import sqlite_vec

    def broken(conn):
        raise OSError("libvec0.so: cannot open shared object file")

    monkeypatch.setattr(sqlite_vec, "load", broken)
    import sqlean

    conn = sqlean.connect(":memory:")
    settings.MEMORY_VECTOR_BACKEND = "sqlite-vec"
    with pytest.raises(
        ImproperlyConfigured, match="sqlite-vec could not be loaded.*cannot open shared object"
    ):
        base.load_sqlite_vec(conn)
    settings.MEMORY_VECTOR_BACKEND = "numpy"
    assert base.load_sqlite_vec(conn) is False


@pytest.mark.django_db
def test_it_uses_wal_and_a_busy_timeout_for_file_databases(tmp_path):
    from django.db import connections

    settings_dict = {**connections["default"].settings_dict, "NAME": str(tmp_path / "x.sqlite3")}
    wrapper = base.DatabaseWrapper(settings_dict, alias="walcheck")
    wrapper.ensure_connection()
    try:
        with wrapper.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode")
            assert cursor.fetchone()[0] == "wal"
            cursor.execute("PRAGMA busy_timeout")
            assert cursor.fetchone()[0] >= 5000
    finally:
        wrapper.close()


def test_format_placeholders_become_sqlite_ones_the_same_way_each_time():
    cursor = base.SQLiteCursorWrapper.__new__(base.SQLiteCursorWrapper)  # no connection needed
    query = "SELECT %s, '100%%', '%%s' WHERE a LIKE %s"
    first = cursor.convert_query(query)
    assert first == "SELECT ?, '100%', '%s' WHERE a LIKE ?"
    assert cursor.convert_query(query) is first  # kept: the same text, not converted again
    long = "SELECT %s" + " " * base._KEPT_QUERY_CHARS
    assert cursor.convert_query(long) == "SELECT ?" + " " * base._KEPT_QUERY_CHARS
    assert cursor.convert_query(long) is not cursor.convert_query(long)  # too long to keep
    assert cursor.convert_query("SELECT %(a)s", param_names=["a"]) == "SELECT :a"
