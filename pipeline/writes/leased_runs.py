"""The lease of a queued run (an evaluation's or an import's: `status`, `worker`, `claimed_at`,
`heartbeat_at`, `attempts`): claimed by one worker, handed back after its time slice, taken back
from a worker whose heartbeat outlived the lease, and handed off again when it waited queued
too long (its hand-off lost). One conditional statement each, so two workers never hold one run.
A queued run's `heartbeat_at` is when it was last queued (None: since it was created)."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import F, Model, Q, QuerySet
from django.utils import timezone

from pipeline.models import ReplayStatus

# A queued run waits this long for a task before its hand-off counts as lost (jobs wait as long).
QUEUED_QUIET = timedelta(minutes=5)


def stale(cutoff) -> Q:
    """A heartbeat older than the cutoff (or none)."""
    return Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=cutoff)


def claim(
    model: type[Model], run_id: str, *, worker: str, lease_timeout: timedelta, max_attempts: int
):
    """Hold a queued run (or a running one whose worker died) for `worker`, one attempt more.
    None: finished, gone, held by a live worker, or out of attempts (the sweep fails it)."""
    now = timezone.now()
    claimable = Q(status=ReplayStatus.QUEUED) | (
        Q(status=ReplayStatus.RUNNING) & stale(now - lease_timeout)
    )
    claimed = model.objects.filter(claimable, id=run_id, attempts__lt=max_attempts).update(
        status=ReplayStatus.RUNNING,
        worker=worker,
        claimed_at=now,
        heartbeat_at=now,
        attempts=F("attempts") + 1,
    )
    return model.objects.get(id=run_id) if claimed else None


def release(model: type[Model], run_id: str, worker: str) -> bool:
    """The task used its time slice: the run goes back to the queue to go on in a new task, its
    attempts reset (it made progress; attempts count the workers that died on it)."""
    return bool(
        model.objects.filter(id=run_id, status=ReplayStatus.RUNNING, worker=worker).update(
            status=ReplayStatus.QUEUED, worker="", heartbeat_at=timezone.now(), attempts=0
        )
    )


def stale_running(model: type[Model], lease_timeout: timedelta) -> tuple[QuerySet, object]:
    """The running runs whose worker died (heartbeat older than the lease), and the cutoff."""
    cutoff = timezone.now() - lease_timeout
    return model.objects.filter(stale(cutoff), status=ReplayStatus.RUNNING), cutoff


def queued_out_of_attempts(model: type[Model], max_attempts: int) -> list[str]:
    """Queued runs that used every attempt allowed now (the setting was lowered while a run that
    lost a worker waited): no task can claim them, so the sweep fails them rather than hand them
    off again."""
    return list(
        model.objects.filter(status=ReplayStatus.QUEUED, attempts__gte=max_attempts).values_list(
            "id", flat=True
        )
    )


def no_attempt_left(max_attempts: int) -> str:
    """Why such a run failed, for its page (the caller says how to start it again)."""
    return f"it waited in the queue with no attempt left ({max_attempts} allowed now)"


def requeue(model: type[Model], ids: list[str], cutoff) -> None:
    """Back to the queue, conditional like a claim: a run claimed since it was read keeps its
    new heartbeat."""
    model.objects.filter(stale(cutoff), id__in=ids, status=ReplayStatus.RUNNING).update(
        status=ReplayStatus.QUEUED, worker="", heartbeat_at=timezone.now()
    )


def lost_queued(
    model: type[Model],
    quiet: timedelta,
    *,
    exclude: Q | None = None,
    stamp: str = "heartbeat_at",
) -> list[str]:
    """Queued runs no task claimed for `quiet` since they were queued (a process that died between
    queueing a run and handing it off, a queue that lost the task): each marked queued now in
    `stamp` (None: queued when created), one conditional statement each so one sweep takes it, and
    returned to be handed off again. A second task for a run is harmless: only one claims it."""
    cutoff = timezone.now() - quiet
    waiting = Q(**{f"{stamp}__lt": cutoff}) | Q(
        **{f"{stamp}__isnull": True, "created_at__lt": cutoff}
    )
    found = model.objects.filter(waiting, status=ReplayStatus.QUEUED)
    if exclude is not None:
        found = found.exclude(exclude)
    lost = []
    for run_id in found.order_by("created_at").values_list("id", flat=True)[:100]:
        if model.objects.filter(waiting, id=run_id, status=ReplayStatus.QUEUED).update(
            **{stamp: timezone.now()}
        ):
            lost.append(run_id)
    return lost
