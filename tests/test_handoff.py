"""A run the queue cannot take (its broker down) fails at once, saying why, instead of waiting
on a page for a task nobody will run: one helper for second opinions, evaluations and imports."""

from __future__ import annotations

import pytest
from django_q.models import OrmQ

from pipeline import handoff
from pipeline.imports import runs
from pipeline.imports.models import ImportRun

pytestmark = pytest.mark.django_db


def broker_down(*args, **kwargs):
    raise ConnectionError("the broker refused the connection")


def test_a_run_the_queue_takes_is_queued_under_its_kind_and_name():
    failed = []
    handoff.hand_off("pipeline.imports.runs.run_task", "r1", kind="import", fail=failed.append)
    (queued,) = OrmQ.objects.all()
    assert queued.task["func"] == "pipeline.imports.runs.run_task"
    assert queued.task["args"] == ("r1",) and queued.task["name"] == "import-r1"
    assert failed == []


def test_an_upload_the_queue_cannot_take_fails_with_the_reason(monkeypatch):
    monkeypatch.setattr(handoff, "async_task", broker_down)  # the third-party broker, not ours
    run = runs.start_upload(
        b"- Kenji deploys billing-api.\n",
        file_name="notes.md",
        requested_by="ada",
        agent="",
        process=False,
    )
    run = ImportRun.objects.get(id=run.id)
    assert run.status == "failed"
    assert run.error == "the run could not be queued: the broker refused the connection"
    assert not OrmQ.objects.exists()
