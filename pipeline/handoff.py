"""Handing a queued run (a second opinion, an evaluation, an import) to the queue workers: its
task queued by dotted path, or, when the queue cannot take it, the run failed with the reason, so
no page waits on a run nobody will start."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django_q.tasks import async_task

log = logging.getLogger(__name__)


def hand_off(func: str, run_id: str, *, kind: str, fail: Callable[[str, str], None]) -> None:
    """Queue `func(run_id)` in the group `kind`; `fail(run_id, message)` when it cannot be."""
    try:
        async_task(func, run_id, task_name=f"{kind}-{run_id}", q_options={"group": kind})
    except Exception as exc:
        log.exception("could not queue %s run %s", kind, run_id)
        fail(run_id, f"the run could not be queued: {exc}")
