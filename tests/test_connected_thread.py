"""A thread with a connection of its own keeps serving when giving its connection back fails: a
caller waiting on its Future (the vector search's half beside the caller's, with no timeout) must
never wait on a thread that died while it still looked idle."""

import threading

import pytest
from django.db import OperationalError

from memory.threads import ConnectedThread


def _select_one() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        return cursor.fetchone()[0]


def _fail_every_close(error: BaseException) -> threading.Thread:
    """Open this thread's connection and make each close of it (after really closing) raise."""
    from django.db import connection

    connection.ensure_connection()
    really_close = connection._close

    def close_then_fail():
        really_close()
        raise error

    connection._close = close_then_fail
    return threading.current_thread()


def _close_normally_again() -> int:
    from django.db import connection

    connection.__dict__.pop("_close", None)
    return _select_one()


@pytest.fixture
def quick_thread(file_db):
    thread = ConnectedThread("test-connected")
    thread.IDLE_SECONDS = 0.05
    yield thread
    thread.submit(_close_normally_again).result(timeout=10)
    assert thread.wait(10, disconnected=True)


def test_a_close_the_server_refuses_leaves_the_thread_serving_on_a_fresh_connection(quick_thread):
    dropped = OperationalError("server closed the connection unexpectedly")
    first = quick_thread.submit(_fail_every_close, dropped).result(timeout=10)

    assert quick_thread.wait(10, disconnected=True)  # the idle close raised and was let go
    assert quick_thread.submit(_select_one).result(timeout=10) == 1
    assert quick_thread.submit(threading.current_thread).result(timeout=10) is first
    assert quick_thread.idle()


def test_a_thread_killed_by_an_unexpected_error_is_started_again_by_the_next_task(
    quick_thread, caplog
):
    first = quick_thread.submit(_fail_every_close, RuntimeError("broken driver")).result(10)

    assert quick_thread.wait(10, disconnected=True)
    assert quick_thread.idle()  # it looks idle, and it is: the next task gets a thread again
    assert quick_thread.submit(_close_normally_again).result(timeout=10) == 1
    assert quick_thread.submit(threading.current_thread).result(timeout=10) is not first
    assert "test-connected stopped" in caplog.text
