"""WAL checkpoints off the write path: each process runs one background thread per SQLite file that
copies the write-ahead log into the database whenever the log passes CHECKPOINT_BYTES.

SQLite's own auto-checkpoint runs inside the COMMIT of whichever connection crosses its threshold,
so every thousandth page written made one unlucky request or job wait for the copy and its fsync
(300 ms measured at 100k memories: the tail of remember and of the job's write). A PASSIVE
checkpoint from another connection never blocks readers or writers, and this one waits for a
quiet moment; the connections themselves keep a far-away auto-checkpoint (FALLBACK_PAGES) only so
the log stays bounded if no thread runs.

Two things keep the thread harmless. A process that forks (django-q2's sentinel starting a
worker, a pre-forking web server) waits until the thread is outside SQLite: a child forked while
the thread held one of SQLite's mutexes inherited it locked and hung at its first connection. And
a log already copied in full is not checkpointed again until a commit writes to it (the file
keeps its size when the log starts over, so the size alone said "due" every 50 ms, in every
process); connections keep `journal_size_limit` at BUSY_CHECKPOINT_BYTES, so only a file a bulk
load grew is cut back. The `-shm` index is never opened here: closing any descriptor of it would
drop SQLite's own locks on it.
"""

from __future__ import annotations

import contextlib
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
# Held by the thread whenever it is inside SQLite, and by a fork in progress (see below).
_in_sqlite = threading.Lock()
# path -> (size, mtime) of its log when a checkpoint last copied all of it: nothing to copy.
_copied: dict[str, tuple[int, int]] = {}


def _new_lock_in_child() -> None:
    global _in_sqlite
    _in_sqlite = threading.Lock()  # the parent's was held for the fork; the thread stays behind


# A child process gets a copy of every mutex as it was at the fork, but not the threads holding
# them: forking only while the thread is outside SQLite means no SQLite mutex is copied locked.
os.register_at_fork(
    before=lambda: _in_sqlite.acquire(),
    after_in_parent=lambda: _in_sqlite.release(),
    after_in_child=_new_lock_in_child,
)


def checkpoint_if_due(path: str, connection=None) -> bool:
    """One PASSIVE checkpoint of `path` when its WAL holds more than CHECKPOINT_BYTES and no
    commit wrote to it for QUIET_SECONDS (or it holds more than BUSY_CHECKPOINT_BYTES); True if
    one ran. Busy (another checkpoint running) is not an error: the next round tries again."""
    try:
        wal = os.stat(f"{path}-wal")
    except OSError:
        return False
    if wal.st_size <= CHECKPOINT_BYTES or _copied.get(path) == (wal.st_size, wal.st_mtime_ns):
        return False
    quiet = time.time() - wal.st_mtime >= QUIET_SECONDS
    if not quiet and wal.st_size <= BUSY_CHECKPOINT_BYTES:
        return False
    own = connection is None
    with _in_sqlite:
        conn = connection or _connect(path)
        try:
            busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlean.OperationalError as exc:
            log.debug("checkpoint of %s skipped: %s", path, exc)
            return False
        finally:
            if own:
                conn.close()
    if not busy and frames == copied:
        _copied[path] = (wal.st_size, wal.st_mtime_ns)  # until a commit changes the file
    return True


@contextlib.contextmanager
def quiet():
    """This process's checkpoint thread stays out of SQLite for the block (a purge's own
    checkpoint runs meanwhile: two checkpoints of one file never run at once)."""
    with _in_sqlite:
        yield


def _connect(path: str):
    conn = sqlean.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 1000")
    conn.execute("PRAGMA secure_delete = ON")  # as every connection (memory.backend.erasure)
    return conn


def _close(conn) -> None:
    with _in_sqlite:
        conn.close()


def _run(path: str) -> None:
    conn = None
    while True:
        threading.Event().wait(INTERVAL_SECONDS)
        try:
            if not os.path.exists(path):
                continue  # a test's database removed under us: the thread idles
            if conn is None:
                with _in_sqlite:
                    conn = _connect(path)
            checkpoint_if_due(path, conn)
        except Exception as exc:  # never let the thread die: the log would grow to the fallback
            log.warning("background checkpoint of %s failed: %s", path, exc)
            if conn is not None:
                _close(conn)
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
