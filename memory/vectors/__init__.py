"""The vector index, whichever engine holds it: sqlite-vec and the shared matrix on SQLite
(memory.vectors.sqlite), pgvector with HNSW on PostgreSQL (memory.vectors.postgres). Each call
picks the engine's module once, so callers never see the engine; what is the same on both (the
vector a write carries, its blob, the widening search, the exact similarities) is here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from memory import backend
from memory.vectors import postgres, sqlite
from memory.vectors.sqlite import nearest_vec0  # noqa: F401 (SQLite's exact scan, for its tests)


@dataclass
class Vector:
    """A vector computed before the transaction, with the model that produced it."""

    values: np.ndarray
    model: str


def vector_to_blob(vector: np.ndarray) -> bytes:
    """The float32 bytes stored in `embeddings.vector`."""
    return np.asarray(vector, dtype=np.float32).tobytes()


def _engine():
    """The vector module of the store's engine."""
    return postgres if backend.is_postgres() else sqlite


def extension_loaded() -> bool:
    """True when the engine's vector index is usable."""
    return _engine().extension_loaded()


def describe() -> dict:
    """What serves KNN, for the health report (SQLite's keys, or pgvector's on PostgreSQL)."""
    return _engine().describe()


def search_engine() -> str:
    """'matrix' (the shared quantised matrix, exact re-rank) or 'vec0' (sqlite-vec scan) on
    SQLite; 'hnsw' (pgvector's index, approximate) on PostgreSQL."""
    return _engine().search_engine()


def index_vector(embedding_id: int, vector: np.ndarray, model: str) -> bool:
    """Put one vector into the KNN index (replacing any previous one); False if it cannot go in."""
    return index_vectors([(embedding_id, vector, model)]) == 1


def index_vectors(
    items: list[tuple[int, np.ndarray, str]], *, replacing: set[int] | None = None
) -> int:
    """Mirror many (embedding id, vector, model) into the KNN index; returns how many can go in.

    Inside a write transaction the index inserts run right after its commit, before the write
    function returns (`replacing`: the ids that had a vector; None: all of them); a commit whose
    index insert never ran is caught up by `repair_index`.
    """
    return _engine().index_vectors(items, replacing=replacing)


def remove(embedding_ids: list[int]) -> None:
    """Take these vectors out of the KNN index, inside the caller's transaction and before their
    `embeddings` rows are deleted (a purge): sqlite-vec's rows go, their bytes zeroed; pgvector's
    go with the rows and leave the HNSW index when the table is vacuumed."""
    _engine().remove(embedding_ids)


def erase_copies(vectors: list[tuple[int, str, int]]) -> dict:
    """After the commit that deleted these (id, model, dimensions) vectors: the rows of the shared
    matrix files that held them are zeroed (SQLite). Returns what the check needs (`erased`)."""
    return _engine().erase_copies(vectors)


def erased(vectors: list[tuple[int, str, int]], written: dict) -> list[tuple[str, int]]:
    """Where any of these deleted vectors is still indexed: (place, count), empty when none is."""
    return _engine().erased(vectors, written)


def repair_index(*, older_than: float = 60.0, limit: int = 500) -> int:
    """Index the stored vectors that have no KNN index row (a commit whose post-commit insert
    never ran), written more than `older_than` seconds ago (younger ones are their own write's
    to index); returns how many went in. Vectors that cannot be indexed are left out again."""
    return _engine().repair_index(older_than=older_than, limit=limit)


def repair_matrix(*, every: float = 0.0) -> dict[str, str]:
    """Check the shared matrix file against the stored vectors and rebuild it where they differ
    (at most every `every` seconds per process); {model: the damage found}. SQLite only."""
    return _engine().repair_matrix(every=every)


def catch_up(model: str) -> None:
    """Bring this process's view of `model`'s vectors up to the store's last change now, so the
    search that follows starts at once (a job calls it while its embedding call is on the wire);
    only the shared matrix has anything to do."""
    _engine().catch_up(model)


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
    found = _engine().nearest_many([queries[i] for i in usable], model=model, k=k)
    for i, hits in zip(usable, found, strict=True):
        results[i] = hits
    return results


def nearest_owned_many(
    queries: list[np.ndarray], *, model: str, k: int, agent_id: str, exclude_id: str | None
) -> tuple[list[list[tuple[int, float]]], dict[int, list[str]]]:
    """`nearest_many` of the queries, and `live_memories_for` of every neighbour found (on
    PostgreSQL each half of a batch looks up its own neighbours' owners, on the connection that
    found them, side by side)."""
    results: list[list[tuple[int, float]]] = [[] for _ in queries]
    usable = [i for i, query in enumerate(queries) if np.any(query)]
    if not usable:
        return results, {}
    found, owners = _engine().nearest_owned_many(
        [queries[i] for i in usable], model=model, k=k, agent_id=agent_id, exclude_id=exclude_id
    )
    for i, hits in zip(usable, found, strict=True):
        results[i] = hits
    return results, owners


def live_memories_for(
    embedding_ids: list[int], *, agent_id: str, exclude_id: str | None
) -> dict[int, list[str]]:
    """Map embedding ids to the live memory ids of one agent that carry that content."""
    if not embedding_ids:
        return {}
    return _engine().live_memories_for(embedding_ids, agent_id=agent_id, exclude_id=exclude_id)


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
    keep: Callable[[list[str]], set[str]] | None = None,
) -> list[list[tuple[str, float]]]:
    """`search` for several queries: one KNN pass per round and the owners of its neighbours
    (looked up once, or on PostgreSQL once per half of a batch it splits).

    The index holds vectors of every agent and of deleted memories, so the scan asks for more
    neighbours than needed and widens (for the queries still short) until `limit` live rows are
    found, the index is exhausted, or 5,120 neighbours were looked at (a bound on the cost of one
    search: an agent with no memory among the nearest 5,120 of the whole index gets keyword
    results only). With `keep` (the memory ids a filter admits, of the ids given), only those
    count, and the scan widens until `limit` of them are found or the index is exhausted: a
    filter never hides a match.
    """
    results: list[list[tuple[str, float]]] = [[] for _ in queries]
    waiting = list(range(len(queries)))
    # Twice what is needed covers the usual share of other agents' and forgotten rows; a query
    # still short after that widens (x4 a round), so a crowded index costs rounds, not answers.
    k = max(limit * 2, 20)
    while waiting:
        neighbours, owners = nearest_owned_many(
            [queries[i] for i in waiting],
            model=model,
            k=k,
            agent_id=agent_id,
            exclude_id=exclude_id,
        )
        if keep is not None:
            kept = keep(sorted({mid for ids in owners.values() for mid in ids}))
            owners = {eid: [mid for mid in ids if mid in kept] for eid, ids in owners.items()}
        still = []
        for i, hits in zip(waiting, neighbours, strict=True):
            found = [
                (memory_id, max(0.0, min(1.0, 1.0 - distance)))
                for embedding_id, distance in hits
                for memory_id in owners.get(embedding_id, [])
            ]
            results[i] = found[:limit]
            if len(found) < limit and len(hits) >= k and (k < 4096 or keep is not None):
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
    found = _engine().vectors_of(wanted, model=model, dimensions=dimensions)
    for memory_id, blob in found:
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
