"""An import run's life (pipeline.imports.runs): each batch is its own short transaction recorded
with the run's progress, a task hands the rest to a new one after its time slice, and a run whose
worker died is reclaimed by the sweep and goes on after its last recorded batch, adding nothing
twice."""

from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.models import OrmQ

from memory.models import Memory, MemoryHistory
from pipeline.config import get_config
from pipeline.imports import runs
from pipeline.imports.models import ImportRun
from pipeline.tasks import sweep
from pipeline.writes import imports as writes

pytestmark = pytest.mark.django_db

NOTES = "".join(f"- Service number {n} is owned by the platform team.\n" for n in range(1, 8))


def start(text: str = NOTES) -> ImportRun:
    return runs.start_upload(
        text.encode(), file_name="notes.md", requested_by="ada", agent="", process=False
    )


def drain_all(drain_queue) -> int:
    ran = 0
    while count := drain_queue():
        ran += count
    return ran


def test_each_batch_commits_alone_and_a_task_hands_on_after_its_time_slice(
    drain_queue, monkeypatch, settings
):
    monkeypatch.setattr(runs, "BATCH_ITEMS", 3)
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 0}  # a slice of no time: one batch
    run = start()
    assert drain_queue() == 1
    run.refresh_from_db()
    # One batch went in and is committed; the run waits in the queue to go on after it.
    assert (run.status, run.position, run.imported) == ("queued", 3, 3)
    assert Memory.objects.count() == 3
    # The run goes on in a new task; the batch's vectors are queued beside it.
    assert sorted(q.task["func"] for q in OrmQ.objects.all()) == [
        "pipeline.imports.runs.run_task",
        "pipeline.memory_ops.embed_stored_many",
    ]

    assert drain_all(drain_queue) == 5  # two more slices, and the three batches' vectors
    assert Memory.objects.filter(embedding_model__isnull=True).count() == 0
    run.refresh_from_db()
    assert (run.status, run.position, run.imported, run.deduped) == ("done", 7, 7, 0)
    assert run.report["imported"] == [[1, 7]]
    assert Memory.objects.count() == 7 and MemoryHistory.objects.count() == 7


def test_a_run_whose_worker_died_is_queued_again_by_the_sweep_and_goes_on(drain_queue, monkeypatch):
    monkeypatch.setattr(runs, "BATCH_ITEMS", 3)
    run = start()
    OrmQ.objects.all().delete()  # the first task went with its worker
    claimed = writes.claim_run(
        run.id, worker="dead", lease_timeout=timedelta(minutes=5), max_attempts=3
    )
    # The dead worker recorded one batch before it died.
    runs.import_lines(claimed, "dead", iter(NOTES.encode().splitlines(keepends=True)[:3]))
    ImportRun.objects.filter(id=run.id).update(heartbeat_at=timezone.now() - timedelta(hours=2))
    assert Memory.objects.count() == 3

    assert sweep()["importRuns"] == {"retried": 1, "failed": 0}
    assert ImportRun.objects.get(id=run.id).status == "queued"
    drain_all(drain_queue)
    run.refresh_from_db()
    assert (run.status, run.imported, run.deduped) == ("done", 7, 0)
    assert Memory.objects.count() == 7


def test_a_batch_of_a_worker_that_lost_the_run_writes_nothing():
    run = start()
    writes.claim_run(run.id, worker="first", lease_timeout=timedelta(minutes=5), max_attempts=3)
    ImportRun.objects.filter(id=run.id).update(worker="second")
    assert runs.import_lines(run, "first", iter([b"- A memory.\n"])) == runs.LOST
    assert not Memory.objects.exists()


def test_a_command_run_left_running_by_a_dead_command_is_failed_not_requeued(tmp_path):
    path = tmp_path / "notes.md"
    path.write_text(NOTES)
    run = runs.import_file(path)
    ImportRun.objects.filter(id=run.id).update(
        status="running", heartbeat_at=timezone.now() - timedelta(hours=2)
    )
    assert sweep()["importRuns"] == {"retried": 0, "failed": 1}
    run.refresh_from_db()
    assert run.status == "failed" and "run it again" in run.error
    assert "pipeline.imports.runs.run_task" not in {q.task["func"] for q in OrmQ.objects.all()}


def test_an_upload_whose_hand_off_was_lost_is_handed_off_again_after_five_quiet_minutes(
    drain_queue,
):
    run = start()
    OrmQ.objects.all().delete()  # the process died between queueing the run and its hand-off
    assert "importRuns" not in sweep()  # queued a moment ago: its task may still be on the way
    ImportRun.objects.filter(id=run.id).update(created_at=timezone.now() - timedelta(minutes=6))
    assert sweep()["importRuns"] == {"retried": 1, "failed": 0}
    assert [q.task["func"] for q in OrmQ.objects.all()] == ["pipeline.imports.runs.run_task"]
    assert "importRuns" not in sweep()  # handed off just now: not again every minute
    drain_all(drain_queue)
    run.refresh_from_db()
    assert (run.status, run.imported) == ("done", 7)


def test_a_queued_upload_left_with_no_attempt_is_failed_by_the_sweep_not_handed_off_forever():
    run = start()
    OrmQ.objects.all().delete()
    ImportRun.objects.filter(id=run.id).update(
        attempts=get_config().max_attempts, created_at=timezone.now() - timedelta(minutes=6)
    )
    assert sweep()["importRuns"] == {"retried": 0, "failed": 1}
    run.refresh_from_db()
    assert run.status == "failed" and "no attempt left" in run.error
    assert not OrmQ.objects.exists()


def test_a_run_handed_back_after_its_time_slice_counts_as_queued_from_then(
    drain_queue, monkeypatch, settings
):
    monkeypatch.setattr(runs, "BATCH_ITEMS", 3)
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 0}  # one batch per task
    run = start()
    ImportRun.objects.filter(id=run.id).update(created_at=timezone.now() - timedelta(hours=1))
    assert drain_queue() == 1
    assert ImportRun.objects.get(id=run.id).status == "queued"
    # Queued again just now, its next task in the queue: the sweep leaves it alone for five
    # minutes, however old the run.
    assert "importRuns" not in sweep()


def test_a_lost_run_the_queue_cannot_take_again_stays_queued_for_the_next_sweep(monkeypatch):
    from pipeline import handoff

    run = start()
    ImportRun.objects.filter(id=run.id).update(created_at=timezone.now() - timedelta(minutes=6))

    def queue_down(*args, **kwargs):
        raise ConnectionError("broker unreachable")

    monkeypatch.setattr(handoff, "async_task", queue_down)
    assert sweep()["importRuns"] == {"retried": 1, "failed": 0}
    run.refresh_from_db()
    # Its first task may still be in the queue: a failed second hand-off does not fail it.
    assert (run.status, run.error) == ("queued", "")
