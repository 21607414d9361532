"""All vector SQL on PostgreSQL: a pgvector `embedding vector(<dims>)` column on `embeddings` with
an HNSW cosine index, KNN through that index (or an exact scan, for measuring recall), and the
index writes: handed, at the commit of the write that stored the vectors, to a thread that indexes
every write's vectors in one statement per batch, with a repair path for a commit whose index
write never ran. Until indexed, a vector is found by an exact comparison in every KNN query."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Iterable

import numpy as np
from django.conf import settings
from django.db import connection
from pgvector import Vector as PgVector

from memory import expiry
from memory.guard import runs_after_commit
from memory.threads import ConnectedThread, close_quietly, submit_beside

log = logging.getLogger(__name__)

INDEX_NAME = "embeddings_embedding_hnsw"
PENDING_INDEX_NAME = "embeddings_unindexed"


EXTENSION_SQL = "CREATE EXTENSION IF NOT EXISTS vector"
# ef_construction 128 instead of pgvector's 64: with 64, 2-3% of the benchmark's 100k vectors
# (sparse, in tight clusters of look-alike sentences) ended up unreachable in the graph (a search
# for a stored vector did not return it, whatever hnsw.ef_search), and recall@5 ranged from 0.95
# to 0.98 from one build to the next; with 128, about 0.5% and 0.98 to 0.99. It costs a third more
# per insert (about 39 ms instead of 30 for a job's 11 vectors, after the commit) and build time.
CREATE_INDEX_SQL = (
    f"CREATE INDEX {INDEX_NAME} ON embeddings USING hnsw (embedding vector_cosine_ops) "
    "WITH (ef_construction = 128)"
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

# pgvector stores a vector out of line (TOAST) by default. Then every distance the KNN query
# computes from a heap row costs a TOAST lookup, and the planner prices a sequential scan by the
# main table's pages only: with 10k vectors of the offline embedder (whose compressible blobs stay
# in the row: 600 pages, against 5,000 for the index) it chose a 50 ms exact scan over a 3 ms HNSW
# scan. Kept in the row, the vector is read with its row and the table's size is honest. PLAIN
# fits a row of up to about 1,900 dimensions; larger vectors stay compressible and move out of line
# only when they must (MAIN).
PLAIN_MAX_DIMENSIONS = 1900


def storage_sql(dimensions: int) -> str:
    storage = "PLAIN" if dimensions <= PLAIN_MAX_DIMENSIONS else "MAIN"
    return f"ALTER TABLE embeddings ALTER COLUMN embedding SET STORAGE {storage}"


# Rows stored before the storage change keep their out-of-line vectors until rewritten; the HNSW
# index is rebuilt (with the current build options) once afterwards instead of taking every
# rewritten row one by one.
REWRITE_SQL = (
    "UPDATE embeddings SET embedding = embedding::real[]::vector WHERE embedding IS NOT NULL"
)
REBUILD_SQL = [
    f"DROP INDEX IF EXISTS {INDEX_NAME}",
    "SET LOCAL maintenance_work_mem = '512MB'",
    CREATE_INDEX_SQL,
]

# The invariant the deferred index write and its repair rely on: a row whose float32 blob changed
# has no indexed vector (NULL) until the new one is written, so "blob without indexed vector" is
# exactly the set of rows still to index, whoever wrote the blob and however that write ended.
# An UPDATE that sets both (a bulk load) keeps its vector.
PENDING_SQL = [
    "CREATE FUNCTION embeddings_vector_changed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF NEW.vector IS DISTINCT FROM OLD.vector "
    "AND NEW.embedding IS NOT DISTINCT FROM OLD.embedding THEN NEW.embedding := NULL; END IF; "
    "RETURN NEW; END $$",
    "CREATE TRIGGER embeddings_vector_changed BEFORE UPDATE OF vector ON embeddings "
    "FOR EACH ROW EXECUTE FUNCTION embeddings_vector_changed()",
    # Small (only rows still to index, plus the few vectors that cannot be indexed): the repair
    # finds them without scanning the table.
    f"CREATE INDEX {PENDING_INDEX_NAME} ON embeddings (id) WHERE embedding IS NULL",
]
PENDING_DROP_SQL = [
    f"DROP INDEX IF EXISTS {PENDING_INDEX_NAME}",
    "DROP TRIGGER IF EXISTS embeddings_vector_changed ON embeddings",
    "DROP FUNCTION IF EXISTS embeddings_vector_changed()",
]


def literal(vector: np.ndarray) -> str:
    """pgvector's text form '[x,y,...]' (exact for float32 values)."""
    return PgVector(np.asarray(vector, dtype=np.float32)).to_text()


def indexable(vector: np.ndarray) -> bool:
    # A zero vector (text without words) has no direction: its cosine distance is undefined.
    return vector.shape[0] == settings.MEMORY_EMBEDDING_DIMENSIONS and bool(np.any(vector))


def _digest(vector: np.ndarray) -> str:
    """SHA-256 of the float32 blob this vector is stored as (embeddings.vector)."""
    return hashlib.sha256(np.asarray(vector, dtype=np.float32).tobytes()).hexdigest()


# Sets a vector only on a row still waiting for it (NULL) whose blob is still the one the vector
# was made from: a later write of the same row (another vector for that content) is never
# overwritten by an earlier write's late index insert, and a row indexed already is not indexed
# twice (an HNSW insert is the expensive part of a vector write). The rows are locked first, in
# content-hash order (the order writers upsert them in, memory.batch.upsert_embeddings): a batch
# of several writes' rows and a write of some of them wait for each other, never deadlock.
_SET_VECTORS_SQL = (
    "WITH locked AS MATERIALIZED (SELECT id FROM embeddings WHERE id = ANY(%s) "
    "AND embedding IS NULL ORDER BY content_hash FOR NO KEY UPDATE) "
    "UPDATE embeddings e SET embedding = v.embedding FROM (VALUES {values}) "
    "AS v(id, embedding, digest) WHERE e.id = v.id AND e.id IN (SELECT id FROM locked) "
    "AND e.embedding IS NULL AND encode(sha256(e.vector), 'hex') = v.digest"
)


def _set_vectors(rows: list[tuple[int, np.ndarray]]) -> int:
    if not rows:
        return 0
    values = ", ".join(["(%s::bigint, %s::vector, %s)"] * len(rows))
    params = [[eid for eid, _ in rows]]
    params += [value for eid, v in rows for value in (eid, literal(v), _digest(v))]
    with connection.cursor() as cursor:
        cursor.execute(_SET_VECTORS_SQL.format(values=values), params)
        return cursor.rowcount


def remove(embedding_ids: list[int]) -> None:
    """Nothing before the delete: the vector is a column of the `embeddings` row and leaves the
    HNSW index when the table is vacuumed after the commit."""


def erase_copies(vectors: list[tuple[int, str, int]]) -> dict:
    """No copy outside the table on PostgreSQL."""
    return {}


def erased(vectors: list[tuple[int, str, int]], written: dict) -> list[tuple[str, int]]:
    """Rows of these vectors still in `embeddings` (the HNSW index holds only what the table
    holds once it is vacuumed)."""
    ids = sorted({eid for eid, _, _ in vectors})
    if not ids:
        return []
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM embeddings WHERE id = ANY(%s)", [ids])
        n = cursor.fetchone()[0]
    return [("embeddings", n)] if n else []


def extension_loaded() -> bool:
    """Always: the PostgreSQL backend refuses to start without pgvector."""
    return True


def describe() -> dict:
    """What serves KNN, for the health report."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
    return {"backend": "pgvector", "pgvectorVersion": row[0] if row else None, "index": "hnsw"}


def search_engine() -> str:
    """'hnsw': pgvector's index (approximate)."""
    return "hnsw"


def index_vectors(items, *, replacing: set[int] | None = None) -> int:
    """Index the vectors of embeddings rows just written: (embedding id, vector[, model]), each
    the vector of its row's blob. `replacing` is not needed: a row whose blob changed lost its
    indexed vector to the trigger already.

    Inside a write transaction the HNSW inserts (milliseconds each) are handed at its commit to
    this process's indexer thread (INDEXER), which indexes them with those of other writes in one
    statement: they lengthen neither the transaction nor the write, and a search after the write
    finds the vectors anyway (`nearest_many` compares unindexed rows exactly). A vector that
    cannot go in (zero, other dimensions) leaves the row without one. Returns how many can go in.
    """
    rows = [(item[0], item[1]) for item in items if indexable(item[1])]
    if not rows:
        return 0
    if runs_after_commit(connection):
        connection.on_commit(lambda: _index_after_commit(rows), robust=True)
    else:
        _set_vectors(rows)
    return len(rows)


def _index_after_commit(rows: list[tuple[int, np.ndarray]]) -> None:
    if not INDEXER.add(rows):  # a backlog the thread is not keeping up with: index them here
        _set_vectors(rows)
        REPAIR.run_if_due()


class _Indexer:
    """This process's HNSW inserts, off the writers' path: a thread with its own connection
    (memory.threads.ConnectedThread) takes the rows of every write committed since its last
    batch and sets their indexed vectors in one statement. Rows it has not indexed yet stay
    `embedding IS NULL`, which searches compare exactly and the repair indexes if the process
    dies first, so a queued row is never lost, only late. At most BACKLOG rows wait: past that a
    writer indexes its own (as it did before this thread), so a burst cannot pile up unindexed
    rows that every search would then compare."""

    BACKLOG = 256
    BATCH = 128  # rows per statement: one long UPDATE would hold its rows' locks for seconds

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[tuple[int, np.ndarray]] = []
        self.flushing = False
        self.pid = 0
        self.thread = ConnectedThread("hnsw-indexer")

    def add(self, rows: list[tuple[int, np.ndarray]]) -> bool:
        """Queue rows for the thread; False (nothing queued) when the backlog is full."""
        with self.lock:
            if self.pid != os.getpid():  # a forked child starts with nothing queued
                self.pid, self.rows, self.flushing = os.getpid(), [], False
            if len(self.rows) + len(rows) > self.BACKLOG:
                return False
            self.rows.extend(rows)
            if not self.flushing:
                self.flushing = True
                self.thread.submit(self._flush)
        return True

    def wait(self, timeout: float = 30.0) -> bool:
        """Until every row queued so far is indexed (or failed, left to the repair)."""
        return self.thread.wait(timeout)

    def _flush(self) -> None:
        try:
            self._flush_batches()
        except BaseException:
            # Whatever stopped this flush, the next write must start one again: a flag left
            # set would stop indexing in this process for good (rows still queued go to that one).
            with self.lock:
                self.flushing = False
            raise

    def _flush_batches(self) -> None:
        while True:
            with self.lock:
                batch, self.rows = self.rows[: self.BATCH], self.rows[self.BATCH :]
                if not batch:
                    self.flushing = False
                    return
            try:
                with connection.cursor() as cursor:
                    # A lost commit of an index write leaves its rows unindexed, searched exactly
                    # and repaired: no flush of the log to wait for (nor one more for the next
                    # writer's commit to queue behind). The thread's connection does nothing else.
                    cursor.execute("SET synchronous_commit = off")
                _set_vectors(batch)
                REPAIR.run_if_due()
            except Exception:  # the rows stay unindexed: searched exactly, repaired later
                log.exception("could not index %d vectors; the repair will", len(batch))
                close_quietly(connection)


INDEXER = _Indexer()


def index_pending(*, older_than: float = 0.0, batch: int = 500) -> int:
    """Index stored vectors that have no indexed vector yet: the repair for a write whose
    post-commit index insert never ran (the process died between its commit and the insert).
    Only rows written more than `older_than` seconds ago (younger ones are their own write's to
    index), and at most `batch` vectors per call (each is an HNSW insert); rows whose vector
    cannot be indexed are passed over. Returns how many went in."""
    dims = settings.MEMORY_EMBEDDING_DIMENSIONS
    indexed, after = 0, 0
    while indexed < batch:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, vector FROM embeddings WHERE embedding IS NULL AND id > %s "
                "AND dimensions = %s AND created_at < now() - make_interval(secs => %s) "
                "ORDER BY id LIMIT %s",
                [after, dims, older_than, batch - indexed],
            )
            found = cursor.fetchall()
        if not found:
            break
        after = int(found[-1][0])
        pending = [(int(eid), np.frombuffer(bytes(blob), dtype=np.float32)) for eid, blob in found]
        indexed += _set_vectors([(eid, v) for eid, v in pending if indexable(v)])
    return indexed


def repair_matrix(*, every: float = 0.0) -> dict[str, str]:
    """Nothing to check: PostgreSQL serves KNN from pgvector's index, not a shared matrix file."""
    return {}


def repair_index(*, older_than: float = 60.0, limit: int = 500) -> int:
    """`index_pending` of at most `limit` rows written more than `older_than` seconds ago."""
    return index_pending(older_than=older_than, batch=limit)


class _Repair:
    """`index_pending` from a write's post-commit step, at most once a minute per process, for
    rows older than a minute: a vector whose insert was lost is indexed by a later write, and by
    the periodic sweep (pipeline.tasks.sweep -> memory.vectors.repair_index)."""

    EVERY_SECONDS = 60.0
    AGE_SECONDS = 60.0

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.next_at = 0.0

    def run_if_due(self) -> int:
        now = time.monotonic()
        with self.lock:
            if now < self.next_at:
                return 0
            self.next_at = now + self.EVERY_SECONDS
        repaired = index_pending(older_than=self.AGE_SECONDS)
        if repaired:
            log.warning("indexed %d vectors whose index write had not run", repaired)
        return repaired


REPAIR = _Repair()


def _locks_of_our_own() -> None:
    """A forked child's locks are its own: the parent's may have been held by its indexer thread
    at the fork (the indexer's, then the repair's after each batch), and that thread is not in
    the child to let them go."""
    INDEXER.lock = threading.Lock()
    REPAIR.lock = threading.Lock()


os.register_at_fork(after_in_child=_locks_of_our_own)


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


# Every query's k nearest through the HNSW index (LATERAL: one statement for a job's facts; the
# session's iterative scan may return a query's rows slightly out of order, they are re-sorted
# here), and the vectors not indexed yet, newest first, compared here exactly.
NEAREST_SQL = (
    "SELECT q.i, h.id, h.distance, NULL::bytea FROM unnest(%s::vector[]) WITH ORDINALITY "
    "AS q(v, i) CROSS JOIN LATERAL (SELECT id, embedding <=> q.v AS distance FROM embeddings "
    "WHERE model = %s ORDER BY distance LIMIT %s) h "
    "UNION ALL (SELECT 0, id, NULL, vector FROM embeddings WHERE embedding IS NULL "
    "AND model = %s AND dimensions = %s ORDER BY id DESC LIMIT %s)"
)
# Unindexed rows a search compares: the indexer's backlogs and the repair's (rows past these are
# found once indexed, as every row was before the indexer thread).
UNINDEXED_SEARCHED = 1000


def nearest(query: np.ndarray, *, model: str, k: int) -> list[tuple[int, float]]:
    """(embedding id, cosine distance) of the k nearest vectors of one model, through HNSW.

    The session runs with hnsw.iterative_scan = relaxed_order (set by the backend), so the scan
    goes on until k rows of this model are found.
    """
    return nearest_many([query], model=model, k=k)[0]


# A batch of at least this many queries sends half of them to an idle connection beside the
# caller's (memory.threads.BESIDE): ten queries took 17.5 ms of one backend at 100k vectors, 10.8
# in two halves side by side. In a job with a slow model the keyword leg is done by then; with
# a fast one it is still running on both, and the whole batch stays here.
SPLIT_QUERIES = 4


def nearest_many(queries: list[np.ndarray], *, model: str, k: int) -> list[list[tuple[int, float]]]:
    """`nearest` of each query, in one statement (or two, side by side, for a batch outside a
    transaction while a connection beside this one is idle: each query is searched on its own);
    vectors written but not indexed yet are compared exactly and count as any other."""
    return _nearest_split(queries, model, k, None)[0]


def nearest_owned_many(
    queries: list[np.ndarray], *, model: str, k: int, agent_id: str, exclude_id: str | None
) -> tuple[list[list[tuple[int, float]]], dict[int, list[str]]]:
    """`nearest_many`, and the live memories of the agent that own the neighbours found: each
    half of a split batch looks up the owners of its own neighbours on its own connection, so
    the two lookups run side by side as the two searches did."""
    return _nearest_split(queries, model, k, (agent_id, exclude_id))


def _nearest_split(queries, model: str, k: int, owned_by: tuple[str, str | None] | None):
    """(hits of each query, owners of the hits when `owned_by` names the agent and the excluded
    memory, else {})."""
    results: list[list[tuple[int, float]]] = [[] for _ in queries]
    usable = [i for i, query in enumerate(queries) if indexable(query)]
    parts, beside = ([usable] if usable else []), None
    # A connection of its own would not see what an open transaction wrote.
    if len(usable) >= SPLIT_QUERIES and not connection.in_atomic_block:
        # Each part's statement sees one snapshot: the vectors it finds through HNSW and the
        # unindexed ones it compares exactly are never a vector that one part's index holds and
        # the other's not.
        half = len(usable) // 2
        beside = submit_beside(_owned_part, queries, usable[half:], model, k, owned_by)
        if beside is not None:
            parts = [usable[:half], usable[half:]]
    found = [_owned_part(queries, parts[0], model, k, owned_by)] if parts else []
    if beside is not None:
        found.append(beside.result())
    owners: dict[int, list[str]] = {}
    for part, (hits, part_owners) in zip(parts, found, strict=True):
        for position, part_hits in zip(part, hits, strict=True):
            results[position] = part_hits
        owners.update(part_owners)
    return results, owners


def _owned_part(queries, usable: list[int], model: str, k: int, owned_by) -> tuple[list, dict]:
    """`_nearest_part`, and with `owned_by` the owners of its hits, on this thread's connection."""
    hits = _nearest_part(queries, usable, model, k)
    if owned_by is None:
        return hits, {}
    ids = sorted({eid for part_hits in hits for eid, _ in part_hits})
    return hits, (
        live_memories_for(ids, agent_id=owned_by[0], exclude_id=owned_by[1]) if ids else {}
    )


def _nearest_part(queries: list[np.ndarray], usable: list[int], model: str, k: int) -> list:
    """The k nearest of queries[i] for each i of `usable`, from one statement on this thread's
    connection, the unindexed vectors it returns compared exactly."""
    results: list[list[tuple[int, float]]] = [[] for _ in queries]
    unindexed: list[tuple[int, np.ndarray]] = []
    with connection.cursor() as cursor:
        cursor.execute(
            NEAREST_SQL,
            [
                [literal(queries[i]) for i in usable],
                model,
                k,
                model,
                settings.MEMORY_EMBEDDING_DIMENSIONS,
                UNINDEXED_SEARCHED,
            ],
        )
        for position, eid, distance, blob in cursor.fetchall():
            if blob is not None:
                unindexed.append((int(eid), np.frombuffer(bytes(blob), dtype=np.float32)))
            elif distance is not None:
                results[usable[position - 1]].append((int(eid), float(distance)))
    if unindexed:
        _add_exact(results, queries, usable, unindexed)
    for i in usable:
        results[i].sort(key=lambda hit: (hit[1], hit[0]))
        del results[i][k:]
    return [results[i] for i in usable]


def _add_exact(results, queries, usable, unindexed) -> None:
    """Each query's cosine distance to the unindexed vectors (as pgvector computes it), merged
    into its hits; ids the index returned already are not added twice."""
    ids = [eid for eid, vector in unindexed if np.any(vector)]
    if not ids:
        return
    rows = np.vstack([vector for _, vector in unindexed if np.any(vector)]).astype(np.float64)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    for i in usable:
        query = np.asarray(queries[i], dtype=np.float64)
        distances = 1.0 - rows @ (query / np.linalg.norm(query))
        seen = {eid for eid, _ in results[i]}
        results[i].extend(
            (eid, float(d)) for eid, d in zip(ids, distances, strict=True) if eid not in seen
        )


def catch_up(model: str) -> None:
    """Nothing to catch up: the HNSW index lives in the database."""


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
    """Map embedding ids (at least one) to the live (not deleted, not expired) memory ids of one
    agent that carry that content."""
    marks = ",".join(["%s"] * len(embedding_ids))
    unexpired, now = expiry.unexpired_sql("expires_at")
    # LATERAL keeps the plan driven by the few embedding ids (one index probe each), whatever the
    # planner's statistics say about the agent's live memories.
    sql = (
        "SELECT e.id, m.id FROM embeddings e CROSS JOIN LATERAL (SELECT id FROM memories "
        f"WHERE content_hash = e.content_hash AND NOT is_deleted AND agent_id = %s AND {unexpired}"
        + (" AND id <> %s" if exclude_id else "")
        + f") m WHERE e.id IN ({marks})"
    )
    params: list = [agent_id, *now, *([exclude_id] if exclude_id else []), *embedding_ids]
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
