"""Python's garbage collector kept out of write transactions (see CollectorPause), for both
database backends."""

from __future__ import annotations

import gc
import os
import threading


class CollectorPause:
    """Python's cyclic garbage collector stays off while this process holds a writer's turn
    (SQLite) or has a transaction open (PostgreSQL).

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
            self.holders -= 1
            if self.holders == 0 and self.was_enabled:
                gc.enable()

    def forget_in_child(self) -> None:
        """A forked child holds no turn of its parent's (it takes turns through a file of its
        own): it starts with the collector as the parent had it before its turn."""
        self.lock = threading.Lock()
        if self.holders and self.was_enabled:
            gc.enable()
        self.holders = 0


COLLECTOR_PAUSE = CollectorPause()
os.register_at_fork(after_in_child=COLLECTOR_PAUSE.forget_in_child)
