"""The in-memory vector matrix: exact, equal in ranking to sqlite-vec, and in step with writes."""

import numpy as np
import pytest
from django.db import connection
from django.utils import timezone

from memory import matrix, vectors
from memory.models import Embedding
from memory.vectors import vector_to_blob

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.sqlite_only(
        reason="the per-process matrix and its embedding_changes log exist only on SQLite; "
        "PostgreSQL answers KNN from its HNSW index (tests/test_postgres.py)"
    ),
]
DIMS = 768


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


def test_the_matrix_ranks_exactly_like_the_sqlite_vec_scan():
    rng = np.random.default_rng(7)
    rows = add(rng, 400)
    for _ in range(10):
        q = rng.standard_normal(DIMS).astype(np.float32)
        fast = matrix.INDEX.nearest(q, model="m1", k=10)
        exact = vectors.nearest_vec0(q, model="m1", k=10)
        assert [i for i, _ in fast] == [i for i, _ in exact]
        assert np.allclose([d for _, d in fast], [d for _, d in exact], atol=1e-5)
        brute = sorted(rows, key=lambda r: -float(r[1] @ (q / np.linalg.norm(q))))[:10]
        assert [i for i, _ in fast] == [i for i, _ in brute]


def test_the_matrix_follows_inserts_updates_and_deletes_through_the_change_log():
    rng = np.random.default_rng(1)
    rows = add(rng, 50)
    target_id, target = rows[0]
    assert matrix.INDEX.nearest(target, model="m1", k=1)[0][0] == target_id
    new_id, new = add(rng, 1)[0]
    assert matrix.INDEX.nearest(new, model="m1", k=1)[0][0] == new_id  # insert seen
    Embedding.objects.filter(id=new_id).update(vector=vector_to_blob(target))
    top = [i for i, _ in matrix.INDEX.nearest(target, model="m1", k=2)]
    assert set(top) == {target_id, new_id}  # update seen
    Embedding.objects.filter(id=target_id).delete()
    assert target_id not in [
        i for i, _ in matrix.INDEX.nearest(target, model="m1", k=5)
    ]  # delete seen


def test_vectors_of_another_model_never_enter_the_matrix():
    rng = np.random.default_rng(2)
    other_id, other = add(rng, 1, model="m2")[0]
    add(rng, 5, model="m1")
    assert other_id not in [i for i, _ in matrix.INDEX.nearest(other, model="m1", k=10)]
    assert matrix.INDEX.nearest(other, model="m2", k=1)[0][0] == other_id


def test_a_pruned_change_log_triggers_a_full_reload():
    rng = np.random.default_rng(3)
    add(rng, 5)
    matrix.INDEX.nearest(rng.standard_normal(DIMS).astype(np.float32), model="m1", k=1)
    new_id, new = add(rng, 1)[0]
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM embedding_changes")
        cursor.execute(
            "INSERT INTO embedding_changes(seq, embedding_id) VALUES (100000, %s)", [new_id]
        )
    assert matrix.INDEX.nearest(new, model="m1", k=1)[0][0] == new_id
    assert matrix.INDEX.memory_bytes() >= 6 * DIMS * 4


def test_asking_for_more_neighbours_than_the_candidate_pool_still_returns_them_all():
    rng = np.random.default_rng(3)
    vectors_by_row = [rng.standard_normal(DIMS).astype(np.float32) for _ in range(1500)]
    rows = [v / np.linalg.norm(v) for v in vectors_by_row]
    Embedding.objects.bulk_create(
        Embedding(
            content_hash=f"h{i}",
            vector=vector_to_blob(v),
            dimensions=DIMS,
            model="m1",
            created_at=timezone.now(),
        )
        for i, v in enumerate(rows)
    )
    ids = list(Embedding.objects.order_by("id").values_list("id", flat=True))
    vectors.index_vectors([(e, v, "m1") for e, v in zip(ids, rows, strict=True)], replacing=set())
    query = rng.standard_normal(DIMS).astype(np.float32)
    wide = matrix.INDEX.nearest(query, model="m1", k=matrix.POOL * 2)
    exact = vectors.nearest_vec0(query, model="m1", k=matrix.POOL * 2)
    assert len(wide) == len(exact) == matrix.POOL * 2


def test_catching_up_takes_new_vectors_in_before_any_search():
    rng = np.random.default_rng(3)
    add(rng, 20)
    matrix.INDEX.nearest(rng.standard_normal(DIMS).astype(np.float32), model="m1", k=1)
    new_id, new = add(rng, 1)[0]
    with connection.cursor() as cursor:
        cursor.execute("SELECT MAX(seq) FROM embedding_changes")
        last = cursor.fetchone()[0]
    assert matrix.INDEX.mapping.seq < last
    vectors.catch_up("m1")
    assert matrix.INDEX.mapping.seq == last
    assert new_id in matrix.INDEX.mapping.ids[: matrix.INDEX.mapping.count]
    assert matrix.INDEX.nearest(new, model="m1", k=1)[0][0] == new_id


def test_catching_up_for_another_model_leaves_the_mapped_matrix_alone():
    rng = np.random.default_rng(4)
    add(rng, 20)
    matrix.INDEX.nearest(rng.standard_normal(DIMS).astype(np.float32), model="m1", k=1)
    mapped = matrix.INDEX.mapping
    add(rng, 1)
    vectors.catch_up("m2")  # the search knows its vectors' width; a guess would re-map
    assert matrix.INDEX.mapping is mapped
    assert (matrix.INDEX.model, matrix.INDEX.dims) == ("m1", DIMS)
