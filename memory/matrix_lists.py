"""The shared vector matrix's inverted-file index: rows grouped in lists of about LIST_ROWS
similar vectors (spherical k-means, two levels so a million rows are grouped in seconds), a new
file written with each list's rows side by side, and the lists a query probes (the nearest
centroids first, until PROBE_ROWS rows are covered), so a search reads a fixed number of rows
whatever the size of the store.

Rows appended after the file was written (the tail) are put in the list of their nearest centroid
and scanned with it; the next rewrite of the file sorts them in, and splits a list that grew past
SPLIT_ROWS. A store of fewer than INDEX_MIN_ROWS rows has one list: every search scans it whole.
"""

from __future__ import annotations

import numpy as np

from memory.matrix_file import MatrixDamaged, _Mapping, quantise

LIST_ROWS = 512  # rows per list, on average
INDEX_MIN_ROWS = 32768  # fewer rows than this: one list (a whole scan costs what a probe would)
PROBE_ROWS = 16384  # rows a query's probe covers at least: recall@5 >= 0.99 at 1M rows
PROBE_LISTS = 8  # and lists, at least
SPLIT_ROWS = 4 * LIST_ROWS  # a list grown past this is split when the file is next written
SAMPLE_PER_LIST = 32  # rows k-means learns a list's centroid from
COPY_ROWS = 16384  # rows copied (or grouped) at a time: a chunk's float copy stays ~50 MB
SEED = 20240


class RowSource:
    """The rows a new file is written from: the live rows of a mapping, then new rows (ids and
    unit vectors, quantised here). Position p < len(live) is row live[p] of the mapping."""

    def __init__(self, mapping: _Mapping, live: np.ndarray, new_ids=None, new_vectors=None):
        self.mapping, self.live = mapping, live
        dims = mapping.layout.dims
        if new_ids is None or not len(new_ids):
            new_ids, new_vectors = np.zeros(0, np.int64), np.zeros((0, dims), np.float32)
        self.new_ids = np.asarray(new_ids, dtype=np.int64)
        self.new_bits, self.new_scale, self.new_codes = quantise(new_vectors)
        self.total = len(live) + len(self.new_ids)

    def _split(self, positions: np.ndarray):
        old = positions < len(self.live)
        return old, self.live[positions[old]], positions[~old] - len(self.live)

    def approx(self, positions: np.ndarray, scaled: bool = True) -> np.ndarray:
        """The rows' vectors as their int8 codes give them back (float32, about unit length;
        without `scaled`, each row times its own factor: the same nearest centroid)."""
        old, rows, new = self._split(positions)
        m = self.mapping
        if old.all():
            out = m.codes[rows].astype(np.float32)
            return out * m.scale[rows][:, None] if scaled else out
        out = np.empty((len(positions), m.layout.dims), dtype=np.float32)
        out[old], out[~old] = m.codes[rows], self.new_codes[new]
        if scaled:
            scale = np.empty(len(positions), dtype=np.float32)
            scale[old], scale[~old] = m.scale[rows], self.new_scale[new]
            out *= scale[:, None]
        return out

    def copy(self, fresh: _Mapping, at: int, positions: np.ndarray) -> None:
        """Rows `positions` into fresh rows at, at + 1, ... (alive)."""
        old, rows, new = self._split(positions)
        target = np.arange(at, at + len(positions))
        m = self.mapping
        fresh.ids[target[old]] = m.ids[rows]
        fresh.scale[target[old]] = m.scale[rows]
        fresh.codes[target[old]] = m.codes[rows]
        fresh.bits[:, target[old]] = m.bits[:, rows]
        fresh.ids[target[~old]] = self.new_ids[new]
        fresh.scale[target[~old]] = self.new_scale[new]
        fresh.codes[target[~old]] = self.new_codes[new]
        fresh.bits[:, target[~old]] = self.new_bits[new].T
        fresh.alive[target] = 1


# -- grouping ------------------------------------------------------------------------------------
def _normalised(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


def kmeans(data: np.ndarray, k: int, rng, iterations: int = 6) -> np.ndarray:
    """k unit centroids of `data` (spherical k-means from k distinct rows; an emptied centroid
    is reseeded with a random row)."""
    k = max(1, min(k, len(data)))
    centroids = data[rng.choice(len(data), k, replace=False)].copy()
    for _ in range(iterations):
        nearest = np.argmax(data @ centroids.T, axis=1)
        members = np.arange(k)[:, None] == nearest[None, :]
        sums = members.astype(np.float32) @ data
        empty = ~members.any(axis=1)
        if empty.any():
            sums[empty] = data[rng.choice(len(data), int(empty.sum()))]
        centroids = _normalised(sums)
    return centroids.astype(np.float32)


def assign(vectors: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """The list (nearest centroid by cosine) of each vector."""
    if len(centroids) <= 1 or not len(vectors):
        return np.zeros(len(vectors), dtype=np.int32)
    return np.argmax(vectors @ centroids.T, axis=1).astype(np.int32)


def _assign_positions(source: RowSource, positions: np.ndarray, centroids) -> np.ndarray:
    out = np.empty(len(positions), dtype=np.int32)
    for start in range(0, len(positions), COPY_ROWS):
        part = positions[start : start + COPY_ROWS]
        out[start : start + len(part)] = assign(source.approx(part, scaled=False), centroids)
    return out


def build(source: RowSource) -> tuple[np.ndarray, np.ndarray]:
    """(centroids, list of each position) of every row of `source`, learnt from a sample: about
    sqrt(lists) groups first, then each group's lists; then one pass over the rows puts each in
    its group's nearest list, so a row meets ~2 sqrt(lists) centroids instead of all of them.
    k-means leaves some lists crowded: those past SPLIT_ROWS are split."""
    total, dims = source.total, source.mapping.layout.dims
    if total < INDEX_MIN_ROWS:
        return np.zeros((1, dims), np.float32), np.zeros(total, np.int32)
    rng = np.random.default_rng(SEED)
    lists = max(1, total // LIST_ROWS)
    picked = np.sort(rng.choice(total, min(total, lists * SAMPLE_PER_LIST, 65536), False))
    sample = source.approx(picked)
    groups = max(2, int(round(np.sqrt(lists))))
    coarse = kmeans(
        sample[rng.choice(len(sample), min(len(sample), groups * 64), False)], groups, rng, 8
    )
    in_group = assign(sample, coarse)
    fine = []
    for g in range(len(coarse)):
        members = sample[in_group == g]
        share = max(1, int(round(len(members) * total / len(sample) / LIST_ROWS)))
        if not len(members):
            fine.append(coarse[g : g + 1])  # no row of the sample near it: one list, its own
        elif share == 1 or len(members) <= share:
            fine.append(_normalised(members.sum(axis=0, keepdims=True)))
        else:
            fine.append(kmeans(members, share, rng))
    first = np.cumsum([0] + [len(f) for f in fine])
    list_of = np.empty(total, np.int32)
    for start in range(0, total, COPY_ROWS):
        vectors = source.approx(np.arange(start, min(total, start + COPY_ROWS)), scaled=False)
        group = assign(vectors, coarse)
        for g in np.unique(group):
            rows = np.flatnonzero(group == g)
            list_of[start + rows] = assign(vectors[rows], fine[g]) + first[g]
    return split_large(source, np.vstack(fine), list_of)


def _learn(source: RowSource, members: np.ndarray, rng) -> np.ndarray:
    """Centroids of about LIST_ROWS members each, learnt from a sample of them."""
    k = max(1, int(round(len(members) / LIST_ROWS)))
    if k == 1:
        return _normalised(source.approx(members[:COPY_ROWS]).sum(axis=0, keepdims=True))
    picked = np.sort(rng.choice(len(members), min(len(members), k * SAMPLE_PER_LIST), False))
    return kmeans(source.approx(members[picked]), k, rng)


def split_large(source: RowSource, centroids: np.ndarray, list_of: np.ndarray):
    """(centroids, lists) with each list of more than SPLIT_ROWS rows split in lists of about
    LIST_ROWS (its first part keeps its number, the others are numbered after the last); a part
    still too long is split again, up to 4 rounds (identical vectors stay together)."""
    rng = np.random.default_rng(SEED + len(centroids))
    centroids, list_of = centroids.astype(np.float32), list_of.astype(np.int32)
    for _ in range(4):
        large = np.flatnonzero(np.bincount(list_of, minlength=len(centroids)) > SPLIT_ROWS)
        if not len(large):
            break
        centroids, list_of = _split(source, centroids, list_of, large, rng)
    return centroids, list_of


def _split(source, centroids, list_of, large, rng):
    order = np.argsort(list_of, kind="stable")
    bounds = np.searchsorted(list_of[order], np.arange(len(centroids) + 1))
    grown, list_of = [centroids.copy()], list_of.copy()
    next_list = len(centroids)
    for number in large:
        members = order[bounds[number] : bounds[number + 1]]
        parts = _learn(source, members, rng)
        local = _assign_positions(source, members, parts)
        grown[0][number] = parts[0]
        renumber = np.concatenate([[number], next_list + np.arange(len(parts) - 1)])
        list_of[members] = renumber[local]
        grown.append(parts[1:])
        next_list += len(parts) - 1
    return np.vstack(grown).astype(np.float32), list_of


def write_sorted(fresh: _Mapping, source: RowSource, centroids, list_of) -> int:
    """Every row of `source` into `fresh`, list by list, with the index sections; returns the row
    count (the caller publishes it)."""
    order = np.argsort(list_of, kind="stable")
    for start in range(0, source.total, COPY_ROWS):
        part = order[start : start + COPY_ROWS]
        source.copy(fresh, start, part)
        fresh.lists[start : start + len(part)] = list_of[part]
    total, nlist = source.total, len(centroids)
    fresh.centroids[:] = centroids
    fresh.starts[:] = np.searchsorted(list_of[order], np.arange(nlist + 1))
    fresh.by_id[:total] = np.argsort(fresh.ids[:total], kind="stable")
    fresh.seal_index(nlist, total)
    return total


# -- searching -----------------------------------------------------------------------------------
def probes(mapping: _Mapping, count: int, units: np.ndarray, want: int) -> list | None:
    """The rows each query scans (its nearest lists' indexed rows and the tail rows in them), or
    None when the whole file is scanned: one list, or as many rows wanted as a probe would read."""
    nlist, indexed = mapping.layout.nlist, mapping.indexed
    need = max(PROBE_ROWS, 8 * want)
    if nlist <= 1 or 2 * need >= count:
        return None
    starts = np.clip(mapping.starts, 0, indexed)  # a damaged file reads no row outside its lists
    tail_lists = np.clip(mapping.lists[indexed:count], 0, nlist - 1)
    sizes = np.diff(starts) + np.bincount(tail_lists, minlength=nlist)
    nearest = np.argsort(-(units @ mapping.centroids.T), axis=1)
    covered = np.cumsum(sizes[nearest], axis=1)
    found = []
    for i in range(len(units)):
        take = max(PROBE_LISTS, int(np.searchsorted(covered[i], need)) + 1)
        probed = np.sort(nearest[i, :take])
        lengths = starts[probed + 1] - starts[probed]
        firsts = np.repeat(starts[probed] - np.cumsum(lengths) + lengths, lengths)
        rows = firsts + np.arange(int(lengths.sum()))
        chosen = np.zeros(nlist, dtype=bool)
        chosen[probed] = True
        tail = np.flatnonzero(chosen[tail_lists]) + indexed
        found.append(np.concatenate([rows, tail]))
    return found


def damage(mapping: _Mapping, count: int) -> str | None:
    """What is wrong with the index of a mapped file (None: nothing): sections that fail their
    checksum, sorted rows outside their list's range, tail rows in no list."""
    try:
        mapping.check_index()
    except MatrixDamaged as exc:
        return str(exc)
    nlist, indexed = mapping.layout.nlist, mapping.indexed
    if not nlist:
        return None
    expected = np.repeat(np.arange(nlist, dtype=np.int32), np.diff(mapping.starts))
    wrong = int(np.count_nonzero(mapping.lists[:indexed] != expected))
    tail = mapping.lists[indexed:count]
    wrong += int(np.count_nonzero((tail < 0) | (tail >= nlist)))
    return f"{wrong} row(s) are outside their lists" if wrong else None
