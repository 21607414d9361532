"""Purge (issue 22): memories.purged_at marks a memory's tombstone; on SQLite the full-text index
removes a deleted row's entries at once (FTS5 secure-delete), and a store with no memory yet is
marked as one whose freed bytes were all zeroed (connections now run with secure_delete), so its
purges never need the one-time VACUUM that an older store gets at its first purge.

The column is added with a plain ALTER TABLE (as 0010): Django's SQLite AddField may rebuild the
table, which would drop the full-text triggers on `memories`."""

from django.db import migrations, models

from memory.backend.erasure import mark_if_new
from memory.keyword.sqlite import FTS_SECURE_DELETE_SQL


def add_column(apps, schema_editor):
    kind = (
        "timestamp with time zone"
        if schema_editor.connection.vendor == "postgresql"
        else "datetime"
    )
    schema_editor.execute(f"ALTER TABLE memories ADD COLUMN purged_at {kind} NULL")


def drop_column(apps, schema_editor):
    schema_editor.execute("ALTER TABLE memories DROP COLUMN purged_at")


def secure_index(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    schema_editor.execute(FTS_SECURE_DELETE_SQL)
    mark_if_new(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("memory", "0010_memory_asserted_by")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="memory",
                    name="purged_at",
                    field=models.DateTimeField(blank=True, null=True),
                )
            ],
            database_operations=[migrations.RunPython(add_column, drop_column)],
        ),
        migrations.RunPython(secure_index, migrations.RunPython.noop),
    ]
