"""All vector SQL: the sqlite-vec vec0 index `vec_embeddings` mirroring `embeddings`, and KNN."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from django.conf import settings
from django.db import connection


@dataclass
class Vector:
    """A vector computed before the transaction, with the model that produced it."""

    values: np.ndarray
    model: str


def vector_to_blob(vector: np.ndarray) -> bytes:
    """The float32 bytes stored in `embeddings.vector`."""
    return np.asarray(vector, dtype=np.float32).tobytes()


def extension_loaded() -> bool:
    connection.ensure_connection()
    return bool(getattr(connection, "sqlite_vec_loaded", False))


def create_index_sql(dimensions: int) -> str:
    # rowid = embeddings.id; `model` is a metadata column so one KNN never mixes two models.
    return (
        "CREATE VIRTUAL TABLE IF NOT EXISTS vec_embeddings USING vec0("
        f"embedding float[{int(dimensions)}] distance_metric=cosine, model text)"
    )


def index_dimensions() -> int | None:
    """Dimension the vec0 table was created with, or None when there is no index."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT sql FROM sqlite_master WHERE name = 'vec_embeddings'")
        row = cursor.fetchone()
    if not row:
        return None
    sql = row[0]
    start = sql.index("float[") + len("float[")
    return int(sql[start : sql.index("]", start)])


def index_vector(embedding_id: int, vector: np.ndarray, model: str) -> bool:
    """Put one vector into the KNN index (replacing any previous one); False if it cannot go in."""
    if not extension_loaded() or vector.shape[0] != settings.MEMORY_EMBEDDING_DIMENSIONS:
        return False
    if not np.any(vector):
        return False  # a zero vector (text without words) has no direction: cosine is undefined
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM vec_embeddings WHERE rowid = %s", [embedding_id])
        cursor.execute(
            "INSERT INTO vec_embeddings(rowid, embedding, model) VALUES (%s, %s, %s)",
            [embedding_id, np.asarray(vector, dtype=np.float32).tobytes(), model],
        )
    return True


def search_engine() -> str:
    """'matrix' (default: per-process numpy matrix, exact) or 'vec0' (sqlite-vec scan, exact)."""
    if not extension_loaded():
        return "matrix"
    return getattr(settings, "MEMORY_VECTOR_SEARCH", "matrix")


def nearest(query: np.ndarray, *, model: str, k: int) -> list[tuple[int, float]]:
    """(embedding id, cosine distance) of the k nearest vectors of one model, nearest first."""
    from memory.guard import open_write_transaction
    from memory.matrix import INDEX

    if not np.any(query):
        return []
    # Inside a write transaction the matrix could learn rows that are later rolled back.
    if search_engine() == "matrix" and not open_write_transaction():
        return INDEX.nearest(query, model=model, k=k)
    return nearest_vec0(query, model=model, k=k)


def nearest_vec0(query: np.ndarray, *, model: str, k: int) -> list[tuple[int, float]]:
    """The same KNN through the durable sqlite-vec index."""
    if not extension_loaded() or query.shape[0] != settings.MEMORY_EMBEDDING_DIMENSIONS:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT rowid, distance FROM vec_embeddings "
            "WHERE embedding MATCH %s AND k = %s AND model = %s ORDER BY distance",
            [np.asarray(query, dtype=np.float32).tobytes(), k, model],
        )
        rows = cursor.fetchall()
    return [(int(rowid), float(distance)) for rowid, distance in rows if distance is not None]


def live_memories_for(
    embedding_ids: list[int], *, agent_id: str, exclude_id: str | None
) -> dict[int, list[str]]:
    """Map embedding ids to the live memory ids of one agent that carry that content."""
    if not embedding_ids:
        return {}
    marks = ",".join(["%s"] * len(embedding_ids))
    sql = (
        # CROSS JOIN keeps SQLite on this order (ids first, then the content_hash index): without
        # statistics it otherwise scans every live memory of the agent.
        "SELECT e.id, m.id FROM embeddings e CROSS JOIN memories m ON m.content_hash = e.content_hash "
        f"WHERE e.id IN ({marks}) AND m.is_deleted = 0 AND m.agent_id = %s"
    )
    params: list = [*embedding_ids, agent_id]
    if exclude_id:
        sql += " AND m.id != %s"
        params.append(exclude_id)
    found: dict[int, list[str]] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for embedding_id, memory_id in cursor.fetchall():
            found.setdefault(int(embedding_id), []).append(memory_id)
    return found


def search(
    query: np.ndarray,
    *,
    model: str,
    agent_id: str,
    limit: int,
    exclude_id: str | None = None,
) -> list[tuple[str, float]]:
    """(memory id, similarity in [0,1]) of the agent's live memories nearest to the query.

    The index holds vectors of every agent and of deleted memories, so the scan asks for more
    neighbours than needed and widens until `limit` live rows are found or the index is exhausted.
    """
    k = max(limit * 4, 20)
    while True:
        neighbours = nearest(query, model=model, k=k)
        owners = live_memories_for(
            [eid for eid, _ in neighbours], agent_id=agent_id, exclude_id=exclude_id
        )
        results: list[tuple[str, float]] = []
        for embedding_id, distance in neighbours:
            for memory_id in owners.get(embedding_id, []):
                results.append((memory_id, max(0.0, min(1.0, 1.0 - distance))))
        if len(results) >= limit or len(neighbours) < k or k >= 4096:
            return results[:limit]
        k *= 4


def similarities_for(query: np.ndarray, *, model: str, memory_ids: list[str]) -> dict[str, float]:
    """Cosine similarity in [0,1] of specific memories to the query (memories without a vector of
    this model are left out)."""
    norm = float(np.linalg.norm(query))
    if not memory_ids or norm == 0:
        return {}
    q = np.asarray(query, dtype=np.float32) / norm
    marks = ",".join(["%s"] * len(memory_ids))
    sql = (
        "SELECT m.id, e.vector FROM memories m CROSS JOIN embeddings e ON e.content_hash = m.content_hash "
        f"WHERE m.id IN ({marks}) AND e.model = %s AND e.dimensions = %s"
    )
    found: dict[str, float] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, [*memory_ids, model, int(q.shape[0])])
        for memory_id, blob in cursor.fetchall():
            vector = np.frombuffer(bytes(blob), dtype=np.float32)
            length = float(np.linalg.norm(vector))
            if length > 0:
                found[memory_id] = max(0.0, min(1.0, float(vector @ q) / length))
    return found
