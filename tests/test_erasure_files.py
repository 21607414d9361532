"""SQLite's side of erasure (memory.backend.erasure): the log's pages are read from its frame
headers, the free pages from the freelist; a purge whose log a reader holds cannot verify and
says so (failed, never done)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import sqlean
from django.db import connection

from memory import writes
from memory.backend import erasure as files
from memory.writes import Actor
from pipeline import purge

pytestmark = pytest.mark.sqlite_only(reason="SQLite's write-ahead log and file format")
WRITER = Actor("agent-one", "agent")


def test_the_log_names_the_pages_written_since_the_checkpoint(file_db):
    files.checkpoint(files.Settled("sqlite", str(file_db)))
    assert files.wal_pages(str(file_db)) == set()
    writes.remember("A note written after the checkpoint.", actor=WRITER, create_job=False)
    pages = files.wal_pages(str(file_db))
    assert pages and all(1 <= page <= files.page_count() for page in pages)


def test_free_pages_are_read_from_the_freelist_and_hold_zeros(file_db):
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE scratch (t TEXT)")
        cursor.executemany("INSERT INTO scratch VALUES (%s)", [("canary " * 500,)] * 40)
        cursor.execute("DROP TABLE scratch")
    files.checkpoint(files.Settled("sqlite", str(file_db)))
    free = files.free_pages()
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA freelist_count")
        assert len(free) == cursor.fetchone()[0] > 0
    # secure_delete zeroed them when they were freed (the first is the trunk listing the rest)
    assert not any(b"canary" in files.read_page(page) for page in free)
    assert all(set(files.read_page(page)) == {0} for page in free[1:])


def test_a_purge_whose_log_a_reader_holds_is_reported_failed(file_db, client, admin_client_role):
    memory = writes.remember("The staging DB password is hunter2-prod.", actor=WRITER).memory
    reader = sqlean.connect(str(file_db))
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM memories").fetchone()  # a snapshot held open
    try:
        receipt = purge.purge(
            purge.Request(purge.Scope.MEMORY, memory_id=memory.id), reason="leak", actor=WRITER
        )
    finally:
        reader.close()
    assert not receipt.verified and receipt.status == "failed"
    assert any(item["where"].startswith("write-ahead log") for item in receipt.found)
    page = admin_client_role.get(f"/purge/receipts/{receipt.tombstone}/")
    assert "Failed." in page.content.decode()


def test_a_purge_keeps_sqlites_locks_so_other_processes_and_later_writes_stay_safe(file_db):
    """The byte scan reads the database through SQLite: a file this process opened and closed
    itself would drop SQLite's locks on it, and another process closing its last connection
    would then reset the log under this one (writes lost, 'disk I/O error')."""
    memory = writes.remember("The staging DB password is hunter2-prod.", actor=WRITER).memory
    purge.purge(purge.Request(purge.Scope.MEMORY, memory_id=memory.id), reason="leak", actor=WRITER)
    script = (
        "import sqlean, sys; c = sqlean.connect(sys.argv[1]); "
        "c.execute('SELECT COUNT(*) FROM memories').fetchone(); c.close()"
    )
    subprocess.run([sys.executable, "-c", script, str(file_db)], check=True, timeout=60)
    later = writes.remember("A note written after the purge.", actor=WRITER).memory
    fresh = sqlean.connect(str(file_db))
    try:
        assert fresh.execute("SELECT content FROM memories WHERE id = ?", [later.id]).fetchone()
    finally:
        fresh.close()
