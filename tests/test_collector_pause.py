"""Python's garbage collector stays out of the job's write (memory.backend.collector): a
collection of an old generation walks the whole heap while the write's locks are held."""

import gc

import pytest
from django.db import connection

from memory.backend.collector import COLLECTOR_PAUSE
from pipeline.writes import record
from tests.test_job_batching import ten_fact_job
from tests.test_writer_turn import in_forked_child

pytestmark = pytest.mark.django_db


def test_the_job_write_runs_with_the_collector_off_and_gives_it_back(fake_ollama):
    _, outcome = ten_fact_job(fake_ollama)
    during = []

    def watch(execute, sql, params, many, context):
        if "pipeline_proposals" in sql:
            during.append(gc.isenabled())
        return execute(sql, params, many, context)

    assert gc.isenabled()
    with connection.execute_wrapper(watch):
        record.record_job(outcome)

    assert during == [False]
    assert gc.isenabled()


def test_a_failed_write_gives_the_collector_back(fake_ollama, monkeypatch):
    _, outcome = ten_fact_job(fake_ollama)
    monkeypatch.setattr(record, "write_proposal", lambda *args: 1 / 0)

    with pytest.raises(ZeroDivisionError):
        record.record_job(outcome)

    assert gc.isenabled()


def _leave_the_copied_pause_then_pause_again(queue) -> None:
    COLLECTOR_PAUSE.leave()  # what leaving the parent's `with paused()` in the child does
    states = [gc.isenabled(), COLLECTOR_PAUSE.holders]
    with COLLECTOR_PAUSE.paused():
        states.append(gc.isenabled())
    states.append(gc.isenabled())
    queue.put(states)


def test_a_child_forked_inside_a_pause_keeps_its_own_count_in_step():
    with COLLECTOR_PAUSE.paused():
        in_child = in_forked_child(_leave_the_copied_pause_then_pause_again)
        assert not gc.isenabled()
    # On in the child, its count not thrown below zero by the parent's pause, and still working.
    assert in_child == [True, 0, False, True]
    assert gc.isenabled()
