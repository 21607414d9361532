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


def _nearest(distance: np.ndarray, rows: np.ndarray, want: int, far: int) -> np.ndarray:
    """Each query's `want` rows of smallest distance (any of those tied at the cut), -1 where
    fewer are live: one counting pass per query (distances are small integers), no sort."""
    if distance.shape[1] <= want:
        return np.where(distance >= far, -1, rows)
    chosen = np.full((len(distance), want), -1, dtype=np.int64)
    for i, row in enumerate(distance):
        reached = np.cumsum(np.bincount(row, minlength=far + 1)[:far])
        cut = min(int(np.searchsorted(reached, want)), far)  # `want` rows at distance <= cut
        picked = np.flatnonzero(row < cut)
        if cut < far:
            picked = np.concatenate([picked, np.flatnonzero(row == cut)[: want - len(picked)]])
        chosen[i, : len(picked)] = rows[i, picked]
    return chosen


def _pooled(mapping, count, query_bits, probed, want) -> np.ndarray:
    """(queries, want) rows nearest by hamming, -1 for none: over the whole file, or each
    query's probe (padded to one width with row 0, marked far)."""
    alive, far = mapping.alive, mapping.layout.words * 64 + 1
    if probed is None:
        distance = hamming_all(mapping, count, query_bits)
        distance[:, alive[:count] == 0] = far
        rows = np.broadcast_to(np.arange(count), distance.shape)
        return _nearest(distance, rows, want, far)
    width = max(len(rows) for rows in probed)
    padded = np.zeros((len(probed), width), dtype=np.int64)
    for i, rows in enumerate(probed):
        padded[i, : len(rows)] = rows
    distance = hamming_of(mapping, query_bits, padded)
    distance[alive[padded] == 0] = far
    for i, rows in enumerate(probed):
        distance[i, len(rows) :] = far
    return _nearest(distance, padded, want, far)


def _scored(mapping: _Mapping, units: np.ndarray, pool: np.ndarray, keep: int) -> list:
    """Each query's `keep` rows of its `pool` (-1: none) with the best int8 scores, a query at a
    time (its codes stay in cache between the conversion and the product)."""
    chosen = []
    for unit, rows in zip(units, pool, strict=True):
        rows = rows[rows >= 0]
        if len(rows) > keep:
            scores = (mapping.codes[rows].astype(np.float32) @ unit) * mapping.scale[rows]
            rows = rows[np.argpartition(-scores, keep - 1)[:keep]]
        chosen.append(rows)
    return chosen


def _part(mapping, count, units, probed, want, keep) -> list[np.ndarray]:
    query_bits = quantise(units)[0]
    return _scored(mapping, units, _pooled(mapping, count, query_bits, probed, want), keep)


def candidates(mapping: _Mapping, count: int, units, probed, want: int, keep: int) -> list:
    """(embedding ids, their sign bits) of each query's rows most likely to hold its exact top
    k: `want` nearest by hamming (over `probed` rows, or all), the best `keep` of them by int8.
    Two halves of a batch that probes run side by side."""
    alive = mapping.alive[:count]
    if count <= want:
        live = np.flatnonzero(alive)
        chosen = _scored(mapping, units, np.broadcast_to(live, (len(units), len(live))), keep)
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
        # An id on two rows for a moment (a moved vector, its old row not yet dead) counts once.
        ids, first = np.unique(mapping.ids[rows], return_index=True)
        found.append((ids, mapping.bits[:, rows[first]].T.copy()))
    return found
