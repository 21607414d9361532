"""The shared matrix's candidate search for a batch of queries, in one fused pass: the hamming
distance of every query's sign bits to the rows it probes (its lists, memory.matrix_lists, or the
whole file), one selection of each query's `pool` nearest rows, their int8 scores and one
selection of the best `rerank` by score. memory.matrix re-ranks those exactly."""

from __future__ import annotations

import os

import numpy as np

from memory.matrix_file import _Mapping, quantise
from memory.threads import process_pool

HAMMING_BLOCK = 16384  # rows compared with a batch of queries at a time (their bits fit in cache)
PARALLEL_SCAN_ROWS = 32768  # fewer rows than this per thread are scanned in the caller's thread
_SCAN_THREADS = max(1, min(4, os.cpu_count() or 1))
FAR = np.uint16(0xFFFF)  # the distance of a dead row, or of padding: past any live row


def _hamming_rows(mapping: _Mapping, query_bits, distance, first: int, last: int) -> None:
    """Fill distance[:, first:last]. Rows are taken a block at a time so the block's bit columns
    stay in cache while every query of a batch is compared with them."""
    queries = len(query_bits)
    block = min(last - first, HAMMING_BLOCK)
    scratch = np.empty((queries, block), dtype=np.uint64)
    counts = np.empty((queries, block), dtype=np.uint8)
    for start in range(first, last, block):
        end = min(last, start + block)
        width = end - start
        into = distance[:, start:end]
        for word in range(mapping.layout.words):
            np.bitwise_xor(
                mapping.bits[word, start:end][None, :],
                query_bits[:, word][:, None],
                out=scratch[:, :width],
            )
            np.bitwise_count(scratch[:, :width], out=counts[:, :width])
            np.add(into, counts[:, :width], out=into)


def hamming_all(mapping: _Mapping, count: int, query_bits: np.ndarray) -> np.ndarray:
    """Hamming distance of every query's sign bits to every row's: (queries, rows) uint16.

    Big matrices are split into one row range per core, scanned side by side (numpy releases
    the GIL in these loops), so a job's batch does not wait on one core while another idles.
    """
    distance = np.zeros((len(query_bits), count), dtype=np.uint16)
    parts = min(_SCAN_THREADS, max(1, count // PARALLEL_SCAN_ROWS))
    if parts == 1:
        _hamming_rows(mapping, query_bits, distance, 0, count)
        return distance
    bounds = np.linspace(0, count, parts + 1).astype(int)
    futures = [
        process_pool("matrix-scan", _SCAN_THREADS).submit(
            _hamming_rows, mapping, query_bits, distance, start, end
        )
        for start, end in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    for future in futures:
        future.result()
    return distance


def hamming_of(mapping: _Mapping, query_bits: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Hamming distance of query i's sign bits to rows[i] (queries, probed rows): one gather of
    the rows' bit columns for the whole batch."""
    words = mapping.layout.words
    gathered = np.take(mapping.bits, rows.ravel(), axis=1).reshape(words, *rows.shape)
    np.bitwise_xor(gathered, query_bits.T[:, :, None], out=gathered)
    return np.add.reduce(np.bitwise_count(gathered), axis=0, dtype=np.uint16)


def _nearest(distance: np.ndarray, rows: np.ndarray, want: int) -> np.ndarray:
    """Each query's `want` rows of smallest distance, -1 where fewer are live (one selection)."""
    if distance.shape[1] > want:
        pick = np.argpartition(distance, want - 1, axis=1)[:, :want]
        distance = np.take_along_axis(distance, pick, axis=1)
        rows = np.take_along_axis(rows, pick, axis=1)
    return np.where(distance == FAR, -1, rows)


def _pooled(mapping, count, query_bits, probed, want) -> np.ndarray:
    """(queries, want) rows nearest by hamming, -1 for none: over the whole file, or each
    query's probe (padded to one width with row 0, marked far)."""
    alive = mapping.alive
    if probed is None:
        distance = hamming_all(mapping, count, query_bits)
        distance[:, alive[:count] == 0] = FAR
        rows = np.broadcast_to(np.arange(count), distance.shape)
        return _nearest(distance, rows, want)
    width = max(len(rows) for rows in probed)
    padded = np.zeros((len(probed), width), dtype=np.int64)
    valid = np.zeros((len(probed), width), dtype=bool)
    for i, rows in enumerate(probed):
        padded[i, : len(rows)] = rows
        valid[i, : len(rows)] = True
    distance = hamming_of(mapping, query_bits, padded)
    distance[~valid | (alive[padded] == 0)] = FAR
    return _nearest(distance, padded, want)


def _scored(mapping: _Mapping, units: np.ndarray, pool: np.ndarray, keep: int) -> np.ndarray:
    """Each query's `keep` rows of `pool` with the best int8 scores (-1 stays -1)."""
    if pool.shape[1] <= keep:
        return pool
    safe = np.maximum(pool, 0)
    codes = mapping.codes[safe].astype(np.float32)  # (queries, pool, dims)
    scores = np.matmul(codes, units[:, :, None])[:, :, 0] * mapping.scale[safe]
    scores[pool < 0] = -np.inf
    pick = np.argpartition(-scores, keep - 1, axis=1)[:, :keep]
    return np.take_along_axis(pool, pick, axis=1)


def _part(mapping, count, units, probed, want, keep) -> list[np.ndarray]:
    query_bits = quantise(units)[0]
    return list(_scored(mapping, units, _pooled(mapping, count, query_bits, probed, want), keep))


def candidates(mapping: _Mapping, count: int, units, probed, want: int, keep: int) -> list:
    """(embedding ids, their sign bits) of each query's rows most likely to hold its exact top
    k: `want` nearest by hamming (over `probed` rows, or all), the best `keep` of them by int8.
    Two halves of a batch that probes run side by side."""
    alive = mapping.alive[:count]
    if count <= want:
        live = np.flatnonzero(alive)
        chosen = list(_scored(mapping, units, np.broadcast_to(live, (len(units), len(live))), keep))
    elif probed is not None and len(units) > 1:
        half = len(units) // 2
        pool = process_pool("matrix-scan", _SCAN_THREADS)
        first = pool.submit(_part, mapping, count, units[:half], probed[:half], want, keep)
        second = _part(mapping, count, units[half:], probed[half:], want, keep)
        chosen = first.result() + second
    else:
        chosen = _part(mapping, count, units, probed, want, keep)
    found = []
    for rows in chosen:
        rows = rows[rows >= 0]
        found.append((mapping.ids[rows].copy(), mapping.bits[:, rows].T.copy()))
    return found
