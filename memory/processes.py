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


def alive(pid: int) -> bool:
    """Whether a process of this pid exists (one of another user's counts)."""
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
    state["supervisorAlive"] = alive(int(state.get("pid") or 0)) if state.get("pid") else False
    return state
