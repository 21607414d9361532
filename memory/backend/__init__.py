"""Django database backends: SQLite through sqlean.py with sqlite-vec loaded on every connection
(this package), PostgreSQL with pgvector (memory.backend.postgres); `describe` names the one in use
and `is_postgres` is the engine check for code outside the backend and the engine packages."""

from __future__ import annotations

from contextlib import contextmanager


def is_postgres(db=None) -> bool:
    """True when `db` (a Django connection; default: the store's) runs on PostgreSQL."""
    if db is None:
        from django.db import connection as db

    return db.vendor == "postgresql"


# SQLite's SQLITE_FULL (result code 13) and PostgreSQL's disk_full (SQLSTATE 53100), and the
# operating system's "no space left on device" / "file too large".
_SQLITE_FULL = 13
_FULL_SQLSTATES = {"53100"}
_FULL_ERRNOS = {28, 27}  # ENOSPC, EFBIG


def storage_full(exc: BaseException) -> bool:
    """True when `exc` (a Django database error, a driver error or an OSError) means the disk or
    the database has no room left: the write was refused whole, nothing of it is stored."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
            return True
        if getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL:
            return True
        if getattr(exc, "sqlstate", None) in _FULL_SQLSTATES:
            return True
        if "database or disk is full" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def list_holds(field: str, item):
    """A filter (Q) for rows whose JSON list in `field` holds `item`, exactly, on both engines."""
    import json

    from django.db import connection
    from django.db.models import BooleanField, Q
    from django.db.models.expressions import RawSQL

    if connection.features.supports_json_field_contains:
        return Q(**{f"{field}__contains": [item]})
    # SQLite has no JSON containment lookup: the item's JSON text inside the stored list narrows
    # the rows cheaply (LIKE ignores the case of A-Z), then json_each holds it exactly (a QA pass:
    # "TAG2" found "tag2" on SQLite and not on PostgreSQL). The column is the model's own table's.
    exact = RawSQL(
        f'EXISTS (SELECT 1 FROM json_each("{field}") WHERE json_each.value = %s)',
        [item],
        output_field=BooleanField(),
    )
    return Q(**{f"{field}__icontains": json.dumps(item)}) & Q(exact)


def describe() -> dict:
    """Engine and server version of the default database, for the health report."""
    from django.db import connection

    with connection.cursor() as cursor:
        if is_postgres(connection):
            cursor.execute("SELECT current_setting('server_version')")
            return {"engine": "postgresql", "version": cursor.fetchone()[0]}
        cursor.execute("SELECT sqlite_version()")
        return {"engine": "sqlite", "version": cursor.fetchone()[0]}


def lock_contents(agent_id: str, content_hashes) -> None:
    """Inside a write transaction: wait for any other transaction writing the same memory text
    (agent, content hash) to finish, so a dedupe check made afterwards sees its row.

    PostgreSQL runs writers side by side: two jobs deriving the same fact would otherwise both
    find no duplicate, and the second would fail on the UNIQUE index (or deadlock, when each
    waits for the other's row). Transaction-level advisory locks, taken in one sorted order,
    serialise just those writers. SQLite needs nothing: its single writer already serialises all.
    """
    from django.db import connection

    keys = sorted({f"{agent_id}:{content_hash}" for content_hash in content_hashes})
    if not is_postgres(connection) or not keys:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_advisory_xact_lock(hashtextextended(k, 0))) "
            "FROM (SELECT unnest(%s::text[]) AS k ORDER BY 1) ordered",
            [keys],
        )


def commit_unflushed() -> None:
    """Inside a write transaction: its COMMIT returns without waiting for the log to reach the
    disk (PostgreSQL's synchronous_commit off, for this transaction alone). Only for rows that
    something else puts back if a crash of the server loses them; SQLite's commits (WAL,
    synchronous=NORMAL) never wait for the disk anyway."""
    from django.db import connection

    if is_postgres(connection):
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit = off")


@contextmanager
def pipelined():
    """A block of statements PostgreSQL gets without the client waiting for each answer
    (psycopg's pipeline mode); the block ends once the server has answered them all.

    Reads may be sent in the block and fetched after it (memory.models.RowRead). Nothing in the
    block may depend on `rowcount` (unknown until the end) or catch a statement's error: the
    first error is raised by a later fetch or at the end of the block, as Django's database
    error, and the enclosing transaction must roll back. SQLite, in the same process as its file,
    runs the block as it is; so does a client library without pipeline mode.
    """
    from django.db import connection
    from psycopg import Pipeline

    if not is_postgres(connection) or not Pipeline.is_supported():
        yield
        return
    connection.ensure_connection()
    with connection.wrap_database_errors, connection.connection.pipeline():
        yield
