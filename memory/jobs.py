"""The Job's life: every change of a memory_jobs row's status is written here. Created with its
memory, cancelled on forget, requeued on recover, leased, failed with backoff, reclaimed when its
lease went stale, completed, cancelled or requeued by its record write, sent back by a person.

The pipeline passes its policy (attempts, backoff, lease timeout) as arguments: nothing here reads
its config. A hand-off to the queue always waits for the commit, so a worker never sees an
uncommitted row. `lease` and `reclaim_stale_leases` are one short transaction each; the others
are single statements or join the caller's transaction (`_in_transaction`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from memory import expiry, queue
from memory.backend import commit_unflushed, pipelined
from memory.batch import insert_rows, update_rows
from memory.models import ExtractionStatus, Job, JobStatus, Memory, RowRead
from memory.moments import iso

log = logging.getLogger(__name__)

# A job in one of these holds its memory's extraction: no second job is queued beside it.
LIVE_OR_DONE = (JobStatus.PENDING, JobStatus.LEASED, JobStatus.COMPLETED)
RETRYABLE = (JobStatus.DEAD, JobStatus.CANCELLED)
RUNNING = (JobStatus.PENDING, JobStatus.LEASED)  # a purge cancels these


@dataclass(frozen=True)
class Claim:
    """A lease taken on a job: its attempt, and the `leased_at` that proves it is still held."""

    job_id: str
    memory_id: str | None
    leased_at: datetime
    attempts: int
    max_attempts: int


def set_extraction_status(
    memory_ids, status: str, *, model: str | None = None, embedding_model: str | None = None
) -> int:
    """Where the extraction of these memories stands (ids or a subquery of ids): bookkeeping of
    the job, so no version change and no audit. `model` also records which model extracted,
    `embedding_model` which model made the vector stored for them in the same write."""
    columns: dict[str, Any] = {"extraction_status": status}
    if model is not None:
        columns["extraction_model"] = model
    if embedding_model is not None:
        columns["embedding_model"] = embedding_model
    if not isinstance(memory_ids, list | tuple):
        return Memory.objects.filter(id__in=memory_ids).update(**columns)
    return update_rows(Memory, memory_ids, columns)


def _hand_off_after_commit(job_id: str) -> None:
    transaction.on_commit(lambda: _hand_off(job_id))


def _hand_off(job_id: str) -> None:
    """The job to the queue, just after the commit that made it. A task row in the store's
    database is written by a commit that does not wait for the disk (`commit_unflushed`): the
    job's row, flushed with its own commit, is the record; a task row a crash loses is handed off
    again by the sweep. That saves remember a second flush of the log."""
    if not queue.in_store():  # to Redis (or kept by `queue.held()`)
        queue.hand_off(job_id)
        return
    if queue.held_back(job_id):
        return
    try:
        with transaction.atomic(), pipelined():
            commit_unflushed()
            queue.enqueue(job_id)
    except Exception:
        log.exception("could not hand job %s to the queue; the sweep will pick it up", job_id)


# --- with the memory: remember, forget, recover --------------------------------------------------


def create_in_transaction(memory: Memory, *, at) -> Job:
    """A pending job for a new raw memory; handed to the queue after the commit."""
    job = Job(memory=memory, created_at=at, updated_at=at)
    insert_rows(Job, [job])
    _hand_off_after_commit(job.id)
    return job


def create_many_in_transaction(memory_ids: list[str], *, at) -> list[str]:
    """Pending jobs for many new raw memories in one statement (an import's batch), each
    handed to the queue after the commit; returns their ids."""
    created = [Job(memory_id=memory_id, created_at=at, updated_at=at) for memory_id in memory_ids]
    insert_rows(Job, created)
    for job in created:
        _hand_off_after_commit(job.id)
    return [job.id for job in created]


def cancel_pending_in_transaction(memory: Memory, *, at) -> int:
    """The forgotten memory's pending jobs are cancelled; returns how many."""
    return Job.objects.filter(memory=memory, status=JobStatus.PENDING).update(
        status=JobStatus.CANCELLED, error="source memory was forgotten", updated_at=at
    )


def cancel_purged_in_transaction(memory_ids: list[str], *, at) -> int:
    """The purged memories' pending and running jobs are cancelled: a worker that still holds
    one finds its lease gone and records nothing (no copy of the text is written afterwards)."""
    return Job.objects.filter(memory_id__in=memory_ids, status__in=RUNNING).update(
        status=JobStatus.CANCELLED, error="source memory was purged", updated_at=at
    )


def restart_redacted_in_transaction(memory_ids: list[str], *, at) -> int:
    """The redacted memories' leased jobs, and those of their agents' other memories (which may
    have read the old text as a candidate), are cancelled and started again (restart_leased)."""
    return restart_leased_in_transaction(
        memory_ids,
        reason="a memory it may have read was redacted while it ran: a new job reads the "
        "redacted text",
        at=at,
    )


def restart_leased_in_transaction(
    memory_ids: list[str], *, reason: str, at, sparing: list[str] = ()
) -> int:
    """The leased jobs of these memories' agents (but those of `sparing`) are cancelled with
    `reason`, so a worker that read a text as its memory or as a candidate logs and records
    nothing more (LiveCalls and the job's write check the lease), and a fresh job is queued for
    each of their memories. A QA pass purged a memory while another memory's job had it as a
    candidate: the job then logged and recorded its text, after the purge had verified."""
    # Only when one of them is a candidate still: an expired or forgotten memory is no job's
    # (the expiry purge, every maintenance run, would restart a slow job again and again).
    live = Memory.objects.filter(id__in=memory_ids, is_deleted=False).filter(expiry.unexpired())
    agents = live.values("agent_id")
    leased = (
        Job.objects.filter(status=JobStatus.LEASED, memory__agent_id__in=agents)
        .exclude(memory_id__in=sparing)
        .order_by("id")
    )
    # Locked, in id order, as a worker's write takes its job's row (PostgreSQL): a job that
    # completes meanwhile is waited for, and then no longer leased, left as it ended.
    rows = list(leased.select_for_update().values_list("id", "memory_id"))
    if not rows:
        return 0
    Job.objects.filter(id__in=[pk for pk, _ in rows]).update(
        status=JobStatus.CANCELLED, error=reason, updated_at=at
    )
    for memory in Memory.objects.filter(id__in={memory_id for _, memory_id in rows}):
        create_in_transaction(memory, at=at)
    return len(rows)


def live_or_done(memory_id: str, *, other_than: str | None = None) -> Job | None:
    """A job of the memory that is queued, running or completed (other than `other_than`)."""
    jobs = Job.objects.filter(memory_id=memory_id, status__in=LIVE_OR_DONE)
    if other_than is not None:
        jobs = jobs.exclude(id=other_than)
    return jobs.first()


def requeue_unfinished_in_transaction(memory: Memory, *, at) -> Job | None:
    """A fresh job for a recovered raw memory whose extraction never ran to the end: forgetting
    it cancelled its job, and nothing else would ever pick it up again. None when a job is still
    live or one completed (or the memory never wanted one)."""
    if memory.extraction_status != ExtractionStatus.PENDING:
        return None
    if Job.objects.filter(memory=memory, status__in=LIVE_OR_DONE).exists():
        return None
    return create_in_transaction(memory, at=at)


# --- leased, failed, reclaimed ------------------------------------------------------------------


# The lease in one statement, its row returned by it: the ORM's filter, update and get of the
# same took about 1.2 ms of Python a job here against 0.2, and on PostgreSQL a round trip more.
# A pending job that is due, or a lease older than the timeout that has attempts left (a dead
# worker's: a re-delivered task may take it over; out of attempts, the sweep buries it).
_LEASE_SQL = (
    f"UPDATE {Job._meta.db_table} SET status = %s, leased_at = %s, attempts = attempts + 1, "
    "max_attempts = %s, updated_at = %s WHERE id = %s AND ("
    "(status = %s AND (next_attempt_at IS NULL OR next_attempt_at <= %s)) "
    "OR (status = %s AND leased_at < %s AND attempts < max_attempts)"
    ") RETURNING memory_id, attempts"
)


def lease(job_id: str, *, max_attempts: int, lease_timeout: timedelta) -> Claim | None:
    """pending -> leased with one conditional UPDATE; the attempt is counted here, not at the end,
    so a job that kills its worker still runs out of attempts. None: not claimable now."""
    now = timezone.now()
    at = connection.ops.adapt_datetimefield_value(now)
    stale = connection.ops.adapt_datetimefield_value(now - lease_timeout)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            _LEASE_SQL,
            # What it sets; the job; due and pending; or a dead worker's lease.
            [JobStatus.LEASED, at, max_attempts, at, str(job_id)]
            + [JobStatus.PENDING, at]
            + [JobStatus.LEASED, stale],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    memory_id, attempts = row
    return Claim(job_id, memory_id, now, attempts, max_attempts)


def held(claim: Claim) -> Job | None:
    """The job row, locked, if this claim still holds its lease (a reclaimed lease changes
    leased_at). Raw: the job's write runs it with the write lock held."""
    return held_read(claim).get()


def held_read(claim: Claim) -> RowRead:
    """`held`, sent now and read by `.get()` (in a pipelined block, with other reads)."""
    return RowRead(
        Job,
        "id = %s AND status = %s AND leased_at = %s",
        [claim.job_id, JobStatus.LEASED, connection.ops.adapt_datetimefield_value(claim.leased_at)],
        lock=True,
    )


def fail_in_transaction(job: Job, error: str, *, retry_in: timedelta, at) -> str:
    """A held job's attempt failed: back to pending, due again `retry_in` from now, or dead once
    its attempts are spent (the memory is kept, marked failed). Returns the new status."""
    if job.attempts >= job.max_attempts:
        Job.objects.filter(id=job.id).update(
            status=JobStatus.DEAD, error=error, failed_at=at, leased_at=None, updated_at=at
        )
        if job.memory_id:
            set_extraction_status([job.memory_id], ExtractionStatus.FAILED)
        return JobStatus.DEAD
    Job.objects.filter(id=job.id).update(
        status=JobStatus.PENDING,
        error=error,
        failed_at=at,
        leased_at=None,
        next_attempt_at=at + retry_in,
        updated_at=at,
    )
    return JobStatus.PENDING


def reclaim_stale_leases(lease_timeout: timedelta) -> dict[str, int]:
    """Leases older than the timeout belong to a worker that died: retry or bury them."""
    now = timezone.now()
    cutoff = now - lease_timeout
    with transaction.atomic():
        stale = Job.objects.filter(status=JobStatus.LEASED, leased_at__lt=cutoff)
        dead_ids = list(stale.filter(attempts__gte=F("max_attempts")).values_list("id", flat=True))
        dead = Job.objects.filter(id__in=dead_ids).update(
            status=JobStatus.DEAD,
            error="lease expired: the worker died or timed out on every attempt",
            failed_at=now,
            leased_at=None,
            updated_at=now,
        )
        set_extraction_status(
            Job.objects.filter(id__in=dead_ids).values("memory_id"), ExtractionStatus.FAILED
        )
        retried = stale.exclude(id__in=dead_ids).update(
            status=JobStatus.PENDING,
            error="lease expired: the worker died or timed out; retrying",
            leased_at=None,
            next_attempt_at=now,
            updated_at=now,
        )
    return {"dead": dead, "retried": retried}


def mark_handed_off(job_ids: list[str]) -> None:
    """Note a re-queued hand-off, so the next sweep does not queue the same job again at once."""
    if job_ids:
        Job.objects.filter(id__in=job_ids, status=JobStatus.PENDING).update(
            updated_at=timezone.now(), next_attempt_at=None
        )


# --- the record write's ends --------------------------------------------------------------------


def complete_in_transaction(job: Job, result: dict, *, at) -> None:
    """The job's completion with its result, in one UPDATE (pipelined writes wait for no answer).
    The last failed attempt's error moves into the result (`earlierFailure`): the error column
    is cleared, and a disk that filled up once left no trace of it (a QA pass)."""
    if job.error:  # added to the caller's result too: it returns what was stored
        result["earlierFailure"] = {"error": job.error, "failedAt": iso(job.failed_at)}
    update_rows(
        Job,
        [job.id],
        {
            "status": JobStatus.COMPLETED,
            "result": result,
            "completed_at": at,
            "leased_at": None,
            "error": None,
            "updated_at": at,
        },
    )


def cancel_in_transaction(job: Job, result: dict, *, at) -> None:
    """The held job ends cancelled (its source was forgotten while it ran), with its result."""
    Job.objects.filter(id=job.id).update(
        status=JobStatus.CANCELLED,
        result=result,
        completed_at=at,
        leased_at=None,
        updated_at=at,
    )


def requeue_in_transaction(job: Job, result: dict, *, at) -> None:
    """The held job goes back to the queue with its attempt given back (its source changed while
    it ran: not a failure), handed off again after the commit."""
    Job.objects.filter(id=job.id).update(
        status=JobStatus.PENDING,
        result=result,
        attempts=F("attempts") - 1,
        leased_at=None,
        next_attempt_at=None,
        updated_at=at,
    )
    _hand_off_after_commit(job.id)


# --- a person's retry ---------------------------------------------------------------------------


def locked(job_id: str) -> Job | None:
    """The job row, locked for a change of its status (None: no such job)."""
    return Job.objects.select_for_update().filter(id=job_id).first()


def retry_in_transaction(job: Job, *, at) -> None:
    """A dead or cancelled job back to pending with a fresh attempt budget, its memory's
    extraction pending again; handed to the queue after the commit."""
    Job.objects.filter(id=job.id).update(
        status=JobStatus.PENDING,
        attempts=0,
        next_attempt_at=None,
        leased_at=None,
        completed_at=None,
        result=None,
        updated_at=at,
    )
    if job.memory_id:
        set_extraction_status([job.memory_id], ExtractionStatus.PENDING)
    _hand_off_after_commit(job.id)
