"""Who asserted each memory (Memory.asserted_by). Existing rows: a memory the pipeline derived
(source_type pipeline-v2) was asserted by the model, every other one by an agent.

The column is added with a plain ALTER TABLE on both engines: Django's SQLite AddField of a NOT
NULL column rebuilds the table, which would drop the full-text triggers on `memories` (and copy
every row). The column keeps its database default, so any insert without it reads "agent"."""

from django.db import migrations, models

DERIVED_SOURCE_TYPE = "pipeline-v2"  # memory.models.DERIVED_SOURCE_TYPE when this was written


def add_column(apps, schema_editor):
    schema_editor.execute(
        "ALTER TABLE memories ADD COLUMN asserted_by varchar(10) NOT NULL DEFAULT 'agent'"
    )


def drop_column(apps, schema_editor):
    schema_editor.execute("ALTER TABLE memories DROP COLUMN asserted_by")


def fill(apps, schema_editor):
    Memory = apps.get_model("memory", "Memory")
    Memory.objects.filter(source_type=DERIVED_SOURCE_TYPE).update(asserted_by="model")


class Migration(migrations.Migration):
    dependencies = [("memory", "0009_token_expiry")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="memory",
                    name="asserted_by",
                    field=models.CharField(
                        choices=[
                            ("person", "Person"),
                            ("agent", "Agent"),
                            ("model", "Model"),
                            ("import", "Import"),
                        ],
                        default="agent",
                        max_length=10,
                    ),
                )
            ],
            database_operations=[migrations.RunPython(add_column, drop_column)],
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
