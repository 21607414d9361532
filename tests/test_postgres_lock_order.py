"""PostgreSQL's multi-row writers lock the rows they share in one order (sorted ids), so writers
running side by side over the same rows in opposite orders wait for each other and never deadlock:
a job's write against a reviewer's approval that names the same two memories the other way round,
two bulk approvals of the same proposals listed in reverse, two jobs whose facts name the same
entities in reverse order, and a revert of a raw memory's lineage against a job writing over it.
Real threads, each on its own connection, on the test server (MEMORY_TEST_ENGINE=postgres)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections
from django.utils import timezone

from memory.models import Entity, Job, Memory, MemoryEntityMention
from memory.writes import Actor
from pipeline import review, tasks
from pipeline.models import Proposal
from tests.conftest import TEST_ENGINE
from tests.pipeline_support import ScriptedModel, decision, is_extraction, raw, seed, set_mode

pytestmark = pytest.mark.skipif(
    TEST_ENGINE != "postgres",
    reason="PostgreSQL's concurrent writers (MEMORY_TEST_ENGINE=postgres)",
)
DANA = Actor("dana", "operator")


def in_threads(works: list) -> list:
    """Run each work() in its own thread, released at once; results (exceptions included)."""
    barrier = threading.Barrier(len(works))
    results: list = [None] * len(works)

    def run(i):
        try:
            barrier.wait(timeout=30)
            results[i] = works[i]()
        except Exception as exc:
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(works))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    return results


class FactsByRaw(ScriptedModel):
    """ScriptedModel whose extraction answers each raw memory with its own facts."""

    def __init__(self, fake, facts_of: dict[str, list[str]], decisions=None):
        super().__init__(fake, decisions=decisions)
        self.facts_of = facts_of

    def __call__(self, payload: dict) -> str:
        if is_extraction(payload):
            prompt = payload["messages"][-1]["content"]
            self.facts = [
                {"content": f, "type": "fact", "confidence": 0.9}
                for text, facts in self.facts_of.items()
                if text in prompt
                for f in facts
            ]
        return super().__call__(payload)


def no_deadlock(results) -> None:
    errors = [r for r in results if isinstance(r, Exception)]
    assert not errors, errors
    failed = Job.objects.exclude(error=None).values_list("error", flat=True)
    assert not [e for e in failed if "deadlock" in e.lower()], list(failed)


# --- a job's write against a reviewer's approval of the same two memories, crosswise -------------

LOW = "The billing service runs on Postgres 14 in the main cluster"
HIGH = "The staging cluster lives in the eu-west-1 region for billing"
LOW_FACT = "The staging cluster lives in the eu-west-2 region for billing"  # updates HIGH
HIGH_FACT = "The billing service runs on Postgres 16 in the main cluster"  # updates LOW


def test_a_jobs_write_and_an_approval_naming_two_memories_crosswise_do_not_deadlock(
    file_db, fake_ollama
):
    # LOW's job proposed updating HIGH (pending); HIGH's job, in full mode, updates LOW while a
    # reviewer approves that proposal. The approval locks LOW then HIGH (id order); a job write
    # that locked its source HIGH first and then its target LOW would wait in a cycle with it.
    set_mode("controlled-write")
    low, high = raw(LOW), raw(HIGH)
    assert low.memory.id < high.memory.id
    FactsByRaw(
        fake_ollama,
        {LOW: [LOW_FACT], HIGH: [HIGH_FACT]},
        decisions={
            LOW_FACT: decision("update", high.memory, reason="the region moved"),
            HIGH_FACT: decision("update", low.memory, reason="Postgres was upgraded"),
        },
    )
    assert tasks.run_job(low.job.id) == "completed"
    proposal = Proposal.objects.get(source_memory=low.memory, action="update")
    assert proposal.status == "pending" and proposal.target_memory_id == high.memory.id
    set_mode("full")

    approval_waits, job_writes = threading.Event(), threading.Event()

    # The statements are matched by their text (a row lock is FOR UPDATE or FOR NO KEY UPDATE);
    # the end of the test checks that both hooks fired, so a changed statement fails it.
    def job_write(execute, sql, params, many, context):
        if '"memory_jobs"' in sql and "leased_at = %s" in sql and " FOR " in sql:
            # The write has begun: the job's row, then its memories in id order, are being locked.
            job_writes.set()
        # Before the job locks its UPDATE's target again, the approval asks for its own locks
        # (both memories, in id order) and waits behind the job's.
        if " FOR " in sql and '"memories"' in sql and "LIMIT" in sql:
            approval_waits.wait(timeout=10)
            time.sleep(1.0)
        return execute(sql, params, many, context)

    def approval(execute, sql, params, many, context):
        if " FOR " in sql and '"memories"' in sql and " IN (" in sql:
            job_writes.wait(timeout=10)  # the reviewer clicks while the job's write is open
            time.sleep(0.3)
            approval_waits.set()
        return execute(sql, params, many, context)

    def run_job():
        with connection.execute_wrapper(job_write):
            return tasks.run_job(high.job.id)

    def approve():
        with connection.execute_wrapper(approval):
            return review.bulk_approve([proposal.id], DANA, note="looks right")

    ran, approved = in_threads([run_job, approve])
    no_deadlock([ran, approved])
    assert job_writes.is_set() and approval_waits.is_set()  # the interleaving happened
    assert ran == "completed", (
        Job.objects.get(id=high.job.id).error,
        Job.objects.get(id=high.job.id).result,
    )
    # The job committed first: its UPDATE applied, and the approval, which waited for it, found
    # its raw memory changed since and marked the proposal stale instead of applying it.
    updated = Proposal.objects.get(source_memory=high.memory, action="update")
    assert updated.status == "applied"
    assert Memory.objects.get(id=low.memory.id).content == HIGH_FACT
    assert Proposal.objects.get(id=proposal.id).status == "stale"
    assert approved[0].error
    assert Memory.objects.get(id=high.memory.id).content == HIGH


# --- two bulk approvals of the same proposals, listed in reverse ---------------------------------

TARGETS = [f"Service {n} is owned by the platform team in Berlin" for n in "ABCDEF"]


def test_two_bulk_approvals_of_the_same_proposals_in_reverse_decide_each_once(file_db, fake_ollama):
    set_mode("controlled-write")
    targets = [seed(text) for text in TARGETS]
    facts = [text.replace("Berlin", "Lisbon") for text in TARGETS]
    source = raw("Ownership moved: every service of the platform team is now run from Lisbon.")
    FactsByRaw(
        fake_ollama,
        {"Ownership moved": facts},
        decisions={
            f: decision("update", t, reason="moved") for f, t in zip(facts, targets, strict=True)
        },
    )
    assert tasks.run_job(source.job.id) == "completed"
    ids = list(
        Proposal.objects.filter(source_memory=source.memory, status="pending").values_list(
            "id", flat=True
        )
    )
    assert len(ids) >= 4

    results = in_threads(
        [
            lambda: review.bulk_approve(ids, DANA, note="first"),
            lambda: review.bulk_approve(ids[::-1], Actor("erik", "operator"), note="second"),
        ]
    )
    no_deadlock(results)
    won = [outcome for outcomes in results for outcome in outcomes if outcome.error is None]
    assert len(won) == len(ids)  # each proposal applied by exactly one of the two
    assert set(Proposal.objects.filter(id__in=ids).values_list("status", flat=True)) == {"applied"}
    for proposal in Proposal.objects.filter(id__in=ids).select_related("target_memory"):
        target = proposal.target_memory
        assert (target.content, target.version) == (proposal.fact_content, 2)


# --- two jobs whose facts name the same entities in reverse order --------------------------------

NAMES = ["Zoe", "Priya", "Marco", "Bruno", "Kenji", "Aiko", "Lena", "Omar"]


def test_two_jobs_naming_the_same_entities_in_reverse_order_count_every_mention(
    file_db, fake_ollama
):
    set_mode("controlled-write")
    now = timezone.now()
    entities = [
        Entity.objects.create(name=n, canonical_name=n.lower(), created_at=now, updated_at=now)
        for n in NAMES
    ]
    rounds = 3
    facts_of, jobs = {}, []
    for r in range(rounds):
        pair = []
        for side, names in (("forward", NAMES), ("backward", NAMES[::-1])):
            text = f"Round {r} {side} notes of the guild meeting."
            facts_of[text] = [f"{name} presented item {r} {side} of the guild" for name in names]
            pair.append(raw(text).job.id)
        jobs.append(pair)
    FactsByRaw(fake_ollama, facts_of)
    for forward, backward in jobs:
        no_deadlock(
            in_threads([lambda j=forward: tasks.run_job(j), lambda j=backward: tasks.run_job(j)])
        )
    for entity in entities:
        entity.refresh_from_db()
        stored = MemoryEntityMention.objects.filter(entity=entity).count()
        assert entity.mentions == stored == 2 * rounds, entity.name


# --- reverting a raw memory's lineage against a job writing over the same memories ---------------


def test_reverting_a_lineage_while_a_job_updates_the_same_memories_does_not_deadlock(
    file_db, fake_ollama
):
    set_mode("full")
    added = [f"Team {n} meets on Tuesdays in room {n}" for n in "PQRS"]
    first = raw("Meeting notes: the teams and their rooms for the quarter.")
    moved = [text.replace("Tuesdays", "Thursdays") for text in added]
    second = raw("Calendar change: the team meetings move to another weekday.")
    FactsByRaw(fake_ollama, {"Meeting notes": added, "Calendar change": moved})
    assert tasks.run_job(first.job.id) == "completed"
    derived = {m.content: m for m in Memory.objects.filter(source_id=first.memory.id)}
    assert set(derived) == set(added)
    FactsByRaw(
        fake_ollama,
        {"Calendar change": moved[::-1]},
        decisions={
            new: decision("update", derived[old], reason="weekday moved")
            for old, new in zip(added, moved, strict=True)
        },
    )
    results = in_threads(
        [
            lambda: tasks.run_job(second.job.id),
            lambda: review.revert_derived(first.memory.id, DANA),
        ]
    )
    no_deadlock(results)
    assert results[0] == "completed"
    # Each derived memory ends one way: reverted (forgotten) by the reviewer, or updated by the
    # job (and then its revert refused as changed since) - never both, never neither.
    reverted = {r.proposal.created_memory_id for r in results[1] if r.refused is None}
    for memory in Memory.objects.filter(id__in=[m.id for m in derived.values()]):
        if memory.id in reverted:
            assert memory.is_deleted
        else:
            assert not memory.is_deleted and memory.content in moved


# --- a job's lock on its source against a writer that points at it under a content lock ------------


@pytest.mark.django_db(transaction=True)
def test_a_row_locked_for_a_write_still_takes_new_rows_that_point_at_it():
    """A job's write locks its source memory, then waits for the content locks of its facts; a
    second job holding one of those content locks (the same fact) writes a proposal or an audit
    pointing at that source (its candidate). With FOR UPDATE the second job's foreign-key check
    waited for the first job, and the first for the second: a deadlock, seen with three queue
    workers on overlapping notes. Rows locked for an update that keeps their key (FOR NO KEY
    UPDATE) let such references in, and the two writes simply take turns."""
    from django.db import transaction

    from memory.backend import lock_contents
    from memory.models import MemoryHistory, RowRead
    from memory.writes import history_row

    source = seed("Ines maintains the Grafana setup. The Grafana dashboards are reviewed weekly.")
    fact_hash = "hash-of-the-shared-fact"
    content_locked, source_locked = threading.Event(), threading.Event()

    def second_job():
        with transaction.atomic():
            lock_contents("default", [fact_hash])
            content_locked.set()
            assert source_locked.wait(10)
            time.sleep(0.2)  # the first job is waiting for the content lock by now
            history_row(source.id, "none", actor=DANA, reason="candidate", at=timezone.now()).save()
        return "second"

    def first_job():
        assert content_locked.wait(10)
        with transaction.atomic():
            assert RowRead(Memory, "id = %s", [source.id], lock=True).get() is not None
            source_locked.set()
            lock_contents("default", [fact_hash])
        return "first"

    assert in_threads([second_job, first_job]) == ["second", "first"]
    assert MemoryHistory.objects.filter(memory_id=source.id, event="none").count() == 1


# --- the HNSW indexer's batch against a write upserting the same vectors ---------------------------


@pytest.mark.django_db(transaction=True)
def test_the_indexers_batch_locks_its_rows_in_the_writers_order():
    """A job's write upserts its vectors in content-hash order; the indexer thread sets the
    indexed vectors of several writes in one statement. It takes its rows' locks in the same
    order (content hash), so the two wait for each other instead of deadlocking, whatever
    order the batch came in."""
    import numpy as np
    from django.db import transaction

    from memory.models import Embedding
    from memory.vectors import postgres as vectors_postgres
    from memory.vectors import vector_to_blob

    rng = np.random.default_rng(3)
    vectors = [v / np.linalg.norm(v) for v in rng.standard_normal((2, 768)).astype(np.float32)]
    now = timezone.now()
    # The row with the larger id has the smaller hash: id order and hash order differ.
    later, first = (
        Embedding.objects.create(
            content_hash=letter * 64,
            vector=vector_to_blob(vector),
            dimensions=768,
            model="m1",
            created_at=now,
        )
        for letter, vector in (("b", vectors[1]), ("a", vectors[0]))
    )
    writer_holds_first, indexer_started = threading.Event(), threading.Event()

    def writer():
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT id FROM embeddings WHERE id = %s FOR UPDATE", [first.id])
            writer_holds_first.set()
            assert indexer_started.wait(10)
            time.sleep(0.3)  # the indexer's statement is waiting (or locked what it could)
            cursor.execute("SELECT id FROM embeddings WHERE id = %s FOR UPDATE", [later.id])
        return "writer"

    def indexer():
        assert writer_holds_first.wait(10)
        indexer_started.set()
        # The batch in the order another write handed it over: the larger hash first.
        return vectors_postgres._set_vectors([(later.id, vectors[1]), (first.id, vectors[0])])

    assert in_threads([writer, indexer]) == ["writer", 2]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM embeddings WHERE id IN (%s, %s) AND embedding IS NOT NULL",
            [first.id, later.id],
        )
        assert cursor.fetchone()[0] == 2
