"""The HNSW insert of a write's vectors runs after its commit, off the writer's path (the process's
indexer thread, one statement for every write it batches), the vector is found by a search as
soon as the write returns (compared exactly until indexed), and the insert is repaired when it
never ran (the process died between the commit and the insert); a late insert never overwrites a
newer vector."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from memory import keyword, vectors, writes
from memory.models import Embedding, Memory
from memory.search import hybrid_search
from memory.threads import BESIDE
from memory.vectors import postgres as vectors_postgres
from memory.writes import Actor, Vector
from pipeline import memory_ops, tasks
from pipeline.tasks import run_job
from tests.conftest import TEST_ENGINE, database_env
from tests.connection_faults import close_normally_again, fail_every_close
from tests.fork_support import child_answer_while_held
from tests.pipeline_support import set_mode

pytestmark = pytest.mark.skipif(
    TEST_ENGINE != "postgres", reason="PostgreSQL backend only (MEMORY_TEST_ENGINE=postgres)"
)

AGENT = Actor("claude-code", "agent")
DIMS = settings.MEMORY_EMBEDDING_DIMENSIONS
MODEL = "m1"


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
    return v / np.linalg.norm(v)


def stored(text: str, vector: np.ndarray) -> Memory:
    memory = writes.remember(text, actor=AGENT, create_job=False).memory
    assert writes.store_vector(memory.id, memory.content_hash, Vector(vector, MODEL))
    return memory


def indexed(memory: Memory) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT embedding IS NOT NULL FROM embeddings WHERE content_hash = %s",
            [memory.content_hash],
        )
        return cursor.fetchone()[0]


def found(memory: Memory, vector: np.ndarray) -> bool:
    hits = vectors.search(vector, model=MODEL, agent_id="default", limit=3)
    return memory.id in {memory_id for memory_id, _ in hits}


def settled() -> None:
    """Wait until this process's indexer thread has indexed what was handed to it."""
    assert vectors_postgres.INDEXER.wait(timeout=30)


class IndexWrites:
    """The HNSW write statements the writer's own connection runs."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, execute, sql, params, many, context):
        if "UPDATE embeddings e SET embedding" in sql:
            self.seen.append(sql)
        return execute(sql, params, many, context)


@pytest.mark.django_db(transaction=True)
def test_the_hnsw_insert_leaves_the_writers_path_and_a_search_right_after_the_write_finds_it():
    vector = unit(1)
    writes_seen = IndexWrites()
    with connection.execute_wrapper(writes_seen):
        memory = stored("Deploys run from the release branch.", vector)
        assert found(memory, vector)  # at once: exactly until indexed, then through the index
    assert writes_seen.seen == []  # the indexer thread's connection ran it, not the writer's
    settled()
    assert indexed(memory) and found(memory, vector)


@pytest.mark.django_db(transaction=True)
def test_a_job_write_indexes_its_new_vectors_after_its_transaction_in_one_statement():
    set_mode("controlled-write")
    raw = writes.remember(
        "Priya moved the billing service to Postgres last week. The cache TTL is 60 seconds.",
        actor=AGENT,
    )
    writes_seen = IndexWrites()
    with connection.execute_wrapper(writes_seen):
        assert run_job(raw.job.id) == "completed"
    derived = list(Memory.objects.filter(source_id=raw.memory.id, is_deleted=False))
    assert derived, "the offline model derives facts from the note"
    vector = np.frombuffer(
        bytes(Embedding.objects.get(content_hash=derived[0].content_hash).vector), np.float32
    )
    hits = vectors.search(vector, model=derived[0].embedding_model, agent_id="default", limit=3)
    assert derived[0].id in {memory_id for memory_id, _ in hits}
    assert writes_seen.seen == []
    settled()
    assert all(indexed(memory) for memory in [raw.memory, *derived])


@pytest.mark.django_db(transaction=True)
def test_a_writer_indexes_its_own_vectors_when_the_indexers_backlog_is_full(monkeypatch):
    monkeypatch.setattr(vectors_postgres._Indexer, "BACKLOG", 0)
    writes_seen = IndexWrites()
    with connection.execute_wrapper(writes_seen):
        memory = stored("Hotfixes go through the same review.", unit(13))
    assert len(writes_seen.seen) == 1 and indexed(memory)


@pytest.mark.django_db(transaction=True)
def test_a_flush_stopped_by_a_failing_close_leaves_the_next_write_to_start_indexing_again(
    monkeypatch,
):
    settled()
    indexer = vectors_postgres.INDEXER
    indexer.thread.submit(fail_every_close, RuntimeError("broken driver")).result(timeout=10)
    really_set_vectors, refused = vectors_postgres._set_vectors, []

    def refuse_the_first_batch(rows):
        if not refused:
            refused.append(rows)
            raise OperationalError("server closed the connection unexpectedly")
        return really_set_vectors(rows)

    monkeypatch.setattr(vectors_postgres, "_set_vectors", refuse_the_first_batch)
    try:
        left_to_the_repair = stored("Deploys freeze on Fridays.", unit(21))
        settled()
        assert refused and not indexed(left_to_the_repair)

        after = stored("The on-call rota changes on Mondays.", unit(22))
        settled()
        assert indexed(after), "the flag of the stopped flush was left set: indexing stopped"
    finally:
        indexer.thread.submit(close_normally_again).result(timeout=10)


def test_a_child_forked_while_the_indexer_held_its_locks_gets_locks_of_its_own():
    # Held as the indexer thread holds them around a batch and its repair check.
    locks = [vectors_postgres.INDEXER.lock, vectors_postgres.REPAIR.lock]

    def taken_in_the_child() -> bool:
        indexer, repair = vectors_postgres.INDEXER.lock, vectors_postgres.REPAIR.lock
        return indexer.acquire(timeout=2) and repair.acquire(timeout=2)

    assert child_answer_while_held(locks, taken_in_the_child), "a lock held at the fork stayed held"


@pytest.mark.django_db(transaction=True)
def test_unindexed_vectors_are_compared_exactly_in_the_same_knn_statement():
    memories = [
        stored(f"Note number {n} about the release train.", unit(100 + n)) for n in range(6)
    ]
    settled()
    waiting = memories[0]
    with connection.cursor() as cursor:  # as if its insert had not run yet
        cursor.execute(
            "UPDATE embeddings SET embedding = NULL WHERE content_hash = %s", [waiting.content_hash]
        )
    statements = []

    def count(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        nearest = vectors_postgres.nearest_many([unit(100), unit(101)], model=MODEL, k=3)
    assert len(statements) == 1  # both queries, through the index and exactly, at once
    ids = [memory_embedding_id(memory) for memory in memories]
    assert nearest[0][0] == (ids[0], pytest.approx(0.0, abs=1e-6))
    assert nearest[1][0] == (ids[1], pytest.approx(0.0, abs=1e-6))
    assert [eid for eid, _ in nearest[1]].count(ids[0]) <= 1 and len(nearest[1]) == 3
    distances = [d for _, d in nearest[1]]
    assert distances == sorted(distances)


@pytest.mark.django_db(transaction=True)
def test_a_batch_of_queries_runs_in_halves_on_the_callers_connection_and_an_idle_one_beside_it(
    monkeypatch,
):
    """Each half's statement compares the vectors not indexed yet (one here) itself, and the
    split answers what one statement answers; busy connections beside it or an open transaction
    keep the whole batch on the caller's."""
    memories = [stored(f"Runbook page {n} for the payments team.", unit(200 + n)) for n in range(8)]
    settled()
    with connection.cursor() as cursor:  # as if its insert had not run yet
        cursor.execute(
            "UPDATE embeddings SET embedding = NULL WHERE content_hash = %s",
            [memories[5].content_hash],
        )
    queries = [unit(200 + n) for n in range(8)]
    backends: list[tuple[int, int]] = []
    one_part = vectors_postgres._nearest_part

    def on_backend(queries, usable, model, k):
        connection.ensure_connection()
        backends.append((connection.connection.info.backend_pid, len(usable)))
        return one_part(queries, usable, model, k)

    monkeypatch.setattr(vectors_postgres, "_nearest_part", on_backend)
    split = vectors_postgres.nearest_many(queries, model=MODEL, k=3)
    caller = connection.connection.info.backend_pid
    assert sorted(count for _, count in backends) == [4, 4]
    pids = {pid for pid, _ in backends}
    assert caller in pids and len(pids) == 2  # side by side on two server backends
    ids = [memory_embedding_id(memory) for memory in memories]
    assert [hits[0][0] for hits in split] == ids  # the unindexed one too, in the other half

    backends.clear()
    with monkeypatch.context() as patch:
        patch.setattr(vectors_postgres, "SPLIT_QUERIES", 100)
        assert vectors_postgres.nearest_many(queries, model=MODEL, k=3) == split
    assert backends == [(caller, 8)]

    backends.clear()
    release = threading.Event()
    for thread in BESIDE:  # both busy (a job's keyword halves, say)
        thread.submit(release.wait, 10)
    try:
        assert vectors_postgres.nearest_many(queries, model=MODEL, k=3) == split
    finally:
        release.set()
    assert backends == [(caller, 8)]

    backends.clear()
    assert all(thread.wait(10) for thread in BESIDE)
    with transaction.atomic():  # another connection would not see this transaction's writes
        assert vectors_postgres.nearest_many(queries, model=MODEL, k=3) == split
    assert backends == [(caller, 8)]


@pytest.mark.django_db(transaction=True)
def test_each_half_of_a_batch_looks_up_its_own_neighbours_owners_on_its_own_connection(
    monkeypatch,
):
    """A job's facts searched in halves: the owners of each half's neighbours (not the other
    half's) are looked up on the backend that found them, side by side, and the hits are those of
    one connection doing all of it (an open transaction). The store holds more vectors than a
    query's neighbours, so the halves find different ones."""
    memories = [stored(f"Runbook page {n} for the billing team.", unit(600 + n)) for n in range(48)]
    forgotten = memories[3]
    Memory.objects.filter(id=forgotten.id).update(is_deleted=True)  # its vector stays indexed
    settled()
    queries = [unit(600 + n) for n in range(8)]
    neighbours_of_half = [
        sorted(
            {
                eid
                for hits in vectors_postgres.nearest_many(part, model=MODEL, k=20)
                for eid, _ in hits
            }
        )
        for part in (queries[:4], queries[4:])
    ]
    assert neighbours_of_half[0] != neighbours_of_half[1]
    lookups: list[tuple[int, list[int]]] = []
    owners_of = vectors_postgres.live_memories_for

    def on_backend(embedding_ids, **kwargs):
        connection.ensure_connection()
        lookups.append((connection.connection.info.backend_pid, embedding_ids))
        return owners_of(embedding_ids, **kwargs)

    monkeypatch.setattr(vectors_postgres, "live_memories_for", on_backend)
    split = vectors.search_many(queries, model=MODEL, agent_id="default", limit=10)
    caller = connection.connection.info.backend_pid
    pids = [pid for pid, _ in lookups]
    assert len(pids) == 2 and caller in pids and len(set(pids)) == 2  # side by side
    assert sorted(ids for _, ids in lookups) == sorted(neighbours_of_half)
    assert [hits[0][0] for n, hits in enumerate(split) if n != 3] == [
        memory.id for memory in memories[:8] if memory is not forgotten
    ]
    assert forgotten.id not in {memory_id for hits in split for memory_id, _ in hits}
    assert all(len(hits) == 10 for hits in split)

    lookups.clear()
    with transaction.atomic():  # one connection: one search, one lookup of every neighbour
        assert vectors.search_many(queries, model=MODEL, agent_id="default", limit=10) == split
    assert [pid for pid, _ in lookups] == [caller]


@pytest.mark.django_db(transaction=True)
def test_a_searchs_keyword_leg_runs_on_an_idle_connection_beside_its_vector_leg(monkeypatch):
    """One search, two server backends: the keyword leg on one of BESIDE, the vector leg on the
    caller's, and the same hits as both legs on the caller's; busy connections beside it, an open
    transaction or a search with no vector leg keep the keyword leg on the caller's."""
    memories = [
        stored(f"Runbook page {n} for the payments team on call.", unit(300 + n)) for n in range(6)
    ]
    settled()
    legs: list[tuple[str, int]] = []
    keyword_search, vector_part = keyword.search_many, vectors_postgres._nearest_part

    def keyword_on_backend(*args, **kwargs):
        connection.ensure_connection()
        legs.append(("keyword", connection.connection.info.backend_pid))
        return keyword_search(*args, **kwargs)

    def vector_on_backend(*args):
        connection.ensure_connection()
        legs.append(("vector", connection.connection.info.backend_pid))
        return vector_part(*args)

    monkeypatch.setattr(keyword, "search_many", keyword_on_backend)
    monkeypatch.setattr(vectors_postgres, "_nearest_part", vector_on_backend)

    def search(vector=True):
        legs.clear()
        hits = hybrid_search(
            "payments runbook",
            k=3,
            query_vector=unit(302) if vector else None,
            model=MODEL if vector else None,
        )
        return [hit.memory_id for hit in hits], dict(legs)

    beside, used = search()
    caller = connection.connection.info.backend_pid
    assert used["vector"] == caller and used["keyword"] != caller
    assert beside[0] == memories[2].id

    release = threading.Event()
    for thread in BESIDE:  # both busy (a job's keyword halves, say)
        thread.submit(release.wait, 10)
    try:
        assert search() == (beside, {"keyword": caller, "vector": caller})
    finally:
        release.set()
    assert all(thread.wait(10) for thread in BESIDE)
    with transaction.atomic():  # another connection would not see this transaction's writes
        assert search() == (beside, {"keyword": caller, "vector": caller})
    _, used = search(vector=False)  # nothing to run beside: no second backend for it
    assert used == {"keyword": caller}


@pytest.mark.django_db(transaction=True)
def test_a_searchs_cross_scoring_reads_keyword_scores_beside_the_vectors_it_reads(monkeypatch):
    """The keyword scores of the vector leg's hits are read on an idle connection beside the
    caller's while the caller reads the vectors of the keyword leg's hits: two backends, and the
    scores both reads on the caller's give; an open transaction keeps both on the caller's."""
    near = stored("Lunch is served at noon.", unit(500))  # the vector leg's, no query word
    far = stored("The payments runbook lives in the wiki.", unit(501))
    unembedded = writes.remember(
        "Payments runbook owners rotate.", actor=AGENT, create_job=False
    ).memory
    settled()
    reads: dict[str, int] = {}
    keyword_scores, vector_scores = keyword.scores_for_many, vectors.similarities_for_many

    def keyword_on_backend(texts, memory_ids):
        connection.ensure_connection()
        reads["keyword"] = connection.connection.info.backend_pid
        return keyword_scores(texts, memory_ids)

    def vectors_on_backend(queries, *, model, memory_ids):
        connection.ensure_connection()
        reads["vector"] = connection.connection.info.backend_pid
        return vector_scores(queries, model=model, memory_ids=memory_ids)

    monkeypatch.setattr(keyword, "scores_for_many", keyword_on_backend)
    monkeypatch.setattr(vectors, "similarities_for_many", vectors_on_backend)

    def search():
        reads.clear()
        hits = hybrid_search("payments runbook", k=5, query_vector=unit(500), model=MODEL)
        return {hit.memory_id: (hit.keyword_score, hit.vector_score) for hit in hits}, dict(reads)

    beside, used = search()
    caller = connection.connection.info.backend_pid
    assert used["vector"] == caller and used["keyword"] != caller
    assert beside[near.id][0] == 0.0 and beside[near.id][1] > 0.99  # scored on both legs
    assert beside[far.id][0] > 0 and beside[far.id][1] is not None
    assert beside[unembedded.id][0] > 0 and beside[unembedded.id][1] is None  # no vector
    with transaction.atomic():  # another connection would not see this transaction's writes
        assert search() == (beside, {"keyword": caller, "vector": caller})


@pytest.mark.django_db(transaction=True)
def test_a_recalls_keyword_leg_runs_on_an_idle_connection_beside_the_callers(monkeypatch):
    """While the query is embedded and its vector leg searched on the caller's connection, the
    keyword leg runs on another backend, and finds what it found on the caller's."""
    memory = stored("The payments runbook lives in the ops wiki.", unit(400))
    backends: list[int] = []
    keyword_search = keyword.search_many

    def keyword_on_backend(*args, **kwargs):
        connection.ensure_connection()
        backends.append(connection.connection.info.backend_pid)
        return keyword_search(*args, **kwargs)

    monkeypatch.setattr(keyword, "search_many", keyword_on_backend)
    recalled = memory_ops.recall("payments runbook", ["default"], k=3)
    connection.ensure_connection()
    assert backends and backends[0] != connection.connection.info.backend_pid
    assert [hit.memory_id for hit in recalled.hits] == [memory.id]
    assert recalled.hits[0].keyword_score > 0


@pytest.mark.django_db(transaction=True)
def test_a_vector_whose_insert_was_lost_is_found_and_indexed_by_the_next_write_or_the_repair(
    monkeypatch,
):
    lost_vector = unit(2)
    with monkeypatch.context() as patch:  # the process "dies" after the commit
        patch.setattr(vectors_postgres, "_index_after_commit", lambda rows: None)
        lost = stored("The staging database restarts nightly.", lost_vector)
    assert not indexed(lost) and found(lost, lost_vector)  # compared exactly meanwhile
    assert vectors_postgres.index_pending(older_than=60) == 0  # too recent: its own insert may run

    monkeypatch.setattr(vectors_postgres._Repair, "AGE_SECONDS", 0.0)
    monkeypatch.setattr(vectors_postgres.REPAIR, "next_at", 0.0)
    stored("Backups are kept for thirty days.", unit(3))  # the next write, after its commit
    settled()
    assert indexed(lost) and found(lost, lost_vector)
    assert vectors_postgres.index_pending() == 0


@pytest.mark.django_db(transaction=True)
def test_the_sweep_indexes_a_vector_whose_insert_was_lost_after_a_minutes_grace(monkeypatch):
    lost_vector = unit(11)
    with monkeypatch.context() as patch:  # the process "dies" after the commit
        patch.setattr(vectors_postgres, "_index_after_commit", lambda rows: None)
        lost = stored("Releases are tagged from main.", lost_vector)
    assert "vectorsIndexed" not in tasks.sweep(), "a minute's grace for the write's own insert"
    assert not indexed(lost)
    Embedding.objects.filter(content_hash=lost.content_hash).update(
        created_at=timezone.now() - timedelta(minutes=2)
    )
    assert tasks.sweep()["vectorsIndexed"] == 1
    assert indexed(lost) and found(lost, lost_vector)


@pytest.mark.django_db(transaction=True)
def test_a_late_insert_of_an_older_vector_never_replaces_the_newer_one():
    old, new = unit(4), unit(5)
    memory = stored("Alerts page the on-call engineer.", old)
    assert writes.store_vector(memory.id, memory.content_hash, Vector(new, MODEL))
    settled()
    assert indexed(memory) and found(memory, new)
    assert vectors_postgres.index_vectors([(memory_embedding_id(memory), old)]) == 1
    assert nearest_vector(memory) == pytest.approx(new, abs=1e-6)


def memory_embedding_id(memory: Memory) -> int:
    return Embedding.objects.get(content_hash=memory.content_hash).id


def nearest_vector(memory: Memory) -> np.ndarray:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT embedding::real[] FROM embeddings WHERE content_hash = %s",
            [memory.content_hash],
        )
        return np.array(cursor.fetchone()[0], dtype=np.float32)


@pytest.mark.django_db(transaction=True)
def test_a_new_blob_clears_the_indexed_vector_until_its_own_is_written():
    memory = stored("Logs ship to the central cluster.", unit(6))
    settled()
    Embedding.objects.filter(content_hash=memory.content_hash).update(
        vector=vectors.vector_to_blob(unit(7))
    )
    assert not indexed(memory)
    assert vectors_postgres.index_pending() == 1
    assert nearest_vector(memory) == pytest.approx(unit(7), abs=1e-6)


KILLED_WRITER = """
import os, signal
import numpy as np
from memory import writes
from memory.vectors import postgres as vectors_postgres
from memory.writes import Actor, Vector

def die(rows):  # the machine goes away between the commit and the HNSW insert
    os.kill(os.getpid(), signal.SIGKILL)

vectors_postgres._index_after_commit = die
v = np.random.default_rng(8).standard_normal({dims}).astype(np.float32)
memory = writes.remember("Tokens expire after an hour.", actor=Actor("a", "agent"),
                         create_job=False).memory
writes.store_vector(memory.id, memory.content_hash, Vector(v / np.linalg.norm(v), "m1"))
"""


@pytest.mark.slow  # starts a Django process
@pytest.mark.django_db(transaction=True)
def test_a_process_killed_between_commit_and_insert_leaves_a_vector_the_repair_indexes():
    run = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-c",
            textwrap.dedent(KILLED_WRITER).format(dims=DIMS),
        ],
        cwd=Path(settings.BASE_DIR),
        env={**os.environ, **database_env(), "DJANGO_SECRET_KEY": "test"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == -9, run.stderr
    memory = Memory.objects.get(content="Tokens expire after an hour.")
    vector = unit(8)
    assert memory.embedding_model == MODEL and not indexed(memory)
    assert found(memory, vector)  # compared exactly until the repair indexes it
    assert vectors_postgres.index_pending() == 1
    assert indexed(memory) and found(memory, vector)


@pytest.mark.slow  # 10,000 vectors and an HNSW build
@pytest.mark.django_db(transaction=True)
def test_a_knn_over_ten_thousand_vectors_is_answered_by_the_hnsw_index():
    """Sparse vectors (like the offline embedder's) have a compressible blob that stays in the row;
    with the indexed vector stored out of line, the planner then priced an exact scan of 10k rows
    below the index and took 50 ms where the index takes 3."""
    rng = np.random.default_rng(9)
    rows = rng.standard_normal((10_000, DIMS)).astype(np.float32)
    rows[rng.random(rows.shape) < 0.97] = 0
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    now = timezone.now()
    stored_rows = Embedding.objects.bulk_create(
        [
            Embedding(
                content_hash=f"h{n}",
                vector=vectors.vector_to_blob(v),
                dimensions=DIMS,
                model=MODEL,
                created_at=now,
            )
            for n, v in enumerate(rows)
        ],
        batch_size=2000,
    )
    with transaction.atomic():
        vectors_postgres.bulk_index((e.id, v) for e, v in zip(stored_rows, rows, strict=True))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE embeddings")  # what autovacuum does after a load
        query = rows[5]
        cursor.execute(
            "EXPLAIN " + vectors_postgres.NEAREST_SQL,
            [[vectors_postgres.literal(query)], MODEL, 40, MODEL, DIMS, 1000],
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert vectors_postgres.INDEX_NAME in plan, plan


@pytest.mark.django_db(transaction=True)
def test_after_a_purge_vacuums_the_table_a_search_inside_the_hnsw_index_skips_the_purged_row():
    """The purge deletes the vector's row and vacuums the table, which takes the row out of the
    HNSW graph: a search walked through the index afterwards still answers from the live rows,
    nearest first, and never with the purged memory."""
    from pipeline import review

    base = unit(100)
    near = []
    for n in range(40):  # a neighbourhood around `base`, then the rest of the store
        vector = base + (0.2 + 0.02 * n) * unit(200 + n)
        near.append((stored(f"Neighbour {n} of the ledger service", vector), vector))
    for n in range(60):
        stored(f"Unrelated note {n}", unit(300 + n))
    settled()
    gone, gone_vector = near[0]
    receipt = review.purge(
        review.purging.Request("memory", gone.id), reason="erasure request", actor=Actor("rita")
    )
    assert receipt.verified
    with connection.cursor() as cursor:
        cursor.execute("SELECT last_vacuum FROM pg_stat_user_tables WHERE relname = 'embeddings'")
        assert cursor.fetchone()[0] is not None  # the purge vacuumed it
    assert not Embedding.objects.filter(content_hash=gone.content_hash).exists()
    with transaction.atomic(), connection.cursor() as cursor:
        # A table this small is cheaper to scan and sort: make the planner walk the graph.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute(
            "EXPLAIN " + vectors_postgres.NEAREST_SQL,
            [[vectors_postgres.literal(gone_vector)], MODEL, 40, MODEL, DIMS, 1000],
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
        assert vectors_postgres.INDEX_NAME in plan, plan
        hits = vectors.search(gone_vector, model=MODEL, agent_id="default", limit=5)
    ids = [memory_id for memory_id, _ in hits]
    assert gone.id not in ids
    # The purged row's nearest neighbours are still reached through the repaired graph.
    exact = sorted(
        near[1:], key=lambda pair: -float(pair[1] @ gone_vector / np.linalg.norm(pair[1]))
    )
    assert ids == [memory.id for memory, _ in exact[:5]]
