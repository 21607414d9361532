"""Migrations run forward and back, creating and dropping the keyword and vector indexes of the
engine under test (SQLite: FTS5 and vec0; PostgreSQL: a tsvector GIN index and pgvector HNSW)."""

import pytest
from django.core.management import call_command
from django.db import connection


def _tables():
    """Names of tables, triggers and indexes."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                "UNION SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
            )
        else:
            cursor.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')")
        return {row[0] for row in cursor.fetchall()}


def _search_indexes():
    if connection.vendor == "postgresql":
        return {"memories_search_vector", "embeddings_embedding_hnsw"}
    return {"memories_fts", "vec_embeddings", "memories_fts_au"}


@pytest.mark.slow  # every migration, down and up again
@pytest.mark.django_db(transaction=True)
def test_it_migrates_back_to_zero_and_forward_again():
    assert {"memories", "memory_jobs", *_search_indexes()} <= _tables()
    call_command("migrate", "pipeline", "zero", verbosity=0)
    call_command("migrate", "memory", "zero", verbosity=0)
    assert not {"memories", *_search_indexes()} & _tables()
    call_command("migrate", verbosity=0)
    assert {"memories", "pipeline_proposals", *_search_indexes()} <= _tables()
    from pipeline.models import PipelineConfig

    config = PipelineConfig.objects.get(pk=1)  # written by the data migration: shadow mode
    assert config.enabled and config.shadow_mode and not config.allow_update_delete


@pytest.mark.django_db(transaction=True)
def test_it_has_no_model_changes_missing_a_migration():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
