"""Schema operations that migrations of several apps share."""

from __future__ import annotations

from django.db import migrations


def _index_names(schema_editor, model, field) -> list[str]:
    """The names Django gave the index of a `db_index` field (and its LIKE twin on PostgreSQL)."""
    table = model._meta.db_table
    names = [schema_editor._create_index_name(table, [field.column], suffix="")]
    if schema_editor.connection.vendor == "postgresql":
        names.append(schema_editor._create_index_name(table, [field.column], suffix="_like"))
    return names


def drop_field_indexes(app_label: str, fields: list[tuple[str, str]]) -> migrations.RunPython:
    """Drop the single-column indexes Django made for these (model, field) pairs, and only them:
    SQLite's AlterField would rebuild the whole table. Reversed, the indexes are made again.
    Pair it with state-only AlterFields that set `db_index=False`."""

    def drop(apps, schema_editor):
        for model_name, field_name in fields:
            model = apps.get_model(app_label, model_name)
            for name in _index_names(schema_editor, model, model._meta.get_field(field_name)):
                schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")

    def restore(apps, schema_editor):
        for model_name, field_name in fields:
            model = apps.get_model(app_label, model_name)
            field = model._meta.get_field(field_name)
            schema_editor.execute(schema_editor._create_index_sql(model, fields=[field]))

    return migrations.RunPython(drop, restore)


def drop_like_indexes(app_label: str) -> migrations.RunPython:
    """PostgreSQL: drop the LIKE twins (`varchar_pattern_ops`, `text_pattern_ops`, named
    `..._like`) Django made for the indexed text columns of this app's tables; the backend makes
    no new ones (see memory.backend.postgres.base.DatabaseSchemaEditor). Each goes with
    `DROP INDEX CONCURRENTLY`, so a live store keeps writing meanwhile: the migration must say
    `atomic = False`. Nothing to do on SQLite; reversed, the plain indexes stay, which every
    query of the store uses."""

    def drop(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        tables = [model._meta.db_table for model in apps.get_app_config(app_label).get_models()]
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
                "AND tablename = ANY(%s) AND indexname LIKE '%%\\_like' "
                "AND indexdef ~ '(varchar|text)_pattern_ops'",
                [tables],
            )
            names = [name for (name,) in cursor.fetchall()]
        for name in names:
            schema_editor.execute(
                f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(name)}"
            )

    return migrations.RunPython(drop, migrations.RunPython.noop, atomic=False)
