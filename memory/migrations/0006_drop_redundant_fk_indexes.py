"""Drop the single-column indexes Django made for two foreign keys that other indexes already lead
with (history_memory_time, the unique mention per memory and entity): each job's write inserted
into them while holding the write lock. Only the indexes go; no table is rebuilt."""

import django.db.models.deletion
from django.db import migrations, models

REDUNDANT = [("memoryhistory", "memory"), ("memoryentitymention", "memory")]


def _index_names(schema_editor, model, field) -> list[str]:
    table = model._meta.db_table
    names = [schema_editor._create_index_name(table, [field.column], suffix="")]
    if schema_editor.connection.vendor == "postgresql":
        names.append(schema_editor._create_index_name(table, [field.column], suffix="_like"))
    return names


def drop(apps, schema_editor):
    for model_name, field_name in REDUNDANT:
        model = apps.get_model("memory", model_name)
        for name in _index_names(schema_editor, model, model._meta.get_field(field_name)):
            schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


def restore(apps, schema_editor):
    for model_name, field_name in REDUNDANT:
        model = apps.get_model("memory", model_name)
        field = model._meta.get_field(field_name)
        schema_editor.execute(schema_editor._create_index_sql(model, fields=[field]))


class Migration(migrations.Migration):
    dependencies = [("memory", "0005_pg_vector_storage")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(drop, restore)],
            state_operations=[
                migrations.AlterField(
                    model_name="memoryhistory",
                    name="memory",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="history",
                        to="memory.memory",
                    ),
                ),
                migrations.AlterField(
                    model_name="memoryentitymention",
                    name="memory",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="entity_mentions",
                        to="memory.memory",
                    ),
                ),
            ],
        )
    ]
