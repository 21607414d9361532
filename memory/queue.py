"""Hand-off of job ids to django-q2. The job row stays the source of truth; a lost hand-off is
picked up by the periodic sweep."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def hand_off(job_id: str) -> None:
    """Queue `pipeline.tasks.run_job(job_id)`; failures are logged, the sweep retries later."""
    from django_q.tasks import async_task

    try:
        async_task(
            "pipeline.tasks.run_job", job_id, task_name=f"job-{job_id}", q_options={"group": "jobs"}
        )
    except Exception:
        log.exception("could not hand job %s to the queue; the sweep will pick it up", job_id)
