"""PostgreSQL only: the indexed vector kept in its row (so the planner prices KNN honestly and uses
HNSW), the HNSW index rebuilt with its current options, and the trigger + partial index behind the
deferred HNSW insert and its repair."""

from django.conf import settings
from django.db import migrations

from memory.vectors import postgres as vectors_postgres


def forward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(vectors_postgres.storage_sql(settings.MEMORY_EMBEDDING_DIMENSIONS))
    schema_editor.execute(f"DROP INDEX IF EXISTS {vectors_postgres.INDEX_NAME}")
    schema_editor.execute(vectors_postgres.REWRITE_SQL)
    for statement in vectors_postgres.REBUILD_SQL + vectors_postgres.PENDING_SQL:
        schema_editor.execute(statement)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in vectors_postgres.PENDING_DROP_SQL:
        schema_editor.execute(statement)
    schema_editor.execute("ALTER TABLE embeddings ALTER COLUMN embedding SET STORAGE EXTERNAL")


class Migration(migrations.Migration):
    dependencies = [("memory", "0004_token_multi_agent")]

    operations = [migrations.RunPython(forward, backward)]
