"""WAL checkpoints off the write path: each process runs one background thread per SQLite file that
copies the write-ahead log into the database whenever the log passes CHECKPOINT_BYTES.

SQLite's own auto-checkpoint runs inside the COMMIT of whichever connection crosses its threshold,
so every thousandth page written made one unlucky request or job wait for the copy and its fsync
(300 ms measured at 100k memories: the tail of remember and of the job's write). A PASSIVE
checkpoint from another connection never blocks readers or writers, and this one waits for a
quiet moment; the connections themselves keep a far-away auto-checkpoint (FALLBACK_PAGES) only so
the log stays bounded if no thread runs.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import sqlean

log = logging.getLogger(__name__)

CHECKPOINT_BYTES = 4 * 1024 * 1024  # SQLite's default auto-checkpoint (1000 pages of 4 KiB)
# A checkpoint ends with an fsync of the database file, which on ext4 also stalls the writes of
# commits in progress (5 ms added to a job's write was measured): so it waits for a moment with
# no commit, unless the log has grown this much.
BUSY_CHECKPOINT_BYTES = 64 * 1024 * 1024
QUIET_SECONDS = 0.05
FALLBACK_PAGES = 40_000  # inline auto-checkpoint, only reached if the thread cannot keep up
INTERVAL_SECONDS = 0.05

_started: dict[tuple[int, str], threading.Thread] = {}
_lock = threading.Lock()


def checkpoint_if_due(path: str, connection=None) -> bool:
    """One PASSIVE checkpoint of `path` when its WAL holds more than CHECKPOINT_BYTES and no
    commit wrote to it for QUIET_SECONDS (or it holds more than BUSY_CHECKPOINT_BYTES); True if
    one ran. Busy (another checkpoint running) is not an error: the next round tries again."""
    try:
        log = os.stat(f"{path}-wal")
    except OSError:
        return False
    if log.st_size <= CHECKPOINT_BYTES:
        return False
    quiet = time.time() - log.st_mtime >= QUIET_SECONDS
    if not quiet and log.st_size <= BUSY_CHECKPOINT_BYTES:
        return False
    own = connection is None
    conn = connection or _connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        return True
    except sqlean.OperationalError as exc:
        log.debug("checkpoint of %s skipped: %s", path, exc)
        return False
    finally:
        if own:
            conn.close()


def _connect(path: str):
    conn = sqlean.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 1000")
    return conn


def _run(path: str) -> None:
    conn = None
    while True:
        threading.Event().wait(INTERVAL_SECONDS)
        try:
            if not os.path.exists(path):
                continue  # a test's database removed under us: the thread idles
            conn = conn or _connect(path)
            checkpoint_if_due(path, conn)
        except Exception as exc:  # never let the thread die: the log would grow to the fallback
            log.warning("background checkpoint of %s failed: %s", path, exc)
            if conn is not None:
                conn.close()
            conn = None


def ensure_checkpointer(path: str) -> None:
    """Start this process's checkpoint thread for the database file `path` (once per process:
    a forked worker starts its own)."""
    key = (os.getpid(), os.path.abspath(path))
    if key in _started:
        return
    with _lock:
        if key in _started:
            return
        thread = threading.Thread(
            target=_run, args=(key[1],), name="sqlite-checkpoint", daemon=True
        )
        thread.start()
        _started[key] = thread
