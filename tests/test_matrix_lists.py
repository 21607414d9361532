"""The shared matrix's inverted-file index (issue 24, item 1): a big store is searched through the
lists nearest each query, not row by row, and still ranks like brute force; vectors written after
the lists were built (the tail), changed vectors, forgotten and recovered memories, a second
process, a forked child and a damaged index all keep the answers right.

The thresholds are lowered so a store of a few thousand rows has lists (a real store needs
32,768 rows); the benchmark measures recall and cost at 10k, 100k and 1M."""

import os

import numpy as np
import pytest
from django.db import connection
from django.utils import timezone

from memory import matrix, matrix_file, matrix_lists, vectors
from memory.models import Embedding
from memory.vectors import vector_to_blob
from tests.pipeline_support import on_a_file_database

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.sqlite_only(reason="the shared matrix serves SQLite; PostgreSQL uses HNSW"),
]
DIMS = 768
ROWS = 3000
CENTRES = 60


@pytest.fixture
def small_lists(monkeypatch):
    monkeypatch.setattr(matrix_lists, "INDEX_MIN_ROWS", 512)
    monkeypatch.setattr(matrix_lists, "LIST_ROWS", 40)
    monkeypatch.setattr(matrix_lists, "SPLIT_ROWS", 160)
    monkeypatch.setattr(matrix_lists, "PROBE_ROWS", 400)
    monkeypatch.setattr(matrix_lists, "PROBE_LISTS", 4)
    monkeypatch.setattr(matrix, "POOL", 64)
    monkeypatch.setattr(matrix, "TAIL_ROWS", 64)


@pytest.fixture
def folder(transactional_db, tmp_path, settings, small_lists):
    settings.MEMORY_MATRIX_DIR = str(tmp_path / "vectors")
    matrix.STATE.update(lastDamage=None, damagedAt=None, rebuilds=0, unavailable=None)
    with on_a_file_database(tmp_path / "store.sqlite3"):
        yield tmp_path / "vectors"


def clustered(rng, n):
    """Unit vectors around CENTRES topics, each of a few subtopics, as real memories cluster."""
    shapes = np.random.default_rng(5)
    centres = shapes.standard_normal((CENTRES, DIMS)).astype(np.float32)
    subtopics = shapes.standard_normal((CENTRES, 8, DIMS)).astype(np.float32)
    topic, sub = rng.integers(0, CENTRES, n), rng.integers(0, 8, n)
    rows = centres[topic] + 0.7 * subtopics[topic, sub] + 0.4 * rng.standard_normal((n, DIMS))
    rows = rows.astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def store(units, start=0):
    now = timezone.now()
    created = Embedding.objects.bulk_create(
        Embedding(
            content_hash=f"h{start + i}",
            vector=vector_to_blob(v),
            dimensions=DIMS,
            model="m1",
            created_at=now,
        )
        for i, v in enumerate(units)
    )
    return np.asarray([e.id for e in created])


@pytest.fixture
def stored(folder):
    units = clustered(np.random.default_rng(24), ROWS)
    return store(units), units


def exact_top(ids, units, query, k=5):
    return [int(i) for i in ids[np.lexsort((ids, -(units @ query)))[:k]]]


def queries(units, rng, n=40):
    picked = units[rng.choice(len(units), n, replace=False)]
    noisy = picked + 0.03 * rng.standard_normal(picked.shape).astype(np.float32)
    return noisy / np.linalg.norm(noisy, axis=1, keepdims=True)


def recall(index, ids, units, qs, k=5):
    found = index.nearest_many(qs, model="m1", k=k)
    hits = sum(
        len({eid for eid, _ in hits} & set(exact_top(ids, units, q, k)))
        for q, hits in zip(qs, found, strict=True)
    )
    return hits / (k * len(qs))


def test_a_big_store_is_searched_through_its_nearest_lists_and_ranks_like_brute_force(stored):
    ids, units = stored
    index = matrix.MatrixIndex()
    qs = queries(units, np.random.default_rng(1))
    assert recall(index, ids, units, qs) >= 0.98
    mapping = index.mapping
    assert mapping.layout.nlist > 20 and mapping.indexed == ROWS
    probed = matrix_lists.probes(mapping, mapping.count, qs, matrix.POOL)
    assert all(len(rows) < ROWS // 2 for rows in probed)  # no query reads the whole file
    # Each list's rows lie side by side, and nearly every row is in the list of its nearest
    # centroid (it was put in its group's nearest, having met only its group's centroids).
    starts = mapping.starts
    for number in range(mapping.layout.nlist):
        assert (mapping.lists[starts[number] : starts[number + 1]] == number).all()
    approx = mapping.codes[:ROWS].astype(np.float32) * mapping.scale[:ROWS, None]
    assert (matrix_lists.assign(approx, mapping.centroids) == mapping.lists[:ROWS]).mean() > 0.95


def test_the_distances_are_exact_and_ties_are_broken_by_id(stored):
    ids, units = stored
    query = queries(units, np.random.default_rng(2), 1)[0]
    hits = matrix.MatrixIndex().nearest(query, model="m1", k=5)
    top = exact_top(ids, units, query)
    assert [eid for eid, _ in hits] == top
    position = {int(e): i for i, e in enumerate(ids)}
    assert np.allclose([1 - d for _, d in hits], [units[position[e]] @ query for e in top])


def test_vectors_written_after_the_lists_were_built_are_found_in_the_tail(stored):
    ids, units = stored
    index = matrix.MatrixIndex()
    index.nearest(units[0], model="m1", k=1)
    inode = index.mapping.inode
    rng = np.random.default_rng(3)
    more = clustered(rng, 30)
    more_ids = store(more, start=ROWS)
    for eid, unit in zip(more_ids, more, strict=True):
        assert index.nearest(unit, model="m1", k=1)[0][0] == eid
    mapping = index.mapping
    assert mapping.inode == inode and mapping.count == ROWS + 30 and mapping.indexed == ROWS
    tail = mapping.lists[ROWS : ROWS + 30]
    assert (tail == matrix_lists.assign(more, mapping.centroids)).all()
    every_id, every = np.concatenate([ids, more_ids]), np.vstack([units, more])
    assert recall(index, every_id, every, queries(every, rng)) >= 0.98


def test_a_long_tail_is_sorted_in_and_a_crowded_list_is_split(stored):
    ids, units = stored
    index = matrix.MatrixIndex()
    index.nearest(units[0], model="m1", k=1)
    lists = index.mapping.layout.nlist
    # Many rows around one direction: its list outgrows SPLIT_ROWS.
    rng = np.random.default_rng(4)
    facets = rng.standard_normal((30, DIMS)).astype(np.float32)
    noise = rng.standard_normal((600, DIMS)).astype(np.float32)
    crowd = units[7] + 0.04 * facets[rng.integers(0, 30, 600)] + 0.02 * noise
    crowd /= np.linalg.norm(crowd, axis=1, keepdims=True)
    crowd_ids = store(crowd, start=ROWS)
    assert index.nearest(crowd[-1], model="m1", k=1)[0][0] == crowd_ids[-1]
    mapping = index.mapping
    assert mapping.indexed == mapping.count == ROWS + 600  # rewritten, sorted
    assert mapping.layout.nlist > lists
    assert np.bincount(mapping.lists[: mapping.count]).max() <= matrix_lists.SPLIT_ROWS
    every_id, every = np.concatenate([ids, crowd_ids]), np.vstack([units, crowd])
    assert recall(index, every_id, every, queries(every, rng)) >= 0.98
    assert index.verify("m1", DIMS) is None


def test_a_changed_vector_moves_to_its_new_list_and_leaves_its_old_place(stored):
    ids, units = stored
    index = matrix.MatrixIndex()
    index.nearest(units[0], model="m1", k=1)
    mapping = index.mapping
    lists = mapping.lists[list(mapping.rows_of(ids).values())]
    other = int(np.flatnonzero(lists != lists[10])[0])  # a vector of another list
    target, elsewhere = int(ids[10]), units[other]
    assert index.nearest(units[10], model="m1", k=1)[0][0] == target
    Embedding.objects.filter(id=target).update(vector=vector_to_blob(elsewhere))
    top = [eid for eid, _ in index.nearest(elsewhere, model="m1", k=2)]
    assert set(top) == {target, int(ids[other])}
    assert target not in [eid for eid, _ in index.nearest(units[10], model="m1", k=5)]
    row = index.mapping.rows_of(np.asarray([target]))[target]
    assert row >= index.mapping.indexed and index.mapping.alive[row] == 1
    Embedding.objects.filter(id=target).delete()
    assert target not in [eid for eid, _ in index.nearest(elsewhere, model="m1", k=5)]


def test_another_process_finds_what_one_appended_and_follows_a_rewrite(stored):
    ids, units = stored
    first, second = matrix.MatrixIndex(), matrix.MatrixIndex()
    first.nearest(units[0], model="m1", k=1)
    second.nearest(units[0], model="m1", k=1)
    rng = np.random.default_rng(6)
    added = clustered(rng, 10)
    added_ids = store(added, start=ROWS)
    assert first.nearest(added[3], model="m1", k=1)[0][0] == added_ids[3]  # first appends
    assert second.nearest(added[4], model="m1", k=1)[0][0] == added_ids[4]  # second reads it
    old = second.mapping
    many = clustered(rng, 400)
    many_ids = store(many, start=ROWS + 10)
    assert first.nearest(many[0], model="m1", k=1)[0][0] == many_ids[0]  # sorted anew
    assert old.superseded
    assert second.nearest(many[1], model="m1", k=1)[0][0] == many_ids[1]
    assert second.mapping is not old and second.mapping.indexed == ROWS + 410


def test_a_forked_child_searches_the_lists_it_inherited_and_those_written_since(stored):
    ids, units = stored
    index = matrix.INDEX
    query = units[33]
    assert index.nearest(query, model="m1", k=1)[0][0] == int(ids[33])
    late = clustered(np.random.default_rng(8), 5)
    late_ids = store(late, start=ROWS)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        connection.connection = None
        try:
            ok = index.nearest(query, model="m1", k=1)[0][0] == int(ids[33])
            ok = ok and index.nearest(late[2], model="m1", k=1)[0][0] == int(late_ids[2])
            os._exit(0 if ok else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert index.nearest(late[2], model="m1", k=1)[0][0] == int(late_ids[2])


def test_forgotten_memories_leave_the_vector_leg_and_recovered_ones_come_back(folder):
    from memory.writes import Actor, forget, recover, remember, store_vector
    from pipeline.llm.offline import OfflineEmbedder

    embedder = OfflineEmbedder(DIMS, model="m1")
    texts = [f"Note {n}: service s{n % 97} runs job j{n % 13} on node {n}" for n in range(700)]
    units = np.vstack([embedder.embed_one(t) for t in texts])
    store(units)  # other agents' vectors, so the store has lists
    memory = remember(
        "Priya moved the ledger service to Kafka on staging", actor=Actor("a", "agent")
    ).memory
    vector = vectors.Vector(embedder.embed_one(memory.content), "m1")
    assert store_vector(memory.id, memory.content_hash, vector)
    query = embedder.embed_one("Priya moved ledger to Kafka")

    def found():
        hits = vectors.search(query, model="m1", agent_id="default", limit=5)
        return memory.id in [memory_id for memory_id, _ in hits]

    assert found() and matrix.INDEX.mapping.layout.nlist > 1
    forget(memory.id, actor=Actor("dana"), reason="test")
    assert not found()
    recover(memory.id, actor=Actor("dana"), reason="test")
    assert found()


def test_damaged_index_sections_are_caught_when_mapped_and_by_the_sweep(stored):
    ids, units = stored
    index = matrix.INDEX
    query = units[50]
    assert index.nearest(query, model="m1", k=5)[0][0] == int(ids[50])
    (path,) = index.mapping.path.parent.glob("*.matrix")
    writer = matrix_file._Mapping.open(path, writable=True)
    writer.starts[3] = writer.starts[3] + 7  # a list boundary moved: rows outside their list
    writer.buffer.flush()
    writer.close()
    assert "checksum" in vectors.repair_matrix()["m1"]  # the sweep, in this process
    assert [eid for eid, _ in index.nearest(query, model="m1", k=5)] == exact_top(ids, units, query)
    assert matrix_file._Mapping.open(path, writable=False) is not None  # rebuilt, sound
    writer = matrix_file._Mapping.open(path, writable=True)
    writer.centroids[0] = 0.0
    writer.close()
    assert matrix_file._Mapping.open(path, writable=False) is None  # refused when mapped
    fresh = matrix.MatrixIndex()
    assert [eid for eid, _ in fresh.nearest(query, model="m1", k=5)] == exact_top(ids, units, query)


def test_a_catch_up_sums_the_index_once_per_file_and_a_new_mapping_sums_it_again(
    stored, monkeypatch
):
    ids, units = stored
    index = matrix.INDEX
    index.nearest(units[0], model="m1", k=1)
    summed = []
    original = matrix_file._Mapping.index_checksum
    monkeypatch.setattr(
        matrix_file._Mapping,
        "index_checksum",
        lambda mapping: summed.append(mapping.writable) or original(mapping),
    )
    for n in range(3):  # each write is caught up through a writer mapping of the same file
        store(clustered(np.random.default_rng(30 + n), 2), start=ROWS + 2 * n)
        index.nearest(units[0], model="m1", k=1)
    assert index.mapping.seq and summed == []
    # A mapping of its own (another process's, or this one's after a rewrite) sums them again:
    # a damaged section is refused when mapped (the test above).
    assert matrix_file._Mapping.open(index.mapping.path, writable=False) is not None
    assert summed == [False]


def test_a_tail_row_in_no_list_is_reported_by_the_sweep_and_rebuilt(stored):
    ids, units = stored
    index = matrix.INDEX
    index.nearest(units[0], model="m1", k=1)
    added = store(clustered(np.random.default_rng(9), 3), start=ROWS)
    index.nearest(units[0], model="m1", k=1)
    writer = matrix_file._Mapping.open(index.mapping.path, writable=True)
    writer.lists[ROWS + 1] = -5
    writer.close()
    assert "outside their lists" in vectors.repair_matrix()["m1"]
    assert index.mapping.rows_of(added)  # rebuilt from the database, the new rows in it
    assert vectors.repair_matrix() == {}


def test_an_id_on_two_rows_for_a_moment_comes_back_once(stored):
    # A moved vector's new row is published before its old row dies: a search in between sees
    # the id twice in the file, and must answer it once.
    ids, units = stored
    index = matrix.INDEX
    index.nearest(units[5], model="m1", k=1)
    writer = matrix_file._Mapping.open(index.mapping.path, writable=True)
    count = writer.count
    lists = matrix_lists.assign(units[5:6], writer.centroids)
    writer.put(np.array([count]), np.array([ids[5]]), units[5:6], lists)
    writer.publish(count=count + 1)
    writer.close()
    hits = [eid for eid, _ in index.nearest(units[5], model="m1", k=3)]
    assert hits[0] == int(ids[5]) and hits.count(int(ids[5])) == 1 and len(hits) == 3


def test_a_purge_zeroing_indexed_rows_leaves_the_lists_sound(stored):
    """A purge zeroes its vectors' rows in place (ids too): every other id is still found
    through the rows' order by id, the sweep sees no damage, searches still rank exactly."""
    from memory import matrix_erase

    ids, units = stored
    index = matrix.INDEX
    index.nearest(units[0], model="m1", k=1)
    gone = [int(i) for i in ids[100:140]]
    Embedding.objects.filter(id__in=gone).delete()
    rows = matrix_erase.erase(index, "m1", DIMS, gone)
    assert len(rows) == len(gone)
    assert matrix_erase.still_held(index, "m1", DIMS, gone, rows) == 0
    kept = np.asarray([i for i in ids if int(i) not in set(gone)])
    assert len(index.mapping.rows_of(kept)) == len(kept)
    assert vectors.repair_matrix() == {}
    query = units[200]
    remaining = [i for i in range(ROWS) if not 100 <= i < 140]
    top = [eid for eid, _ in index.nearest(query, model="m1", k=5)]
    assert top == exact_top(ids[remaining], units[remaining], query)
