"""Per-process in-memory vector matrix for exact cosine KNN, kept in step with the `embeddings` table
through the `embedding_changes` log (filled by triggers). Costs N x dims x 4 bytes per process
(about 307 MB for 100k vectors of 768 dimensions); a query is one matrix-vector product."""

from __future__ import annotations

import threading

import numpy as np
from django.db import connection

CHUNK = 500


class MatrixIndex:
    """Normalised float32 rows of one embedding model; dead rows are masked, not moved."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.model: str | None = None
        self.dims = 0
        self.matrix = np.zeros((0, 0), dtype=np.float32)
        self.ids = np.zeros(0, dtype=np.int64)
        self.alive = np.zeros(0, dtype=bool)
        self.size = 0
        self.row_of: dict[int, int] = {}
        self.seq = -1
        self.database: str | None = None

    # -- loading -----------------------------------------------------------------------------------
    def _reset(self, model: str, dims: int, capacity: int) -> None:
        self.model, self.dims = model, dims
        self.matrix = np.zeros((max(capacity, 1024), dims), dtype=np.float32)
        self.ids = np.zeros(self.matrix.shape[0], dtype=np.int64)
        self.alive = np.zeros(self.matrix.shape[0], dtype=bool)
        self.size = 0
        self.row_of = {}

    def _grow(self) -> None:
        capacity = self.matrix.shape[0] * 2
        matrix = np.zeros((capacity, self.dims), dtype=np.float32)
        matrix[: self.size] = self.matrix[: self.size]
        ids = np.zeros(capacity, dtype=np.int64)
        ids[: self.size] = self.ids[: self.size]
        alive = np.zeros(capacity, dtype=bool)
        alive[: self.size] = self.alive[: self.size]
        self.matrix, self.ids, self.alive = matrix, ids, alive

    def _put(self, embedding_id: int, blob: bytes) -> None:
        vector = np.frombuffer(bytes(blob), dtype=np.float32)
        if vector.shape[0] != self.dims:
            self._drop(embedding_id)
            return
        norm = float(np.linalg.norm(vector))
        row = self.row_of.get(embedding_id)
        if row is None:
            if self.size == self.matrix.shape[0]:
                self._grow()
            row = self.size
            self.size += 1
            self.row_of[embedding_id] = row
            self.ids[row] = embedding_id
        self.matrix[row] = vector / norm if norm > 0 else vector
        self.alive[row] = True

    def _drop(self, embedding_id: int) -> None:
        row = self.row_of.get(embedding_id)
        if row is not None:
            self.alive[row] = False

    def _full_load(self, cursor, model: str, dims: int) -> None:
        cursor.execute("SELECT COALESCE(MAX(seq), 0) FROM embedding_changes")
        seq = cursor.fetchone()[0]
        cursor.execute(
            "SELECT COUNT(*) FROM embeddings WHERE model = %s AND dimensions = %s", [model, dims]
        )
        self._reset(model, dims, int(cursor.fetchone()[0] * 1.25) + 16)
        cursor.execute(
            "SELECT id, vector FROM embeddings WHERE model = %s AND dimensions = %s", [model, dims]
        )
        while rows := cursor.fetchmany(5000):
            for embedding_id, blob in rows:
                self._put(int(embedding_id), blob)
        self.seq = seq

    def _catch_up(self, cursor) -> bool:
        """Apply logged changes since self.seq; False when the log was pruned past us."""
        cursor.execute("SELECT MIN(seq), MAX(seq) FROM embedding_changes")
        low, high = cursor.fetchone()
        if high is None or high <= self.seq:
            return True
        if low is not None and low > self.seq + 1:
            return False
        cursor.execute(
            "SELECT DISTINCT embedding_id FROM embedding_changes WHERE seq > %s", [self.seq]
        )
        changed = [int(row[0]) for row in cursor.fetchall()]
        for start in range(0, len(changed), CHUNK):
            part = changed[start : start + CHUNK]
            marks = ",".join(["%s"] * len(part))
            cursor.execute(
                f"SELECT id, vector, model, dimensions FROM embeddings WHERE id IN ({marks})", part
            )
            found = {int(row[0]): row for row in cursor.fetchall()}
            for embedding_id in part:
                row = found.get(embedding_id)
                if row is None or row[2] != self.model or int(row[3]) != self.dims:
                    self._drop(embedding_id)
                else:
                    self._put(embedding_id, row[1])
        self.seq = high
        return True

    def refresh(self, model: str, dims: int) -> None:
        database = connection.settings_dict["NAME"]
        with connection.cursor() as cursor:
            if (
                self.model != model
                or self.dims != dims
                or self.database != database
                or not self._catch_up(cursor)
            ):
                self._full_load(cursor, model, dims)
                self.database = database

    # -- querying ------------------------------------------------------------------------------------
    def nearest(self, query: np.ndarray, *, model: str, k: int) -> list[tuple[int, float]]:
        """(embedding id, cosine distance) of the k nearest live rows, nearest first (exact)."""
        with self.lock:
            self.refresh(model, int(query.shape[0]))
            if self.size == 0:
                return []
            norm = float(np.linalg.norm(query))
            q = (query / norm if norm > 0 else query).astype(np.float32)
            scores = self.matrix[: self.size] @ q
            scores[~self.alive[: self.size]] = -np.inf
            k = min(k, int(self.alive[: self.size].sum()))
            if k <= 0:
                return []
            top = np.argpartition(-scores, k - 1)[:k] if k < self.size else np.arange(self.size)
            top = top[np.isfinite(scores[top])]
            # Ties broken by embedding id so results are stable and equal to an exact sort.
            order = np.lexsort((self.ids[top], -scores[top]))
            return [(int(self.ids[top[i]]), float(1.0 - scores[top[i]])) for i in order[:k]]

    def memory_bytes(self) -> int:
        return int(self.matrix.nbytes + self.ids.nbytes + self.alive.nbytes)


INDEX = MatrixIndex()
