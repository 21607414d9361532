"""A second opinion's run row: created by the request, claimed, filled and finished by its task.

Each write is one statement in autocommit: the task holds no transaction across its model calls,
and the page reading the run sees every result the moment it is saved.
"""

from __future__ import annotations

from datetime import timedelta

from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from pipeline.models import Proposal, ReplayRun, ReplayStatus
from pipeline.writes import leased_runs


def create_run(
    *,
    requested_by: str,
    provider: str,
    model: str,
    proposal_ids: list[str],
    total: int,
    proposal: Proposal | None = None,
    filters: str = "",
    with_extraction: bool = False,
) -> ReplayRun:
    """A queued run; with nothing to compare it is done at once."""
    now = timezone.now()
    empty = not proposal_ids
    return ReplayRun.objects.create(
        requested_by=requested_by,
        provider=provider,
        model=model,
        proposal=proposal,
        filters=filters,
        proposal_ids=proposal_ids,
        total=total,
        with_extraction=with_extraction,
        status=ReplayStatus.DONE if empty else ReplayStatus.QUEUED,
        created_at=now,
        finished_at=now if empty else None,
    )


def _stale(cutoff) -> Q:
    # A lease older than the cutoff; a run claimed before leases were kept has none: its start.
    return Q(leased_at__lt=cutoff) | Q(leased_at__isnull=True, started_at__lt=cutoff)


def claim_run(run_id: str, *, lease_timeout: timedelta, max_attempts: int) -> ReplayRun | None:
    """Lease a queued run (one attempt more); None when it is finished, gone, held by a live
    worker or out of attempts (the sweep then fails it).

    A running run whose lease expired can be claimed again: django-q2 re-delivers the task of a
    worker that died, and the new attempt goes on after the results already saved. A fresh lease
    is never taken over, so two tasks never fill one run.
    """
    now = timezone.now()
    expired = Q(leased_at__isnull=True) | Q(leased_at__lt=now - lease_timeout)
    claimable = Q(status=ReplayStatus.QUEUED) | (Q(status=ReplayStatus.RUNNING) & expired)
    claimed = ReplayRun.objects.filter(claimable, id=run_id, attempts__lt=max_attempts).update(
        status=ReplayStatus.RUNNING,
        started_at=Coalesce("started_at", now),
        leased_at=now,
        attempts=F("attempts") + 1,
    )
    return ReplayRun.objects.get(id=run_id) if claimed else None


def save_results(run_id: str, results: list[dict]) -> None:
    """Store the results so far (the run's task is their only writer) and renew its lease."""
    ReplayRun.objects.filter(id=run_id).update(results=results, leased_at=timezone.now())


def reclaim_stale_runs(lease_timeout: timedelta, *, max_attempts: int) -> tuple[list[str], int]:
    """Running runs whose lease expired lost their worker: those with attempts left go back to
    queued (their ids are returned, to be queued again), the others fail saying why."""
    now = timezone.now()
    stale = ReplayRun.objects.filter(_stale(now - lease_timeout), status=ReplayStatus.RUNNING)
    failed = stale.filter(attempts__gte=max_attempts).update(
        status=ReplayStatus.FAILED,
        error=(
            f"the worker running it stopped on each of its {max_attempts} attempts; "
            "ask for the second opinion again"
        ),
        finished_at=now,
        leased_at=None,
    )
    stuck = leased_runs.queued_out_of_attempts(ReplayRun, max_attempts)
    failed += ReplayRun.objects.filter(
        id__in=stuck, status=ReplayStatus.QUEUED, attempts__gte=max_attempts
    ).update(
        status=ReplayStatus.FAILED,
        error=f"{leased_runs.no_attempt_left(max_attempts)}; ask for the second opinion again",
        finished_at=now,
        leased_at=None,
    )
    ids = list(stale.values_list("id", flat=True))
    # Conditional like a claim: a run claimed since it was read keeps its new lease.
    # A queued run's leased_at says when it was queued (None: when it was created).
    ReplayRun.objects.filter(
        _stale(now - lease_timeout), id__in=ids, status=ReplayStatus.RUNNING
    ).update(status=ReplayStatus.QUEUED, leased_at=now)
    return ids, failed


def lost_runs() -> list[str]:
    """Runs queued too long without a task taking them (their hand-off lost): to hand off again."""
    return leased_runs.lost_queued(ReplayRun, leased_runs.QUEUED_QUIET, stamp="leased_at")


def finish_run(run_id: str, error: str = "") -> None:
    """Done, or failed with the error people will read on the page."""
    ReplayRun.objects.filter(id=run_id).update(
        status=ReplayStatus.FAILED if error else ReplayStatus.DONE,
        error=error,
        finished_at=timezone.now(),
        leased_at=None,
    )
