"""Faults in a thread's own database connection, set from inside that thread (a task given to a
memory.threads.ConnectedThread): a close that raises after really closing, one that waits to be
let go, and the way back."""

import threading


def select_one() -> int:
    """1, read through this thread's connection (opened again if it was closed)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        return cursor.fetchone()[0]


def _wrap_every_close(around) -> None:
    """Open this thread's connection and close it through `around(really_close)` from now on."""
    from django.db import connection

    connection.ensure_connection()
    really_close = connection._close
    connection._close = lambda: around(really_close)


def fail_every_close(error: BaseException) -> threading.Thread:
    """Open this thread's connection and make each close of it (after really closing) raise."""

    def close_then_fail(really_close):
        really_close()
        raise error

    _wrap_every_close(close_then_fail)
    return threading.current_thread()


def hold_every_close(closing: threading.Event, let_close: threading.Event) -> None:
    """Open this thread's connection and make each close of it set `closing`, then wait for
    `let_close` (at most 10 s) before really closing."""

    def slow_close(really_close):
        closing.set()
        let_close.wait(10)
        really_close()

    _wrap_every_close(slow_close)


def close_normally_again() -> int:
    """Undo fail_every_close or hold_every_close on this thread's connection; 1 read through it."""
    from django.db import connection

    connection.__dict__.pop("_close", None)
    return select_one()
