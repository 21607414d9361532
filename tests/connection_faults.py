"""Faults in a thread's own database connection, set from inside that thread (a task given to a
memory.threads.ConnectedThread): a close that raises after really closing, and the way back."""

import threading


def select_one() -> int:
    """1, read through this thread's connection (opened again if it was closed)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        return cursor.fetchone()[0]


def fail_every_close(error: BaseException) -> threading.Thread:
    """Open this thread's connection and make each close of it (after really closing) raise."""
    from django.db import connection

    connection.ensure_connection()
    really_close = connection._close

    def close_then_fail():
        really_close()
        raise error

    connection._close = close_then_fail
    return threading.current_thread()


def close_normally_again() -> int:
    """Undo fail_every_close on this thread's connection; 1 read through it."""
    from django.db import connection

    connection.__dict__.pop("_close", None)
    return select_one()
