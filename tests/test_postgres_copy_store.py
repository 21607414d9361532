"""copy_store: the demo store copied into an empty PostgreSQL database arrives whole, ids kept,
with a working keyword index and vector index (on the SQLite pass the target is an embedded
PostgreSQL started for the test; on the PostgreSQL pass, a second database on the same server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection

from memory.management.commands.copy_store import copied_models
from memory.models import Embedding, Entity, Memory
from pipeline.models import Proposal
from tests.conftest import TEST_ENGINE, database_env

pytestmark = pytest.mark.slow


@pytest.fixture
def empty_postgres():
    """The URL of an empty PostgreSQL database, dropped afterwards."""
    if TEST_ENGINE == "postgres":
        server_url = database_env()["DATABASE_URL"].rsplit("/", 1)[0]
        with psycopg.connect(f"{server_url}/postgres", autocommit=True) as admin:
            admin.execute("DROP DATABASE IF EXISTS memory_copy")
            admin.execute("CREATE DATABASE memory_copy")
        yield f"{server_url}/memory_copy"
        with psycopg.connect(f"{server_url}/postgres", autocommit=True) as admin:
            admin.execute("DROP DATABASE IF EXISTS memory_copy WITH (FORCE)")
        return
    from devtools.pgserver import EmbeddedPostgres

    with EmbeddedPostgres() as server:
        yield server.url


def copy_store(url: str) -> subprocess.CompletedProcess:
    """manage.py copy_store in its own process, reading this test's database like a deployment."""
    return subprocess.run(
        [sys.executable, "manage.py", "copy_store", "--to", url],
        cwd=Path(settings.BASE_DIR),
        env={**os.environ, **database_env(), "DJANGO_SECRET_KEY": settings.SECRET_KEY},
        capture_output=True,
        text=True,
        timeout=300,
    )


SAMPLED = {
    "memories": ("id", "content", "content_hash", "agent_id", "version", "is_deleted", "tags"),
    "memory_history": ("id", "memory_id", "event", "new_content", "changed_by", "metadata"),
    "pipeline_proposals": ("id", "status", "action", "fact_content", "source_memory_id"),
    "embeddings": ("id", "content_hash", "model", "dimensions", "vector"),
    "entities": ("id", "name", "canonical_name", "agent_id", "mentions"),
}


def comparable(value):
    if isinstance(value, memoryview | bytes):
        return bytes(value).hex()
    if isinstance(value, str) and value[:1] in "[{":
        return json.loads(value)  # JSON read raw from SQLite is text
    return value


def rows(cursor, table: str, columns: tuple[str, ...], limit: int = 20) -> list[tuple]:
    cursor.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY id LIMIT {limit}")
    return [tuple(comparable(v) for v in row) for row in cursor.fetchall()]


def test_the_demo_store_arrives_whole_with_its_indexes(file_db, empty_postgres):
    call_command("seed_demo")
    assert Memory.objects.count() > 50 and Proposal.objects.exists()
    assert Embedding.objects.exists()

    run = copy_store(empty_postgres)
    assert run.returncode == 0, run.stderr
    assert "Point DATABASE_URL at the target" in run.stdout

    with psycopg.connect(empty_postgres) as target, connection.cursor() as source:
        for model in copied_models():
            table = model._meta.db_table
            count = target.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
            assert count == model._base_manager.count(), table
        for table, columns in SAMPLED.items():
            expected = [
                tuple(
                    bool(v) if c == "is_deleted" else v for c, v in zip(columns, row, strict=True)
                )
                for row in rows(source, table, columns)
            ]
            assert rows(target.cursor(), table, columns) == expected, table
        # The keyword index answers for the copied memories.
        keyword_hits = target.execute(
            "SELECT count(*) FROM memories WHERE search_vector @@ plainto_tsquery('english', %s)",
            ["postgresql"],
        ).fetchone()[0]
        indexed = target.execute(
            "SELECT count(*) FROM embeddings WHERE embedding IS NOT NULL"
        ).fetchone()[0]
        # The vector index finds a copied vector as its own nearest neighbour.
        probe = Embedding.objects.order_by("id").last()
        vector = np.frombuffer(bytes(probe.vector), dtype=np.float32)
        nearest = target.execute(
            "SELECT id FROM embeddings WHERE model = %s ORDER BY embedding <=> %s::vector LIMIT 1",
            [probe.model, "[" + ",".join(str(float(x)) for x in vector) + "]"],
        ).fetchone()[0]
        # New rows continue after the copied ids.
        next_id = target.execute("SELECT nextval(pg_get_serial_sequence('entities', 'id'))")
        assert next_id.fetchone()[0] > (Entity.objects.order_by("-id").first().id)
    assert keyword_hits >= Memory.objects.filter(content__icontains="postgresql").count() > 0
    assert indexed == Embedding.objects.count()
    assert nearest == probe.id

    again = copy_store(empty_postgres)
    assert again.returncode != 0 and "already holds memories" in again.stderr


def test_an_unreachable_target_is_one_clear_line(file_db):
    """Found by a QA pass: a target nothing listens on gave a hundred-line traceback."""
    from tests.mcp_support import free_port

    run = copy_store(f"postgres://user:pw-secret@127.0.0.1:{free_port()}/memories")
    assert run.returncode != 0
    assert "cannot reach the target database" in run.stderr
    assert "Traceback" not in run.stderr and "pw-secret" not in run.stderr
