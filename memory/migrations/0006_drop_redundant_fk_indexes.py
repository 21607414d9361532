"""Drop the single-column indexes Django made for two foreign keys that other indexes already lead
with (history_memory_time, the unique mention per memory and entity): each job's write inserted
into them while holding the write lock. Only the indexes go; no table is rebuilt."""

import django.db.models.deletion
from django.db import migrations, models

from memory.migration_ops import drop_field_indexes

REDUNDANT = [("memoryhistory", "memory"), ("memoryentitymention", "memory")]


class Migration(migrations.Migration):
    dependencies = [("memory", "0005_pg_vector_storage")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[drop_field_indexes("memory", REDUNDANT)],
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
