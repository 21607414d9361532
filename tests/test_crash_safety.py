"""A job's write is all or nothing, and a retried or re-delivered job never duplicates anything."""

import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from memory.models import Embedding, Job, Memory, MemoryCold, MemoryHistory
from pipeline import tasks
from pipeline.models import LlmCall, Proposal
from pipeline.writes import jobs, record
from tests.fault_tasks import failing_after_proposal
from tests.pipeline_support import make_due, on_a_file_database, raw, set_mode

# Three sentences, three facts with no candidates: three ADDs in controlled-write.
TEXT = (
    "Kenji deploys billing-api with Terraform every Friday. "
    "Priya prefers squash merges for every repository. "
    "The payments gateway is written in Go by Ana."
)


class Crash(RuntimeError):
    pass


def crash_on_second_proposal():
    return failing_after_proposal(1, Crash("power cut while writing proposal 2"))


def derived() -> list[Memory]:
    return list(Memory.objects.filter(source_type="pipeline-v2").order_by("content"))


@pytest.mark.django_db
def test_a_crash_inside_the_write_leaves_nothing_of_the_job_and_the_retry_writes_once():
    set_mode("controlled-write")
    result = raw(TEXT)
    source = result.memory

    with crash_on_second_proposal():
        assert tasks.run_job(result.job.id) == "pending"

    job = Job.objects.get(id=result.job.id)
    assert job.status == "pending" and job.attempts == 1
    assert job.error.startswith("write failed: Crash: power cut")
    assert job.next_attempt_at is not None and job.result is None
    assert not Proposal.objects.exists()
    assert derived() == []
    assert list(MemoryHistory.objects.values_list("memory_id", "event")) == [(source.id, "created")]
    assert not Embedding.objects.exists()  # not even the raw memory's vector
    # Nothing of the write survives, but the failed attempt's model calls are logged with it.
    assert LlmCall.objects.filter(kind="extract").count() == 1
    assert not LlmCall.objects.filter(error__isnull=False).exists()
    memory = Memory.objects.get(id=source.id)
    assert memory.extraction_status == "pending" and memory.content == source.content

    make_due(job)
    assert tasks.process_pending() == {"completed": 1}
    contents = [m.content for m in derived()]
    assert contents == sorted(
        [
            "Kenji deploys billing-api with Terraform every Friday.",
            "Priya prefers squash merges for every repository.",
            "The payments gateway is written in Go by Ana.",
        ]
    )
    assert Proposal.objects.filter(status="applied").count() == 3
    assert MemoryHistory.objects.filter(event="created").count() == 4  # raw + 3 derived
    assert MemoryHistory.objects.filter(memory=source, event="none").count() == 3
    assert Embedding.objects.filter(content_hash=source.content_hash).count() == 1
    assert (
        LlmCall.objects.filter(job=job, kind="extract").count() == 2
    )  # the failed attempt's and the retry's
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2
    # The failed attempt stays readable (the error column is cleared by the completion).
    assert job.error is None
    assert job.result["earlierFailure"]["error"].startswith("write failed: Crash: power cut")
    assert job.result["earlierFailure"]["failedAt"].endswith("Z")

    # Running it again (a re-delivered task) changes nothing.
    assert tasks.run_job(job.id) is None
    assert len(derived()) == 3 and Proposal.objects.count() == 3


@pytest.mark.django_db
def test_a_crash_while_applying_an_update_rolls_back_the_target_and_its_cold_copy(fake_ollama):
    from tests.pipeline_support import ScriptedModel, decision, seed

    set_mode("full")
    target = seed("The billing service runs on Postgres 14")
    assert tasks.embed_missing() == 1  # so the vector leg finds it in this tiny store
    model = ScriptedModel(
        fake_ollama,
        facts=["The billing service runs on Postgres 16", "Priya prefers squash merges always"],
        decisions={"The billing service runs on Postgres 16": decision("update", target)},
    )
    result = raw("Notes from the platform sync.")

    with crash_on_second_proposal():
        assert tasks.run_job(result.job.id) == "pending"
    # The update was decided, applied, then lost (the decisions run side by side: any order).
    assert any('"update"' in reply for reply in model.replies[1:])
    target.refresh_from_db()
    assert target.content == "The billing service runs on Postgres 14" and target.version == 1
    assert not MemoryCold.objects.exists() and not Proposal.objects.exists()
    assert not MemoryHistory.objects.filter(memory=target, event="updated").exists()

    make_due(result.job)
    assert tasks.process_pending() == {"completed": 1}
    target.refresh_from_db()
    assert target.content == "The billing service runs on Postgres 16" and target.version == 2
    assert MemoryCold.objects.filter(memory=target).count() == 1


@pytest.mark.django_db
def test_a_job_can_be_claimed_only_once():
    result = raw(TEXT)
    first = jobs.claim_job(result.job.id)
    assert first is not None and first.attempts == 1
    assert jobs.claim_job(result.job.id) is None
    assert tasks.run_job(result.job.id) is None  # leased by someone else: not run
    assert Job.objects.get(id=result.job.id).attempts == 1


@pytest.mark.django_db
def test_running_a_job_twice_in_sequence_never_duplicates():
    set_mode("controlled-write")
    result = raw(TEXT)
    assert tasks.run_job(result.job.id) == "completed"
    assert tasks.run_job(result.job.id) is None
    assert len(derived()) == 3 and Proposal.objects.count() == 3
    assert Job.objects.get(id=result.job.id).attempts == 1


@pytest.mark.django_db
def test_a_worker_whose_lease_was_reclaimed_cannot_write_its_outcome():
    """A slow worker outlives its lease; the job is reclaimed and done by another worker."""
    set_mode("controlled-write")
    result = raw(TEXT)
    slow_claim = jobs.claim_job(result.job.id)
    slow_outcome = tasks.compute(slow_claim, [])

    Job.objects.filter(id=result.job.id).update(leased_at=timezone.now() - timedelta(hours=1))
    assert jobs.reclaim_stale_leases(timedelta(minutes=10))["retried"] == 1
    assert tasks.run_job(result.job.id) == "completed"
    assert len(derived()) == 3

    assert record.record_job(slow_outcome) is None  # the lease is gone: nothing is written
    assert jobs.fail_job(slow_claim, "late failure", []) is None  # nor can it fail the job
    assert len(derived()) == 3 and Proposal.objects.count() == 3
    job = Job.objects.get(id=result.job.id)
    assert job.status == "completed" and job.attempts == 2 and job.error is None
    assert MemoryHistory.objects.filter(event="none").count() == 3


@pytest.fixture
def file_db(transactional_db, tmp_path):
    with on_a_file_database(tmp_path / "crash.sqlite3"):
        yield


@pytest.mark.django_db(transaction=True)
def test_the_same_job_run_by_two_workers_at_once_is_written_once(file_db):
    set_mode("controlled-write")
    extra = [
        "Mara rotates the on-call pager on Mondays.",
        "The search cluster uses OpenSearch 2.11 in production.",
        "Lena reviews every database migration before release.",
        "Backups of the ledger run nightly at two o'clock.",
    ]
    results = [raw(f"{TEXT} {sentence}") for sentence in extra]
    statuses: list = []
    errors: list = []
    barrier = threading.Barrier(2)

    def worker():
        try:
            barrier.wait()
            for result in results:
                statuses.append(tasks.run_job(result.job.id))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(repr(exc))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert sorted(statuses, key=str) == sorted(["completed"] * 4 + [None] * 4, key=str)
    assert set(Job.objects.values_list("status", "attempts")) == {("completed", 1)}
    for result in results:  # 4 facts per raw memory, one proposal each
        assert Proposal.objects.filter(job=result.job.id).count() == 4
    contents = [m.content for m in derived()]
    # Written once: no memory twice, every raw memory's own fact added. The 3 facts every raw
    # memory shares are added at most once (or not at all: the other raw memories, candidates
    # too, already say them, and a model may answer NONE).
    assert sorted(contents) == sorted(set(contents)) and set(extra) <= set(contents)
    shared = {f"{sentence}." for sentence in TEXT.rstrip(".").split(". ")}
    assert set(contents) - set(extra) <= shared
