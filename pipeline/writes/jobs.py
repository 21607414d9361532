"""A job's life as the pipeline runs it: its policy (attempts, backoff, lease timeout) passed to
memory.jobs, which writes every status change; the model-call log; a person's retry (of a dead or
a cancelled job) with its checks; sweep and maintenance marks, retention. Each public function is
one short transaction."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from memory import jobs as job_life
from memory import keyword
from memory.batch import insert_rows

# The job's life itself, as the pipeline has always named it (the sweep passes the lease timeout).
from memory.jobs import (  # noqa: F401
    Claim,
    held,
    held_read,
    mark_handed_off,
    reclaim_stale_leases,
)
from memory.models import Job, JobStatus, RowRead
from memory.writes import Actor, Refused, audit
from pipeline.config import get_config
from pipeline.models import LlmCall, PipelineConfig


def claim_job(job_id: str) -> Claim | None:
    """Lease the job under the configured policy; None when the pipeline is disabled or the job
    is not claimable (see memory.jobs.lease)."""
    config = get_config()
    if not config.enabled:
        return None
    return job_life.lease(
        job_id,
        max_attempts=config.max_attempts,
        lease_timeout=timedelta(seconds=config.lease_timeout_seconds),
    )


class LiveCalls(list):
    """A job's model calls, each logged the moment it is appended: one short write of its own
    after the call returned (never a transaction around a model call), so the job's page shows
    the calls while the job runs. log_calls skips the ones already logged."""

    def __init__(self, job_id: str):
        super().__init__()
        self.job_id = job_id

    def append(self, call) -> None:
        super().append(call)
        with transaction.atomic():
            # A job cancelled meanwhile (its memory purged) logs nothing more: the prompt holds
            # the text the purge erased. Locked: a purge cancelling the job waits, or is waited for.
            # Raw: the ORM took longer to build this one-row read than the database to run it.
            live = RowRead(
                Job, "id = %s AND status != %s", [self.job_id, JobStatus.CANCELLED], lock=True
            )
            if live.get() is not None:
                log_calls(self.job_id, [call], timezone.now())
        call.logged = True


def log_calls(job_id: str, calls: list, at: datetime) -> None:
    """The job's model calls ("what the model saw"), inside the caller's transaction."""
    insert_rows(LlmCall, call_rows(job_id, calls, at))


def call_rows(job_id: str, calls: list, at: datetime) -> list[LlmCall]:
    """The rows of the calls not logged yet (no database: the job's write builds them before it
    takes the write lock and inserts them inside)."""
    return [
        LlmCall(
            job_id=job_id,
            kind=call.kind,
            provider=call.provider,
            model=call.model,
            prompt=call.prompt,
            raw_response=call.raw_response or "",
            duration_ms=call.duration_ms,
            prompt_tokens=call.prompt_tokens,
            completion_tokens=call.completion_tokens,
            error=call.error,
            fact_index=call.fact_index,
            created_at=at,
        )
        for call in calls
        if not getattr(call, "logged", False)
    ]


def backoff(attempts: int) -> timedelta:
    """How long a failed job waits before its next attempt: doubling from 10 s, at most 2 min."""
    return timedelta(seconds=min(5 * 2**attempts, 120))


def fail_job(claim: Claim, error: str, calls: list) -> str | None:
    """Back to pending with backoff, or dead after max attempts (the memory is kept, marked failed)."""
    now = timezone.now()
    with transaction.atomic():
        job = held(claim)
        if job is None:
            return None
        log_calls(job.id, calls, now)
        return job_life.fail_in_transaction(job, error, retry_in=backoff(job.attempts), at=now)


def retry_job(job_id: str, *, actor: Actor) -> Job:
    """A person sends a dead or cancelled job back to the queue with a fresh attempt budget;
    refused, with the reason, when `retry_refusal` says so."""
    now = timezone.now()
    with transaction.atomic():
        job = job_life.locked(job_id)
        if job is None:
            raise Refused("not_found", f"job {job_id} not found")
        refusal = retry_refusal(job)
        if refusal is not None:
            raise refusal
        job_life.retry_in_transaction(job, at=now)
        if job.memory_id:
            audit(
                job.memory_id,
                "job_retried",
                actor=actor,
                reason=f"{job.status} job sent back to the queue",
                metadata={"jobId": job.id, "lastError": job.error, "previousStatus": job.status},
                at=now,
            )
    return Job.objects.get(id=job_id)


def retry_refusal(job: Job) -> Refused | None:
    """Why the job cannot go back to the queue, or None (the job page's button asks too): only
    a dead or cancelled job, and a cancelled one only for a live memory that no other job is
    extracting or has extracted (a recovered memory may already have a new job). Reads only."""
    if job.status not in job_life.RETRYABLE:
        return Refused("not_retryable", f"nothing to retry: the job is {job.status}")
    if job.status != JobStatus.CANCELLED:
        return None
    memory = job.memory
    if memory is None or memory.is_deleted:
        return Refused("source_forgotten", "the memory is forgotten: recover it first")
    other = job_life.live_or_done(memory.id, other_than=job.id)
    if other is not None:
        return Refused(
            "already_extracted" if other.status == JobStatus.COMPLETED else "already_queued",
            f"job {other.id} is {other.status} for this memory; this one is not needed",
            jobId=other.id,
        )
    return None


def mark_maintenance_run(at: datetime) -> None:
    PipelineConfig.objects.filter(pk=1).update(last_maintenance_at=at)


def purge_old(before: datetime) -> dict[str, int]:
    """Delete completed/cancelled jobs' model-call logs and the jobs themselves past retention.

    Jobs that produced proposals are kept (proposals reference them); their call logs go. The
    log of changed texts the keyword caches read is trimmed to its last entries.
    """
    with transaction.atomic():
        old = Job.objects.filter(
            status__in=[JobStatus.COMPLETED, JobStatus.CANCELLED], updated_at__lt=before
        )
        calls, _ = LlmCall.objects.filter(
            Q(job__in=old) | Q(job__isnull=True, created_at__lt=before)
        ).delete()
        jobs, _ = old.filter(proposals__isnull=True).delete()
        keyword.trim_changes()
    return {"calls": calls, "jobs": jobs}
