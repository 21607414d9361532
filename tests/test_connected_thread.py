"""A thread with a connection of its own keeps serving whatever befalls it: when giving its
connection back fails, when it could not be started, and in a child forked while another thread
held its lock. A caller waiting on its Future (the vector search's half beside the caller's, with
no timeout) must never wait on a thread that died, or was never made, while it looked idle."""

import os
import threading
import time

import pytest
from django.db import OperationalError

from memory.threads import ConnectedThread
from tests.connection_faults import close_normally_again, fail_every_close, select_one


@pytest.fixture
def quick_thread(file_db):
    thread = ConnectedThread("test-connected")
    thread.IDLE_SECONDS = 0.05
    yield thread
    thread.submit(close_normally_again).result(timeout=10)
    assert thread.wait(10, disconnected=True)


def test_a_close_the_server_refuses_leaves_the_thread_serving_on_a_fresh_connection(quick_thread):
    dropped = OperationalError("server closed the connection unexpectedly")
    first = quick_thread.submit(fail_every_close, dropped).result(timeout=10)

    assert quick_thread.wait(10, disconnected=True)  # the idle close raised and was let go
    assert quick_thread.submit(select_one).result(timeout=10) == 1
    assert quick_thread.submit(threading.current_thread).result(timeout=10) is first
    assert quick_thread.wait(10)


def test_a_thread_killed_by_an_unexpected_error_is_started_again_by_the_next_task(
    quick_thread, caplog
):
    first = quick_thread.submit(fail_every_close, RuntimeError("broken driver")).result(10)

    assert quick_thread.wait(10, disconnected=True)
    assert quick_thread.idle()  # it looks idle (after wait(), no race), and it is: see below
    assert quick_thread.submit(close_normally_again).result(timeout=10) == 1
    assert quick_thread.submit(threading.current_thread).result(timeout=10) is not first
    assert "test-connected stopped" in caplog.text


def test_a_thread_that_could_not_be_started_is_tried_again_by_the_next_task(
    quick_thread, monkeypatch
):
    really_start = threading.Thread.start

    def refuse_once(thread):
        monkeypatch.setattr(threading.Thread, "start", really_start)
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse_once)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        quick_thread.submit(select_one)

    assert quick_thread.submit(select_one).result(timeout=10) == 1


def test_a_forked_child_gets_a_thread_of_its_own_even_when_the_lock_was_held_at_the_fork():
    thread = ConnectedThread("test-fork")
    assert thread.submit(os.getpid).result(timeout=10) == os.getpid()
    held, let_go = threading.Event(), threading.Event()

    def hold_the_lock():
        with thread.ready:
            held.set()
            let_go.wait(10)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    assert held.wait(10)
    child = os.fork()
    if child == 0:  # the holder thread is not in the child; its hold of the lock is
        code = 1
        try:
            code = 0 if thread.submit(os.getpid).result(timeout=5) == os.getpid() else 1
        finally:
            os._exit(code)
    let_go.set()
    holder.join()
    deadline = time.monotonic() + 10
    while (done := os.waitpid(child, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(child, 9)
        os.waitpid(child, 0)
        pytest.fail("the child waited for ever on a lock its parent's thread held at the fork")
    assert os.waitstatus_to_exitcode(done[1]) == 0
