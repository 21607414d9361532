"""The keyword and vector indexes, per engine.

SQLite: the FTS5 external-content table with its triggers, and the sqlite-vec vec0 table.
PostgreSQL: a generated tsvector column with a GIN index, and the pgvector extension with a
vector(<dims>) column on `embeddings` and its HNSW cosine index.
"""

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, migrations

from memory.keyword import postgres as keyword_postgres
from memory.keyword import sqlite as keyword
from memory.vectors import postgres as vectors_postgres
from memory.vectors import sqlite as vectors


def _execute(schema_editor, statements):
    for statement in statements:
        schema_editor.execute(statement)


def create_indexes(apps, schema_editor):
    dimensions = settings.MEMORY_EMBEDDING_DIMENSIONS
    if schema_editor.connection.vendor == "postgresql":
        _require_vector_extension(schema_editor)
        _execute(schema_editor, keyword_postgres.INDEX_SQL)
        _execute(schema_editor, vectors_postgres.index_sql(dimensions))
        return
    _execute(schema_editor, keyword.FTS_TABLE_SQL)
    # Skipped only when the numpy backend was chosen explicitly and the extension is absent;
    # otherwise the connection itself has already failed with a clear message.
    if getattr(schema_editor.connection, "sqlite_vec_loaded", False):
        schema_editor.execute(vectors.create_index_sql(dimensions))


def _require_vector_extension(schema_editor):
    try:
        schema_editor.execute(vectors_postgres.EXTENSION_SQL)
    except DatabaseError as exc:
        settings_dict = schema_editor.connection.settings_dict
        raise ImproperlyConfigured(
            f"The PostgreSQL extension 'vector' (pgvector) is not installed in database "
            f"'{settings_dict['NAME']}' and role '{settings_dict['USER']}' may not create it "
            f"({exc}). Run `CREATE EXTENSION vector;` in that database as a superuser, then "
            "migrate again."
        ) from exc


def drop_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        _execute(schema_editor, vectors_postgres.DROP_SQL + keyword_postgres.DROP_SQL)
        return
    schema_editor.execute("DROP TABLE IF EXISTS vec_embeddings")
    _execute(schema_editor, keyword.FTS_DROP_SQL)


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]

    operations = [migrations.RunPython(create_indexes, drop_indexes)]
