"""The log of changed texts (issue 24): on SQLite, triggers on `memories` note each row whose text
changed and each deleted row in memories_fts_changes, so every process can keep the posting lists
of the full-text index it has read and bring them up to date (memory.keyword.sqlite_postings).
PostgreSQL has nothing to add."""

from django.db import migrations

from memory.keyword.sqlite_postings import CHANGES_DROP_SQL, CHANGES_TABLE_SQL


def create_log(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    for statement in CHANGES_TABLE_SQL:
        schema_editor.execute(statement)


def drop_log(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    for statement in CHANGES_DROP_SQL:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("memory", "0012_memory_expiry")]

    operations = [migrations.RunPython(create_log, drop_log)]
