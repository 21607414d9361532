"""The PostgreSQL engine: the pgvector check at startup, the HNSW leg with filters, NUL bytes, and
the races that SQLite's single writer used to settle (run on both engines, written for PostgreSQL's
READ COMMITTED isolation: dedupe under a UNIQUE race, optimistic ifVersion, one claim per job)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import psycopg
import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, connections
from django.utils import timezone

from memory import vectors, writes
from memory.models import Embedding, Entity, Memory, MemoryEntityMention
from memory.writes import Actor, Refused, Vector
from tests.conftest import TEST_ENGINE, database_env

AGENT = Actor("claude-code", "agent")
DIMS = settings.MEMORY_EMBEDDING_DIMENSIONS
postgres_only = pytest.mark.skipif(
    TEST_ENGINE != "postgres", reason="PostgreSQL backend only (MEMORY_TEST_ENGINE=postgres)"
)


def unit(rng, near=None, spread=0.05):
    v = rng.standard_normal(DIMS).astype(np.float32)
    if near is not None:
        v = near + spread * v
    return v / np.linalg.norm(v)


def in_threads(count: int, work) -> list:
    """Run work(i) in `count` threads released at once; returns results (exceptions included)."""
    barrier = threading.Barrier(count)
    results: list = [None] * count

    def run(i):
        try:
            barrier.wait(timeout=30)
            results[i] = work(i)
        except Exception as exc:
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    return results


# --- startup ------------------------------------------------------------------------------------


@postgres_only
@pytest.mark.django_db
def test_a_server_without_the_extension_fails_at_the_first_connection_naming_it(monkeypatch):
    from memory.backend.postgres import base

    monkeypatch.setattr(base, "EXTENSION", "vector_not_on_this_server")
    wrapper = base.DatabaseWrapper({**connection.settings_dict}, alias="no_pgvector")
    with pytest.raises(ImproperlyConfigured, match="'vector_not_on_this_server' extension"):
        wrapper.ensure_connection()
    assert wrapper.connection is None


@postgres_only
@pytest.mark.django_db
def test_migrating_as_a_role_that_cannot_create_the_extension_says_what_to_run():
    dsn = database_env()["DATABASE_URL"].rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS memory_unprivileged")
        admin.execute("DROP ROLE IF EXISTS memory_app")
        admin.execute("CREATE ROLE memory_app LOGIN")
        admin.execute("CREATE DATABASE memory_unprivileged OWNER memory_app")
    try:
        url = dsn.replace("postgres://postgres@", "postgres://memory_app@").rsplit("/", 1)[0]
        run = subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput"],
            cwd=Path(settings.BASE_DIR),
            env={
                **os.environ,
                "DATABASE_URL": f"{url}/memory_unprivileged",
                "DJANGO_SECRET_KEY": "test",
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode != 0
        assert "extension 'vector' (pgvector) is not installed" in run.stderr
        assert "CREATE EXTENSION vector;" in run.stderr
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("DROP DATABASE IF EXISTS memory_unprivileged")
            admin.execute("DROP ROLE IF EXISTS memory_app")


# --- the vector leg through HNSW ------------------------------------------------------------------


def _embedding(rng, vector, model, n):
    e = Embedding.objects.create(
        content_hash=f"{model}-{n}-{rng.integers(1 << 62):x}",
        vector=vectors.vector_to_blob(vector),
        dimensions=DIMS,
        model=model,
        created_at=timezone.now(),
    )
    vectors.index_vector(e.id, vector, model)
    return e.id


@postgres_only
@pytest.mark.django_db
def test_hnsw_returns_k_rows_of_the_model_when_other_models_crowd_the_neighbourhood():
    from memory.vectors import postgres as vectors_postgres

    rng = np.random.default_rng(3)
    query = unit(rng)
    for n in range(400):  # the nearest neighbours all belong to another model
        _embedding(rng, unit(rng, near=query, spread=0.02), "other-model", n)
    mine = [_embedding(rng, unit(rng, near=query, spread=0.5), "m1", n) for n in range(12)]
    found = vectors.nearest(query, model="m1", k=10)
    assert len(found) == 10 and {eid for eid, _ in found} <= set(mine)
    assert [d for _, d in found] == sorted(d for _, d in found)
    exact = vectors_postgres.nearest_exact(query, model="m1", k=10)
    assert [eid for eid, _ in found] == [eid for eid, _ in exact]
    assert vectors.search_engine() == "hnsw"


@pytest.mark.django_db
def test_the_vector_leg_returns_k_live_memories_of_the_agent_when_neighbours_are_filtered():
    rng = np.random.default_rng(5)
    query = unit(rng)
    model = "m1"

    def stored(text, agent, vector):
        memory = writes.remember(text, actor=AGENT, agent_id=agent, create_job=False).memory
        writes.store_vector(memory.id, memory.content_hash, Vector(vector, model))
        return memory

    crowd = [stored(f"crowd {n}", "other-agent", unit(rng, query, 0.02)) for n in range(60)]
    gone = [stored(f"gone {n}", "me", unit(rng, query, 0.03)) for n in range(30)]
    for memory in gone:
        writes.forget(memory.id, actor=AGENT, reason="test")
    source = stored("the source itself", "me", query)
    mine = {stored(f"mine {n}", "me", unit(rng, query, 0.4)).id for n in range(8)}
    hits = vectors.search(query, model=model, agent_id="me", limit=5, exclude_id=source.id)
    assert len(hits) == 5 and {memory_id for memory_id, _ in hits} <= mine
    assert not {m.id for m in crowd} & {memory_id for memory_id, _ in hits}


# --- text the server could not store --------------------------------------------------------------


@postgres_only
@pytest.mark.django_db
def test_a_nul_byte_is_stored_as_a_replacement_character_instead_of_failing_the_write():
    result = writes.remember("before\x00after the NUL", actor=AGENT, create_job=False)
    assert Memory.objects.get(id=result.memory.id).content == "before\ufffdafter the NUL"


# --- races (both engines) -------------------------------------------------------------------------


def test_concurrent_remembers_of_one_text_store_it_once_and_dedupe_the_rest(file_db):
    results = in_threads(
        8, lambda i: writes.remember("Deploys freeze on Fridays at noon.", actor=AGENT)
    )
    assert not [r for r in results if isinstance(r, Exception)], results
    stored = [r for r in results if not r.deduped]
    assert len(stored) == 1 and all(r.memory.id == stored[0].memory.id for r in results)
    assert Memory.objects.filter(content_hash=stored[0].memory.content_hash).count() == 1
    assert stored[0].job is not None and all(r.job is None for r in results if r.deduped)


def test_concurrent_edits_at_one_version_apply_once_and_the_rest_get_a_version_conflict(file_db):
    memory = writes.remember("The cache TTL is 60 seconds.", actor=AGENT, create_job=False).memory

    def edit(i):
        return writes.modify(
            memory.id,
            {"content": f"The cache TTL is {i + 61} seconds."},
            actor=AGENT,
            reason="tune",
            if_version=1,
        )

    results = in_threads(6, edit)
    applied = [r for r in results if isinstance(r, Memory)]
    refused = [r for r in results if isinstance(r, Refused)]
    assert len(applied) == 1 and len(refused) == 5
    assert {r.code for r in refused} == {"version_conflict"}
    memory.refresh_from_db()
    assert memory.version == 2 and memory.content == applied[0].content
    assert memory.history.filter(event="updated").count() == 1


@postgres_only
def test_concurrent_remembers_naming_one_entity_count_every_mention(file_db):
    # Each remember waits, right after its linker looked the entity up, until every other one has
    # looked it up too: a counter written from the value read then would keep one mention of six.
    now = timezone.now()
    entity = Entity.objects.create(
        name="Priya", canonical_name="priya", mentions=0, created_at=now, updated_at=now
    )
    looked_up = threading.Barrier(6)

    def wait_after_the_entity_lookup(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if sql.lstrip().upper().startswith("SELECT") and '"entities"' in sql:
            try:
                looked_up.wait(timeout=10)
            except threading.BrokenBarrierError:
                pass
        return result

    def remember(i):
        with connection.execute_wrapper(wait_after_the_entity_lookup):
            return writes.remember(f"Priya reviewed release {i}.", actor=AGENT, create_job=False)

    results = in_threads(6, remember)
    assert not [r for r in results if isinstance(r, Exception)], results
    assert all(r.linked_entity_ids == [entity.pk] for r in results)
    entity.refresh_from_db()
    assert entity.mentions == 6
    assert MemoryEntityMention.objects.filter(entity=entity).count() == 6


def test_concurrent_claims_of_one_job_lease_it_once(file_db):
    from pipeline.writes.jobs import claim_job

    job = writes.remember("Rotate the API keys monthly.", actor=AGENT).job
    claims = in_threads(6, lambda i: claim_job(job.id))
    assert not [c for c in claims if isinstance(c, Exception)], claims
    assert len([c for c in claims if c is not None]) == 1
    job.refresh_from_db()
    assert job.status == "leased" and job.attempts == 1


@postgres_only
@pytest.mark.django_db
def test_the_text_index_keeps_stop_words_like_fts5_so_a_query_of_only_them_still_matches():
    from memory import keyword

    memory = writes.remember("Where is it and what of the rest", actor=AGENT, create_job=False)
    writes.remember("Billing runs on Postgres", actor=AGENT, create_job=False)
    hits = keyword.search("the of and", agent_id="default", limit=5)
    assert [memory_id for memory_id, _ in hits] == [memory.memory.id]


# --- indexes --------------------------------------------------------------------------------------


def _pattern_indexes(tables) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
            "AND tablename = ANY(%s) AND indexdef ~ '(varchar|text)_pattern_ops'",
            [list(tables)],
        )
        return [name for (name,) in cursor.fetchall()]


def _store_tables() -> list[str]:
    from django.apps import apps

    return [
        model._meta.db_table
        for label in ("memory", "pipeline", "dashboard")
        for model in apps.get_app_config(label).get_models()
    ]


@postgres_only
@pytest.mark.django_db
def test_no_text_column_of_the_store_carries_a_second_like_index():
    """Every row a job writes pays for each index: the store compares its ids and hashes with `=`,
    so Django's LIKE twins (varchar_pattern_ops) were pure cost. New migrations make none."""
    assert _store_tables() and not _pattern_indexes(_store_tables())


@postgres_only
@pytest.mark.django_db(transaction=True)  # DROP INDEX CONCURRENTLY runs outside a transaction
@pytest.mark.parametrize(
    "app, migration, table, column",
    [
        ("memory", "0007_drop_like_indexes", "memories", "id"),
        ("pipeline", "0011_drop_like_indexes", "pipeline_proposals", "created_memory_id"),
        ("dashboard", "0002_drop_like_indexes", "login_throttle", "key"),
    ],
)
def test_each_apps_migration_drops_the_like_indexes_an_older_schema_still_has(
    app, migration, table, column
):
    from django.apps import apps
    from django.db.migrations.loader import MigrationLoader

    old = f"{table}_{column}_old_like"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE INDEX {old} ON {table} ({column} varchar_pattern_ops)")
        cursor.execute(
            f"CREATE INDEX {table}_kept_on_purpose ON {table} ({column} text_pattern_ops)"
        )
    (operation,) = MigrationLoader(connection).get_migration(app, migration).operations

    try:
        with connection.schema_editor(atomic=False) as editor:
            operation.code(apps, editor)

        # Django's twin goes; an index someone made on purpose under another name stays.
        assert _pattern_indexes([table]) == [f"{table}_kept_on_purpose"]
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP INDEX IF EXISTS {old}, {table}_kept_on_purpose")


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_table_a_later_migration_creates_gets_no_like_index_either():
    from django.db import models
    from django.test.utils import isolate_apps

    with isolate_apps("memory"):  # a model of this test only, not in the app's registry

        class Scratch(models.Model):
            code = models.CharField(max_length=40, primary_key=True)
            name = models.CharField(max_length=40, db_index=True)

            class Meta:
                app_label = "memory"
                db_table = "scratch_like_check"

    with connection.schema_editor() as editor:
        editor.create_model(Scratch)
    try:
        assert not _pattern_indexes(["scratch_like_check"])
    finally:
        with connection.schema_editor() as editor:
            editor.delete_model(Scratch)
