"""An evaluation run's row (pipeline.models.EvalRun): created by the request, claimed by its task,
filled batch by batch and finished. Each public function is one short transaction (or one
statement) and makes no model call: the task calls the model between them.

A run is held by one worker at a time (`worker`, `heartbeat_at`): every record renews the
heartbeat and writes only while the run is still held by the worker that records. A run whose
heartbeat outlived the lease timeout lost its worker: a re-delivered task may claim it, and the
sweep queues it again (or, out of attempts, fails it); the new attempt goes on after the outcomes
already recorded.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from pipeline.models import EvalResult, EvalRun, ReplayStatus
from pipeline.writes import leased_runs


def create_run(
    *,
    requested_by: str,
    set_kind: str,
    set_name: str,
    set_sha256: str,
    set_text: str,
    total: int,
    provider: str,
    model: str,
    prompt_version: str,
    selection: str = "",
) -> EvalRun:
    return EvalRun.objects.create(
        requested_by=requested_by,
        set_kind=set_kind,
        set_name=set_name,
        set_sha256=set_sha256,
        selection=selection,
        set_text=set_text,
        total=total,
        provider=provider,
        model=model,
        prompt_version=prompt_version,
        created_at=timezone.now(),
    )


def claim_run(
    run_id: str, *, worker: str, lease_timeout: timedelta, max_attempts: int
) -> EvalRun | None:
    """Hold the run for `worker` (leased_runs.claim)."""
    return leased_runs.claim(
        EvalRun, run_id, worker=worker, lease_timeout=lease_timeout, max_attempts=max_attempts
    )


def recorded(run_id: str) -> dict[int, dict]:
    """The outcomes recorded so far, by case position (a reclaimed run goes on after them)."""
    rows = EvalResult.objects.filter(run_id=run_id).values_list("position", "outcome")
    return dict(rows)


def record(run_id: str, worker: str, outcomes: dict[int, dict]) -> bool:
    """Save a batch of outcomes, the progress and the heartbeat. False: the run is no longer this
    worker's (finished, or taken over after its heartbeat went stale): nothing is saved."""
    with transaction.atomic():
        held = EvalRun.objects.filter(id=run_id, status=ReplayStatus.RUNNING, worker=worker).update(
            heartbeat_at=timezone.now()
        )
        if not held:
            return False
        EvalResult.objects.bulk_create(
            [EvalResult(run_id=run_id, position=p, outcome=o) for p, o in outcomes.items()],
            ignore_conflicts=True,
        )
        done = EvalResult.objects.filter(run_id=run_id).count()
        EvalRun.objects.filter(id=run_id).update(done=done)
    return True


def release_run(run_id: str, worker: str) -> bool:
    """Back to the queue after the task's time slice (leased_runs.release)."""
    return leased_runs.release(EvalRun, run_id, worker)


def finish_run(run_id: str, worker: str, report: dict, counts: dict) -> bool:
    """Done: the report replaces the recorded outcomes."""
    with transaction.atomic():
        finished = EvalRun.objects.filter(
            id=run_id, status=ReplayStatus.RUNNING, worker=worker
        ).update(
            status=ReplayStatus.DONE,
            report=report,
            counts=counts,
            done=report["set"]["cases"],
            finished_at=timezone.now(),
            heartbeat_at=None,
        )
        if finished:
            EvalResult.objects.filter(run_id=run_id).delete()
    return bool(finished)


def fail_run(run_id: str, error: str) -> None:
    """Failed, with the error people read on the page; its recorded outcomes go."""
    with transaction.atomic():
        EvalRun.objects.filter(id=run_id).exclude(status=ReplayStatus.DONE).update(
            status=ReplayStatus.FAILED, error=error, finished_at=timezone.now(), heartbeat_at=None
        )
        EvalResult.objects.filter(run_id=run_id).delete()


def reclaim_stale_runs(lease_timeout: timedelta, *, max_attempts: int) -> tuple[list[str], int]:
    """Running runs whose heartbeat outlived the lease timeout lost their worker: those with
    attempts left go back to the queue (their ids are returned, to be queued again), the others
    fail saying why."""
    stale, cutoff = leased_runs.stale_running(EvalRun, lease_timeout)
    out_of_attempts = list(stale.filter(attempts__gte=max_attempts).values_list("id", flat=True))
    for run_id in out_of_attempts:
        fail_run(
            run_id,
            f"the worker running it stopped on each of its {max_attempts} attempts; "
            "start the evaluation again",
        )
    stuck = leased_runs.queued_out_of_attempts(EvalRun, max_attempts)
    for run_id in stuck:
        fail_run(run_id, f"{leased_runs.no_attempt_left(max_attempts)}; start the evaluation again")
    ids = list(stale.values_list("id", flat=True))
    leased_runs.requeue(EvalRun, ids, cutoff)
    return ids, len(out_of_attempts) + len(stuck)


def lost_runs() -> list[str]:
    """Runs queued too long without a task taking them (their hand-off lost): to hand off again."""
    return leased_runs.lost_queued(EvalRun, leased_runs.QUEUED_QUIET)
