"""The vector index. On SQLite all of its SQL is here: the sqlite-vec vec0 index `vec_embeddings`
mirroring `embeddings`, and KNN through it or the machine's shared matrix (memory.matrix). On PostgreSQL
memory.vectors_postgres holds the SQL (pgvector, HNSW); the functions below pick it by the
connection's vendor, so callers never see the engine."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

import numpy as np
from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from memory import matrix, vectors_postgres
from memory.guard import open_write_transaction, runs_after_commit

log = logging.getLogger(__name__)


@dataclass
class Vector:
    """A vector computed before the transaction, with the model that produced it."""

    values: np.ndarray
    model: str


def vector_to_blob(vector: np.ndarray) -> bytes:
    """The float32 bytes stored in `embeddings.vector`."""
    return np.asarray(vector, dtype=np.float32).tobytes()


def _postgres():
    """The PostgreSQL module when the store is on PostgreSQL, else None (SQLite: this module)."""
    if connection.vendor != "postgresql":
        return None
    return vectors_postgres


def extension_loaded() -> bool:
    """True when the engine's vector index is usable (the PostgreSQL backend refuses to start
    without pgvector)."""
    if _postgres():
        return True
    connection.ensure_connection()
    return bool(getattr(connection, "sqlite_vec_loaded", False))


def describe() -> dict:
    """What serves KNN, for the health report (SQLite keys as before; pgvector's on PostgreSQL)."""
    if _postgres():
        with connection.cursor() as cursor:
            cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            row = cursor.fetchone()
        return {"backend": "pgvector", "pgvectorVersion": row[0] if row else None, "index": "hnsw"}
    loaded = extension_loaded()
    report = {"backend": settings.MEMORY_VECTOR_BACKEND, "sqliteVecLoaded": loaded}
    if loaded:
        with connection.cursor() as cursor:
            cursor.execute("SELECT vec_version()")
            report["sqliteVecVersion"] = cursor.fetchone()[0]
    return report


def create_index_sql(dimensions: int) -> str:
    # rowid = embeddings.id; `model` is a metadata column so one KNN never mixes two models.
    return (
        "CREATE VIRTUAL TABLE IF NOT EXISTS vec_embeddings USING vec0("
        f"embedding float[{int(dimensions)}] distance_metric=cosine, model text)"
    )


def index_vector(embedding_id: int, vector: np.ndarray, model: str) -> bool:
    """Put one vector into the KNN index (replacing any previous one); False if it cannot go in."""
    if engine := _postgres():
        return engine.index_vector(embedding_id, vector)
    return index_vectors([(embedding_id, vector, model)]) == 1


def index_vectors(
    items: list[tuple[int, np.ndarray, str]], *, replacing: set[int] | None = None
) -> int:
    """Mirror many (embedding id, vector, model) into the KNN index; returns how many can go in.

    On SQLite, inside a write transaction, the previous vectors of `replacing` (the ids that had
    one; None: all of them) leave the index with the transaction, and the new ones go in right
    after its commit, in the same thread, before the write function returns: a vec0 insert
    rewrites pages of its chunk blobs, time the write lock is not held for. A commit whose index
    insert never ran (the process died in between) is caught up by `repair_index`.
    """
    if engine := _postgres():
        return engine.index_vectors([(embedding_id, vector) for embedding_id, vector, _ in items])
    if not extension_loaded() or not items:
        return 0
    gone = [(eid,) for eid, _, _ in items if replacing is None or eid in replacing]
    if gone:
        with connection.cursor() as cursor:
            # One rowid at a time (vec0 answers `rowid IN (...)` by scanning every vector), in one
            # executemany; a rowid with no row costs a lookup in vec0's rowid table.
            cursor.executemany("DELETE FROM vec_embeddings WHERE rowid = %s", gone)
    usable = [(eid, v, m) for eid, v, m in items if _indexable(v)]
    if usable:
        if runs_after_commit(connection):
            connection.on_commit(partial(_insert_after_commit, usable))
        else:
            _insert(usable)
    return len(usable)


def _indexable(vector: np.ndarray) -> bool:
    # A zero vector (text without words) has no direction: cosine is undefined.
    return vector.shape[0] == settings.MEMORY_EMBEDDING_DIMENSIONS and bool(np.any(vector))


def _insert(items: list[tuple[int, np.ndarray, str]]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO vec_embeddings(rowid, embedding, model) VALUES "
            + ", ".join(["(%s, %s, %s)"] * len(items)),
            [
                value
                for eid, vector, model in items
                for value in (eid, np.asarray(vector, dtype=np.float32).tobytes(), model)
            ],
        )


def _insert_after_commit(items: list[tuple[int, np.ndarray, str]]) -> None:
    """After the commit (autocommit statements): the rows still missing go in. A failure leaves
    them to `repair_index`; the write itself has committed and stands."""
    try:
        with connection.cursor() as cursor:
            marks = ",".join(["%s"] * len(items))
            cursor.execute(
                f"SELECT rowid FROM vec_embeddings_rowids WHERE rowid IN ({marks})",
                [eid for eid, _, _ in items],
            )
            present = {row[0] for row in cursor.fetchall()}
        missing = [item for item in items if item[0] not in present]
        if missing:
            _insert(missing)
    except DatabaseError as exc:
        log.warning("KNN index insert after commit failed (repair_index will retry): %s", exc)


def repair_index(*, older_than: float = 60.0, limit: int = 500) -> int:
    """Index the stored vectors that have no KNN index row (a commit whose post-commit insert
    never ran), written more than `older_than` seconds ago (younger ones are their own write's
    to index); returns how many went in. Vectors that cannot be indexed are left out again."""
    if engine := _postgres():
        return engine.index_pending(older_than=older_than, batch=limit)
    if not extension_loaded():
        return 0
    before = timezone.now() - timedelta(seconds=older_than)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT e.id, e.vector, e.model FROM embeddings e WHERE e.dimensions = %s "
            "AND e.created_at < %s AND NOT EXISTS "
            "(SELECT 1 FROM vec_embeddings_rowids r WHERE r.rowid = e.id) LIMIT %s",
            [
                settings.MEMORY_EMBEDDING_DIMENSIONS,
                connection.ops.adapt_datetimefield_value(before),
                limit,
            ],
        )
        rows = cursor.fetchall()
    usable = [
        (int(eid), vector, model)
        for eid, blob, model in rows
        if _indexable(vector := np.frombuffer(bytes(blob), dtype=np.float32))
    ]
    if usable:
        _insert(usable)
    return len(usable)


def search_engine() -> str:
    """'matrix' (default: the shared quantised matrix, exact re-rank) or 'vec0' (sqlite-vec scan) on
    SQLite; 'hnsw' (pgvector's index, approximate) on PostgreSQL."""
    if _postgres():
        return "hnsw"
    if not extension_loaded():
        return "matrix"
    return getattr(settings, "MEMORY_VECTOR_SEARCH", "matrix")


def nearest(query: np.ndarray, *, model: str, k: int) -> list[tuple[int, float]]:
    """(embedding id, cosine distance) of the k nearest vectors of one model, nearest first."""
    return nearest_many([query], model=model, k=k)[0]


def nearest_many(queries: list[np.ndarray], *, model: str, k: int) -> list[list[tuple[int, float]]]:
    """`nearest` for several queries: one pass over the shared matrix for all of them."""
    results: list[list[tuple[int, float]]] = [[] for _ in queries]
    # A zero vector (text without words) has no direction: it has no neighbours.
    usable = [i for i, query in enumerate(queries) if np.any(query)]
    if not usable:
        return results
    if engine := _postgres():
        for i in usable:
            results[i] = engine.nearest(queries[i], model=model, k=k)
        return results
    # Inside a write transaction the matrix could learn rows that are later rolled back.
    if search_engine() == "matrix" and not open_write_transaction():
        found = matrix.INDEX.nearest_many(np.vstack([queries[i] for i in usable]), model=model, k=k)
        for i, hits in zip(usable, found, strict=True):
            results[i] = hits
        return results
    for i in usable:
        results[i] = nearest_vec0(queries[i], model=model, k=k)
    return results


def catch_up(model: str) -> None:
    """Bring this process's shared matrix of `model` (if it maps one) up to the store's last
    change now, so the search that follows starts scanning at once (a job calls it while its
    embedding call is on the wire). Nothing to do on PostgreSQL or with the vec0 scan. Only a head
    start: a failure is logged and left to the search, which meets it again."""
    if _postgres() or search_engine() != "matrix" or open_write_transaction():
        return
    try:
        matrix.INDEX.catch_up(model)
    except Exception as exc:
        log.warning("the shared matrix could not catch up ahead of a search: %s", exc)


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
    if engine := _postgres():
        return engine.live_memories_for(embedding_ids, agent_id=agent_id, exclude_id=exclude_id)
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
    """(memory id, similarity in [0,1]) of the agent's live memories nearest to the query."""
    return search_many([query], model=model, agent_id=agent_id, limit=limit, exclude_id=exclude_id)[
        0
    ]


def search_many(
    queries: list[np.ndarray],
    *,
    model: str,
    agent_id: str,
    limit: int,
    exclude_id: str | None = None,
) -> list[list[tuple[str, float]]]:
    """`search` for several queries: one KNN pass and one owner lookup per round.

    The index holds vectors of every agent and of deleted memories, so the scan asks for more
    neighbours than needed and widens (for the queries still short) until `limit` live rows are
    found, the index is exhausted, or 5,120 neighbours were looked at (a bound on the cost of one
    search: an agent with no memory among the nearest 5,120 of the whole index gets keyword
    results only).
    """
    results: list[list[tuple[str, float]]] = [[] for _ in queries]
    waiting = list(range(len(queries)))
    # Twice what is needed covers the usual share of other agents' and forgotten rows; a query
    # still short after that widens (x4 a round), so a crowded index costs rounds, not answers.
    k = max(limit * 2, 20)
    while waiting:
        neighbours = nearest_many([queries[i] for i in waiting], model=model, k=k)
        owners = live_memories_for(
            sorted({eid for hits in neighbours for eid, _ in hits}),
            agent_id=agent_id,
            exclude_id=exclude_id,
        )
        still = []
        for i, hits in zip(waiting, neighbours, strict=True):
            found = [
                (memory_id, max(0.0, min(1.0, 1.0 - distance)))
                for embedding_id, distance in hits
                for memory_id in owners.get(embedding_id, [])
            ]
            results[i] = found[:limit]
            if len(found) < limit and len(hits) >= k and k < 4096:
                still.append(i)
        waiting = still
        k *= 4
    return results


def similarities_for(query: np.ndarray, *, model: str, memory_ids: list[str]) -> dict[str, float]:
    """Cosine similarity in [0,1] of specific memories to the query (memories without a vector of
    this model are left out)."""
    return similarities_for_many([query], model=model, memory_ids=[memory_ids])[0]


def similarities_for_many(
    queries: list[np.ndarray], *, model: str, memory_ids: list[list[str]]
) -> list[dict[str, float]]:
    """`similarities_for` of several queries, each with its own memories: one query in all."""
    results: list[dict[str, float]] = [{} for _ in queries]
    wanted = sorted({memory_id for ids in memory_ids for memory_id in ids})
    if not wanted or not queries:
        return results
    dimensions = int(np.asarray(queries[0]).shape[0])
    stored: dict[str, np.ndarray] = {}
    for memory_id, blob in _vectors_of(wanted, model=model, dimensions=dimensions):
        vector = np.frombuffer(blob, dtype=np.float32)
        length = float(np.linalg.norm(vector))
        if length > 0:
            stored[memory_id] = vector / length
    for i, (query, ids) in enumerate(zip(queries, memory_ids, strict=True)):
        norm = float(np.linalg.norm(query))
        if norm == 0:
            continue
        q = np.asarray(query, dtype=np.float32) / norm
        for memory_id in ids:
            if memory_id in stored:
                results[i][memory_id] = max(0.0, min(1.0, float(stored[memory_id] @ q)))
    return results


def _vectors_of(memory_ids: list[str], *, model: str, dimensions: int) -> list[tuple[str, bytes]]:
    if engine := _postgres():
        return engine.vectors_of(memory_ids, model=model, dimensions=dimensions)
    marks = ",".join(["%s"] * len(memory_ids))
    sql = (
        "SELECT m.id, e.vector FROM memories m CROSS JOIN embeddings e ON e.content_hash = m.content_hash "
        f"WHERE m.id IN ({marks}) AND e.model = %s AND e.dimensions = %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*memory_ids, model, dimensions])
        return [(memory_id, bytes(blob)) for memory_id, blob in cursor.fetchall()]
