"""Thread pools kept per process (made again after a fork), by name: starting threads for every
job or search cost more than the work they did; and threads with a database connection of their
own, for store work side by side with the caller's."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

log = logging.getLogger(__name__)

_pools: dict[tuple[int, str, int], ThreadPoolExecutor] = {}
_lock = threading.Lock()


def process_pool(name: str, workers: int) -> ThreadPoolExecutor:
    """This process's pool `name` of `workers` threads."""
    key = (os.getpid(), name, workers)
    with _lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        return pool


class ConnectedThread:
    """One thread of this process (made again after a fork) with a database connection of its
    own, for store work a caller starts now and collects later (`submit` returns a Future), on
    the server side by side with what the caller's connection does. The connection is given back
    after IDLE_SECONDS without work, and opened again by the next task (a connection the server
    dropped too). Never give it work that must see the caller's uncommitted writes."""

    IDLE_SECONDS = 1.0

    def __init__(self, name: str) -> None:
        self.name = name
        self.ready = threading.Condition()
        self.tasks: deque = deque()
        self.pid = 0
        self.busy = self.connected = False
        _connected.append(self)

    def submit(self, work: Callable, *args, **kwargs) -> Future:
        """Queue `work` for this thread; a Future of its result."""
        with self.ready:
            return self._queue(work, args, kwargs)

    def submit_if_idle(self, work: Callable, *args, **kwargs) -> Future | None:
        """`submit` when nothing is queued or running now, else None (nothing queued): the check
        and the queueing under one lock, so two callers never both take the thread as idle."""
        with self.ready:
            if self.pid == os.getpid() and (self.tasks or self.busy):
                return None
            return self._queue(work, args, kwargs)

    def _queue(self, work: Callable, args: tuple, kwargs: dict) -> Future:
        """Under self.ready: `work` queued (the thread started first if this process has none)."""
        if self.pid != os.getpid():  # first use, or a forked child: a thread of its own
            self.tasks, self.busy, self.connected = deque(), False, False
            # Marked started only once it is: a start() that raises (the thread limit) must
            # leave the next submit to try again, not queue behind a thread never made.
            threading.Thread(target=self._run, name=self.name, daemon=True).start()
            self.pid = os.getpid()
        future: Future = Future()
        self.tasks.append((future, work, args, kwargs))
        self.ready.notify_all()
        return future

    def idle(self) -> bool:
        """No task queued or running now (a forked child's copy is idle: its thread is not made
        yet). A caller that finds it idle may still queue behind a task submitted meanwhile
        (submit_if_idle claims it)."""
        with self.ready:
            return self.pid != os.getpid() or not (self.tasks or self.busy)

    def wait(self, timeout: float = 30.0, *, disconnected: bool = False) -> bool:
        """Until no task is queued or running (and with `disconnected`, until the idle thread gave
        its connection back); False when `timeout` passed first."""
        with self.ready:
            return self.ready.wait_for(
                lambda: (
                    not self.tasks
                    and not self.busy
                    and not (disconnected and self.connected and self.pid == os.getpid())
                ),
                timeout,
            )

    def _run(self) -> None:
        try:
            self._serve()
        except BaseException as exc:
            log.exception("%s stopped; the next task starts it again", self.name)
            # Callers wait on their Futures without a timeout: a thread that dies must fail what
            # is queued and let the next submit start a thread again, never look idle forever.
            with self.ready:
                if self.pid == os.getpid():
                    self.pid, self.busy, self.connected = 0, False, False
                queued = [task[0] for task in self.tasks]
                self.tasks.clear()
                self.ready.notify_all()
            for future in queued:  # outside the lock: a Future's callbacks run in set_exception
                if future.set_running_or_notify_cancel():
                    future.set_exception(exc)

    def _serve(self) -> None:
        from django.db import close_old_connections, connection

        while True:
            with self.ready:
                idle = self.IDLE_SECONDS if self.connected else None
                task = (
                    self.tasks.popleft() if self.ready.wait_for(lambda: self.tasks, idle) else None
                )
                if task is not None:
                    self.busy = self.connected = True
            if task is None:
                # Closed outside the lock: a close waits on the network, and idle() (asked by
                # every search) must not wait behind it.
                close_quietly(connection)
                with self.ready:
                    self.connected = False
                    self.ready.notify_all()
                continue
            future, work, args, kwargs = task
            if future.set_running_or_notify_cancel():
                try:
                    close_old_connections()  # one the server dropped, or that failed, is renewed
                    future.set_result(work(*args, **kwargs))
                except BaseException as exc:
                    future.set_exception(exc)
            with self.ready:
                self.busy = False
                self.ready.notify_all()


def close_quietly(connection) -> None:
    """Give the connection back; one the server already dropped may raise on close, and Django
    forgets it either way, so the next task opens a fresh one."""
    from django.db import DatabaseError

    with contextlib.suppress(DatabaseError):
        connection.close()


_connected: list[ConnectedThread] = []


def _forget_threads_after_fork() -> None:
    """In a forked child, each ConnectedThread (and the pools' table) starts over with a lock of
    its own: the parent's lock may have been held by one of its threads at the fork, and that
    thread is not here to let it go."""
    global _lock
    _lock = threading.Lock()
    for thread in _connected:
        thread.ready = threading.Condition()
        thread.tasks, thread.pid, thread.busy, thread.connected = deque(), 0, False, False


os.register_at_fork(after_in_child=_forget_threads_after_fork)

# Two threads with connections of their own for a search's legs on PostgreSQL, where one server
# backend runs one statement on one core: a job's keyword leg goes to both (half its texts each)
# while the caller searches the vectors, and the vector search sends half its queries to one of
# them when it is idle (its keyword half done).
BESIDE = (ConnectedThread("beside-1"), ConnectedThread("beside-2"))


def submit_beside(work: Callable, *args, **kwargs) -> Future | None:
    """`work` given to one of BESIDE with nothing to do now (claimed under its lock: a caller
    that finds none idle runs the work itself rather than wait behind another's); None when
    none was."""
    for thread in BESIDE:
        try:
            future = thread.submit_if_idle(work, *args, **kwargs)
        except RuntimeError:  # its thread could not be started (the thread limit): not idle
            continue
        if future is not None:
            return future
    return None


def release_connections(timeout: float = 10.0) -> bool:
    """Wait until every ConnectedThread of this process is idle and gave its connection back
    (before a test database is dropped, say)."""
    return all(thread.wait(timeout, disconnected=True) for thread in _connected)


# How long a thread may hold the interpreter while another one waits for it (Python's default is
# 5 ms). A job is one thread's Python and SQLite with short turns of others in between: the
# embedding call's thread, the event loop of the decision calls, the vector scan's parts. Each
# such turn could wait the whole interval behind the job's thread. At 1 ms, 10-fact jobs at 100k
# memories took 3-4 % less (one process, alternating, 100 jobs each, p50: 109.5 against 105.2
# ms, 89.9 against 87.2 ms); a job's latency with a 200 ms model did not change (671 against 670
# ms). A thread that runs alone is never switched: the interval only counts while another asks.
SWITCH_INTERVAL_SECONDS = 0.001


def shorter_switch_interval() -> None:
    """Lower this process's switch interval to SWITCH_INTERVAL_SECONDS (never raise one set
    lower on purpose)."""
    if sys.getswitchinterval() > SWITCH_INTERVAL_SECONDS:
        sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)


# numpy's BLAS (OpenBLAS in numpy's wheels) spreads a product over its own threads, which spin
# while they wait: on a shared 2-core machine a 10 x 768 x 200 product of a search took 3 ms
# instead of 0.3. Searches here are many small products; this process's own threads
# (process_pool) split the work that is worth splitting.
_BLAS_SETTERS = (
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)


def blas_threads(count: int) -> bool:
    """Let numpy's BLAS use `count` threads in this process (OpenBLAS, found among the loaded
    libraries); False when there is none to tell."""
    import ctypes

    import numpy  # noqa: F401 (loads its BLAS)

    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower()}
    except OSError:
        return False
    for path in sorted(paths):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _BLAS_SETTERS:
            setter = getattr(library, name, None)
            if setter is not None:
                setter(int(count))
                return True
    return False
