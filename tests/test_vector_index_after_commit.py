"""The KNN index write leaves the job's write transaction (issue 12): on SQLite the vec0 inserts run
right after the commit, before record_job returns; a vector whose post-commit insert was lost is
indexed by the sweep."""

from datetime import timedelta

import numpy as np
import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from memory import vectors
from memory.models import Embedding, Memory
from memory.writes import Vector, store_vector
from pipeline import tasks
from pipeline.writes import jobs
from pipeline.writes.record import record_job
from tests.pipeline_support import ScriptedModel, fact, raw, set_mode

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.sqlite_only(reason="vec0 is SQLite's KNN index (PostgreSQL: test_postgres_*)"),
]

FACTS = ["Kenji deploys the billing service with Terraform", "Priya prefers squash merges"]


def indexed_ids() -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT rowid FROM vec_embeddings_rowids")
        return {row[0] for row in cursor.fetchall()}


def test_a_jobs_vectors_enter_the_knn_index_after_its_commit_not_inside_it(fake_ollama):
    set_mode("full")
    ScriptedModel(fake_ollama, facts=[fact(text) for text in FACTS])
    result = raw("Notes: " + ". ".join(FACTS) + ".")
    outcome = tasks.compute(jobs.claim_job(result.job.id), [])
    seen = []

    def spy(execute, sql, params, many, context):
        if "vec_embeddings" in sql and sql.lstrip().upper().startswith("INSERT"):
            seen.append(connection.in_atomic_block)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(spy):
        record_job(outcome)
    assert seen == [False], "one vec0 insert, after the commit"
    # Every stored vector (the raw memory's and the two facts') is searchable when it returns.
    stored = set(Embedding.objects.values_list("id", flat=True))
    assert len(stored) == 3 and stored <= indexed_ids()
    derived = Memory.objects.filter(source_id=result.memory.id).first()
    vector = np.frombuffer(Embedding.objects.get(content_hash=derived.content_hash).vector, "<f4")
    nearest = vectors.nearest_vec0(vector, model=settings.MEMORY_EMBEDDING_MODEL, k=1)
    assert nearest[0][0] == Embedding.objects.get(content_hash=derived.content_hash).id


def test_the_sweep_indexes_a_vector_whose_post_commit_insert_was_lost(fake_ollama):
    set_mode("full")
    ScriptedModel(fake_ollama, facts=[fact(text) for text in FACTS])
    result = raw("Notes: " + ". ".join(FACTS) + ".")
    tasks.run_job(result.job.id)
    lost = Embedding.objects.order_by("id").last()
    with connection.cursor() as cursor:  # as if the process died between commit and insert
        cursor.execute("DELETE FROM vec_embeddings WHERE rowid = %s", [lost.id])
    assert lost.id not in indexed_ids()

    assert "vectorsIndexed" not in tasks.sweep(), "a minute's grace for the write's own insert"
    assert lost.id not in indexed_ids()

    Embedding.objects.filter(id=lost.id).update(created_at=timezone.now() - timedelta(minutes=2))
    assert tasks.sweep()["vectorsIndexed"] == 1
    assert lost.id in indexed_ids()
    vector = np.frombuffer(lost.vector, "<f4")
    assert vectors.nearest_vec0(vector, model=lost.model, k=1)[0][0] == lost.id
    assert "vectorsIndexed" not in tasks.sweep()


def test_a_replaced_vector_leaves_the_index_with_the_write_that_replaced_it():
    memory = raw("The billing service runs on Postgres 14").memory
    first = np.zeros(settings.MEMORY_EMBEDDING_DIMENSIONS, dtype=np.float32)
    first[0] = 1.0
    second = np.zeros(settings.MEMORY_EMBEDDING_DIMENSIONS, dtype=np.float32)
    second[1] = 1.0
    assert store_vector(memory.id, memory.content_hash, Vector(first, "m-old"))
    assert store_vector(memory.id, memory.content_hash, Vector(second, "m-new"))
    embedding = Embedding.objects.get(content_hash=memory.content_hash)
    assert vectors.nearest_vec0(second, model="m-new", k=1)[0][0] == embedding.id
    assert vectors.nearest_vec0(first, model="m-old", k=1) == []
