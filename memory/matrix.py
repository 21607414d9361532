"""One vector matrix per machine: a memory-mapped file under the data folder (`vectors/`; beside a
database kept elsewhere) that every process maps read-only, kept in step with `embeddings` through
the `embedding_changes` log (filled by triggers).

Rows are quantised: sign bits (96 bytes a row at 768 dimensions) and int8 codes with a per-row
scale (768 bytes), so 100k x 768 costs about 80 MiB of page cache, shared by every process on the
machine, instead of 300 MiB of float32 in each. Rows are grouped in lists of similar vectors
(memory.matrix_lists: an inverted-file index, each list's rows side by side). A batch of queries
(a job's facts) is answered in one pass (memory.matrix_scan):
1. each query's nearest lists, until they hold PROBE_ROWS rows (a store too small for lists is
   scanned whole), and the rows appended since the file was sorted that fall in those lists;
2. hamming distance of the sign bits to those rows, and one selection of the POOL nearest;
3. int8 scores of those, and one selection of the best k + RERANK_EXTRA;
4. exact float32 cosine, from the stored vectors, of those; top k.
The answer equals an exact scan whenever the exact top k are in the lists probed and survive both
cuts (recall@5 against brute force is measured by `manage.py bench`, up to 1M rows).

Any process that finds the file behind the log brings it up to date under an exclusive flock:
rows are written in place or appended to the tail in their nearest list (the row count is
published after the rows, the log position after that); a changed vector that belongs in another
list moves to the tail. The file is rewritten beside and renamed over, its rows sorted by list
(lists grown too long split), when it is full, mostly dead, its tail long, or when the log was
pruned past it; the old file is marked superseded so readers re-map. An in-memory database (the
tests) gets an anonymous mapping of the same layout in its process.

A mapped file that shrinks under a reader would kill the process with SIGBUS, so the file's blocks
are allocated for real before anything is written to them (a full disk fails the allocation, not a
later write), and its size and header are checked before every use; the index's sections carry a
checksum, checked when the file is mapped and by the sweep. A file that is short, has an
impossible header or index, or holds rows that disagree with the stored vectors at the exact
re-rank is rebuilt from the database; when no file can be written, `MatrixUnavailable` tells the
caller to search exactly instead (memory.vectors falls back to the sqlite-vec scan, flagged
degraded).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from django.conf import settings
from django.db import connection
from django.utils import timezone

from memory import matrix_damage, matrix_lists, matrix_scan
from memory.matrix_file import (
    MatrixDamaged,
    MatrixUnavailable,
    _Mapping,
    differences,
    quantise,
    unit_rows,
)
from memory.moments import iso

log = logging.getLogger(__name__)

# What this process last met, for health (the log says it too); a good rebuild ends "unavailable".
STATE: dict = {"lastDamage": None, "damagedAt": None, "rebuilds": 0, "unavailable": None}


def _note_damage(reason: str, folder: Path | None = None) -> None:
    at = iso(timezone.now())
    STATE.update(lastDamage=reason, damagedAt=at, rebuilds=STATE["rebuilds"] + 1)
    log.error("the shared vector matrix is damaged (%s): rebuilding it from the database", reason)
    if folder is not None:
        matrix_damage.record(folder, reason, at)


def damage_report() -> dict:
    """lastDamage, damagedAt, rebuilds for health: the newest record of any process of this
    store (memory.matrix_damage), else this process's own."""
    own = {key: STATE[key] for key in matrix_damage.KEYS}
    folder = INDEX.folder_now()
    return matrix_damage.newest(own, folder) if folder is not None else own


CHUNK = 500
POOL = 512  # rows scored in int8 after the hamming scan
RERANK_EXTRA = 8  # rows re-ranked exactly beyond the k asked for
FULL_LOAD_CHANGES = 5000  # more changed rows than this (and than half the file): reload instead
TAIL_ROWS = 4096  # rows appended since the file was sorted, at least, before it is sorted again


class MatrixIndex:
    """The shared matrix of one embedding model, as this process maps it."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.lock = threading.Lock()
        self.directory = Path(directory) if directory else None
        self.model: str | None = None
        self.dims = 0
        self.database: str | None = None
        self.mapping: _Mapping | None = None

    # -- where the file lives ------------------------------------------------------------------------
    def _folder(self, database: str) -> Path:
        """The data folder's `vectors/` for a database in the data folder (the default); beside
        the database file for one kept elsewhere (a test's, a copy's), so it goes with it."""
        configured = self.directory or getattr(settings, "MEMORY_MATRIX_DIR", "")
        if configured:
            return Path(configured)
        data = Path(settings.DATA_DIR).resolve()
        place = Path(database).resolve()
        if place.is_relative_to(data):
            return data / "vectors"
        return place.with_name(place.name + ".vectors")

    @staticmethod
    def _in_memory(name: str) -> bool:
        return name == ":memory:" or "mode=memory" in name

    def _database_identity(self, name: str) -> tuple[int, int]:
        try:
            info = os.stat(name)
            return info.st_ino, info.st_dev
        except OSError:
            return 0, 0

    def folder_now(self) -> Path | None:
        """The folder of the matrices of the database this connection uses (None in memory)."""
        name = str(connection.settings_dict["NAME"])
        return None if self._in_memory(name) else self._folder(name)

    def _damaged(self, reason: str) -> None:
        _note_damage(reason, self.folder_now())

    def path_for(self, model: str, dims: int) -> Path | None:
        name = str(connection.settings_dict["NAME"])
        if self._in_memory(name):
            return None
        digest = hashlib.sha256(f"{os.path.abspath(name)}|{model}|{dims}".encode()).hexdigest()
        return self._folder(name) / f"{digest[:24]}.matrix"

    # -- keeping in step -----------------------------------------------------------------------------
    def refresh(self, model: str, dims: int) -> None:
        """Map the current matrix of this model and bring it up to the log's last change."""
        name = str(connection.settings_dict["NAME"])
        if (self.model, self.dims, self.database) != (model, dims, name):
            self._drop()
            self.model, self.dims, self.database = model, dims, name
        with connection.cursor() as cursor:
            cursor.execute("SELECT MAX(seq) FROM embedding_changes")
            high = cursor.fetchone()[0] or 0
            current = self.mapping
            noted = False  # one damage, one record: the open below meets it again
            if current is not None:
                try:
                    current.check()  # before any page of it is read
                except MatrixDamaged as exc:
                    self._damaged(str(exc))
                    self._drop()
                    current, noted = None, True
            if current is not None and not current.superseded and current.seq == high:
                return
            path = self.path_for(model, dims)
            if path is None:
                self.mapping = self._update(cursor, self.mapping, None, model, dims)
                return
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # The sections this process's own mapping of the file was summed with when mapped
            # (the writer, opened at every catch-up, summed 14 MB again at 1M rows: 4 ms a job).
            summed = (
                current.index_identity() if current is not None and current.path == path else None
            )
            with self._exclusive(path):
                refused: list[str] = []
                writable = _Mapping.open(path, writable=True, summed=summed, refused=refused)
                if refused and not noted:  # met on opening it (a process started on a cut file)
                    self._damaged(f"the file was not used: {refused[0]}")
                if writable is not None and not self._belongs(writable, model, dims, name):
                    writable.close()
                    writable = None
                updated = self._update(cursor, writable, path, model, dims)
                if updated is not writable:
                    updated.close()
                if writable is not None:
                    writable.close()
            current = self.mapping
            if current is not None and not current.superseded and current.path == path:
                try:
                    if os.stat(path).st_ino == current.inode:
                        return  # brought up to date in place: the pages this process has stay
                except OSError:
                    pass
            self._drop()
            self.mapping = _Mapping.open(path, writable=False)
            if self.mapping is None:
                raise MatrixUnavailable("the vector matrix file could not be mapped")

    def rebuild(self, model: str, dims: int) -> None:
        """A new file from the stored vectors, whatever the old one holds (damage found)."""
        with self.lock:
            self._drop()
            self.model, self.dims = model, dims
            self.database = str(connection.settings_dict["NAME"])
            path = self.path_for(model, dims)
            with connection.cursor() as cursor:
                if path is None:
                    self.mapping = self._full_load(cursor, None, model, dims)
                    return
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                with self._exclusive(path):
                    self._full_load(cursor, path, model, dims).close()
            self.mapping = _Mapping.open(path, writable=False)
            if self.mapping is None:
                raise MatrixUnavailable("the rebuilt vector matrix file could not be mapped")
        STATE["unavailable"] = None

    def _belongs(self, mapping: _Mapping, model: str, dims: int, name: str) -> bool:
        return (
            mapping.model == model[:256]
            and mapping.layout.dims == dims
            and mapping.database == self._database_identity(name)
            and not mapping.superseded
        )

    @contextmanager
    def _exclusive(self, path: Path):
        with open(path.with_suffix(".lock"), "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _drop(self) -> None:
        if self.mapping is not None:
            self.mapping.close()
            self.mapping = None

    def _update(self, cursor, mapping, path, model, dims) -> _Mapping:
        """The mapping brought up to date: changes applied in place, or a rewritten matrix."""
        # Two subqueries: SQLite answers a lone MIN or MAX of the key from the b-tree's edge, but
        # both in one SELECT scan the whole log (7 ms a job at 100k changes).
        cursor.execute(
            "SELECT (SELECT MIN(seq) FROM embedding_changes), (SELECT MAX(seq) FROM embedding_changes)"
        )
        low, high = cursor.fetchone()
        high = high or 0
        if mapping is None or mapping.seq > high:
            return self._full_load(cursor, path, model, dims)
        if mapping.seq == high:
            return mapping
        if low is not None and low > mapping.seq + 1:
            return self._full_load(cursor, path, model, dims)  # the log was pruned past us
        cursor.execute(
            "SELECT DISTINCT embedding_id FROM embedding_changes WHERE seq > %s AND seq <= %s",
            [mapping.seq, high],
        )
        changed = np.fromiter((row[0] for row in cursor.fetchall()), dtype=np.int64)
        if len(changed) > max(FULL_LOAD_CHANGES, mapping.count // 2):
            return self._full_load(cursor, path, model, dims)
        found_ids, found_vectors = self._fetch(cursor, changed, model, dims)
        mapping = self._apply(mapping, path, changed, found_ids, found_vectors)
        mapping.publish(seq=high)
        return mapping

    def _fetch(self, cursor, embedding_ids, model, dims):
        """(ids, unit vectors) of those embeddings that are of this model now."""
        ids, blobs = [], []
        for start in range(0, len(embedding_ids), CHUNK):
            part = [int(i) for i in embedding_ids[start : start + CHUNK]]
            cursor.execute(
                f"SELECT id, vector FROM embeddings WHERE id IN ({','.join(['%s'] * len(part))}) "
                "AND model = %s AND dimensions = %s",
                [*part, model, dims],
            )
            for embedding_id, blob in cursor.fetchall():
                ids.append(int(embedding_id))
                blobs.append(blob)
        if not ids:
            return np.zeros(0, dtype=np.int64), np.zeros((0, dims), dtype=np.float32)
        width = dims * np.dtype(np.float32).itemsize
        if all(len(blob) == width for blob in blobs):  # one array from the joined blobs
            vectors = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(ids), dims)
        else:  # a blob of another width: row by row, as before (it fails or not as it did)
            vectors = np.vstack([np.frombuffer(bytes(blob), dtype=np.float32) for blob in blobs])
        return np.asarray(ids, dtype=np.int64), unit_rows(vectors)

    def _apply(self, mapping, path, changed, found_ids, found_vectors) -> _Mapping:
        rows = mapping.rows_of(changed)
        present = {int(i) for i in found_ids}
        gone = [row for eid, row in rows.items() if eid not in present]
        if gone:
            mapping.alive[gone] = 0
        indexed = mapping.indexed
        lists = matrix_lists.assign(found_vectors, mapping.centroids)
        at = np.asarray([rows.get(int(eid), -1) for eid in found_ids], dtype=np.int64)
        # A sorted row whose changed vector belongs in another list now goes to the tail (the
        # old row dies once the new one is published); in its own list it is written in place.
        stays = (at >= indexed) | ((at >= 0) & (mapping.lists[np.maximum(at, 0)] == lists))
        in_place, new = np.flatnonzero(stays), np.flatnonzero(~stays)
        if len(in_place):
            mapping.put(at[in_place], found_ids[in_place], found_vectors[in_place], lists[in_place])
        moved = at[new][at[new] >= 0]
        count = mapping.count
        dead = count - int(np.count_nonzero(mapping.alive[:count])) + len(moved)
        tail = count + len(new) - indexed
        if (
            count + len(new) > mapping.layout.capacity
            or (dead > 1024 and dead > count // 2)
            or tail > max(TAIL_ROWS, indexed // 8)
        ):
            mapping.alive[moved] = 0
            return self._rewrite(mapping, path, found_ids[new], found_vectors[new])
        if len(new):
            targets = np.arange(count, count + len(new))
            mapping.put(targets, found_ids[new], found_vectors[new], lists[new])
            mapping.publish(count=count + len(new))  # rows first, then the count that shows them
        mapping.alive[moved] = 0
        return mapping

    def _new_file(self, path, model, dims, capacity, nlist: int = 0) -> _Mapping:
        database = self._database_identity(str(connection.settings_dict["NAME"]))
        self._serial = getattr(self, "_serial", 0) + 1
        target = (
            None if path is None else path.with_name(f"{path.name}.{os.getpid()}.{self._serial}")
        )
        return _Mapping.create(target, model, dims, capacity, database, nlist)

    def _grown(self, mapping: _Mapping, path, count: int, capacity: int) -> _Mapping:
        """A bigger unpublished copy of a matrix being loaded (rows arrived while it loaded)."""
        grown = self._new_file(path, mapping.model, mapping.layout.dims, capacity)
        grown.ids[:count] = mapping.ids[:count]
        grown.scale[:count] = mapping.scale[:count]
        grown.codes[:count] = mapping.codes[:count]
        grown.bits[:, :count] = mapping.bits[:, :count]
        grown.alive[:count] = mapping.alive[:count]
        mapping.close()
        if mapping.path is not None:
            mapping.path.unlink(missing_ok=True)
        return grown

    def _install(self, fresh: _Mapping, path, old: _Mapping | None) -> _Mapping:
        if path is not None:
            fresh.buffer.flush()
            os.replace(fresh.path, path)
            fresh.path = path
        if old is not None:
            old.supersede()  # after the rename: a reader that re-maps finds the new file
        return fresh

    def _rewrite(self, mapping, path, new_ids, new_vectors) -> _Mapping:
        """A new file with the live rows and the new ones sorted by list, room to grow: the lists
        kept (those grown too long split), or learnt anew when the file had none worth keeping."""
        count, nlist = mapping.count, mapping.layout.nlist
        live = np.flatnonzero(mapping.alive[:count])
        source = matrix_lists.RowSource(mapping, live, new_ids, new_vectors)
        if nlist > 1 and source.total >= matrix_lists.INDEX_MIN_ROWS:
            kept = np.clip(mapping.lists[live], 0, nlist - 1)
            list_of = np.concatenate([kept, matrix_lists.assign(new_vectors, mapping.centroids)])
            centroids, list_of = matrix_lists.split_large(source, mapping.centroids, list_of)
        else:
            centroids, list_of = matrix_lists.build(source)
        fresh = self._sorted_file(path, source, centroids, list_of, 1.5)
        fresh.publish(count=source.total, seq=mapping.seq)
        return self._install(fresh, path, mapping)

    def _sorted_file(self, path, source, centroids, list_of, room: float) -> _Mapping:
        """An unpublished file of `source`'s rows sorted by list; removed if writing it fails."""
        mapping = source.mapping
        capacity = max(1024, int(source.total * room) + 16)
        fresh = self._new_file(path, mapping.model, mapping.layout.dims, capacity, len(centroids))
        try:
            matrix_lists.write_sorted(fresh, source, centroids, list_of)
        except BaseException:
            if fresh.path is not None:
                fresh.path.unlink(missing_ok=True)
            fresh.close()
            raise
        return fresh

    def _full_load(self, cursor, path, model, dims) -> _Mapping:
        """Every stored vector, read into memory (rows in the order they come), grouped in lists
        and written sorted to a new file that replaces the old one."""
        cursor.execute("SELECT COALESCE(MAX(seq), 0) FROM embedding_changes")
        seq = cursor.fetchone()[0]
        cursor.execute(
            "SELECT COUNT(*) FROM embeddings WHERE model = %s AND dimensions = %s", [model, dims]
        )
        expected = int(cursor.fetchone()[0])
        staging = self._new_file(None, model, dims, max(1024, int(expected * 1.25) + 16))
        staging, count = self._load_rows(cursor, staging, None, model, dims)
        try:
            source = matrix_lists.RowSource(staging, np.arange(count))
            centroids, list_of = matrix_lists.build(source)
            fresh = self._sorted_file(path, source, centroids, list_of, 1.25)
        finally:
            staging.close()
        fresh.publish(count=count, seq=seq)
        old = _Mapping.open(path, writable=True) if path is not None and path.exists() else None
        installed = self._install(fresh, path, old)
        if old is not None:
            old.close()
        return installed

    def _load_rows(self, cursor, fresh: _Mapping, path, model, dims) -> tuple[_Mapping, int]:
        """Every stored vector of the model into `fresh` (a bigger copy when rows arrive while it
        loads): (the mapping, its row count). A partial file (the disk filled) is removed."""
        cursor.execute(
            "SELECT id, vector FROM embeddings WHERE model = %s AND dimensions = %s", [model, dims]
        )
        count = 0
        try:
            while rows := cursor.fetchmany(5000):
                ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
                blobs = np.frombuffer(b"".join([row[1] for row in rows]), np.float32)
                if count + len(rows) > fresh.layout.capacity:  # rows arrived since the count
                    fresh = self._grown(fresh, path, count, int((count + len(rows)) * 1.5))
                vectors = unit_rows(blobs.reshape(len(rows), dims))
                fresh.put(np.arange(count, count + len(rows)), ids, vectors)
                count += len(rows)
        except BaseException:
            if fresh.path is not None:
                fresh.path.unlink(missing_ok=True)
            fresh.close()
            raise
        return fresh, count

    # -- checking the whole file ----------------------------------------------------------------
    def verify(self, model: str, dims: int) -> str | None:
        """Compare every row of the mapped file with the stored vectors (the maintenance sweep
        calls it): the damage found, after rebuilding the file, or None when it is sound."""
        with self.lock:
            self.refresh(model, dims)
            mapping = self.mapping
            if mapping is None:
                return None
            seq, count = mapping.seq, mapping.count
        damage = matrix_lists.damage(mapping, count)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT DISTINCT embedding_id FROM embedding_changes WHERE seq > %s", [seq]
            )
            moving = {row[0] for row in cursor.fetchall()}  # changed since: not judged now
            damage = damage or differences(cursor, mapping, count, moving, model, dims)
        if damage is None:
            return None
        self._damaged(damage)
        self.rebuild(model, dims)
        return damage

    # -- querying ------------------------------------------------------------------------------------
    def catch_up(self, model: str) -> None:
        """`refresh` of the matrix this process maps, if it is `model`'s, under the lock a search
        takes. Only the search knows the width of its vectors: nothing else is mapped here."""
        with self.lock:
            if self.mapping is not None and self.model == model:
                self.refresh(self.model, self.dims)

    def nearest(self, query: np.ndarray, *, model: str, k: int) -> list[tuple[int, float]]:
        """(embedding id, cosine distance) of the k nearest live rows, nearest first."""
        return self.nearest_many(np.asarray(query)[None, :], model=model, k=k)[0]

    def nearest_many(self, queries: np.ndarray, *, model: str, k: int) -> list[list]:
        """`nearest` for each row of `queries`, in one pass over the matrix. A damaged file is
        rebuilt from the database and the search run again; MatrixUnavailable when that fails."""
        queries = np.asarray(queries, dtype=np.float32)
        dims = int(queries.shape[1])
        try:
            return self._search(queries, model, k)
        except MatrixDamaged as exc:
            self._damaged(str(exc))
        try:
            self.rebuild(model, dims)
            return self._search(queries, model, k)
        except (MatrixDamaged, OSError) as exc:
            STATE["unavailable"] = str(exc)
            raise MatrixUnavailable(f"the vector matrix could not be rebuilt: {exc}") from exc

    def _search(self, queries: np.ndarray, model: str, k: int) -> list[list]:
        with self.lock:
            self.refresh(model, int(queries.shape[1]))
            mapping = self.mapping
            count = mapping.count if mapping is not None else 0
            if count == 0 or k <= 0:
                return [[] for _ in queries]
            units = unit_rows(queries)
            # Never fewer candidates than asked for: a caller widening k must get k rows.
            want = max(POOL, 2 * k)
            probed = None if count <= want else matrix_lists.probes(mapping, count, units, want)
            candidates = matrix_scan.candidates(
                mapping, count, units, probed, want, k + RERANK_EXTRA
            )
            seq = mapping.seq
        return self._exact(candidates, units, model, k, seq)

    def _exact(self, candidates, units, model, k, seq) -> list[list[tuple[int, float]]]:
        """Exact cosine of each query's candidates from the stored float32 vectors; top k."""
        ids_of = [ids for ids, _ in candidates]
        wanted = np.unique(np.concatenate(ids_of)) if ids_of else np.zeros(0)
        found_ids, found_vectors = self._fetch_for_rerank(wanted, model, units.shape[1])
        position = {int(eid): i for i, eid in enumerate(found_ids)}
        self._verify_candidates(candidates, position, found_vectors, seq)
        results = []
        for ids, unit in zip(ids_of, units, strict=True):
            rows = [position[int(eid)] for eid in ids if int(eid) in position]
            if not rows:
                results.append([])
                continue
            own_ids = found_ids[rows]
            scores = found_vectors[rows] @ unit
            # Ties broken by embedding id so results are stable and equal to an exact sort.
            order = np.lexsort((own_ids, -scores))[:k]
            results.append([(int(own_ids[i]), float(1.0 - scores[i])) for i in order])
        return results

    def _verify_candidates(self, candidates, position, found_vectors, seq) -> None:
        """Raise MatrixDamaged when a candidate row's sign bits are not those of its stored vector
        (or it names no stored vector of this model) and no change since the mapping explains it."""
        suspect = []
        for ids, bits in candidates:
            present = [i for i, eid in enumerate(ids) if int(eid) in position]
            if len(present) < len(ids):
                suspect += [int(eid) for eid in ids if int(eid) not in position]
            if present:
                stored = quantise(found_vectors[[position[int(ids[i])] for i in present]])[0]
                wrong = np.flatnonzero((stored != bits[present]).any(axis=1))
                suspect += [int(ids[present[i]]) for i in wrong]
        if not suspect:
            return
        with connection.cursor() as cursor:
            marks = ",".join(["%s"] * len(suspect))
            cursor.execute(
                f"SELECT COUNT(*) FROM embedding_changes WHERE seq > %s AND embedding_id IN ({marks})",
                [seq, *suspect],
            )
            if cursor.fetchone()[0]:
                return  # changed since this mapping was read: the next search catches up
        raise MatrixDamaged(f"{len(suspect)} row(s) disagree with the stored vectors")

    def _fetch_for_rerank(self, wanted, model, dims):
        with connection.cursor() as cursor:
            return self._fetch(cursor, wanted, model, dims)

    # -- what it costs -------------------------------------------------------------------------------
    def memory_bytes(self) -> int:
        """Bytes of the mapped matrix (shared by every process that maps it)."""
        return len(self.mapping.buffer) if self.mapping is not None else 0

    def resident_bytes(self) -> int:
        """Bytes of the mapped file resident in this process (its RSS share), from /proc."""
        mapping = self.mapping
        if mapping is None or mapping.path is None:
            return self.memory_bytes()
        target = str(mapping.path)
        resident, inside = 0, False
        try:
            with open("/proc/self/smaps") as smaps:
                for line in smaps:
                    if line[0] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
                        inside = line.rstrip().endswith(target)
                    elif inside and line.startswith("Rss:"):
                        resident += int(line.split()[1]) * 1024
        except OSError:
            return 0
        return resident


INDEX = MatrixIndex()
