"""Hand-off of job ids to django-q2. The job row stays the source of truth; a lost hand-off is
picked up by the periodic sweep."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.db import DEFAULT_DB_ALIAS
from django_q.conf import Conf
from django_q.tasks import async_task

log = logging.getLogger(__name__)

# Set inside `held()`: job ids collected instead of queued.
_held: ContextVar[list[str] | None] = ContextVar("held_hand_offs", default=None)


def hand_off(job_id: str) -> None:
    """Queue `pipeline.tasks.run_job(job_id)`; failures are logged, the sweep retries later."""
    if held_back(job_id):
        return
    try:
        enqueue(job_id)
    except Exception:
        log.exception("could not hand job %s to the queue; the sweep will pick it up", job_id)


def held_back(job_id: str) -> bool:
    """True when a `held()` block collects hand-offs: the id is kept there instead."""
    held = _held.get()
    if held is not None:
        held.append(job_id)
    return held is not None


def enqueue(job_id: str) -> None:
    """Queue `pipeline.tasks.run_job(job_id)` now; a failure raises."""
    async_task(
        "pipeline.tasks.run_job", job_id, task_name=f"job-{job_id}", q_options={"group": "jobs"}
    )


def in_store() -> bool:
    """Whether the queue's tasks are rows of the store's database (django-q2's ORM broker)."""
    return Conf.ORM == DEFAULT_DB_ALIAS and not Conf.SYNC


@contextmanager
def held() -> Iterator[list[str]]:
    """Collect the hand-offs made inside instead of queuing them, for a caller that runs those
    jobs in its own process (seed_demo): it hands off what it left unfinished. Otherwise the
    workers would each start by running ~100 tasks whose job is already done."""
    job_ids: list[str] = []
    token = _held.set(job_ids)
    try:
        yield job_ids
    finally:
        _held.reset(token)
