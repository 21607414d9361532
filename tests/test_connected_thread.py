"""A thread with a connection of its own keeps serving whatever befalls it: when giving its
connection back fails, when it could not be started, and in a child forked while another thread
held its lock; and of callers racing for it while idle, one claims it. A caller waiting on its
Future (the vector search's half beside the caller's, with no timeout) must never wait on a
thread that died, or was never made, while it looked idle."""

import os
import threading
import time

import pytest
from django.db import OperationalError

from memory.threads import ConnectedThread
from tests.connection_faults import (
    close_normally_again,
    fail_every_close,
    hold_every_close,
    select_one,
)
from tests.fork_support import child_answer_while_held


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
    assert quick_thread.idle()  # it looks idle, and it is: the next task gets a thread again
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

    def served_in_the_child() -> bool:
        return thread.submit(os.getpid).result(timeout=5) == os.getpid()

    answer = child_answer_while_held([thread.ready], served_in_the_child)
    assert answer is not None, "the child waited for ever on a lock its parent's thread held"
    assert answer


def test_of_callers_racing_for_an_idle_thread_one_claims_it_and_the_others_run_their_own(
    quick_thread,
):
    # Each release of the lock is followed by a pause, so a check and a queueing made under two
    # holds of it (idle(), then submit()) would let the other racers check in between.
    quick_thread.ready = _SlowToLetGo()
    release, start, claimed = threading.Event(), threading.Barrier(8), []

    def race():
        start.wait(10)
        future = quick_thread.submit_if_idle(release.wait, 10)
        if future is not None:
            claimed.append(future)

    racers = [threading.Thread(target=race) for _ in range(8)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(10)

    assert len(claimed) == 1  # the others got None and queued nothing behind it
    assert quick_thread.submit_if_idle(select_one) is None
    release.set()
    assert claimed[0].result(timeout=10) is True
    assert quick_thread.wait(10)
    assert quick_thread.submit_if_idle(select_one).result(timeout=10) == 1


class _SlowToLetGo(threading.Condition):
    def __exit__(self, *exc):
        let_go = super().__exit__(*exc)
        time.sleep(0.02)
        return let_go


def test_a_slow_close_of_the_idle_connection_keeps_no_caller_waiting(quick_thread):
    closing, let_close = threading.Event(), threading.Event()
    quick_thread.submit(hold_every_close, closing, let_close).result(timeout=10)
    assert closing.wait(10)  # the thread went idle and is giving its connection back
    try:
        asked = time.monotonic()
        assert quick_thread.idle()
        assert time.monotonic() - asked < 0.5, "idle() waited for the close"
    finally:
        let_close.set()
    assert quick_thread.wait(10, disconnected=True)
