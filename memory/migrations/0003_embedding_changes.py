"""Change log of the embeddings table, read by each process's in-memory vector matrix (SQLite
only: on PostgreSQL the HNSW index answers KNN and there is no matrix to keep in step)."""

from django.db import migrations

CREATE = [
    "CREATE TABLE embedding_changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, embedding_id INTEGER NOT NULL)",
    "CREATE TRIGGER embeddings_changes_ai AFTER INSERT ON embeddings BEGIN "
    "INSERT INTO embedding_changes(embedding_id) VALUES (new.id); END",
    "CREATE TRIGGER embeddings_changes_au AFTER UPDATE ON embeddings BEGIN "
    "INSERT INTO embedding_changes(embedding_id) VALUES (new.id); END",
    "CREATE TRIGGER embeddings_changes_ad AFTER DELETE ON embeddings BEGIN "
    "INSERT INTO embedding_changes(embedding_id) VALUES (old.id); END",
]
DROP = [
    "DROP TRIGGER IF EXISTS embeddings_changes_ad",
    "DROP TRIGGER IF EXISTS embeddings_changes_au",
    "DROP TRIGGER IF EXISTS embeddings_changes_ai",
    "DROP TABLE IF EXISTS embedding_changes",
]


def _on_sqlite(statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "sqlite":
            for statement in statements:
                schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("memory", "0002_search_indexes")]

    operations = [migrations.RunPython(_on_sqlite(CREATE), _on_sqlite(DROP))]
