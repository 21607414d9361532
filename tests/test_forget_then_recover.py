"""Forget, then recover (issue 10, item 4): recovering a raw memory whose extraction never ran
queues it again, and the jobs page can send a cancelled job back to the queue."""

import pytest
from django.urls import reverse

from memory.models import ExtractionStatus, Job, JobStatus, Memory, MemoryHistory
from memory.writes import Actor, forget, recover, remember
from pipeline.tasks import process_pending

pytestmark = pytest.mark.django_db
AGENT = Actor("agent-one", "agent")
PERSON = Actor("dana")
TEXT = "Priya prefers squash merges for every repository."


def test_recover_queues_the_extraction_that_forget_cancelled(django_capture_on_commit_callbacks):
    raw = remember(TEXT, actor=AGENT)
    forget(raw.memory.id, actor=PERSON, reason="by mistake")
    assert Job.objects.get(id=raw.job.id).status == JobStatus.CANCELLED
    with django_capture_on_commit_callbacks() as handed_off:
        recover(raw.memory.id, actor=PERSON, reason="it was right")
    queued = Job.objects.get(memory_id=raw.memory.id, status=JobStatus.PENDING)
    assert len(handed_off) == 1  # the hand-off to the queue waits for the commit
    recovered = MemoryHistory.objects.get(memory_id=raw.memory.id, event="recovered")
    assert recovered.metadata["queuedJobId"] == queued.id
    assert process_pending() == {"completed": 1}
    assert Memory.objects.get(id=raw.memory.id).extraction_status == ExtractionStatus.COMPLETED


def test_recover_queues_nothing_when_the_extraction_completed():
    raw = remember(TEXT, actor=AGENT)
    process_pending()
    forget(raw.memory.id, actor=PERSON, reason="obsolete")
    recover(raw.memory.id, actor=PERSON, reason="still true")
    assert list(Job.objects.values_list("status", flat=True)) == [JobStatus.COMPLETED]
    recovered = MemoryHistory.objects.get(memory_id=raw.memory.id, event="recovered")
    assert recovered.metadata["queuedJobId"] is None


def test_recover_queues_nothing_for_a_memory_that_never_wanted_extraction():
    seeded = remember(TEXT, actor=AGENT, create_job=False).memory
    forget(seeded.id, actor=PERSON, reason="x")
    recover(seeded.id, actor=PERSON, reason="y")
    assert not Job.objects.exists()


# --- the jobs page: retry a cancelled job ---------------------------------------------------------


@pytest.fixture
def stuck_job(db):
    """What recovering did before the fix: a live memory whose only job was cancelled."""
    raw = remember(TEXT, actor=AGENT)
    forget(raw.memory.id, actor=PERSON, reason="by mistake")
    Memory.objects.filter(id=raw.memory.id).update(is_deleted=False, deleted_at=None)
    return Job.objects.get(id=raw.job.id)


def test_a_reviewer_retries_a_cancelled_job_from_its_page(reviewer_client, stuck_job):
    page = reverse("dashboard:job", args=[stuck_job.id])
    assert "Retry this job" in reviewer_client.get(page).content.decode()
    response = reviewer_client.post(reverse("dashboard:job-retry", args=[stuck_job.id]))
    assert response.status_code == 302
    job = Job.objects.get(id=stuck_job.id)
    assert (job.status, job.attempts, job.result) == (JobStatus.PENDING, 0, None)
    audit = MemoryHistory.objects.get(memory_id=job.memory_id, event="job_retried")
    assert audit.changed_by == "rita" and audit.metadata["previousStatus"] == "cancelled"
    assert process_pending() == {"completed": 1}


def test_a_cancelled_job_of_a_forgotten_memory_is_not_retried(reviewer_client, hx):
    raw = remember(TEXT, actor=AGENT)
    forget(raw.memory.id, actor=PERSON, reason="really gone")
    page = reverse("dashboard:job", args=[raw.job.id])
    assert "Retry this job" not in reviewer_client.get(page).content.decode()
    response = reviewer_client.post(reverse("dashboard:job-retry", args=[raw.job.id]), **hx)
    assert "recover it first" in response.content.decode()
    assert Job.objects.get(id=raw.job.id).status == JobStatus.CANCELLED


def test_a_cancelled_job_is_not_retried_once_another_job_took_over(reviewer_client, hx):
    raw = remember(TEXT, actor=AGENT)
    forget(raw.memory.id, actor=PERSON, reason="by mistake")
    recover(raw.memory.id, actor=PERSON, reason="it was right")  # queues a fresh job
    response = reviewer_client.post(reverse("dashboard:job-retry", args=[raw.job.id]), **hx)
    assert "is pending for this memory" in response.content.decode()
    assert Job.objects.get(id=raw.job.id).status == JobStatus.CANCELLED
