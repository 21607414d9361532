"""The serve command's record of the processes it supervises: one JSON file in the data folder,
replaced whole on every change (so a reader never sees half of it), read by the health report."""

from __future__ import annotations

import json
import os
from pathlib import Path

from django.conf import settings

FILE_NAME = "processes.json"


def record_path() -> Path:
    return Path(settings.DATA_DIR) / FILE_NAME


def write(state: dict) -> None:
    """Replace the record with `state` (written beside, then renamed over)."""
    path = record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(state, indent=1, sort_keys=True))
    os.replace(partial, path)


def clear() -> None:
    record_path().unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read() -> dict | None:
    """The record, or None when nothing is supervised (the product runs under another manager).
    A record left by a supervisor that died says so rather than passing for a live one."""
    try:
        state = json.loads(record_path().read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict):
        return None
    state["supervisorAlive"] = _alive(int(state.get("pid") or 0)) if state.get("pid") else False
    return state


# --- is the queue moving? -------------------------------------------------------------------------

BEAT_FILE = "queue-beat"  # its modification time: when a worker last started or ended a task


def beat_path() -> Path:
    return Path(settings.DATA_DIR) / BEAT_FILE


BUSY_FOLDER = "queue-busy"  # a file per worker running a task, named by its pid


def _busy_path(pid: int) -> Path:
    return Path(settings.DATA_DIR) / BUSY_FOLDER / str(pid)


def task_started(sender=None, **kwargs) -> None:
    """django-q2's pre_execute, in a worker about to run a task: the queue moves, and this
    worker is busy until task_ended."""
    try:
        beat_path().touch()
        busy = _busy_path(os.getpid())
        busy.parent.mkdir(exist_ok=True)
        busy.touch()
    except OSError:  # a full disk or a read-only folder must not stop the task
        pass


def task_ended(sender=None, **kwargs) -> None:
    """django-q2's post_execute_in_worker: the worker is free again (and the queue moved)."""
    try:
        _busy_path(os.getpid()).unlink(missing_ok=True)
        beat_path().touch()
    except OSError:
        pass


def busy_workers() -> int:
    """Workers running a task now: their files, less those of processes that are gone (killed
    mid-task; their files are removed here)."""
    try:
        files = list((Path(settings.DATA_DIR) / BUSY_FOLDER).iterdir())
    except OSError:
        return 0
    running = 0
    for busy in files:
        if busy.name.isdigit() and _alive(int(busy.name)):
            running += 1
        else:
            busy.unlink(missing_ok=True)
    return running


def last_task_started() -> float | None:
    """When a worker last started a task (seconds since the epoch), None when never recorded."""
    try:
        return beat_path().stat().st_mtime
    except OSError:
        return None


def stall_seconds() -> float:
    """How long the queue may start and finish no task, with no worker running one, before it
    counts as stalled. The minute's tick is always due, so an idle queue that moves starts a
    task at least that often; the margin covers a slow machine and a job attempt's model calls
    at their timeouts (two chat calls and an embedding)."""
    attempt = 2 * settings.MEMORY_LLM_TIMEOUT_SECONDS + settings.MEMORY_EMBED_TIMEOUT_SECONDS
    return max(300.0, attempt + 120.0)


def queue_quiet_for(running_since: float | None, now: float) -> float | None:
    """Seconds the queue has neither started nor finished a task, counted from the last one or
    from when its cluster started (`running_since`, epoch seconds), whichever is later; 0 while a
    worker runs a task (a long import's slice is work, not a stall); None when nothing is known.
    The worker killed while it held django-q2's task pipe left the others waiting for good, with
    every process alive (a QA pass): only this says so."""
    if busy_workers():
        return 0.0
    known = [moment for moment in (last_task_started(), running_since) if moment is not None]
    return now - max(known) if known else None
