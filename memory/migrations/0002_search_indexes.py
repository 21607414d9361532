"""FTS5 external-content index with its triggers, and the sqlite-vec KNN index."""

from django.conf import settings
from django.db import migrations

from memory import keyword, vectors


def create_vector_index(apps, schema_editor):
    # Skipped only when the numpy backend was chosen explicitly and the extension is absent;
    # otherwise the connection itself has already failed with a clear message.
    if getattr(schema_editor.connection, "sqlite_vec_loaded", False):
        schema_editor.execute(vectors.create_index_sql(settings.MEMORY_EMBEDDING_DIMENSIONS))


def drop_vector_index(apps, schema_editor):
    schema_editor.execute("DROP TABLE IF EXISTS vec_embeddings")


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]

    operations = [
        migrations.RunSQL(keyword.FTS_TABLE_SQL, keyword.FTS_DROP_SQL),
        migrations.RunPython(create_vector_index, drop_vector_index),
    ]
