"""The job write's batched statements (memory.writes.insert_rows and friends, run in a
`pipelined` block): values reach the database exactly as written on both engines, an error inside
the block fails the whole write, and rows a statement returns inside the block can be read."""

import numpy as np
import pytest
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from memory import writes
from memory.backend import pipelined
from memory.models import ActorType, Embedding, MemoryHistory
from memory.writes import Actor, Vector
from tests.conftest import TEST_ENGINE

pytestmark = pytest.mark.django_db

AGENT = Actor("claude-code", "agent")
TRICKY = 'it\'s 100% done; \\n is not a newline, %s is not a parameter, "quoted" -- DROP TABLE x;'


def audit_row(memory_id: str, reason: str, metadata: dict, **fields) -> MemoryHistory:
    return MemoryHistory(
        memory_id=memory_id,
        event="none",
        changed_by="pipeline",
        actor_type=ActorType.PIPELINE,
        reason=reason,
        metadata=metadata,
        created_at=timezone.now(),
        **fields,
    )


def test_batched_inserts_keep_quotes_percent_signs_backslashes_and_json_as_written():
    memory = writes.remember(
        "The billing cron runs at 02:00.", actor=AGENT, create_job=False
    ).memory
    metadata = {"fact": TRICKY, "nested": {"list": [1, 2.5, None, True]}, "emoji": "🚀"}
    row = audit_row(memory.id, TRICKY, metadata)
    with transaction.atomic(), pipelined():
        writes.insert_rows(MemoryHistory, [row])

    stored = MemoryHistory.objects.get(id=row.id)
    assert stored.reason == TRICKY and stored.metadata == metadata


@pytest.mark.skipif(TEST_ENGINE != "postgres", reason="SQLite text holds NUL; PostgreSQL's cannot")
def test_a_nul_byte_in_a_batched_insert_is_stored_as_a_replacement_character():
    memory = writes.remember("The cache TTL is 60 seconds.", actor=AGENT, create_job=False).memory
    row = audit_row(memory.id, "model said\x00this", {})
    with transaction.atomic(), pipelined():
        writes.insert_rows(MemoryHistory, [row])

    assert MemoryHistory.objects.get(id=row.id).reason == "model said\ufffdthis"


def test_a_failing_statement_in_a_pipelined_write_raises_a_database_error_and_keeps_nothing():
    memory = writes.remember("Deploys freeze on Fridays.", actor=AGENT, create_job=False).memory
    first = audit_row(memory.id, "written first", {})
    clash = audit_row(memory.id, "same primary key", {}, id=first.id)
    after = audit_row(memory.id, "written after the failure", {})

    with pytest.raises(IntegrityError), transaction.atomic(), pipelined():
        writes.insert_rows(MemoryHistory, [first])
        writes.insert_rows(MemoryHistory, [clash])
        writes.insert_rows(MemoryHistory, [after])

    assert not MemoryHistory.objects.filter(id__in=[first.id, after.id]).exists()
    # The connection is usable again: the next write goes through.
    with transaction.atomic(), pipelined():
        writes.insert_rows(MemoryHistory, [audit_row(memory.id, "next write", {})])
    assert MemoryHistory.objects.filter(reason="next write").count() == 1


def test_rows_a_statement_returns_inside_a_pipelined_block_are_read_and_used():
    """upsert_embeddings reads back the ids of its rows (RETURNING) to index the vectors (after
    the commit; within a test's own transaction, right away): inside a pipelined block the read
    waits for them instead of finding none."""
    memory = writes.remember("Kenji deploys billing.", actor=AGENT, create_job=False).memory
    values = np.random.default_rng(7).standard_normal(settings.MEMORY_EMBEDDING_DIMENSIONS)
    vector = Vector((values / np.linalg.norm(values)).astype(np.float32), "nomic-embed-text")

    with transaction.atomic(), pipelined():
        writes.upsert_embeddings([(memory, vector)], at=timezone.now())

    stored = Embedding.objects.get(content_hash=memory.content_hash)
    assert stored.source_memory_id == memory.id
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT embedding IS NOT NULL FROM embeddings WHERE id = %s", [stored.id]
            )
            assert cursor.fetchone()[0], "the vector was not indexed after the commit"


@pytest.mark.skipif(TEST_ENGINE != "postgres", reason="server-side binding: PostgreSQL only")
def test_on_postgresql_batched_inserts_send_their_values_apart_from_the_sql():
    """Quoting every value into the SQL in Python, for the server to parse back, took half the
    time of a ten-row insert of proposals: the batched statements let the server bind them."""
    import psycopg

    memory = writes.remember("Lena reviews migrations.", actor=AGENT, create_job=False).memory
    cursors = []

    def watch(execute, sql, params, many, context):
        if sql.startswith("INSERT"):
            cursors.append(type(context["cursor"].cursor))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watch), transaction.atomic(), pipelined():
        writes.insert_rows(MemoryHistory, [audit_row(memory.id, "bound by the server", {})])

    assert cursors and not any(issubclass(c, psycopg.ClientCursor) for c in cursors), cursors


@pytest.mark.skipif(TEST_ENGINE != "postgres", reason="prepared statements: PostgreSQL only")
def test_on_postgresql_each_batched_insert_is_parsed_once_per_connection_not_once_per_row():
    memory = writes.remember("Omar owns the runbook.", actor=AGENT, create_job=False).memory
    for batch in range(3):
        with transaction.atomic(), pipelined():
            rows = [audit_row(memory.id, f"batch {batch} row {i}", {}) for i in range(4)]
            writes.insert_rows(MemoryHistory, rows)

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE strpos(statement, %s) = 1",
            ['INSERT INTO "memory_history"'],
        )
        assert cursor.fetchone()[0] == 1
    assert MemoryHistory.objects.filter(reason__startswith="batch ").count() == 12


def test_database_url_can_turn_prepared_statements_off_for_older_connection_poolers():
    from config.settings import postgres_database

    assert postgres_database("postgres://u@db/memory")["OPTIONS"] == {}
    off = postgres_database("postgres://u@db/memory?prepare_threshold=none")
    assert off["OPTIONS"]["prepare_threshold"] is None
    assert postgres_database("postgres://u@db/m?prepare_threshold=5")["OPTIONS"] == {
        "prepare_threshold": 5
    }
    with pytest.raises(ValueError, match="prepare_threshold"):
        postgres_database("postgres://u@db/memory?prepare_threshold=sometimes")


def test_a_row_read_gives_the_same_instance_as_the_orm():
    """RowRead applies the ORM's own conversions (SQLite's dates and booleans, JSON)."""
    from memory.models import Job, Memory, RowRead
    from pipeline.config import get_config
    from pipeline.models import PipelineConfig

    result = writes.remember(
        "Mara rotates the pager on Mondays.", actor=AGENT, tags=["on-call", "ops"], pinned=True
    )
    get_config()
    for model, pk in ((Memory, result.memory.id), (Job, result.job.id), (PipelineConfig, 1)):
        raw = RowRead(model, "id = %s", [pk]).get()
        orm = model.objects.get(pk=pk)
        for field in model._meta.concrete_fields:
            assert getattr(raw, field.attname) == getattr(orm, field.attname), field.name
    assert RowRead(Memory, "id = %s", ["no-such-memory"]).get() is None


def test_a_write_that_found_its_lease_gone_leaves_the_connection_ready_for_the_next(fake_ollama):
    """The gates' reads are all read before the write decides anything: a write that returns
    early leaves no statement half-read behind it (on SQLite that would pin an old snapshot)."""
    from memory.models import Job
    from pipeline import tasks
    from pipeline.writes import jobs, record
    from tests.pipeline_support import raw

    result = raw("Ivo documents the public API in the handbook.")
    outcome = tasks.compute(jobs.claim_job(result.job.id), [])
    Job.objects.filter(id=result.job.id).update(leased_at=timezone.now())  # another lease

    assert record.record_job(outcome) is None
    later = writes.remember("Written after the early return.", actor=AGENT).memory
    assert MemoryHistory.objects.filter(memory_id=later.id, event="created").count() == 1


@pytest.mark.skipif(TEST_ENGINE != "postgres", reason="SQLite JSON holds NUL; jsonb cannot")
def test_a_nul_in_json_is_stored_as_a_replacement_character_on_every_path():
    """A fact with a stray NUL ends up in the job's JSON (its result, the audits' metadata):
    jsonb refuses U+0000, which failed the whole write. An escaped backslash before "u0000"
    is text, not a NUL, and stays as written."""
    memory = writes.remember("Yuki tests the mobile app.", actor=AGENT, create_job=False).memory
    metadata = {"fact": "model said\x00this", "literal": "\\u0000 stays", "list": ["a\x00"]}
    batched = audit_row(memory.id, "batched", metadata)
    with transaction.atomic(), pipelined():
        writes.insert_rows(MemoryHistory, [batched])
    orm = audit_row(memory.id, "orm", metadata)
    orm.save(force_insert=True)  # the ORM's own path (client-side binding)

    expected = {"fact": "model said\ufffdthis", "literal": "\\u0000 stays", "list": ["a\ufffd"]}
    for row in (batched, orm):
        assert MemoryHistory.objects.get(id=row.id).metadata == expected
