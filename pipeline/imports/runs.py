"""Import runs: a file read item by item and written in batches (claim -> read -> record).

From the dashboard the request only stores the upload and queues `run_task`; the task claims the
run, reads and validates a batch with no transaction open, records it with the run's progress in
one short transaction (pipeline.writes.imports), and after its time slice hands the rest to a
new task, so a large file never runs inside a web request nor past the queue's timeout. A run
whose worker died is reclaimed by the sweep and goes on after its last recorded batch.
`manage.py import` runs the same loop in its own process on its file (`import_file`).

Raw-first and idempotent: memories are stored as they are (extraction jobs only with
`process`), and what is already here (same id, or same agent and text) is deduplicated, so
importing a file twice adds nothing the second time.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from itertools import chain, islice
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError

from memory.imported import DONE, Incoming, Outcome
from memory.models import ActorType
from memory.writes import Actor
from pipeline import handoff
from pipeline.config import get_config
from pipeline.imports import formats
from pipeline.imports.formats import FileRefused, Options, Refusal
from pipeline.imports.models import COMMAND, DASHBOARD, ImportRun
from pipeline.imports.report import Progress
from pipeline.memory_ops import embed_later_many
from pipeline.models import ReplayStatus
from pipeline.writes import imports as writes

log = logging.getLogger(__name__)

# A batch is one transaction: at most this many items, or this much text, whichever comes first
# (a file whose memories carry long histories makes fewer items per batch). Each batch holds
# SQLite's write lock while it inserts: a few hundred rows keep other writers' wait short.
BATCH_ITEMS = 250
BATCH_CHARS = 1_000_000
RELEASED, LOST = "released", "lost"


class UploadRefused(ValueError):
    """An upload that is not started (too large, empty); the message says why."""


def line_count(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def start_upload(
    data: bytes, *, file_name: str, requested_by: str, agent: str, process: bool, fmt: str = ""
) -> ImportRun:
    """Store an uploaded file as a queued run and queue its task; nothing is imported here."""
    if not data.strip():
        raise UploadRefused("The file is empty: there is nothing to import.")
    limit = settings.MEMORY_IMPORT_MAX_BYTES
    if len(data) > limit:
        raise UploadRefused(
            f"The file is {len(data) / 1e6:.1f} MB; uploads are limited to {limit / 1e6:.0f} MB "
            "(MEMORY_IMPORT_MAX_BYTES). Import a larger file with manage.py import."
        )
    run = writes.create_run(
        requested_by=requested_by,
        origin=DASHBOARD,
        file_name=file_name[:300],
        fmt=fmt,
        agent=agent,
        process=process,
        size=len(data),
        lines=line_count(data),
        upload=data,
    )
    hand_off(run.id)
    return run


def hand_off(run_id: str, *, again: bool = False) -> None:
    """Queue `run_task(run_id)`; a run that cannot be queued fails with the reason (handed off
    `again` by the sweep, it stays queued for the next sweep)."""
    handoff.hand_off(
        "pipeline.imports.runs.run_task", run_id, kind="import", fail=writes.fail_run, again=again
    )


def _claim(run_id: str) -> tuple[ImportRun, str] | None:
    return handoff.claim(writes.claim_run, run_id)


def run_task(run_id: str) -> str | None:
    """The queued task: claim the run, import its upload from where it stopped, finish. Returns
    the run's status (None: not claimed; "released": queued again to go on; "lost")."""
    claimed = _claim(run_id)
    if claimed is None:
        return None
    run, worker = claimed
    try:
        source = io.BytesIO(bytes(run.upload or b""))
        stopped = import_lines(run, worker, source, slice_for=handoff.slice_seconds())
    except FileRefused as exc:
        writes.fail_run(run.id, str(exc))
        return ReplayStatus.FAILED
    except Exception as exc:  # whatever it was, the page must stop waiting and say so
        log.exception("import %s failed", run_id)
        writes.fail_run(run.id, f"{type(exc).__name__}: {exc}")
        return ReplayStatus.FAILED
    if stopped == RELEASED:
        hand_off(run.id)
    if stopped:
        return stopped
    return ReplayStatus.DONE if writes.finish_run(run.id, worker) else LOST


def actor_of(run: ImportRun) -> Actor:
    return Actor(run.requested_by, ActorType.OPERATOR)


def import_lines(
    run: ImportRun,
    worker: str,
    lines: Iterable[bytes],
    *,
    slice_for: float | None = None,
    on_batch: Callable[[list[Outcome | Refusal], Progress], None] | None = None,
) -> str | None:
    """Read the file's items after those the run already handled, recording them in batches.
    None: every item is recorded; RELEASED: the time slice is used up and the run should be
    queued again; LOST: another worker holds the run now. FileRefused: unreadable file."""
    lines = iter(lines)
    fmt = run.format
    if not fmt:
        first = list(_until_text(lines))
        fmt = formats.detect(first[-1] if first else b"")
        writes.set_format(run.id, fmt)
        lines = chain(first, lines)
    options = Options(file_name=run.file_name, agent=run.agent or None, who=run.requested_by)
    items = islice(formats.items(lines, fmt, options), run.position, None)
    progress = Progress.of(run)
    metadata = {"run": run.id, "format": fmt, "file": run.file_name}
    started = time.monotonic()
    batches = _batches(items)
    batch = next(batches, None)
    while batch is not None:
        recorded = _record(run, worker, batch, progress, metadata)
        if recorded is None:
            return LOST
        progress, handled = recorded
        if not run.process:
            # The job computes a processed memory's vector; the others' are storage all the same
            # (found by meaning as well as by keyword), embedded by a worker after the commit.
            embed_later_many(
                [o.memory_id for o in handled if isinstance(o, Outcome) and o.status == DONE]
            )
        if on_batch is not None:
            on_batch(handled, progress)
        batch = next(batches, None)
        if batch is not None and slice_for is not None and time.monotonic() - started >= slice_for:
            # The rest goes on in a new task (which reads the file again up to here).
            return RELEASED if writes.release_run(run.id, worker) else LOST
    return None


def _until_text(lines: Iterator[bytes]) -> Iterator[bytes]:
    """The lines up to and including the first that is not blank."""
    for line in lines:
        yield line
        if line.strip():
            return


def _record(run, worker, batch, progress, metadata):
    """One batch's transaction; a UNIQUE collision with a concurrent import of the same memory
    (a row that committed after this batch's check) is retried once, and then dedupes."""
    for attempt in (1, 2):
        try:
            return writes.record_batch(
                run.id,
                worker,
                batch,
                progress,
                actor=actor_of(run),
                process=run.process,
                metadata=metadata,
            )
        except IntegrityError:
            if attempt == 2:
                raise
    return None


def _batches(items: Iterable[Incoming | Refusal]) -> Iterator[list[Incoming | Refusal]]:
    batch: list[Incoming | Refusal] = []
    chars = 0
    for item in items:
        batch.append(item)
        if isinstance(item, Incoming):
            chars += len(item.text.storage) + sum(
                len(h.old_content or "") + len(h.new_content or "") for h in item.history
            )
        if len(batch) >= BATCH_ITEMS or chars >= BATCH_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


# --- manage.py import ------------------------------------------------------------------------------


def import_file(
    path: Path,
    *,
    agent: str = "",
    process: bool = False,
    fmt: str = "",
    requested_by: str = "manage.py import",
    on_batch: Callable[[list[Outcome | Refusal], Progress], None] | None = None,
) -> ImportRun:
    """Import a file in this process, recorded as a run like an upload's (without the upload).
    FileRefused when the file cannot be read as its format (the run is failed saying so)."""
    size, lines = 0, 0
    with open(path, "rb") as source:
        for line in source:
            size += len(line)
            lines += 1
    run = writes.create_run(
        requested_by=requested_by,
        origin=COMMAND,
        file_name=path.name,
        fmt=fmt,
        agent=agent,
        process=process,
        size=size,
        lines=lines,
    )
    run, worker = _claim(run.id)
    try:
        with open(path, "rb") as source:
            stopped = import_lines(run, worker, source, on_batch=on_batch)
    except FileRefused as exc:
        writes.fail_run(run.id, str(exc))
        raise
    except BaseException as exc:
        writes.fail_run(run.id, f"{type(exc).__name__}: {exc}")
        raise
    if stopped is None:
        writes.finish_run(run.id, worker)
    return ImportRun.objects.get(id=run.id)


def reclaim_stale_runs() -> dict[str, int]:
    """The sweep's part for imports: a running run whose heartbeat outlived the jobs' lease
    timeout lost its worker. An upload's run is queued again to go on after its last recorded
    batch, or, out of attempts, failed saying so; a command's run is failed."""
    config = get_config()
    retried, failed = writes.reclaim_stale_runs(
        timedelta(seconds=config.lease_timeout_seconds), max_attempts=config.max_attempts
    )
    for run_id in retried:
        hand_off(run_id)
    lost = writes.lost_runs()  # queued five minutes and no task took them
    for run_id in lost:
        hand_off(run_id, again=True)
    return {"retried": len(retried) + len(lost), "failed": failed}
