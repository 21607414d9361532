"""A full disk answers 507 `storage_full` with a clear message, never a generic 500, and nothing of
the refused request is stored (issue 21, item 10). SQLite's own size limit (`max_page_count`)
makes the database full exactly as a full disk does (SQLITE_FULL), without filling a disk."""

import json

import pytest
from django.db import connection

from memory import backend
from memory.models import Memory, MemoryHistory
from memory.writes import Actor, remember

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.sqlite_only(reason="SQLite's max_page_count stands in for a full disk"),
]

LONG = "The staging cluster keeps its nightly snapshots for thirty days. " * 900  # ~57 KB


def fill_the_database():
    """No free page left and no room to grow: the next write that needs a page fails (earlier
    tests' deletes leave free pages that a write would otherwise reuse)."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS filler (x BLOB)")
        while True:
            cursor.execute("PRAGMA freelist_count")
            if cursor.fetchone()[0] == 0:
                break
            cursor.execute("INSERT INTO filler VALUES (zeroblob(2000))")
        cursor.execute("PRAGMA page_count")
        cursor.execute(f"PRAGMA max_page_count = {cursor.fetchone()[0]}")


def empty_it():
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA max_page_count = 4294967294")
        cursor.execute("DROP TABLE IF EXISTS filler")


@pytest.fixture
def full_database():
    fill_the_database()
    yield
    empty_it()


def test_remember_on_a_full_disk_is_a_507_with_nothing_stored(client, ingest_auth, full_database):
    before = Memory.objects.count(), MemoryHistory.objects.count()
    answer = client.post(
        "/api/memory/remember",
        json.dumps({"content": LONG}),
        content_type="application/json",
        **ingest_auth,
    )
    assert answer.status_code == 507
    body = answer.json()
    assert body["error"] == "storage_full"
    assert "nothing of this request was stored" in body["message"]
    assert (Memory.objects.count(), MemoryHistory.objects.count()) == before


def test_an_mcp_remember_on_a_full_disk_is_storage_full_with_nothing_stored():
    """MCP answers with the JSON API's errors: storage_full, not the generic server_error."""
    from api.auth import create_token
    from api.mcp_server import run_tool

    _, plain = create_token("mcp-agent", scopes=["ingest"])
    before = Memory.objects.count(), MemoryHistory.objects.count()
    fill_the_database()
    try:
        payload, is_error = run_tool("remember", {"content": LONG}, f"Bearer {plain}", "client")
    finally:
        empty_it()
    assert is_error and payload["error"] == "storage_full", payload
    assert "nothing of this request was stored" in payload["message"]
    assert (Memory.objects.count(), MemoryHistory.objects.count()) == before


def test_a_dashboard_edit_on_a_full_disk_says_so_and_changes_nothing(reviewer_client):
    memory = remember("Billing runs on Postgres 16", actor=Actor("agent", "agent")).memory
    fill_the_database()
    try:
        answer = reviewer_client.post(
            f"/memories/{memory.id}/action/",
            {"action": "edit", "content": LONG, "reason": "longer", "if_version": 1},
        )
    finally:
        empty_it()
    assert answer.status_code == 507
    assert "disk is full" in answer.content.decode()
    memory.refresh_from_db()
    assert (memory.content, memory.version) == ("Billing runs on Postgres 16", 1)


def test_storage_full_is_told_apart_from_other_database_errors():
    class SqliteFull(Exception):
        sqlite_errorcode = 13

    class DiskFull(Exception):
        sqlstate = "53100"

    wrapped = RuntimeError("write failed")
    wrapped.__cause__ = SqliteFull("database or disk is full")
    assert backend.storage_full(wrapped)
    assert backend.storage_full(DiskFull("could not extend file"))
    assert backend.storage_full(OSError(28, "No space left on device"))
    assert not backend.storage_full(OSError(13, "Permission denied"))
    assert not backend.storage_full(RuntimeError("UNIQUE constraint failed"))
