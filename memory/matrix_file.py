"""The shared vector matrix's file: its layout and header, one mapping of a file (or of anonymous
memory) with numpy views of its arrays, the checks that make a shrunken or nonsensical file an
error rather than a SIGBUS, blocks reserved before they are written, and how rows are quantised
(sign bits, int8 codes with a per-row scale). memory.matrix keeps such files in step and searches
them."""

from __future__ import annotations

import logging
import mmap
import os
import struct
from pathlib import Path

import numpy as np

log = logging.getLogger("memory.matrix")

_MAGIC = b"MEMVEC02"
_HEADER_SIZE = 4096
# magic, dims, bit words, capacity, count, log position, database inode, device, superseded
# magic, dims, bit words, capacity, count, log position, database inode, device, superseded
_HEADER = struct.Struct("<8sIIQQqQQB")
_COUNT_AT, _SEQ_AT = 24, 32
_SUPERSEDED_AT = _HEADER.size - 1


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
    """Where each array of a matrix of `capacity` rows of `dims` dimensions lives in the file."""

    def __init__(self, dims: int, capacity: int):
        self.dims, self.capacity = dims, capacity
        self.words = (dims + 63) // 64
        self.ids = _HEADER_SIZE
        self.alive = _align(self.ids + 8 * capacity)
        self.scale = _align(self.alive + capacity)
        self.bits = _align(self.scale + 4 * capacity)
        self.codes = _align(self.bits + 8 * self.words * capacity)
        self.size = _align(self.codes + dims * capacity)


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
        self.layout = _Layout(dims, capacity)
        if self.layout.words != words or len(buffer) < self.layout.size:
            raise ValueError("vector matrix file is truncated or of another format")
        if count > capacity:
            raise ValueError(f"vector matrix header counts {count} rows in room for {capacity}")
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
        self.bits = view(lay.bits, np.uint64, words * capacity, (words, capacity))
        self.codes = view(lay.codes, np.int8, dims * capacity, (capacity, dims))

    @classmethod
    def create(cls, path: Path | None, model: str, dims: int, capacity: int, database):
        layout = _Layout(dims, capacity)
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
        return cls(buffer, writable=True, path=path)

    @classmethod
    def open(cls, path: Path, *, writable: bool) -> _Mapping | None:
        """The file mapped, or None when it is missing, short or not a matrix (it is rebuilt)."""
        handle = buffer = None
        try:
            handle = open(path, "r+b" if writable else "rb")  # noqa: SIM115 (kept by the mapping)
            if os.fstat(handle.fileno()).st_size < _HEADER_SIZE:
                raise ValueError("vector matrix file is shorter than its header")
            access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
            buffer = mmap.mmap(handle.fileno(), 0, access=access)
            inode = os.fstat(handle.fileno()).st_ino
            mapping = cls(buffer, writable=writable, path=path, inode=inode, handle=handle)
            if writable and inode not in _ALLOCATED:
                # A file written before blocks were reserved may still be sparse.
                _allocate(handle.fileno(), mapping.layout.size)
                _ALLOCATED.add(inode)
            return mapping
        except (OSError, ValueError, MatrixUnavailable) as exc:
            if not isinstance(exc, FileNotFoundError):
                log.warning("vector matrix file %s not used: %s", path, exc)
            if buffer is not None:
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
        """{embedding id: row} of those ids that have a row (live or not)."""
        count = self.count
        ids = self.ids[:count]
        if len(embedding_ids) <= 64:
            hits = np.flatnonzero(np.isin(ids, embedding_ids))
        else:
            order = np.argsort(ids, kind="stable")
            positions = np.searchsorted(ids[order], embedding_ids)
            positions = positions[positions < count]
            hits = order[positions]
            hits = hits[np.isin(ids[hits], embedding_ids)]
        return {int(ids[row]): int(row) for row in hits}

    # -- writing rows (writable mappings only) ---------------------------------------------------
    def put(self, rows: np.ndarray, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Store unit vectors at rows (quantised), alive."""
        bits, scale, codes = quantise(vectors)
        self.ids[rows] = ids
        self.scale[rows] = scale
        self.codes[rows] = codes
        self.bits[:, rows] = bits.T
        self.alive[rows] = 1

    def clear(self, rows: list[int]) -> None:
        """Zero these rows: no id, no bits, no codes, not alive."""
        if not rows:
            return
        at = np.asarray(rows)
        self.alive[at] = 0
        self.ids[at] = 0
        self.scale[at] = 0
        self.codes[at] = 0
        self.bits[:, at] = 0

    def nonzero(self, rows: list[int]) -> int:
        """How many of these rows hold anything but zeros."""
        if not rows:
            return 0
        at = np.asarray(rows)
        held = (self.ids[at] != 0) | (self.scale[at] != 0) | (self.alive[at] != 0)
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
    signs = np.zeros((unit.shape[0], words * 64), dtype=bool)
    signs[:, : unit.shape[1]] = unit > 0
    bits = np.packbits(signs, axis=1, bitorder="little").view(np.uint64)
    peak = np.abs(unit).max(axis=1)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    codes = np.round(unit / scale[:, None]).astype(np.int8)
    return bits, scale, codes


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
