"""Migrations run forward and back, creating and dropping the FTS5 and vec0 indexes."""

import pytest
from django.core.management import call_command
from django.db import connection


def _tables():
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')")
        return {row[0] for row in cursor.fetchall()}


@pytest.mark.django_db(transaction=True)
def test_it_migrates_back_to_zero_and_forward_again():
    assert {
        "memories",
        "memories_fts",
        "vec_embeddings",
        "memories_fts_au",
        "memory_jobs",
    } <= _tables()
    call_command("migrate", "pipeline", "zero", verbosity=0)
    call_command("migrate", "memory", "zero", verbosity=0)
    assert not {"memories", "memories_fts", "vec_embeddings", "memories_fts_au"} & _tables()
    call_command("migrate", verbosity=0)
    assert {"memories", "memories_fts", "vec_embeddings", "pipeline_proposals"} <= _tables()
    from pipeline.models import PipelineConfig

    config = PipelineConfig.objects.get(pk=1)  # written by the data migration: shadow mode
    assert config.enabled and config.shadow_mode and not config.allow_update_delete


@pytest.mark.django_db(transaction=True)
def test_it_has_no_model_changes_missing_a_migration():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
