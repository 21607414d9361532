"""Python's garbage collector kept out of the writes others wait for (see CollectorPause)."""

from __future__ import annotations

import gc
import os
import threading
from contextlib import contextmanager


class CollectorPause:
    """Python's cyclic garbage collector stays off while this process holds SQLite's writer's
    turn or runs a job's write (`paused()`, on both engines).

    A collection that starts inside a write transaction runs with the write lock held, and one
    of an old generation walks the whole heap (tens of milliseconds in a worker that holds a
    Django app and a matrix): every other writer on the machine would wait for it. Objects made
    in the transaction are collected right after it, when the collector is back on."""

    def __init__(self):
        self.lock = threading.Lock()
        self.holders = 0
        self.was_enabled = False

    def enter(self) -> None:
        with self.lock:
            if self.holders == 0:
                self.was_enabled = gc.isenabled()
                gc.disable()
            self.holders += 1

    def leave(self) -> None:
        with self.lock:
            if self.holders == 0:
                return  # a forked child leaving its parent's pause (see forget_in_child)
            self.holders -= 1
            if self.holders == 0 and self.was_enabled:
                gc.enable()

    @contextmanager
    def paused(self):
        """The collector off for the block (and back as it was after it)."""
        self.enter()
        try:
            yield
        finally:
            self.leave()

    def forget_in_child(self) -> None:
        """A forked child holds no turn or write of its parent's: it starts with the collector as
        the parent had it before them."""
        self.lock = threading.Lock()
        if self.holders and self.was_enabled:
            gc.enable()
        self.holders = 0


COLLECTOR_PAUSE = CollectorPause()
os.register_at_fork(after_in_child=COLLECTOR_PAUSE.forget_in_child)
