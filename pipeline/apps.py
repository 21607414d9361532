"""The pipeline app: modes, model calls, extraction, decisions, review and jobs. Queue workers run
at a lower CPU priority (MEMORY_WORKER_NICE) than the web processes they share a machine with."""

import logging
import os

from django.apps import AppConfig
from django.conf import settings

from memory import queue_beat

log = logging.getLogger(__name__)


def lower_worker_priority(sender, proc_name: str = "", **kwargs) -> None:
    """In each new django-q2 worker process: step back behind the web processes, so a remember
    call answers promptly while the workers run jobs flat out (they wait on model servers in
    real life; with a fast model they would otherwise take the machine's cores from requests)."""
    step = settings.MEMORY_WORKER_NICE
    if step > 0:
        try:
            os.nice(step)
        except OSError as exc:  # not allowed here: run at the normal priority
            log.warning("worker %s could not lower its priority: %s", proc_name, exc)


class PipelineConfig(AppConfig):
    name = "pipeline"
    verbose_name = "Pipeline"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # django_q.signals imports django_q's models: only once the apps are loaded.
        from django_q.signals import post_execute_in_worker, post_spawn, pre_execute

        post_spawn.connect(lower_worker_priority, dispatch_uid="pipeline-worker-nice")
        # Each task's start and end is recorded: serve restarts a queue that stops running any,
        # and the health report says so (memory.queue_beat).
        pre_execute.connect(queue_beat.task_started, dispatch_uid="pipeline-task-started")
        post_execute_in_worker.connect(queue_beat.task_ended, dispatch_uid="pipeline-task-ended")
