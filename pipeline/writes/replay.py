"""A second opinion's run row: created by the request, claimed, filled and finished by its task.

Each write is one statement in autocommit: the task holds no transaction across its model calls,
and the page reading the run sees every result the moment it is saved.
"""

from __future__ import annotations

from django.db.models.functions import Coalesce
from django.utils import timezone

from pipeline.models import Proposal, ReplayRun, ReplayStatus

LIVE = (ReplayStatus.QUEUED, ReplayStatus.RUNNING)


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


def claim_run(run_id: str) -> ReplayRun | None:
    """Mark a live run as running; None when it is finished or gone.

    A running run can be claimed again: django-q2 re-delivers the task of a worker that died, and
    the new attempt goes on after the results already saved.
    """
    claimed = ReplayRun.objects.filter(id=run_id, status__in=LIVE).update(
        status=ReplayStatus.RUNNING, started_at=Coalesce("started_at", timezone.now())
    )
    return ReplayRun.objects.get(id=run_id) if claimed else None


def save_results(run_id: str, results: list[dict]) -> None:
    """Store the results so far (the run's task is their only writer)."""
    ReplayRun.objects.filter(id=run_id).update(results=results)


def finish_run(run_id: str, error: str = "") -> None:
    """Done, or failed with the error people will read on the page."""
    ReplayRun.objects.filter(id=run_id).update(
        status=ReplayStatus.FAILED if error else ReplayStatus.DONE,
        error=error,
        finished_at=timezone.now(),
    )
