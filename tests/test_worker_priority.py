"""Queue workers run behind the web (MEMORY_WORKER_NICE): django-q2's post_spawn signal lowers
each new worker process's CPU priority; 0 leaves it level."""

import multiprocessing
import os

import pytest
from django_q.signals import post_spawn


def _spawned_worker_niceness(queue) -> None:
    post_spawn.send(sender="django_q", proc_name="Process-1")  # what django-q2's worker sends
    queue.put(os.nice(0))


def niceness_of_a_new_worker() -> int:
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_spawned_worker_niceness, args=(queue,))
    child.start()
    try:
        return queue.get(timeout=20)
    finally:
        child.join(20)


@pytest.mark.parametrize("step", [7, 0])
def test_a_new_queue_worker_lowers_its_priority_by_the_setting(settings, step):
    settings.MEMORY_WORKER_NICE = step
    ours = os.nice(0)
    assert niceness_of_a_new_worker() == min(19, ours + step)
    assert os.nice(0) == ours  # the cluster that spawned it keeps its own priority
