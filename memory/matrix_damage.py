"""The last damage of the shared vector matrix that any process of a store met, and the rebuilds
they counted, in a file beside the matrices (`last-damage.json`). Health is answered by whichever
web worker takes the request, and the process that met the damage may be another (a QA pass
read "no damage" from 1 worker of 2, and from all of them when it was met while a process
opened the file). Writes are whole-file replacements (a reader sees the old record or the
new), made under an advisory lock on a file beside it, so two processes that meet damage at once
count two rebuilds."""

from __future__ import annotations

import fcntl
import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path

log = logging.getLogger(__name__)

FILE = "last-damage.json"
LOCK = ".last-damage.lock"
KEYS = ("lastDamage", "damagedAt", "rebuilds")


def record(folder: Path, reason: str, at: str) -> None:
    """The damage met now (`at`: its ISO moment), one more rebuild counted."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(folder / LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            shared = read(folder) or {"rebuilds": 0}
            write = {"lastDamage": reason, "damagedAt": at, "rebuilds": shared["rebuilds"] + 1}
            scratch = folder / f".{FILE}.{os.getpid()}"
            scratch.write_text(json.dumps(write))
            os.replace(scratch, folder / FILE)
    except OSError as exc:  # a full disk: this process's own record still says it
        log.warning("the vector matrix damage could not be recorded for other processes: %s", exc)


def read(folder: Path) -> dict | None:
    """The record in `folder`, or None (none yet, or unreadable)."""
    try:
        found = json.loads((folder / FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or not isinstance(found.get("rebuilds"), int):
        return None
    return {key: found.get(key) for key in KEYS}


def newest(own: dict, folder: Path) -> dict:
    """This process's record (`own`) or the shared one in `folder`, whichever is newer."""
    shared = read(folder)
    if shared is None or _moment(own["damagedAt"]) > _moment(shared["damagedAt"]):
        return own
    return shared


def _moment(written: str | None) -> datetime:
    """A damage's moment for comparing (as strings, "...:04Z" sorted after "...:04.5Z")."""
    try:
        moment = datetime.fromisoformat(written)
    except (TypeError, ValueError):  # none, or a record file edited by hand
        return datetime.min.replace(tzinfo=UTC)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
