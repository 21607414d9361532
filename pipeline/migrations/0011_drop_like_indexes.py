"""PostgreSQL: no LIKE twin indexes on the pipeline app's text columns (see memory.migration_ops)."""

from django.db import migrations

from memory.migration_ops import drop_like_indexes


class Migration(migrations.Migration):
    atomic = False  # DROP INDEX CONCURRENTLY (see drop_like_indexes)
    dependencies = [("pipeline", "0010_drop_redundant_fk_indexes")]

    operations = [drop_like_indexes("pipeline")]
