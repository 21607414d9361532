"""Drop the single-column indexes Django made for four foreign keys that composite indexes already
lead with (proposals_job, proposals_source, proposals_target, llm_calls_job): each job's write
inserted into every one of them while holding the write lock.

The state change is the `db_index=False` on the fields; the database change drops just those
indexes (no table rebuild, which SQLite's AlterField would do three times over proposals)."""

import django.db.models.deletion
from django.db import migrations, models

from memory.migration_ops import drop_field_indexes

REDUNDANT = [("proposal", "job"), ("proposal", "source_memory"), ("proposal", "target_memory")]
REDUNDANT += [("llmcall", "job")]


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0004_token_multi_agent"),
        ("pipeline", "0009_replay_runs"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[drop_field_indexes("pipeline", REDUNDANT)],
            state_operations=[
                migrations.AlterField(
                    model_name="llmcall",
                    name="job",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="llm_calls",
                        to="memory.job",
                    ),
                ),
                migrations.AlterField(
                    model_name="proposal",
                    name="job",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="proposals",
                        to="memory.job",
                    ),
                ),
                migrations.AlterField(
                    model_name="proposal",
                    name="source_memory",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="proposals_from",
                        to="memory.memory",
                    ),
                ),
                migrations.AlterField(
                    model_name="proposal",
                    name="target_memory",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="proposals_targeting",
                        to="memory.memory",
                    ),
                ),
            ],
        )
    ]
