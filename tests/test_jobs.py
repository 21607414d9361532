"""memory.jobs: the Job's life in one module, with the pipeline's policy passed in (attempts,
backoff, lease timeout), and no other product module writing a job's status."""

from __future__ import annotations

import ast
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from memory import jobs, writes
from memory.models import ExtractionStatus, Job, JobStatus
from memory.writes import Actor

pytestmark = pytest.mark.django_db

AGENT = Actor("test-agent", "agent")
ROOT = Path(__file__).resolve().parent.parent
WRITES = {"update", "create", "get_or_create", "update_or_create", "bulk_update"}
# SQL text setting a status column (the lease's UPDATE): raw SQL must not dodge the rule either.
RAW_STATUS_WRITE = re.compile(r"\bSET\b[^;]*\bstatus\s*=", re.IGNORECASE)


def _is_job_status(node) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "JobStatus"
    )


def status_writes(source: str) -> list[int]:
    """Lines that set a job's status: `.update(status=JobStatus.X)` and friends, a column dict
    `{"status": JobStatus.X}` (update_rows), or SQL text that sets a status column (raw SQL)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if RAW_STATUS_WRITE.search(node.value):
                lines.append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in WRITES
        ):
            lines += [
                node.lineno for k in node.keywords if k.arg == "status" and _is_job_status(k.value)
            ]
        elif isinstance(node, ast.Dict):
            lines += [
                value.lineno
                for key, value in zip(node.keys, node.values, strict=True)
                if isinstance(key, ast.Constant) and key.value == "status" and _is_job_status(value)
            ]
    return lines


def test_only_memory_jobs_writes_a_jobs_status():
    outside = {
        f"{path.relative_to(ROOT)}:{line}"
        for package in ("memory", "pipeline", "api", "dashboard")
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts and path != ROOT / "memory" / "jobs.py"
        for line in status_writes(path.read_text())
    }
    assert outside == set()
    assert status_writes((ROOT / "memory" / "jobs.py").read_text())


def test_a_planted_status_write_is_caught():
    planted = "Job.objects.filter(id=1).update(status=JobStatus.DEAD)\n"
    assert status_writes(planted) == [1]
    assert status_writes('sql = f"UPDATE {table} SET attempts = 0, status = %s"\n') == [1]
    assert status_writes('update_rows(Job, [1], {"status": JobStatus.COMPLETED})\n') == [1]
    assert status_writes("Job.objects.filter(status=JobStatus.PENDING).count()\n") == []


def test_a_lease_takes_the_attempt_budget_and_lease_timeout_it_is_given():
    job = writes.remember("Deploys freeze on Fridays.", actor=AGENT).job
    claim = jobs.lease(job.id, max_attempts=5, lease_timeout=timedelta(minutes=10))
    assert claim is not None and (claim.attempts, claim.max_attempts) == (1, 5)
    # Leased a minute ago: not stale under a ten-minute timeout, stale under a thirty-second one.
    job.refresh_from_db()
    job.leased_at = timezone.now() - timedelta(minutes=1)
    job.save(update_fields=["leased_at"])
    assert jobs.lease(job.id, max_attempts=5, lease_timeout=timedelta(minutes=10)) is None
    retaken = jobs.lease(job.id, max_attempts=5, lease_timeout=timedelta(seconds=30))
    assert retaken is not None and retaken.attempts == 2


def test_a_lease_takes_only_a_due_pending_job_or_a_dead_workers_lease_with_attempts_left():
    job = writes.remember("The pager rotates on Mondays.", actor=AGENT).job
    other = writes.remember("Backups run nightly at two.", actor=AGENT).job  # never this lease's
    ten = timedelta(minutes=10)
    Job.objects.filter(id=job.id).update(next_attempt_at=timezone.now() + timedelta(minutes=1))
    assert jobs.lease(job.id, max_attempts=3, lease_timeout=ten) is None  # not due yet
    Job.objects.filter(id=job.id).update(next_attempt_at=timezone.now() - timedelta(seconds=1))
    claim = jobs.lease(job.id, max_attempts=3, lease_timeout=ten)
    assert claim is not None and (claim.memory_id, claim.attempts) == (job.memory_id, 1)
    assert jobs.held(claim) is not None  # its leased_at is the one stored
    assert Job.objects.get(id=job.id).updated_at == claim.leased_at
    assert jobs.lease(job.id, max_attempts=3, lease_timeout=ten) is None  # a live lease

    an_hour_ago = timezone.now() - timedelta(hours=1)
    Job.objects.filter(id=job.id).update(leased_at=an_hour_ago)
    taken_over = jobs.lease(job.id, max_attempts=2, lease_timeout=ten)  # a dead worker's
    assert taken_over is not None and (taken_over.attempts, taken_over.max_attempts) == (2, 2)
    assert jobs.held(claim) is None and jobs.held(taken_over) is not None
    row = Job.objects.get(id=job.id)
    assert (row.status, row.attempts, row.max_attempts) == (JobStatus.LEASED, 2, 2)

    Job.objects.filter(id=job.id).update(leased_at=an_hour_ago)
    assert jobs.lease(job.id, max_attempts=5, lease_timeout=ten) is None  # out of attempts (2 of 2)
    # Attempts left are the row's: 2 of 3 stored, though this lease asks for at most 2.
    Job.objects.filter(id=job.id).update(max_attempts=3)
    last = jobs.lease(job.id, max_attempts=2, lease_timeout=ten)
    assert last is not None and last.attempts == 3

    # A cancelled job (a purge, a redaction) keeps its old leased_at: never leased again.
    Job.objects.filter(id=job.id).update(
        status=JobStatus.CANCELLED, leased_at=an_hour_ago, attempts=0
    )
    assert jobs.lease(job.id, max_attempts=5, lease_timeout=ten) is None
    Job.objects.filter(id=job.id).update(status=JobStatus.COMPLETED, leased_at=None)
    assert jobs.lease(job.id, max_attempts=5, lease_timeout=ten) is None  # done
    assert jobs.lease("no-such-job", max_attempts=5, lease_timeout=ten) is None
    assert Job.objects.get(id=other.id).status == JobStatus.PENDING  # and never leased
    fresh = jobs.lease(other.id, max_attempts=3, lease_timeout=ten)  # no next attempt set: due
    assert fresh is not None and fresh.attempts == 1


# Whole seconds too: SQLite stores a datetime as text, and one without microseconds is written
# without its fraction ("12:00:00", not "12:00:00.000000"), so the comparisons are string ones.
@pytest.mark.parametrize("microsecond", [0, 500_000], ids=["whole-second", "fraction"])
def test_the_lease_boundaries_due_at_this_instant_is_taken_and_a_lease_as_old_as_the_timeout_is_not(
    monkeypatch, microsecond
):
    """The exact edges, on a frozen clock: a job due now is due; a lease exactly the timeout old
    is still alive (for the lease and for the sweep that reclaims stale ones), a microsecond
    older it is a dead worker's."""
    job = writes.remember("The pager rotates on Mondays.", actor=AGENT).job
    now = timezone.now().replace(microsecond=microsecond) + timedelta(days=1)
    tick, ten = timedelta(microseconds=1), timedelta(minutes=10)
    monkeypatch.setattr(timezone, "now", lambda: now)

    Job.objects.filter(id=job.id).update(next_attempt_at=now + tick)
    assert jobs.lease(job.id, max_attempts=3, lease_timeout=ten) is None  # due a microsecond on
    Job.objects.filter(id=job.id).update(next_attempt_at=now)
    claim = jobs.lease(job.id, max_attempts=3, lease_timeout=ten)
    assert claim is not None and Job.objects.get(id=job.id).leased_at == now

    Job.objects.filter(id=job.id).update(leased_at=now - ten)
    assert jobs.lease(job.id, max_attempts=3, lease_timeout=ten) is None
    assert jobs.reclaim_stale_leases(ten) == {"dead": 0, "retried": 0}
    Job.objects.filter(id=job.id).update(leased_at=now - ten - tick)
    taken_over = jobs.lease(job.id, max_attempts=3, lease_timeout=ten)
    assert taken_over is not None and taken_over.attempts == 2
    Job.objects.filter(id=job.id).update(leased_at=now - ten - tick)
    assert jobs.reclaim_stale_leases(ten) == {"dead": 0, "retried": 1}
    assert Job.objects.get(id=job.id).status == JobStatus.PENDING


def test_a_failure_waits_the_backoff_it_is_given_and_the_last_attempt_buries_the_job():
    job = writes.remember("Rotate the keys monthly.", actor=AGENT).job
    claim = jobs.lease(job.id, max_attempts=2, lease_timeout=timedelta(minutes=5))
    now = timezone.now()
    assert jobs.fail_in_transaction(
        jobs.held(claim), "boom", retry_in=timedelta(seconds=42), at=now
    )
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.next_attempt_at == now + timedelta(seconds=42)

    job.next_attempt_at = None
    job.save(update_fields=["next_attempt_at"])
    claim = jobs.lease(job.id, max_attempts=2, lease_timeout=timedelta(minutes=5))
    status = jobs.fail_in_transaction(jobs.held(claim), "boom", retry_in=timedelta(0), at=now)
    job.refresh_from_db()
    assert status == job.status == JobStatus.DEAD
    assert job.memory.extraction_status == ExtractionStatus.FAILED


def test_a_requeue_gives_the_attempt_back():
    job = writes.remember("The cache TTL is 60 seconds.", actor=AGENT).job
    claim = jobs.lease(job.id, max_attempts=3, lease_timeout=timedelta(minutes=5))
    jobs.requeue_in_transaction(jobs.held(claim), {"requeued": "edited"}, at=timezone.now())
    job.refresh_from_db()
    assert (job.status, job.attempts, job.leased_at) == (JobStatus.PENDING, 0, None)


def test_forget_cancels_the_pending_job_and_recover_queues_a_fresh_one():
    memory = writes.remember("Backups run at 02:00 UTC.", actor=AGENT).memory
    writes.forget(memory.id, actor=AGENT, reason="test")
    assert list(memory.jobs.values_list("status", flat=True)) == [JobStatus.CANCELLED]
    writes.recover(memory.id, actor=AGENT, reason="test")
    assert sorted(memory.jobs.values_list("status", flat=True)) == [
        JobStatus.CANCELLED,
        JobStatus.PENDING,
    ]
    assert jobs.live_or_done(memory.id).status == JobStatus.PENDING
