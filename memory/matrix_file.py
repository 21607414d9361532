"""The shared vector matrix's file: its layout and header, one mapping of a file (or of anonymous
memory) with numpy views of its arrays, the checks that make a shrunken or nonsensical file an
error rather than a SIGBUS, blocks reserved before they are written, and how rows are quantised
(sign bits, int8 codes with a per-row scale). memory.matrix keeps such files in step and searches
them.

A file also carries its inverted-file index (memory.matrix_lists builds it): the first `indexed`
rows are sorted by list, list l holding rows starts[l]:starts[l + 1], with the lists' centroids and
the rows' order by embedding id. Those sections are written once, before the file is published,
and a checksum of them is checked whenever a process maps the file (its writer mapping at each
catch-up reuses the sum of the same file's mapping; the sweep checks the whole file every ten
minutes); rows appended later (the tail) carry their list number in `lists`."""

from __future__ import annotations

import logging
import mmap
import os
import struct
import zlib
from pathlib import Path

import numpy as np

log = logging.getLogger("memory.matrix")

_MAGIC = b"MEMVEC03"
_HEADER_SIZE = 4096
# magic, dims, bit words, capacity, count, log position, database inode, device, superseded
_HEADER = struct.Struct("<8sIIQQqQQB")
_COUNT_AT, _SEQ_AT = 24, 32
_SUPERSEDED_AT = _HEADER.size - 1
# The index's part of the header (after the model's name): lists, indexed rows, their checksum.
_INDEX = struct.Struct("<IQI")
_INDEX_AT = 1024


class MatrixDamaged(RuntimeError):
    """The mapped file does not hold what its header and the stored vectors say."""


class MatrixUnavailable(RuntimeError):
    """No usable matrix can be had now (the disk is full, say): search exactly instead."""


def _allocate(fd: int, size: int) -> None:
    """Reserve the file's blocks now: a write into a sparse page on a full disk is a SIGBUS."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        raise MatrixUnavailable(f"no room for the vector matrix file ({exc.strerror})") from exc


def _align(offset: int) -> int:
    return (offset + 63) // 64 * 64


class _Layout:
    """Where each array of a matrix of `capacity` rows of `dims` dimensions, indexed in `nlist`
    lists, lives in the file."""

    def __init__(self, dims: int, capacity: int, nlist: int = 0):
        self.dims, self.capacity, self.nlist = dims, capacity, nlist
        self.words = (dims + 63) // 64
        self.ids = _HEADER_SIZE
        self.alive = _align(self.ids + 8 * capacity)
        self.scale = _align(self.alive + capacity)
        self.lists = _align(self.scale + 4 * capacity)
        self.by_id = _align(self.lists + 4 * capacity)
        self.bits = _align(self.by_id + 8 * capacity)
        self.codes = _align(self.bits + 8 * self.words * capacity)
        self.centroids = _align(self.codes + dims * capacity)
        self.starts = _align(self.centroids + 4 * dims * nlist)
        self.size = _align(self.starts + 8 * (nlist + 1))


class _Mapping:
    """One mapping of a matrix (a file or anonymous memory) with numpy views of its arrays."""

    def __init__(
        self,
        buffer: mmap.mmap,
        *,
        writable: bool,
        path: Path | None = None,
        inode: int = 0,
        handle=None,
    ):
        self.buffer, self.writable, self.path, self.inode = buffer, writable, path, inode
        self.handle = handle  # kept open: its size is checked before every read of the mapping
        if len(buffer) < _HEADER_SIZE:
            raise ValueError("vector matrix file is shorter than its header")
        magic, dims, words, capacity, count, _, ino, dev, _ = _HEADER.unpack_from(buffer, 0)
        if magic != _MAGIC:
            raise ValueError("not a vector matrix file")
        nlist, self.indexed, self.checksum = _INDEX.unpack_from(buffer, _INDEX_AT)
        self.layout = _Layout(dims, capacity, nlist)
        if self.layout.words != words or len(buffer) < self.layout.size:
            raise ValueError("vector matrix file is truncated or of another format")
        if count > capacity:
            raise ValueError(f"vector matrix header counts {count} rows in room for {capacity}")
        if self.indexed > capacity:
            raise ValueError(f"vector matrix header indexes {self.indexed} rows of {capacity}")
        self.database = (ino, dev)
        model_bytes = bytes(buffer[_HEADER.size : _HEADER.size + 256]).rstrip(b"\0")
        self.model = model_bytes.decode("utf-8", "replace")
        lay = self.layout

        def view(offset, dtype, count, shape=None):
            array = np.frombuffer(buffer, dtype=dtype, count=count, offset=offset)
            return array.reshape(shape) if shape else array

        self.ids = view(lay.ids, np.int64, capacity)
        self.alive = view(lay.alive, np.uint8, capacity)
        self.scale = view(lay.scale, np.float32, capacity)
        self.lists = view(lay.lists, np.int32, capacity)
        self.by_id = view(lay.by_id, np.int64, capacity)
        self.bits = view(lay.bits, np.uint64, words * capacity, (words, capacity))
        self.codes = view(lay.codes, np.int8, dims * capacity, (capacity, dims))
        self.centroids = view(lay.centroids, np.float32, nlist * dims, (nlist, dims))
        self.starts = view(lay.starts, np.int64, nlist + 1)

    def index_checksum(self) -> int:
        """crc32 of the index's sections (centroids, list starts, the rows' order by id)."""
        crc = zlib.crc32(self.centroids)
        crc = zlib.crc32(self.starts, crc)
        return zlib.crc32(self.by_id[: self.indexed], crc)

    def index_identity(self) -> tuple[int, int, int, int]:
        """(inode, lists, indexed rows, checksum): the index sections a file was sealed with."""
        return self.inode, self.layout.nlist, self.indexed, self.checksum

    def check_index(self, *, sums: bool = True) -> None:
        """Raise MatrixDamaged unless the index sections are those written with the file (without
        `sums`, their order only: the caller has already summed these sections)."""
        if sums and self.index_checksum() != self.checksum:
            raise MatrixDamaged("the index sections do not match their checksum")
        starts = self.starts
        if self.layout.nlist and (
            starts[0] != 0 or starts[-1] != self.indexed or np.any(np.diff(starts) < 0)
        ):
            raise MatrixDamaged("the index's list starts are out of order")

    def seal_index(self, nlist: int, indexed: int) -> None:
        """Record the index written into a new file (before it is published)."""
        self.indexed = indexed
        self.checksum = self.index_checksum()
        _INDEX.pack_into(self.buffer, _INDEX_AT, nlist, indexed, self.checksum)

    @classmethod
    def create(
        cls, path: Path | None, model: str, dims: int, capacity: int, database, nlist: int = 0
    ):
        layout = _Layout(dims, capacity, nlist)
        if path is None:
            buffer = mmap.mmap(-1, layout.size)
        else:
            # Owner-only, like the database: vectors say what the memories say.
            with os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600), "w+b") as f:
                try:
                    f.truncate(layout.size)
                    _allocate(f.fileno(), layout.size)
                except (OSError, MatrixUnavailable) as exc:
                    path.unlink(missing_ok=True)
                    if isinstance(exc, MatrixUnavailable):
                        raise
                    raise MatrixUnavailable(f"no room for the vector matrix file ({exc})") from exc
                buffer = mmap.mmap(f.fileno(), layout.size)
        _HEADER.pack_into(buffer, 0, _MAGIC, dims, layout.words, capacity, 0, -1, *database, 0)
        buffer[_HEADER.size : _HEADER.size + 256] = model.encode("utf-8")[:256].ljust(256, b"\0")
        _INDEX.pack_into(buffer, _INDEX_AT, nlist, 0, 0)
        mapping = cls(buffer, writable=True, path=path)
        mapping.seal_index(nlist, 0)
        return mapping

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        writable: bool,
        summed: tuple | None = None,
        refused: list[str] | None = None,
    ) -> _Mapping | None:
        """The file mapped, or None when it is missing, short or not a matrix (it is rebuilt).
        `summed`: the index_identity of a mapping of this file whose sections this process has
        already summed; the same sections (the same file, sealed alike) are not summed again."""
        handle = buffer = mapping = None
        try:
            handle = open(path, "r+b" if writable else "rb")  # noqa: SIM115 (kept by the mapping)
            if os.fstat(handle.fileno()).st_size < _HEADER_SIZE:
                raise ValueError("vector matrix file is shorter than its header")
            access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
            buffer = mmap.mmap(handle.fileno(), 0, access=access)
            inode = os.fstat(handle.fileno()).st_ino
            mapping = cls(buffer, writable=writable, path=path, inode=inode, handle=handle)
            try:
                mapping.check_index(sums=summed != mapping.index_identity())
            except MatrixDamaged as exc:
                raise ValueError(str(exc)) from exc
            if writable and inode not in _ALLOCATED:
                # A file written before blocks were reserved may still be sparse.
                _allocate(handle.fileno(), mapping.layout.size)
                _ALLOCATED.add(inode)
            return mapping
        except (OSError, ValueError, MatrixUnavailable) as exc:
            if not isinstance(exc, FileNotFoundError):
                log.warning("vector matrix file %s not used: %s", path, exc)
                # The caller records damage (health shows it); a full disk or a permission is
                # no damage of the file, and the exact scan says it (degraded) where it lasts.
                if refused is not None and isinstance(exc, ValueError):
                    refused.append(str(exc))
            if mapping is not None:
                mapping.close()  # its views go with it
            elif buffer is not None:
                buffer.close()
            if handle is not None:
                handle.close()
            return None

    def check(self) -> None:
        """Raise MatrixDamaged unless the file still holds all of the mapping with a sane header.

        The size comes from the open file (no page of the mapping is touched before it passes)."""
        if self.handle is not None:
            try:
                size = os.fstat(self.handle.fileno()).st_size
            except OSError as exc:
                raise MatrixDamaged(f"the file cannot be checked: {exc}") from exc
            if size < self.layout.size:
                raise MatrixDamaged(f"the file shrank to {size} of {self.layout.size} bytes")
        magic, dims, words, capacity = _HEADER.unpack_from(self.buffer, 0)[:4]
        if (magic, dims, words, capacity) != (
            _MAGIC,
            self.layout.dims,
            self.layout.words,
            self.layout.capacity,
        ):
            raise MatrixDamaged("the header no longer describes the mapped layout")
        if self.count > capacity:
            raise MatrixDamaged(f"the header counts {self.count} rows in room for {capacity}")
        if _INDEX.unpack_from(self.buffer, _INDEX_AT) != (
            self.layout.nlist,
            self.indexed,
            self.checksum,
        ):
            raise MatrixDamaged("the index header changed under the mapping")
        if self.count < self.indexed:
            raise MatrixDamaged(f"the header counts {self.count} rows of {self.indexed} indexed")

    # The header fields other processes change: read them from the shared page every time.
    @property
    def count(self) -> int:
        return struct.unpack_from("<Q", self.buffer, _COUNT_AT)[0]

    @property
    def seq(self) -> int:
        return struct.unpack_from("<q", self.buffer, _SEQ_AT)[0]

    @property
    def superseded(self) -> bool:
        return bool(self.buffer[_SUPERSEDED_AT])

    def publish(self, *, count: int | None = None, seq: int | None = None) -> None:
        if count is not None:
            struct.pack_into("<Q", self.buffer, _COUNT_AT, count)
        if seq is not None:
            struct.pack_into("<q", self.buffer, _SEQ_AT, seq)

    def supersede(self) -> None:
        self.buffer[_SUPERSEDED_AT] = 1

    def close(self) -> None:
        try:
            self.buffer.close()
        except BufferError:
            pass  # a caller still holds a view; the mapping goes with it
        if self.handle is not None:
            self.handle.close()
            self.handle = None

    def rows_of(self, embedding_ids: np.ndarray) -> dict[int, int]:
        """{embedding id: row} of those ids that have a row, the live one where an id has two
        (an indexed row replaced by a row in the tail). The indexed rows are found through their
        order by id (no scan of the file), the tail's by a scan of the tail alone."""
        count, indexed = self.count, self.indexed
        wanted = np.asarray(embedding_ids, dtype=np.int64)
        hits = np.zeros(0, dtype=np.int64)
        if indexed and len(wanted):
            at = np.searchsorted(self.ids[:indexed], wanted, sorter=self.by_id[:indexed])
            rows = self.by_id[np.minimum(at, indexed - 1)]
            rows = rows[(rows >= 0) & (rows < indexed)]  # a damaged order finds nothing, safely
            hits = rows[np.isin(self.ids[rows], wanted)]
        if count > indexed and len(wanted):
            tail = np.flatnonzero(np.isin(self.ids[indexed:count], wanted)) + indexed
            hits = np.concatenate([hits, tail])
        # Dead rows first, then by row: the live (and latest) row of an id is written last.
        hits = hits[np.lexsort((hits, self.alive[hits]))]
        return {int(self.ids[row]): int(row) for row in hits}

    # -- writing rows (writable mappings only) ---------------------------------------------------
    def put(self, rows: np.ndarray, ids: np.ndarray, vectors: np.ndarray, lists=None) -> None:
        """Store unit vectors at rows (quantised), alive, in their lists (0 when not given)."""
        bits, scale, codes = quantise(vectors)
        self.ids[rows] = ids
        self.scale[rows] = scale
        self.codes[rows] = codes
        self.bits[:, rows] = bits.T
        self.lists[rows] = 0 if lists is None else lists
        self.alive[rows] = 1

    def clear(self, rows: list[int]) -> None:
        """Zero these rows' vectors: no bits, no codes, no scale, not alive. The id stays: it is
        a number, not the vector, and the indexed rows' order by id must stay sorted (a zeroed
        id inside it would hide other ids from rows_of)."""
        if not rows:
            return
        at = np.asarray(rows)
        self.alive[at] = 0
        self.scale[at] = 0
        self.codes[at] = 0
        self.bits[:, at] = 0

    def nonzero(self, rows: list[int]) -> int:
        """How many of these rows hold any of a vector (or are alive)."""
        if not rows:
            return 0
        at = np.asarray(rows)
        held = (self.scale[at] != 0) | (self.alive[at] != 0)
        held |= self.codes[at].any(axis=1) | self.bits[:, at].any(axis=0)
        return int(held.sum())


_ALLOCATED: set[int] = set()  # inodes whose blocks this process has reserved


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


def quantise(unit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sign bits as uint64 words, per-row scale, int8 codes) of unit rows."""
    words = (unit.shape[1] + 63) // 64
    if unit.shape[1] == words * 64:
        signs = unit > 0
    else:
        signs = np.zeros((unit.shape[0], words * 64), dtype=bool)
        signs[:, : unit.shape[1]] = unit > 0
    bits = np.packbits(signs, axis=1, bitorder="little").view(np.uint64)
    peak = np.maximum(unit.max(axis=1, initial=0.0), -unit.min(axis=1, initial=0.0))
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    scaled = unit / scale[:, None]
    return bits, scale, np.rint(scaled, out=scaled).astype(np.int8)


def differences(
    cursor, mapping: _Mapping, count: int, moving: set, model: str, dims: int
) -> str | None:
    """What differs between the file's live rows and the stored vectors (None: nothing)."""
    alive = mapping.alive[:count].astype(bool)
    live = {int(i) for i in mapping.ids[:count][alive]} - moving
    cursor.execute(
        "SELECT id, vector FROM embeddings WHERE model = %s AND dimensions = %s", [model, dims]
    )
    stored, wrong = set(), 0
    while rows := cursor.fetchmany(5000):
        rows = [row for row in rows if row[0] not in moving]
        stored.update(row[0] for row in rows)
        rows = [row for row in rows if row[0] in live]
        if not rows:
            continue
        ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
        where = mapping.rows_of(ids)
        at = np.asarray([where[int(eid)] for eid in ids])
        blobs = [np.frombuffer(bytes(row[1]), np.float32) for row in rows]
        bits, _, codes = quantise(unit_rows(np.vstack(blobs)))
        differs = (bits != mapping.bits[:, at].T).any(axis=1)
        differs |= (codes != mapping.codes[at]).any(axis=1)
        wrong += int(differs.sum())
    unstored, unlisted = len(live - stored), len(stored - live)
    if wrong or unstored or unlisted:
        return (
            f"{wrong} row(s) disagree with the stored vectors, {unstored} live row(s) have no "
            f"stored vector, {unlisted} stored vector(s) have no live row"
        )
    return None
