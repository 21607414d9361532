"""A queued run's task (an evaluation's, an import's; a second opinion's hand-off too): handed to
the queue workers by dotted path (or, when the queue cannot take it, the run failed with the
reason, so no page waits on a run nobody will start), claimed under this worker's name, and run
for a time slice well within the queue's timeout."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django_q.tasks import async_task

from pipeline.config import get_config

log = logging.getLogger(__name__)


def hand_off(
    func: str, run_id: str, *, kind: str, fail: Callable[[str, str], None], again: bool = False
) -> None:
    """Queue `func(run_id)` in the group `kind`; `fail(run_id, message)` when it cannot be. A run
    the sweep hands off `again` is not failed: it may have a task in the queue after all, and the
    next sweep tries again."""
    try:
        async_task(func, run_id, task_name=f"{kind}-{run_id}", q_options={"group": kind})
    except Exception as exc:
        log.exception("could not queue %s run %s", kind, run_id)
        if not again:
            fail(run_id, f"the run could not be queued: {exc}")


def claim(claim_run: Callable, run_id: str) -> tuple | None:
    """(the run, this worker's name) when `claim_run` (a leased_runs claim) lets this task run it,
    under the jobs' lease timeout and attempts."""
    config = get_config()
    worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    run = claim_run(
        run_id,
        worker=worker,
        lease_timeout=timedelta(seconds=config.lease_timeout_seconds),
        max_attempts=config.max_attempts,
    )
    return None if run is None else (run, worker)


def slice_seconds() -> float:
    """How long one task runs before it hands the rest to a new one: well within the queue's
    timeout, after which django-q2 would kill it."""
    return float(settings.Q_CLUSTER.get("timeout", 1800)) / 2
