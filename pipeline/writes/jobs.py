"""A job's life outside its record write: claim, fail with backoff, stale leases, a person's retry
(of a dead or a cancelled job), sweep and maintenance marks, retention. Each public function is
one short transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from memory import queue
from memory.models import ExtractionStatus, Job, JobStatus, Memory, RowRead
from memory.writes import Actor, Refused, audit, insert_rows, set_extraction_status
from pipeline.config import get_config
from pipeline.models import LlmCall, PipelineConfig


@dataclass(frozen=True)
class Claim:
    job_id: str
    memory_id: str | None
    leased_at: datetime
    attempts: int
    max_attempts: int


def claim_job(job_id: str) -> Claim | None:
    """pending -> leased with one conditional UPDATE; the attempt is counted here, not at the end,
    so a job that kills its worker still runs out of attempts."""
    config = get_config()
    if not config.enabled:
        return None
    now = timezone.now()
    due = Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now)
    # A lease older than the timeout belongs to a dead worker: a re-delivered task may take it over.
    # Out of attempts, it is left for the sweep to bury (a job that kills its worker must end).
    expired = Q(
        status=JobStatus.LEASED,
        leased_at__lt=now - timedelta(seconds=config.lease_timeout_seconds),
        attempts__lt=F("max_attempts"),
    )
    with transaction.atomic():
        claimed = Job.objects.filter(
            (due & Q(status=JobStatus.PENDING)) | expired, id=job_id
        ).update(
            status=JobStatus.LEASED,
            leased_at=now,
            attempts=F("attempts") + 1,
            max_attempts=config.max_attempts,
            updated_at=now,
        )
        if claimed != 1:
            return None
        job = Job.objects.get(id=job_id)
    return Claim(job.id, job.memory_id, now, job.attempts, job.max_attempts)


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


class LiveCalls(list):
    """A job's model calls, each logged the moment it is appended: one short write of its own
    after the call returned (never a transaction around a model call), so the job's page shows
    the calls while the job runs. log_calls skips the ones already logged."""

    def __init__(self, job_id: str):
        super().__init__()
        self.job_id = job_id

    def append(self, call) -> None:
        super().append(call)
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
    return timedelta(seconds=min(5 * 2**attempts, 120))


def fail_job(claim: Claim, error: str, calls: list) -> str | None:
    """Back to pending with backoff, or dead after max attempts (the memory is kept, marked failed)."""
    now = timezone.now()
    with transaction.atomic():
        job = held(claim)
        if job is None:
            return None
        log_calls(job.id, calls, now)
        if job.attempts >= job.max_attempts:
            Job.objects.filter(id=job.id).update(
                status=JobStatus.DEAD, error=error, failed_at=now, leased_at=None, updated_at=now
            )
            if job.memory_id:
                set_extraction_status([job.memory_id], ExtractionStatus.FAILED)
            return JobStatus.DEAD
        Job.objects.filter(id=job.id).update(
            status=JobStatus.PENDING,
            error=error,
            failed_at=now,
            leased_at=None,
            next_attempt_at=now + backoff(job.attempts),
            updated_at=now,
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


RETRYABLE = (JobStatus.DEAD, JobStatus.CANCELLED)


def retry_job(job_id: str, *, actor: Actor) -> Job:
    """A person sends a dead or cancelled job back to the queue with a fresh attempt budget.

    A cancelled job runs again only for a live memory that no other job is extracting or has
    extracted (a recovered memory may already have a new job): refused otherwise, with the reason.
    """
    now = timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(id=job_id).first()
        if job is None:
            raise Refused("not_found", f"job {job_id} not found")
        if job.status not in RETRYABLE:
            raise Refused("not_retryable", f"nothing to retry: the job is {job.status}")
        if job.status == JobStatus.CANCELLED:
            _check_cancelled_job_can_run(job)
        Job.objects.filter(id=job_id).update(
            status=JobStatus.PENDING,
            attempts=0,
            next_attempt_at=None,
            leased_at=None,
            completed_at=None,
            result=None,
            updated_at=now,
        )
        if job.memory_id:
            set_extraction_status([job.memory_id], ExtractionStatus.PENDING)
            audit(
                job.memory_id,
                "job_retried",
                actor=actor,
                reason=f"{job.status} job sent back to the queue",
                metadata={"jobId": job.id, "lastError": job.error, "previousStatus": job.status},
                at=now,
            )
        transaction.on_commit(lambda: queue.hand_off(job_id))
    return Job.objects.get(id=job_id)


def _check_cancelled_job_can_run(job: Job) -> None:
    memory = Memory.objects.filter(id=job.memory_id).first()
    if memory is None or memory.is_deleted:
        raise Refused("source_forgotten", "the memory is forgotten: recover it first")
    other = (
        Job.objects.filter(
            memory=memory, status__in=[JobStatus.PENDING, JobStatus.LEASED, JobStatus.COMPLETED]
        )
        .exclude(id=job.id)
        .first()
    )
    if other is not None:
        raise Refused(
            "already_extracted" if other.status == JobStatus.COMPLETED else "already_queued",
            f"job {other.id} is {other.status} for this memory; this one is not needed",
            jobId=other.id,
        )


def mark_handed_off(job_ids: list[str]) -> None:
    """Note a re-queued hand-off, so the next sweep does not queue the same job again at once."""
    if job_ids:
        Job.objects.filter(id__in=job_ids, status=JobStatus.PENDING).update(
            updated_at=timezone.now(), next_attempt_at=None
        )


def mark_maintenance_run(at: datetime) -> None:
    PipelineConfig.objects.filter(pk=1).update(last_maintenance_at=at)


def purge_old(before: datetime) -> dict[str, int]:
    """Delete completed/cancelled jobs' model-call logs and the jobs themselves past retention.

    Jobs that produced proposals are kept (proposals reference them); their call logs go.
    """
    with transaction.atomic():
        old = Job.objects.filter(
            status__in=[JobStatus.COMPLETED, JobStatus.CANCELLED], updated_at__lt=before
        )
        calls, _ = LlmCall.objects.filter(
            Q(job__in=old) | Q(job__isnull=True, created_at__lt=before)
        ).delete()
        jobs, _ = old.filter(proposals__isnull=True).delete()
    return {"calls": calls, "jobs": jobs}
