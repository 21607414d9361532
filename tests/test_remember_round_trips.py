"""Remember's round trips (issue 24, item 3): on PostgreSQL its reads (the wait for a writer of the
same text, the duplicate, the entities it names) reach the server together and its writes
together (pipeline mode), as in the job's write; the job's hand-off to the queue is a commit that
does not wait for the disk a second time. The rows are those remember always wrote."""

import pytest
from django.db import connection
from django_q.models import OrmQ

from memory import queue, writes
from memory.models import Entity, Job, Memory, MemoryEntityMention, MemoryHistory
from memory.writes import Actor
from tests.conftest import TEST_ENGINE

AGENT = Actor("claude-code", "agent")
on_postgres = pytest.mark.skipif(TEST_ENGINE != "postgres", reason="PostgreSQL's pipeline mode")


def known_entities():
    from django.utils import timezone

    now = timezone.now()
    for name in ("Priya", "Kenji"):
        Entity.objects.create(
            name=name,
            canonical_name=name.lower(),
            agent_id="default",
            created_at=now,
            updated_at=now,
        )


@pytest.mark.django_db
def test_remember_writes_the_memory_its_audit_its_links_and_its_job():
    known_entities()
    result = writes.remember("Priya and Kenji moved billing to Postgres.", actor=AGENT)
    memory = Memory.objects.get(id=result.memory.id)
    assert memory.content == "Priya and Kenji moved billing to Postgres."
    assert memory.extraction_status == "pending" and memory.updated_by == "claude-code"
    (audit,) = MemoryHistory.objects.filter(memory=memory)
    assert audit.event == "created" and audit.reason == "remember"
    assert audit.new_content == memory.content and audit.actor_type == "agent"
    assert sorted(result.linked_entity_ids) == sorted(Entity.objects.values_list("id", flat=True))
    assert MemoryEntityMention.objects.filter(memory=memory).count() == 2
    assert set(Entity.objects.values_list("mentions", flat=True)) == {1}
    assert Job.objects.get(memory=memory).status == "pending" and result.job is not None
    again = writes.remember("Priya and Kenji moved billing to Postgres.", actor=AGENT)
    assert again.deduped and again.memory.id == memory.id and again.job is None


@on_postgres
@pytest.mark.django_db
def test_on_postgresql_remember_waits_for_no_single_statement_inside_its_transaction():
    from psycopg import pq

    known_entities()
    waited, pipelined = [], []

    def watch(execute, sql, params, many, context):
        on = connection.connection.pgconn.pipeline_status != pq.PipelineStatus.OFF
        (pipelined if on else waited).append(" ".join(sql.split()))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watch):
        writes.remember("Priya moved the ledger to Postgres 16.", actor=AGENT)
    # The test's transaction makes remember's atomic() a savepoint: what runs between SAVEPOINT
    # and RELEASE is remember's transaction.
    start = next(i for i, sql in enumerate(waited) if sql.startswith("SAVEPOINT"))
    inside = [sql for sql in waited[start + 1 :] if not sql.startswith("RELEASE")]
    assert not inside, inside
    for statement in (
        "pg_advisory_xact_lock",  # the reads
        'FROM "memories"',
        "FROM entities",
        'INSERT INTO "memories"',  # the writes
        'INSERT INTO "memory_history"',
        'INSERT INTO "memory_entity_mentions"',
        "UPDATE entities",
        'INSERT INTO "memory_jobs"',
    ):
        assert any(statement in sql for sql in pipelined), (statement, pipelined)


@pytest.mark.django_db(transaction=True)
def test_the_jobs_hand_off_is_committed_after_the_memory_without_a_second_flush():
    seen = []

    def watch(execute, sql, params, many, context):
        seen.append((sql, connection.in_atomic_block))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watch):
        result = writes.remember("Kenji rotates the pager on Mondays.", actor=AGENT)
    (task,) = OrmQ.objects.all()
    assert task.task["args"] == (result.job.id,) or list(task.task["args"]) == [result.job.id]
    enqueued = next(i for i, (sql, _) in enumerate(seen) if "django_q_ormq" in sql)
    job_row = next(i for i, (sql, _) in enumerate(seen) if "memory_jobs" in sql)
    assert job_row < enqueued and seen[enqueued][1]  # after the memory's commit, in its own one
    if TEST_ENGINE == "postgres":
        assert seen[enqueued - 1][0] == "SET LOCAL synchronous_commit = off"


@pytest.mark.django_db(transaction=True)
def test_a_held_hand_off_is_kept_once_and_queues_nothing():
    with queue.held() as held:
        result = writes.remember("Lena reviews every migration.", actor=AGENT)
    assert held == [result.job.id]
    assert not OrmQ.objects.exists()
