"""SQLite's side of erasure (memory.backend.erasure): the log's pages are read from its frame
headers, the free pages from the freelist; a purge whose log a reader holds cannot verify and
says so (failed, never done)."""

from __future__ import annotations

from pathlib import Path

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
    data = Path(file_db).read_bytes()
    free = files.free_pages(data)
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA freelist_count")
        assert len(free) == cursor.fetchone()[0] > 0
    assert b"canary" not in data  # secure_delete zeroed them when they were freed


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
