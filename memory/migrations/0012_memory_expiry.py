"""Expiry (issue 22, item 8): memories.expires_at, from which moment a memory is no longer found
(memory.expiry), and a partial index over the few memories that have one: the maintenance purge
and the memory list's "expired" filter find them through it.

The column is added with a plain ALTER TABLE (as 0010 and 0011): Django's SQLite AddField may
rebuild the table, which would drop the full-text triggers on `memories`."""

from django.db import migrations, models


def add_column(apps, schema_editor):
    kind = (
        "timestamp with time zone"
        if schema_editor.connection.vendor == "postgresql"
        else "datetime"
    )
    schema_editor.execute(f"ALTER TABLE memories ADD COLUMN expires_at {kind} NULL")


def drop_column(apps, schema_editor):
    schema_editor.execute("ALTER TABLE memories DROP COLUMN expires_at")


class Migration(migrations.Migration):
    dependencies = [("memory", "0011_purge")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="memory",
                    name="expires_at",
                    field=models.DateTimeField(blank=True, null=True),
                )
            ],
            database_operations=[migrations.RunPython(add_column, drop_column)],
        ),
        migrations.AddIndex(
            model_name="memory",
            index=models.Index(
                condition=models.Q(expires_at__isnull=False),
                fields=["expires_at"],
                name="memories_expiry",
            ),
        ),
    ]
