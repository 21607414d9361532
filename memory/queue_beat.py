"""Is the task queue moving? Workers record each task's start and end (django-q2's signals:
`queue-beat` in the data folder, and `queue-busy/<pid>` while a worker runs one), and `stalled`
says when the queue has run nothing for too long while tasks wait in its broker. A worker killed
while it held django-q2's task pipe left the others waiting on it for good, every process alive
(a QA pass): only this says so. serve restarts such a cluster; health reports it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from django.conf import settings

from memory import processes

BEAT_FILE = "queue-beat"  # its modification time: when a worker last started or ended a task
BUSY_FOLDER = "queue-busy"  # a file per worker running a task, named by its pid


def beat_path() -> Path:
    return Path(settings.DATA_DIR) / BEAT_FILE


def busy_path(pid: int) -> Path:
    return Path(settings.DATA_DIR) / BUSY_FOLDER / str(pid)


def task_started(sender=None, **kwargs) -> None:
    """django-q2's pre_execute, in a worker about to run a task: the queue moves, and this
    worker is busy until task_ended."""
    try:
        beat_path().touch()
        busy = busy_path(os.getpid())
        busy.parent.mkdir(exist_ok=True)
        busy.touch()
    except OSError:  # a full disk or a read-only folder must not stop the task
        pass


def task_ended(sender=None, **kwargs) -> None:
    """django-q2's post_execute_in_worker: the worker is free again (and the queue moved)."""
    try:
        busy_path(os.getpid()).unlink(missing_ok=True)
        beat_path().touch()
    except OSError:
        pass


def forget_busy() -> None:
    """Remove every worker's busy file: called before a cluster starts, when none of its workers
    can be running a task. A file a killed worker left would otherwise count while its pid,
    reused after a restart, names some other live process, hiding a stall (a live check)."""
    try:
        for busy in (Path(settings.DATA_DIR) / BUSY_FOLDER).iterdir():
            busy.unlink(missing_ok=True)
    except OSError:
        pass


def busy_workers(now: float | None = None) -> int:
    """Workers running a task now: their files, less those of processes that are gone (killed
    mid-task) and those older than the queue's task timeout (django-q2 ends such a task; the pid
    may belong to another process by now). Stale files are removed when that is allowed."""
    now = time.time() if now is None else now
    oldest = now - settings.Q_CLUSTER["timeout"] - 60
    try:
        files = list((Path(settings.DATA_DIR) / BUSY_FOLDER).iterdir())
    except OSError:
        return 0
    running = 0
    for busy in files:
        try:
            if (
                busy.name.isdigit()
                and processes.alive(int(busy.name))
                and busy.stat().st_mtime > oldest
            ):
                running += 1
            else:
                busy.unlink(missing_ok=True)
        except OSError:  # gone meanwhile, or not ours to remove: it counts for nothing
            continue
    return running


def last_task_at() -> float | None:
    """When a worker last started or ended a task (seconds since the epoch), None if never."""
    try:
        return beat_path().stat().st_mtime
    except OSError:
        return None


def stall_seconds() -> float:
    """How long the queue may start and end no task, with no worker running one, before it
    counts as stalled. The minute's tick is always due, so an idle queue that moves starts a
    task at least that often; the margin covers a slow machine and a job attempt's model calls
    at their timeouts (two chat calls and an embedding)."""
    attempt = 2 * settings.MEMORY_LLM_TIMEOUT_SECONDS + settings.MEMORY_EMBED_TIMEOUT_SECONDS
    return max(300.0, attempt + 120.0)


def tasks_waiting() -> int | None:
    """Tasks in the broker that no worker has taken (django-q2's queue_size), None when the
    broker does not answer. A stuck cluster's fetcher stops taking them once its own queue is
    full (workers squared), so they wait there; a queue node idle beside busier ones leaves none
    (another node takes each tick)."""
    try:
        from django_q.brokers import get_broker  # noqa: PLC0415 (imports django_q's models)

        return get_broker().queue_size()
    except Exception:  # the broker's own failure, whatever its kind: unknown, not stalled
        return None


def quiet_for(running_since: float | None, now: float) -> float | None:
    """Seconds the queue has neither started nor ended a task, from the last one or from when its
    cluster started (`running_since`, epoch seconds), whichever is later; 0 while a worker runs
    a task (a long import's slice is work, not a stall); None when nothing is known."""
    if busy_workers(now):
        return 0.0
    known = [moment for moment in (last_task_at(), running_since) if moment is not None]
    return now - max(known) if known else None


def stalled(running_since: float | None, now: float) -> float | None:
    """The seconds the queue has been quiet when it is stalled (quiet for longer than
    stall_seconds() while tasks wait in its broker), else None."""
    quiet = quiet_for(running_since, now)
    if quiet is None or quiet <= stall_seconds():
        return None
    return quiet if (tasks_waiting() or 0) > 0 else None
