"""One vector matrix per machine (issue 12): a file under the data folder that each process maps
read-only, brought up to date by whichever process finds it behind the `embedding_changes` log.

Two MatrixIndex objects stand for two processes (each maps the file itself)."""

import numpy as np
import pytest
from django.utils import timezone

from memory import matrix, matrix_file, vectors
from memory.models import Embedding
from memory.vectors import vector_to_blob
from tests.pipeline_support import on_a_file_database

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.sqlite_only(reason="the shared matrix serves SQLite; PostgreSQL uses HNSW"),
]
DIMS = 768


@pytest.fixture
def folder(transactional_db, tmp_path, settings):
    settings.MEMORY_MATRIX_DIR = str(tmp_path / "vectors")
    with on_a_file_database(tmp_path / "store.sqlite3"):
        yield tmp_path / "vectors"


def add(rng, n, model="m1"):
    rows = []
    for _ in range(n):
        v = rng.standard_normal(DIMS).astype(np.float32)
        v /= np.linalg.norm(v)
        e = Embedding.objects.create(
            content_hash=f"{rng.integers(1 << 62):x}",
            vector=vector_to_blob(v),
            dimensions=DIMS,
            model=model,
            created_at=timezone.now(),
        )
        vectors.index_vector(e.id, v, model)
        rows.append((e.id, v))
    return rows


def files(folder):
    return sorted(p.name for p in folder.glob("*.matrix"))


def test_processes_share_one_file_that_each_maps_read_only(folder):
    rng = np.random.default_rng(1)
    rows = add(rng, 40)
    first, second = matrix.MatrixIndex(), matrix.MatrixIndex()
    target_id, target = rows[7]
    assert first.nearest(target, model="m1", k=1)[0][0] == target_id  # builds the file
    (name,) = files(folder)
    inode = (folder / name).stat().st_ino
    assert second.nearest(target, model="m1", k=1)[0][0] == target_id  # maps it as it is
    assert (folder / name).stat().st_ino == inode
    assert second.mapping.path == folder / name and not second.mapping.writable
    with pytest.raises(TypeError):
        second.mapping.buffer[0] = 0  # read-only: only a writer under the lock changes it
    assert second.memory_bytes() == (folder / name).stat().st_size


def test_a_change_seen_by_one_process_is_there_for_the_other(folder):
    rng = np.random.default_rng(2)
    rows = add(rng, 20)
    first, second = matrix.MatrixIndex(), matrix.MatrixIndex()
    first.nearest(rows[0][1], model="m1", k=1)
    second.nearest(rows[0][1], model="m1", k=1)
    new_id, new = add(rng, 1)[0]
    assert first.nearest(new, model="m1", k=1)[0][0] == new_id  # first applies the change...
    seq = first.mapping.seq
    assert second.mapping.seq == seq  # ...in the shared file, so second has nothing left to do
    assert second.nearest(new, model="m1", k=1)[0][0] == new_id
    Embedding.objects.filter(id=rows[3][0]).delete()
    assert rows[3][0] not in [i for i, _ in second.nearest(rows[3][1], model="m1", k=5)]
    assert rows[3][0] not in [i for i, _ in first.nearest(rows[3][1], model="m1", k=5)]


def test_a_full_file_is_rewritten_and_every_process_follows(folder, monkeypatch):
    rng = np.random.default_rng(3)
    rows = add(rng, 10)
    first, second = matrix.MatrixIndex(), matrix.MatrixIndex()
    first.nearest(rows[0][1], model="m1", k=1)
    second.nearest(rows[0][1], model="m1", k=1)
    capacity = first.mapping.layout.capacity
    more = add(rng, capacity)  # more rows than the file has room for
    last_id, last = more[-1]
    assert first.nearest(last, model="m1", k=1)[0][0] == last_id
    assert first.mapping.layout.capacity > capacity
    assert len(files(folder)) == 1  # rewritten beside, renamed over
    # The second process still maps the old file, now marked superseded: it re-maps.
    assert second.nearest(last, model="m1", k=1)[0][0] == last_id
    assert second.mapping.layout.capacity == first.mapping.layout.capacity
    everything = np.vstack([v for _, v in rows + more])
    ids = np.array([i for i, _ in rows + more])
    query = rows[4][1] + 0.2 * rng.standard_normal(DIMS).astype(np.float32)
    scores = everything @ (query / np.linalg.norm(query))
    exact = [int(i) for i in ids[np.lexsort((ids, -scores))[:5]]]
    assert [i for i, _ in second.nearest(query, model="m1", k=5)][:1] == exact[:1]


def test_a_file_of_another_database_at_the_same_place_is_never_used(folder, tmp_path):
    rng = np.random.default_rng(4)
    rows = add(rng, 5)
    index = matrix.MatrixIndex()
    index.nearest(rows[0][1], model="m1", k=1)
    path = index.mapping.path
    other = matrix_file._Mapping.open(path, writable=True)
    other.database = (0, 0)
    matrix_file._HEADER.pack_into(
        other.buffer,
        0,
        matrix_file._MAGIC,
        DIMS,
        other.layout.words,
        other.layout.capacity,
        other.count,
        other.seq,
        0,
        0,
        0,
    )  # as if another database file had been here before
    other.close()
    fresh = matrix.MatrixIndex()
    assert fresh.nearest(rows[2][1], model="m1", k=1)[0][0] == rows[2][0]
    assert fresh.mapping.database != (0, 0)  # rebuilt for this database
