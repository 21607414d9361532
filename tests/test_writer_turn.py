"""Writers of a SQLite file take turns through a flock beside it (memory.backend.base.WriterTurn):
held from BEGIN to COMMIT or ROLLBACK, so a waiting writer starts as soon as the last one ends
instead of on SQLite's sleep schedule; and WAL checkpoints run in a background thread."""

import fcntl
import gc
import multiprocessing
import os
import threading
import time

import pytest
from django.db import connection, connections, transaction

from memory.backend import checkpoint
from memory.models import Memory
from tests.pipeline_support import raw

pytestmark = pytest.mark.sqlite_only(reason="the writer's turn and checkpoints are SQLite's")


def turn_is_free(database_path) -> bool:
    fd = os.open(f"{database_path}-writer.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_a_write_transaction_holds_the_turn_until_it_commits_or_rolls_back(file_db):
    assert turn_is_free(file_db)
    with transaction.atomic():
        raw("Kenji deploys billing with Terraform")
        assert not turn_is_free(file_db)
    assert turn_is_free(file_db)
    with pytest.raises(RuntimeError), transaction.atomic():
        raw("Priya prefers squash merges")
        assert not turn_is_free(file_db)
        raise RuntimeError("rolled back")
    assert turn_is_free(file_db)
    assert Memory.objects.count() == 1


def test_the_garbage_collector_is_off_only_while_the_turn_is_held(file_db):
    assert gc.isenabled()
    with transaction.atomic():
        raw("Kenji deploys billing with Terraform")
        assert not gc.isenabled(), "a collection could run with the write lock held"
    assert gc.isenabled()
    with pytest.raises(RuntimeError), transaction.atomic():
        raw("Priya prefers squash merges")
        assert not gc.isenabled()
        raise RuntimeError("rolled back")
    assert gc.isenabled()


def test_a_collector_switched_off_by_the_program_stays_off_after_a_write(file_db):
    gc.disable()
    try:
        with transaction.atomic():
            raw("Kenji deploys billing with Terraform")
        assert not gc.isenabled()
    finally:
        gc.enable()


def in_forked_child(target):
    """What `target(queue)` puts in its queue, run in a child forked from this process now."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=target, args=(queue,))
    child.start()
    answer = queue.get(timeout=10)
    child.join(10)
    return answer


def _collector_in_child(queue) -> None:
    queue.put(gc.isenabled())


def test_a_child_forked_during_a_write_has_its_collector_on(file_db):
    with transaction.atomic():
        raw("Kenji deploys billing with Terraform")
        child_collector = in_forked_child(_collector_in_child)
    assert child_collector is True
    assert gc.isenabled()


def test_a_second_writer_waits_for_the_turn_then_writes(file_db):
    started, finished = threading.Event(), threading.Event()

    def second_writer():
        try:
            started.set()
            raw("Written by the second writer")
            finished.set()
        finally:
            connections.close_all()

    with transaction.atomic():
        raw("Written by the first writer")
        thread = threading.Thread(target=second_writer)
        thread.start()
        started.wait(5)
        assert not finished.wait(0.3), "the second writer began while the first held the turn"
    thread.join(10)
    assert finished.is_set()
    assert Memory.objects.count() == 2


@pytest.mark.parametrize("in_transaction", [True, False], ids=["atomic", "autocommit"])
def test_a_write_waits_while_another_writer_has_the_turn(file_db, in_transaction):
    """Here the other writer holds only the turn, not SQLite's lock: a write that ignored the
    turn would go straight through."""
    fd = os.open(f"{file_db}-writer.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    done = threading.Event()

    def writer():
        try:
            if in_transaction:
                raw("Written in a transaction")
            else:
                Memory.objects.filter(pk="no such memory").update(pinned=True)  # autocommit
            done.set()
        finally:
            connections.close_all()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert not done.wait(0.3), "the write did not wait for its turn"
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    thread.join(10)
    assert done.is_set()


def wal_state(path) -> tuple[int, int]:
    info = os.stat(f"{path}-wal")
    return info.st_size, info.st_mtime_ns


def wait_until_copied(path) -> None:
    """Until a checkpoint (the background thread's, or a test's) has copied the whole log."""
    deadline = time.monotonic() + 5
    while checkpoint._copied.get(path) != wal_state(path) and time.monotonic() < deadline:
        time.sleep(0.02)


def test_commits_leave_wal_checkpoints_to_the_background_thread(file_db):
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_autocheckpoint")
        assert cursor.fetchone()[0] == checkpoint.FALLBACK_PAGES
    for index in range(30):
        raw(f"Memory number {index} " + "padding " * 2000)
    assert os.path.getsize(f"{file_db}-wal") > checkpoint.CHECKPOINT_BYTES
    os.utime(f"{file_db}-wal")  # a commit just now: the checkpoint waits for a quiet moment
    assert not checkpoint.checkpoint_if_due(str(file_db))
    # A quiet moment later the background thread copies the whole log into the database.
    path = os.path.abspath(file_db)
    wait_until_copied(path)
    assert checkpoint._copied.get(path) == wal_state(file_db)
    assert not checkpoint.checkpoint_if_due(str(file_db) + ".missing")
    assert any(t.name == "sqlite-checkpoint" and t.is_alive() for t in threading.enumerate())


def test_a_log_copied_in_full_is_not_checkpointed_again_until_a_commit(file_db):
    """The log file keeps its size until the next writer starts the log over: read by its size,
    a checkpoint was due every 50 ms in every process, for good."""
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_size_limit")  # a file a bulk load grew is cut back
        assert cursor.fetchone()[0] == checkpoint.BUSY_CHECKPOINT_BYTES
    for index in range(30):
        raw(f"Memory number {index} " + "padding " * 2000)
    time.sleep(checkpoint.QUIET_SECONDS * 2)
    checkpoint.checkpoint_if_due(str(file_db))  # this call or the background thread's copies all
    path = os.path.abspath(file_db)
    wait_until_copied(path)
    assert os.path.getsize(f"{file_db}-wal") > checkpoint.CHECKPOINT_BYTES
    assert not checkpoint.checkpoint_if_due(path)  # nothing left to copy
    raw("Written after the checkpoint: the log starts over")
    # The commit changed the file: the mark no longer matches, so the log is due again once
    # quiet (the background thread may already be at it: checked before the quiet moment).
    assert checkpoint._copied.get(path) != wal_state(file_db)


def _close_inherited_connection(queue) -> None:
    connection.close()  # as close_old_connections does in a worker forked mid-transaction
    queue.put(True)


def test_a_child_closing_its_copy_of_a_connection_leaves_the_parents_turn_held(file_db):
    with transaction.atomic():
        raw("Kenji deploys billing with Terraform")
        assert in_forked_child(_close_inherited_connection)
        assert not turn_is_free(file_db), "the child gave away the parent's turn"
    assert turn_is_free(file_db)
    assert gc.isenabled()


def test_a_fork_waits_while_the_checkpoint_thread_is_inside_sqlite(file_db):
    """A child forked while the thread held one of SQLite's mutexes inherited it locked and hung
    at its first connection (a django-q2 worker did, for good)."""
    forked = threading.Event()

    def fork():
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        forked.set()
        os.waitpid(pid, 0)

    checkpoint._in_sqlite.acquire()  # the thread is inside SQLite
    thread = threading.Thread(target=fork)
    try:
        thread.start()
        assert not forked.wait(0.3), "the process forked while the thread was inside SQLite"
    finally:
        checkpoint._in_sqlite.release()
    assert forked.wait(5)
    thread.join(5)
    assert checkpoint._in_sqlite.acquire(timeout=1)  # given back after the fork
    checkpoint._in_sqlite.release()


def _turn_in_child(queue) -> None:
    turn = connection._writer_turn()
    turn.acquire(1.0)
    queue.put((turn.pid, turn.held))
    turn.release()


def test_a_forked_process_takes_turns_with_its_parent_not_through_its_file(file_db):
    """A flock belongs to the open file: a child that used the parent's would share its turn."""
    with transaction.atomic():
        raw("The parent holds the turn")
        parent = connection._writer_turn()
        assert parent.held
        pid, held = in_forked_child(_turn_in_child)
    assert pid != os.getpid()
    assert not held, "the child got the turn while the parent held it"
