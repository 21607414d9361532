"""All vector SQL on SQLite: the sqlite-vec vec0 index `vec_embeddings` mirroring `embeddings`,
and KNN through the machine's shared matrix (memory.matrix, the default) or the vec0 scan."""

from __future__ import annotations

import logging
from datetime import timedelta
from functools import partial

import numpy as np
from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from memory import expiry, matrix, matrix_erase
from memory.guard import open_write_transaction, runs_after_commit

log = logging.getLogger(__name__)


def extension_loaded() -> bool:
    """True when sqlite-vec is loaded into the store's connection (the vec0 index is usable)."""
    connection.ensure_connection()
    return bool(getattr(connection, "sqlite_vec_loaded", False))


def describe() -> dict:
    """What serves KNN, for the health report."""
    loaded = extension_loaded()
    report = {"backend": settings.MEMORY_VECTOR_BACKEND, "sqliteVecLoaded": loaded}
    if loaded:
        with connection.cursor() as cursor:
            cursor.execute("SELECT vec_version()")
            report["sqliteVecVersion"] = cursor.fetchone()[0]
    state = matrix.STATE
    # Set while the shared matrix cannot be used: searches run exactly on vec0 (or SQL) meanwhile.
    report["degraded"] = f"exact scan: {state['unavailable']}" if state["unavailable"] else None
    report["matrix"] = matrix.damage_report()
    return report


def create_index_sql(dimensions: int) -> str:
    # rowid = embeddings.id; `model` is a metadata column so one KNN never mixes two models.
    return (
        "CREATE VIRTUAL TABLE IF NOT EXISTS vec_embeddings USING vec0("
        f"embedding float[{int(dimensions)}] distance_metric=cosine, model text)"
    )


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


def remove(embedding_ids: list[int]) -> None:
    """Delete these vectors' vec0 rows (sqlite-vec zeroes a deleted vector's bytes in its chunk)."""
    if extension_loaded() and embedding_ids:
        with connection.cursor() as cursor:
            cursor.executemany(
                "DELETE FROM vec_embeddings WHERE rowid = %s", [(eid,) for eid in embedding_ids]
            )


def erase_copies(vectors: list[tuple[int, str, int]]) -> dict:
    """Zero the shared matrix rows of these deleted vectors: {(model, dims): rows zeroed}."""
    by_matrix: dict[tuple[str, int], list[int]] = {}
    for eid, model, dims in vectors:
        by_matrix.setdefault((model, dims), []).append(eid)
    return {
        key: matrix_erase.erase(matrix.INDEX, key[0], key[1], ids)
        for key, ids in sorted(by_matrix.items())
    }


def erased(vectors: list[tuple[int, str, int]], written: dict) -> list[tuple[str, int]]:
    """Where these deleted vectors are still found: vec0 rows, and matrix rows that carry their
    ids or were not zeroed."""
    ids = sorted({eid for eid, _, _ in vectors})
    found: list[tuple[str, int]] = []
    if ids and extension_loaded():
        marks = ",".join(["%s"] * len(ids))
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT COUNT(*) FROM vec_embeddings_rowids WHERE rowid IN ({marks})", ids
            )
            if n := cursor.fetchone()[0]:
                found.append(("vec_embeddings", n))
    left = sum(
        matrix_erase.still_held(
            matrix.INDEX, model, dims, [e for e, m, d in vectors if (m, d) == (model, dims)], rows
        )
        for (model, dims), rows in written.items()
    )
    if left:
        found.append(("vector matrix file", left))
    return found


def search_engine() -> str:
    """'matrix' (default: the shared quantised matrix, exact re-rank) or 'vec0' (sqlite-vec scan)."""
    if not extension_loaded():
        return "matrix"
    return getattr(settings, "MEMORY_VECTOR_SEARCH", "matrix")


def nearest_many(queries: list[np.ndarray], *, model: str, k: int) -> list[list[tuple[int, float]]]:
    """(embedding id, cosine distance) of the k nearest vectors of one model to each query (none of
    them zero), nearest first: one pass over the shared matrix for all of them."""
    # Inside a write transaction the matrix could learn rows that are later rolled back.
    if search_engine() == "matrix" and not open_write_transaction():
        try:
            found = matrix.INDEX.nearest_many(np.vstack(queries), model=model, k=k)
            matrix.STATE["unavailable"] = None
            return found
        except matrix.MatrixUnavailable as exc:
            log.warning("shared vector matrix unavailable, searching exactly instead: %s", exc)
            matrix.STATE["unavailable"] = str(exc)
        if not extension_loaded():
            return _exact_scan(queries, model=model, k=k)
    return [nearest_vec0(query, model=model, k=k) for query in queries]


def nearest_owned_many(
    queries: list[np.ndarray], *, model: str, k: int, agent_id: str, exclude_id: str | None
) -> tuple[list[list[tuple[int, float]]], dict[int, list[str]]]:
    """`nearest_many`, and the live memories of the agent that own the neighbours found."""
    found = nearest_many(queries, model=model, k=k)
    ids = sorted({eid for hits in found for eid, _ in hits})
    owners = live_memories_for(ids, agent_id=agent_id, exclude_id=exclude_id) if ids else {}
    return found, owners


def _exact_scan(queries: list[np.ndarray], *, model: str, k: int) -> list[list[tuple[int, float]]]:
    """Exact cosine KNN over the stored vectors (no index at all): the last resort."""
    units = matrix.unit_rows(np.vstack(queries))
    best: list[list[tuple[float, int]]] = [[] for _ in queries]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, vector FROM embeddings WHERE model = %s AND dimensions = %s",
            [model, units.shape[1]],
        )
        while rows := cursor.fetchmany(5000):
            ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
            stored = matrix.unit_rows(
                np.vstack([np.frombuffer(bytes(r[1]), np.float32) for r in rows])
            )
            scores = units @ stored.T
            take = min(k, len(rows))
            for i, row in enumerate(scores):
                top = np.argpartition(-row, take - 1)[:take]
                best[i] = sorted(best[i] + [(-float(row[j]), int(ids[j])) for j in top])[:k]
    return [[(int(eid), float(1.0 + neg)) for neg, eid in hits] for hits in best]


def repair_matrix(*, every: float = 0.0) -> dict[str, str]:
    """Compare the shared matrix of each stored model with its vectors and rebuild a damaged one
    (the sweep calls it at most every `every` seconds per process): {model: damage found}."""
    now = timezone.now().timestamp()
    if search_engine() != "matrix" or now - _last_check.get("at", 0.0) < every:
        return {}
    _last_check["at"] = now
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT model FROM embeddings WHERE dimensions = %s",
            [settings.MEMORY_EMBEDDING_DIMENSIONS],
        )
        models = [row[0] for row in cursor.fetchall()]
    found = {}
    for model in models:
        damage = matrix.INDEX.verify(model, settings.MEMORY_EMBEDDING_DIMENSIONS)
        if damage:
            found[model] = damage
    return found


_last_check: dict[str, float] = {}


def catch_up(model: str) -> None:
    """Bring this process's shared matrix of `model` (if it maps one) up to the store's last
    change now, so the search that follows starts scanning at once (a job calls it while its
    embedding call is on the wire). Nothing to do with the vec0 scan. Only a head start: a failure
    is logged and left to the search, which meets it again."""
    if search_engine() != "matrix" or open_write_transaction():
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
    """Map embedding ids (at least one) to the live (not deleted, not expired) memory ids of one
    agent that carry that content."""
    marks = ",".join(["%s"] * len(embedding_ids))
    unexpired, now = expiry.unexpired_sql("+m.expires_at")
    sql = (
        # CROSS JOIN keeps SQLite on this order (ids first, then the content_hash index): without
        # statistics it otherwise scans every live memory of the agent.
        "SELECT e.id, m.id FROM embeddings e CROSS JOIN memories m ON m.content_hash = e.content_hash "
        f"WHERE e.id IN ({marks}) AND m.is_deleted = 0 AND m.agent_id = %s AND {unexpired}"
    )
    params: list = [*embedding_ids, agent_id, *now]
    if exclude_id:
        sql += " AND m.id != %s"
        params.append(exclude_id)
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
        "SELECT m.id, e.vector FROM memories m CROSS JOIN embeddings e ON e.content_hash = m.content_hash "
        f"WHERE m.id IN ({marks}) AND e.model = %s AND e.dimensions = %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*memory_ids, model, dimensions])
        return [(memory_id, bytes(blob)) for memory_id, blob in cursor.fetchall()]
