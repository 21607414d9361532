"""All vector SQL on PostgreSQL: a pgvector `embedding vector(<dims>)` column on `embeddings` with
an HNSW cosine index, and KNN through that index (or an exact scan, for measuring recall)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from django.conf import settings
from django.db import connection
from pgvector import Vector as PgVector

INDEX_NAME = "embeddings_embedding_hnsw"


EXTENSION_SQL = "CREATE EXTENSION IF NOT EXISTS vector"
CREATE_INDEX_SQL = (
    f"CREATE INDEX {INDEX_NAME} ON embeddings USING hnsw (embedding vector_cosine_ops)"
)


def index_sql(dimensions: int) -> list[str]:
    # The column sits beside the float32 blob on the same row, so truncating or deleting
    # `embeddings` (a flush, a purge) takes the indexed vector with it.
    return [
        f"ALTER TABLE embeddings ADD COLUMN embedding vector({int(dimensions)})",
        CREATE_INDEX_SQL,
    ]


DROP_SQL = [
    f"DROP INDEX IF EXISTS {INDEX_NAME}",
    "ALTER TABLE embeddings DROP COLUMN IF EXISTS embedding",
]


def literal(vector: np.ndarray) -> str:
    """pgvector's text form '[x,y,...]' (exact for float32 values)."""
    return PgVector(np.asarray(vector, dtype=np.float32)).to_text()


def indexable(vector: np.ndarray) -> bool:
    # A zero vector (text without words) has no direction: its cosine distance is undefined.
    return vector.shape[0] == settings.MEMORY_EMBEDDING_DIMENSIONS and bool(np.any(vector))


UPDATE_VECTOR_SQL = "UPDATE embeddings SET embedding = %s::vector WHERE id = %s"


def index_vector(embedding_id: int, vector: np.ndarray) -> bool:
    """Set the indexed vector of one embeddings row; a vector that cannot go in clears it."""
    ok = indexable(vector)
    with connection.cursor() as cursor:
        cursor.execute(UPDATE_VECTOR_SQL, [literal(vector) if ok else None, embedding_id])
    return ok


def index_vectors(items: list[tuple[int, np.ndarray]]) -> int:
    """`index_vector` for many (embedding id, vector) in one statement; returns how many went in."""
    if not items:
        return 0
    rows = [(embedding_id, literal(v) if indexable(v) else None) for embedding_id, v in items]
    values = ", ".join(["(%s::bigint, %s::vector)"] * len(rows))
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE embeddings e SET embedding = v.embedding "
            f"FROM (VALUES {values}) AS v(id, embedding) WHERE e.id = v.id",
            [value for row in rows for value in row],
        )
    return sum(1 for _, vector in rows if vector is not None)


def bulk_index(pairs: Iterable[tuple[int, np.ndarray]], *, db=connection) -> int:
    """Set many vectors at once (a bulk load, copy_store): staged by binary COPY, written by one
    UPDATE, the HNSW index built once afterwards instead of row by row. Call inside a transaction
    of `db` (default: the store's connection); `pairs` must not be read from that same connection.
    Returns how many vectors went in."""
    from pgvector.psycopg.vector import VectorBinaryDumper
    from psycopg.types import TypeInfo

    with db.cursor() as cursor:
        raw = cursor.cursor
        info = TypeInfo.fetch(raw.connection, "vector")
        raw.adapters.register_dumper(PgVector, type("", (VectorBinaryDumper,), {"oid": info.oid}))
        cursor.execute(
            "CREATE TEMPORARY TABLE vector_stage (id bigint, embedding vector) ON COMMIT DROP"
        )
        count = 0
        with raw.copy("COPY vector_stage (id, embedding) FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(["int8", info.oid])
            for embedding_id, vector in pairs:
                if indexable(vector):
                    copy.write_row((embedding_id, PgVector(np.asarray(vector, dtype=np.float32))))
                    count += 1
        cursor.execute(f"DROP INDEX IF EXISTS {INDEX_NAME}")
        cursor.execute(
            "UPDATE embeddings e SET embedding = s.embedding FROM vector_stage s WHERE e.id = s.id"
        )
        # Foreign keys are checked at commit: run those checks now, or CREATE INDEX refuses.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("SET LOCAL maintenance_work_mem = '1GB'")
        cursor.execute(CREATE_INDEX_SQL)
        cursor.execute("DROP TABLE vector_stage")
    return count


def nearest(query: np.ndarray, *, model: str, k: int) -> list[tuple[int, float]]:
    """(embedding id, cosine distance) of the k nearest vectors of one model, through HNSW.

    The session runs with hnsw.iterative_scan = relaxed_order (set by the backend), so the scan
    goes on until k rows of this model are found; the outer query restores exact order.
    """
    if not indexable(query):
        return []
    sql = (
        "WITH hits AS MATERIALIZED (SELECT id, embedding <=> %s::vector AS distance "
        "FROM embeddings WHERE model = %s ORDER BY distance LIMIT %s) "
        "SELECT id, distance FROM hits ORDER BY distance, id"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [literal(query), model, k])
        rows = cursor.fetchall()
    return [(int(eid), float(distance)) for eid, distance in rows if distance is not None]


def nearest_exact(query: np.ndarray, *, model: str, k: int) -> list[tuple[int, float]]:
    """The same KNN by a full scan (no index): the reference the benchmark measures recall by."""
    if not indexable(query):
        return []
    sql = (
        # Adding zero hides the distance from the planner's index matching: a sequential scan.
        "SELECT id, (embedding <=> %s::vector) + 0 AS distance FROM embeddings "
        "WHERE model = %s AND embedding IS NOT NULL ORDER BY distance, id LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [literal(query), model, k])
        rows = cursor.fetchall()
    return [(int(eid), float(distance)) for eid, distance in rows]


def live_memories_for(
    embedding_ids: list[int], *, agent_id: str, exclude_id: str | None
) -> dict[int, list[str]]:
    """Map embedding ids to the live memory ids of one agent that carry that content."""
    if not embedding_ids:
        return {}
    marks = ",".join(["%s"] * len(embedding_ids))
    # LATERAL keeps the plan driven by the few embedding ids (one index probe each), whatever the
    # planner's statistics say about the agent's live memories.
    sql = (
        "SELECT e.id, m.id FROM embeddings e CROSS JOIN LATERAL (SELECT id FROM memories "
        "WHERE content_hash = e.content_hash AND NOT is_deleted AND agent_id = %s"
        + (" AND id <> %s" if exclude_id else "")
        + f") m WHERE e.id IN ({marks})"
    )
    params: list = [agent_id, *([exclude_id] if exclude_id else []), *embedding_ids]
    found: dict[int, list[str]] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for embedding_id, memory_id in cursor.fetchall():
            found.setdefault(int(embedding_id), []).append(memory_id)
    return found


def vectors_of(memory_ids: list[str], *, model: str, dimensions: int) -> list[tuple[str, bytes]]:
    """(memory id, float32 blob) of specific memories that have a vector of this model."""
    marks = ",".join(["%s"] * len(memory_ids))
    sql = (
        "SELECT m.id, e.vector FROM memories m JOIN embeddings e ON e.content_hash = m.content_hash "
        f"WHERE m.id IN ({marks}) AND e.model = %s AND e.dimensions = %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*memory_ids, model, dimensions])
        return [(memory_id, bytes(blob)) for memory_id, blob in cursor.fetchall()]
