"""A purge's side of the shared matrix: the rows of deleted vectors zeroed in the file (not only
marked dead, which leaves their quantised values in place), and the check that none is left."""

from __future__ import annotations

import numpy as np

from memory.matrix import MatrixIndex
from memory.matrix_file import _Mapping


def erase(index: MatrixIndex, model: str, dims: int, embedding_ids: list[int]) -> list[int]:
    """Zero the rows of these deleted vectors in the matrix of `model` (sign bits, codes, scale
    and the live flag; the id, a number, keeps the rows' order by id sound), under the file's
    exclusive lock: a rewrite in progress copies only live rows, so no copy is left. Returns the
    rows zeroed."""
    wanted = np.asarray(sorted(set(embedding_ids)), dtype=np.int64)
    path = index.path_for(model, dims)
    if path is None:  # an in-memory database: this process's anonymous matrix
        with index.lock:
            if index.mapping is None or index.model != model:
                return []
            rows = sorted(index.mapping.rows_of(wanted).values())
            index.mapping.clear(rows)
            return rows
    if not path.exists():
        return []
    with index._exclusive(path):
        mapping = _Mapping.open(path, writable=True)
        if mapping is None:
            return []
        try:
            rows = sorted(mapping.rows_of(wanted).values())
            mapping.clear(rows)
            mapping.buffer.flush()
        finally:
            mapping.close()
    return rows


def still_held(
    index: MatrixIndex, model: str, dims: int, embedding_ids: list[int], rows: list[int]
) -> int:
    """Rows of the matrix of `model` that carry one of these ids or that `erase` zeroed, and
    still hold any of a vector (or are alive)."""
    path = index.path_for(model, dims)
    own = path is not None
    mapping = (
        index.mapping if not own else _Mapping.open(path, writable=False) if path.exists() else None
    )
    if mapping is None or (not own and index.model != model):
        return 0
    try:
        carried = mapping.rows_of(np.asarray(embedding_ids, dtype=np.int64)).values()
        return mapping.nonzero(sorted(set(carried) | set(rows)))
    finally:
        if own:
            mapping.close()
