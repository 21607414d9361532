"""PostgreSQL: no LIKE twin indexes on the dashboard app's text columns (see memory.migration_ops)."""

from django.db import migrations

from memory.migration_ops import drop_like_indexes


class Migration(migrations.Migration):
    atomic = False  # DROP INDEX CONCURRENTLY (see drop_like_indexes)
    dependencies = [("dashboard", "0001_initial")]

    operations = [drop_like_indexes("dashboard")]
