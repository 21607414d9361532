"""SQLite's per-process posting lists (issue 24): a list kept from an earlier search and brought up to
date equals the list read afresh after memories are added, their text changes (an edit, a purge's
marker), a row is deleted or the index is merged; the keyword leg ranks the same with the cache as
without it; reads inside a transaction never touch it; and the log of changed texts is trimmed."""

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from memory import backend, keyword
from memory.keyword import sqlite_postings
from memory.keyword.sqlite import merge_index, trim_changes
from memory.models import Memory
from pipeline.writes.jobs import purge_old
from tests.test_keyword_recall import bulk_store

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(backend.is_postgres(), reason="SQLite's FTS5 index only"),
]

TERMS = ["harbor", "lantern", "orchard", "granite"]


@pytest.fixture(autouse=True)
def cached(monkeypatch):
    """The cache on for a store of any size, emptied before and after each test."""
    monkeypatch.setattr(sqlite_postings, "MIN_ROWS", 0)
    sqlite_postings._CACHE.empty(None)
    yield
    sqlite_postings._CACHE.empty(None)


def texts(count: int, offset: int = 0) -> list[str]:
    return [
        f"note {offset + i} about the {TERMS[i % 4]} and the {TERMS[(i * 3 + 1) % 4]} "
        f"in {'spring' if i % 5 else 'winter'}"
        for i in range(count)
    ]


def through_cache() -> dict[str, list[int]]:
    with connection.cursor() as cursor:
        found = sqlite_postings.postings(cursor, TERMS + ["winter"], rows=10**6)
    return {term: rowids.tolist() for term, rowids in found.items()}


def afresh() -> dict[str, list[int]]:
    with connection.cursor() as cursor:
        found = sqlite_postings.read_afresh(cursor, TERMS + ["winter"])
    return {term: rowids.tolist() for term, rowids in found.items()}


def test_a_kept_list_brought_up_to_date_equals_one_read_afresh_after_adds_and_edits():
    bulk_store(texts(60))
    assert through_cache() == afresh()
    assert sqlite_postings._CACHE.lists, "the lists were kept"
    bulk_store(texts(15, offset=60))  # added above the kept lists
    edited = Memory.objects.order_by("created_at", "id")[3]
    Memory.objects.filter(pk=edited.pk).update(content="only granite here in winter")
    gone = Memory.objects.order_by("created_at", "id")[8]
    Memory.objects.filter(pk=gone.pk).update(content="[purged]")  # a purge's marker
    assert through_cache() == afresh()
    # Twice: the changes folded in are not folded again into something else.
    assert through_cache() == afresh()
    assert sqlite_postings._CACHE.lists["winter"].seq > 0, "the change log was read"


def logged() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM memories_fts_changes")
        return cursor.fetchone()[0]


def test_a_save_that_keeps_the_text_is_not_logged_as_a_change():
    (memory,) = bulk_store(texts(1))
    before = logged()
    Memory.objects.filter(pk=memory.pk).update(version=2, content=memory.content)
    assert logged() == before
    Memory.objects.filter(pk=memory.pk).update(content="another text")
    assert logged() == before + 1


def test_a_deleted_row_or_a_merge_of_the_index_empties_the_cache():
    bulk_store(texts(40))
    through_cache()
    with connection.cursor() as cursor:  # the last row: the next insert takes its rowid again
        cursor.execute("DELETE FROM memories WHERE rowid = (SELECT max(rowid) FROM memories)")
    bulk_store(texts(5, offset=40))
    assert through_cache() == afresh()
    through_cache()
    merge_index()
    cache = sqlite_postings._CACHE
    seen = cache.seq
    assert through_cache() == afresh()
    assert cache.seq > seen and all(held.seq == cache.seq for held in cache.lists.values())


def test_the_keyword_leg_ranks_the_same_with_the_cache_as_without(monkeypatch):
    bulk_store(texts(80))
    queries = ["harbor lantern in winter", "orchard granite", "granite spring note"]
    keyword.search_many(queries, agent_id="default", limit=10)  # fills the cache
    bulk_store(texts(20, offset=80))
    Memory.objects.filter(pk=Memory.objects.order_by("created_at", "id")[5].pk).update(
        content="harbor lantern winter harbor lantern winter"
    )
    cached_hits = keyword.search_many(queries, agent_id="default", limit=10)
    monkeypatch.setattr(sqlite_postings, "MIN_ROWS", 10**9)
    fresh_hits = keyword.search_many(queries, agent_id="default", limit=10)
    assert cached_hits == fresh_hits
    assert cached_hits[0][0][1] > 0


def test_reads_inside_a_transaction_leave_the_cache_alone():
    bulk_store(texts(30))
    with transaction.atomic():
        bulk_store(texts(10, offset=30))
        keyword.search_many(["harbor winter"], agent_id="default", limit=5)
        transaction.set_rollback(True)
    assert not sqlite_postings._CACHE.lists
    assert through_cache() == afresh()


def test_the_log_of_changed_texts_keeps_only_its_last_entries(monkeypatch):
    memories = bulk_store(texts(12))
    for index, memory in enumerate(memories):
        Memory.objects.filter(pk=memory.pk).update(content=f"changed {index} harbor")
    monkeypatch.setattr(sqlite_postings, "CHANGES_KEPT", 5)
    assert trim_changes() >= 7
    assert logged() == 5
    assert through_cache() == afresh()


def test_maintenance_trims_the_log_of_changed_texts(monkeypatch):
    for index, memory in enumerate(bulk_store(texts(8))):
        Memory.objects.filter(pk=memory.pk).update(content=f"changed again {index}")
    monkeypatch.setattr(sqlite_postings, "CHANGES_KEPT", 3)
    purge_old(timezone.now() - timedelta(days=30))
    assert logged() == 3


def _temp_pages_holding(word: str) -> int:
    """Pages of the connection's temporary database holding `word`, free ones included."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM sqlite_dbpage('temp') WHERE instr(data, CAST(%s AS BLOB)) > 0",
            [word],
        )
        return cursor.fetchone()[0]


def test_the_scratch_index_keeps_no_copy_of_the_texts_after_a_search():
    """Not in a row, not in the index's segments, not in a freed page of the temporary database:
    an emptied FTS5 table kept the words it had indexed, and freed pages their bytes."""
    bulk_store(texts(30))
    through_cache()
    bulk_store([f"{text} zanzibarquokka" for text in texts(10, offset=30)])
    assert through_cache() == afresh()  # caught up through the scratch index
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM temp.memories_fts_recent WHERE memories_fts_recent MATCH 'harbor'"
        )
        assert cursor.fetchone()[0] == 0
    assert _temp_pages_holding("zanzibarquokka") == 0
    assert _temp_pages_holding("harbor") == 0


def test_a_search_bringing_lists_up_to_date_changes_no_schema():
    """The scratch index is made once per connection: a CREATE or DROP at each search expires
    every prepared statement of the connection, and the job's write parsed all of its again."""
    bulk_store(texts(30))
    through_cache()
    bulk_store(texts(5, offset=30))
    through_cache()  # the scratch index made
    bulk_store(texts(5, offset=35))
    seen = []

    def watch(execute, sql, params, many, context):
        seen.append(sql.lstrip().split()[0].upper())
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watch):
        assert through_cache() == afresh()
    assert "INSERT" in seen and not {"CREATE", "DROP", "ALTER"} & set(seen), seen


def test_the_scratch_index_never_takes_the_stores_writer_turn(file_db, monkeypatch):
    """Its writes are to the connection's temporary database: a search bringing lists up to date
    on a store file neither waits for the store's writers nor holds them up."""
    from memory.backend.base import WriterTurn

    bulk_store(texts(30))
    through_cache()
    bulk_store(texts(10, offset=30))
    taken = []
    acquire = WriterTurn.acquire
    monkeypatch.setattr(
        WriterTurn, "acquire", lambda turn, *a: taken.append(1) or acquire(turn, *a)
    )
    assert through_cache() == afresh()  # caught up through the scratch index
    assert sqlite_postings._CACHE.lists and taken == []
    with connection.cursor() as cursor:  # a write to the store itself still takes it
        cursor.execute("DELETE FROM memories_fts_changes WHERE seq < 0")
    assert taken == [1]
