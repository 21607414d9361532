"""An import run's writes: its row (created, claimed, released, finished, failed, reclaimed) and
each batch of memories recorded with the run's progress in one short transaction, so a run
taken over after its worker died goes on exactly after the last batch that committed.

Nothing here reads the file or calls a model: the run's task reads and validates a batch with no
transaction open (pipeline.imports.runs), then calls `record_batch`.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from memory import imported, imported_relations
from memory.imported import Incoming, Outcome
from memory.imported_relations import IncomingRelation
from memory.writes import Actor
from pipeline.imports.formats import Refusal
from pipeline.imports.models import COMMAND, ImportRun
from pipeline.imports.report import Progress
from pipeline.models import ReplayStatus
from pipeline.writes import leased_runs


def create_run(
    *,
    requested_by: str,
    origin: str,
    file_name: str,
    fmt: str,
    agent: str,
    process: bool,
    size: int,
    lines: int,
    upload: bytes | None = None,
) -> ImportRun:
    return ImportRun.objects.create(
        requested_by=requested_by,
        origin=origin,
        file_name=file_name,
        format=fmt,
        agent=agent,
        process=process,
        upload=upload,
        size=size,
        lines=lines,
        created_at=timezone.now(),
    )


def claim_run(
    run_id: str, *, worker: str, lease_timeout: timedelta, max_attempts: int
) -> ImportRun | None:
    """Hold the run for `worker` (leased_runs.claim)."""
    return leased_runs.claim(
        ImportRun, run_id, worker=worker, lease_timeout=lease_timeout, max_attempts=max_attempts
    )


def set_format(run_id: str, fmt: str) -> None:
    """The format the run detected in its file."""
    ImportRun.objects.filter(id=run_id).update(format=fmt)


def record_batch(
    run_id: str,
    worker: str,
    batch: list[Incoming | IncomingRelation | Refusal],
    progress: Progress,
    *,
    actor: Actor,
    process: bool,
    metadata: dict,
) -> tuple[Progress, list[Outcome | Refusal]] | None:
    """Write the batch's memories (memory.imported), its relations (memory.imported_relations)
    and the run's progress and heartbeat in one
    transaction; returns the progress with the batch in it and each item's outcome, in file
    order. None: the run is no longer this worker's (finished, or taken over after its
    heartbeat went stale): nothing is written."""
    now = timezone.now()
    # The rows are built before BEGIN: the transaction only dedupes and inserts them.
    prepared = imported.prepare(
        [item for item in batch if isinstance(item, Incoming)],
        actor=actor,
        at=now,
        process=process,
        metadata=metadata,
    )
    with transaction.atomic():
        held = ImportRun.objects.filter(
            id=run_id, status=ReplayStatus.RUNNING, worker=worker
        ).update(heartbeat_at=timezone.now())
        if not held:
            return None
        written = iter(imported.write_in_transaction(prepared, at=now))
        # After the memories: the entities the file's relations join are theirs.
        related = iter(
            imported_relations.write_in_transaction(
                [item for item in batch if isinstance(item, IncomingRelation)],
                at=now,
                run_id=run_id,
            )
        )
        # In file order: each item's outcome where it was, each refusal where it was.
        handled = [
            item
            if isinstance(item, Refusal)
            else _refused_if_unlinked(next(related))
            if isinstance(item, IncomingRelation)
            else _refused_if_purged(next(written))
            for item in batch
        ]
        progress = progress.after(handled)
        ImportRun.objects.filter(id=run_id).update(**progress.columns())
    return progress, handled


def _refused_if_purged(outcome: Outcome) -> Outcome | Refusal:
    """A memory line sent to another agent whose original was purged here, or no longer holds
    a text the line holds, is reported as refused, by its id (the report never repeats a
    text)."""
    if outcome.status == imported.PURGED_HERE:
        return Refusal(
            outcome.line,
            "id",
            f"memory {outcome.memory_id} was purged in this store: a copy of it for another "
            "agent would bring back what the purge erased",
        )
    if outcome.status == imported.TEXT_GONE:
        return Refusal(
            outcome.line,
            "id",
            f"memory {outcome.memory_id} here no longer holds a text this line holds (redacted "
            "since the export): a copy of it for another agent would bring that text back; "
            "export it again",
        )
    return outcome


def _refused_if_unlinked(outcome: Outcome) -> Outcome | Refusal:
    """A relation line not written because an entity it names is one no memory mentions, or
    no one memory mentions both, is reported as refused, naming that side (or the relation)."""
    if not outcome.unlinked:
        return outcome
    if outcome.unlinked == "relation":
        return Refusal(
            outcome.line,
            "relation",
            "no memory this import wrote (of those its statedBy names) mentions both of its "
            "entities: a relation comes with the memories that state it, in the same file, and "
            "a memory stored before never takes one it did not state (a purge may have erased it)",
        )
    return Refusal(
        outcome.line,
        outcome.unlinked,
        "no memory of the agent here mentions this entity: a relation is imported with the "
        "memories that name its two entities, which state it from then on (import them, or a "
        "file that holds them, first)",
    )


def release_run(run_id: str, worker: str) -> bool:
    """Back to the queue after the task's time slice (leased_runs.release)."""
    return leased_runs.release(ImportRun, run_id, worker)


def finish_run(run_id: str, worker: str) -> bool:
    """Done: the upload goes (the store holds what it had to give)."""
    return bool(
        ImportRun.objects.filter(id=run_id, status=ReplayStatus.RUNNING, worker=worker).update(
            status=ReplayStatus.DONE,
            upload=None,
            finished_at=timezone.now(),
            heartbeat_at=None,
        )
    )


def fail_run(run_id: str, error: str) -> None:
    """Failed, with the error people read; what its batches imported stays (each was whole)."""
    ImportRun.objects.filter(id=run_id).exclude(status=ReplayStatus.DONE).update(
        status=ReplayStatus.FAILED,
        error=error,
        upload=None,
        finished_at=timezone.now(),
        heartbeat_at=None,
    )


def reclaim_stale_runs(lease_timeout: timedelta, *, max_attempts: int) -> tuple[list[str], int]:
    """Running runs whose heartbeat outlived the lease timeout lost their worker. A queued
    task's run with attempts left goes back to the queue (its id is returned, to be queued
    again); the others fail saying why (a command's run has no upload to go on with)."""
    stale, cutoff = leased_runs.stale_running(ImportRun, lease_timeout)
    failed = 0
    for run_id, origin in stale.values_list("id", "origin"):
        if origin == COMMAND:
            fail_run(
                run_id,
                "the import command stopped before the end; run it again: the memories it "
                "imported are deduplicated",
            )
            failed += 1
    for run_id in stale.filter(attempts__gte=max_attempts).values_list("id", flat=True):
        fail_run(
            run_id,
            f"the worker running it stopped on each of its {max_attempts} attempts; "
            "upload the file again: the memories it imported are deduplicated",
        )
        failed += 1
    for run_id in leased_runs.queued_out_of_attempts(ImportRun, max_attempts):
        fail_run(
            run_id,
            f"{leased_runs.no_attempt_left(max_attempts)}; upload the file again: the memories "
            "it imported are deduplicated",
        )
        failed += 1
    ids = list(stale.values_list("id", flat=True))
    leased_runs.requeue(ImportRun, ids, cutoff)
    return ids, failed


def lost_runs() -> list[str]:
    """Uploads queued too long without a task taking them (their hand-off lost): to hand off
    again. A command's run is never queued."""
    return leased_runs.lost_queued(ImportRun, leased_runs.QUEUED_QUIET, exclude=Q(origin=COMMAND))
