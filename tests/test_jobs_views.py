"""Jobs pages: list, detail (facts, proposals, warnings, model calls), live polling, retry."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from dashboard.wording import short_id
from memory.models import Job, JobStatus, MemoryHistory
from memory.writes import Actor, remember
from pipeline.models import LlmCall
from pipeline.tasks import process_pending

AGENT = Actor("x", "agent")
pytestmark = pytest.mark.django_db


@pytest.fixture
def done_job(db):
    result = remember(
        "Alice prefers dark mode in the Harbor dashboard. The deploy runs on Fridays.",
        actor=AGENT,
    )
    process_pending()
    result.job.refresh_from_db()
    return result.job


@pytest.fixture
def dead_job(db):
    result = remember("The release train leaves every Tuesday at noon.", actor=AGENT)
    Job.objects.filter(id=result.job.id).update(status=JobStatus.DEAD, error="boom", attempts=3)
    return Job.objects.get(id=result.job.id)


# --- access ---------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["dashboard:jobs", "dashboard:job"])
def test_it_sends_anonymous_users_to_login(client, done_job, name):
    url = reverse(name, args=[done_job.id] if name == "dashboard:job" else [])
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


@pytest.mark.django_db
def test_anonymous_retry_goes_to_login_and_changes_nothing(client, dead_job):
    response = client.post(reverse("dashboard:job-retry", args=[dead_job.id]))
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
    assert Job.objects.get(id=dead_job.id).status == JobStatus.DEAD


# --- list -----------------------------------------------------------------------------------------


def test_it_lists_jobs_with_counts_plain_and_htmx(viewer_client, done_job, dead_job, hx):
    url = reverse("dashboard:jobs")
    page = viewer_client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert "<html" in html
    assert short_id(done_job.id) in html and short_id(dead_job.id) in html
    assert f'href="/memories/{done_job.memory_id}/"' in html
    assert "boom" in html
    assert 'data-testid="stat-dead"' in html

    fragment = viewer_client.get(url, **hx)
    assert fragment.status_code == 200
    body = fragment.content.decode()
    assert "<html" not in body
    assert 'id="job-list"' in body
    assert short_id(dead_job.id) in body


def test_it_filters_by_status(viewer_client, done_job, dead_job, hx):
    body = viewer_client.get(reverse("dashboard:jobs"), {"status": "dead"}, **hx).content.decode()
    assert short_id(dead_job.id) in body
    assert short_id(done_job.id) not in body
    # An unknown status is ignored rather than an error.
    assert viewer_client.get(reverse("dashboard:jobs"), {"status": "nope"}).status_code == 200


def test_it_paginates_fifty_per_page(viewer_client, hx):
    for i in range(55):
        remember(f"Memory number {i} about the nightly backup window.", actor=AGENT)
    first = viewer_client.get(reverse("dashboard:jobs")).content.decode()
    assert "Page 1 of 2" in first
    second = viewer_client.get(reverse("dashboard:jobs"), {"page": 2}, **hx)
    assert second.status_code == 200
    assert second.content.decode().count("data-row") == 5


def test_it_escapes_memory_content_in_the_list(viewer_client):
    remember('<script>alert("x")</script> Bob owns the <b>billing</b> service.', actor=AGENT)
    html = viewer_client.get(reverse("dashboard:jobs")).content.decode()
    assert '<script>alert("x")' not in html
    assert "&lt;script&gt;" in html
    assert "<b>billing</b>" not in html


def _queries(client, url, **extra) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url, **extra).status_code in (200, 286)
    return len(ctx.captured_queries)


def test_list_query_count_is_constant(viewer_client, hx):
    url = reverse("dashboard:jobs")
    for i in range(3):
        remember(f"Small fact number {i} for counting queries.", actor=AGENT)
    process_pending()
    few, few_hx = _queries(viewer_client, url), _queries(viewer_client, url, **hx)
    for i in range(3, 30):
        remember(f"Small fact number {i} for counting queries.", actor=AGENT)
    process_pending()
    Job.objects.filter(id__in=Job.objects.values("id")[:5]).update(status="dead", error="x")
    assert _queries(viewer_client, url) == few
    assert _queries(viewer_client, url, **hx) == few_hx


# --- detail ---------------------------------------------------------------------------------------


def test_job_detail_shows_facts_proposals_and_model_calls(viewer_client, done_job):
    html = viewer_client.get(reverse("dashboard:job", args=[done_job.id])).content.decode()
    assert "<html" in html
    assert "Alice prefers dark mode in the Harbor dashboard." in html  # fact and source
    assert "The deploy runs on Fridays." in html
    assert "prefers" in html  # entity triple
    proposal = done_job.proposals.first()
    assert f'href="/proposals/{proposal.id}/"' in html
    assert "badge-add" in html
    calls = list(LlmCall.objects.filter(job=done_job))
    assert calls
    assert html.count('data-testid="llm-call"') == len(calls)
    extract = next(c for c in calls if c.kind == "extract")
    # The exact prompt and raw response are in collapsible raw blocks.
    assert '<pre class="raw"' in html
    assert "<details>" in html
    from django.utils.html import escape

    assert escape(extract.prompt) in html
    assert escape(extract.raw_response) in html
    assert "shadow" in html  # write mode
    assert f'href="/memories/{done_job.memory_id}/"' in html


def test_job_detail_shows_every_warning_and_escapes_model_output(viewer_client, done_job):
    result = dict(done_job.result)
    result["warnings"] = [
        "Decision for fact 2 dropped: targetId 'm-999' is not a candidate",
        "<img src=x onerror=alert(1)> unknown type",
    ]
    Job.objects.filter(id=done_job.id).update(result=result)
    LlmCall.objects.create(
        job=done_job,
        kind="decide",
        provider="ollama",
        model="qwen3:4b",
        prompt="Decide about <fact>",
        raw_response='<think>hmm</think><script>alert("pwned")</script>{"action": "add"}',
        duration_ms=1234,
        prompt_tokens=321,
        completion_tokens=45,
        error="<b>oops</b>",
        created_at=timezone.now(),
    )
    html = viewer_client.get(reverse("dashboard:job", args=[done_job.id])).content.decode()
    assert 'data-testid="warnings"' in html
    assert "Decision for fact 2 dropped: targetId &#x27;m-999&#x27; is not a candidate" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<img src=x" not in html
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in html
    assert '<script>alert("pwned")' not in html
    assert "&lt;b&gt;oops&lt;/b&gt;" in html
    assert "321" in html and "45" in html and "qwen3:4b" in html and "1.2 s" in html


def test_job_detail_htmx_is_the_status_fragment(viewer_client, done_job, hx):
    response = viewer_client.get(reverse("dashboard:job", args=[done_job.id]), **hx)
    body = response.content.decode()
    assert "<html" not in body
    assert 'id="job-status"' in body


def test_polling_stops_for_a_completed_job_and_continues_for_a_pending_one(
    viewer_client, done_job, hx
):
    finished = viewer_client.get(reverse("dashboard:job", args=[done_job.id]), **hx)
    assert finished.status_code == 286
    assert 'hx-trigger="every 2s"' not in finished.content.decode()
    assert "completed" in finished.content.decode()

    pending = remember("Carol runs the on-call rotation for payments.", actor=AGENT).job
    response = viewer_client.get(reverse("dashboard:job", args=[pending.id]), **hx)
    assert response.status_code == 200
    body = response.content.decode()
    assert 'hx-trigger="every 2s"' in body
    assert "<html" not in body
    # The full page of a pending job polls too.
    page = viewer_client.get(reverse("dashboard:job", args=[pending.id])).content.decode()
    assert 'hx-trigger="every 2s"' in page


def test_polling_stops_for_dead_and_cancelled_jobs(viewer_client, dead_job, hx):
    assert viewer_client.get(reverse("dashboard:job", args=[dead_job.id]), **hx).status_code == 286
    Job.objects.filter(id=dead_job.id).update(status=JobStatus.CANCELLED)
    assert viewer_client.get(reverse("dashboard:job", args=[dead_job.id]), **hx).status_code == 286


def test_unknown_job_is_404(viewer_client, db):
    assert viewer_client.get(reverse("dashboard:job", args=["nope"])).status_code == 404


def test_detail_query_count_is_constant(viewer_client, done_job, hx):
    url = reverse("dashboard:job", args=[done_job.id])
    now = timezone.now()

    def add_calls(n):
        LlmCall.objects.bulk_create(
            LlmCall(job=done_job, kind="decide", provider="p", model="m", created_at=now)
            for _ in range(n)
        )

    add_calls(3)
    few, few_hx = _queries(viewer_client, url), _queries(viewer_client, url, **hx)
    add_calls(27)
    assert _queries(viewer_client, url) == few
    assert _queries(viewer_client, url, **hx) == few_hx


# --- retry ----------------------------------------------------------------------------------------


def test_viewer_sees_no_retry_button_and_cannot_retry(viewer_client, dead_job):
    html = viewer_client.get(reverse("dashboard:job", args=[dead_job.id])).content.decode()
    assert "Retry this job" not in html
    response = viewer_client.post(reverse("dashboard:job-retry", args=[dead_job.id]))
    assert response.status_code == 403
    job = Job.objects.get(id=dead_job.id)
    assert job.status == JobStatus.DEAD and job.attempts == 3


def test_a_cancelled_job_whose_memory_has_a_new_job_offers_no_retry(reviewer_client):
    """Found by a QA pass: the page offered Retry on a cancelled job that a recovery had already
    replaced, and every click was refused ("this one is not needed")."""
    from memory import writes

    result = remember("The release train leaves every Thursday.", actor=AGENT)
    writes.forget(result.memory.id, actor=AGENT, reason="wrong train")
    old = Job.objects.get(id=result.job.id)
    assert old.status == JobStatus.CANCELLED
    page = reverse("dashboard:job", args=[old.id])
    writes.recover(result.memory.id, actor=AGENT, reason="right after all")
    assert Job.objects.filter(memory_id=result.memory.id, status=JobStatus.PENDING).exists()
    assert "Retry this job" not in reviewer_client.get(page).content.decode()
    Job.objects.filter(memory_id=result.memory.id).exclude(id=old.id).delete()
    assert "Retry this job" in reviewer_client.get(page).content.decode()


def test_hidden_characters_in_a_jobs_triples_are_shown(viewer_client, done_job):
    """Found by a second reviewer: the job's triples and extracted entities showed a
    right-to-left override as it is, reversing the text after it."""
    from django.utils import timezone as tz

    from pipeline.models import TripleReview

    sly = "Ophelia \u202eRTL"
    TripleReview.objects.create(
        job=done_job,
        source_memory_id=done_job.memory_id,
        position=0,
        source=sly,
        source_type="person",
        relationship="owns",
        target="Harbor",
        target_type="project",
        confidence=0.9,
        created_at=tz.now(),
    )
    Job.objects.filter(id=done_job.id).update(
        result={
            **done_job.result,
            "entities": [
                {
                    "source": sly,
                    "sourceType": "person",
                    "relationship": "owns",
                    "target": "Harbor",
                    "targetType": "project",
                    "confidence": 0.9,
                }
            ],
        }
    )
    html = viewer_client.get(reverse("dashboard:job", args=[done_job.id])).content.decode()
    body = html.split("</title>", 1)[1]
    assert "\u202e" not in body and body.count("hidden character U+202E") >= 2


def test_reviewer_retries_a_dead_job(reviewer_client, dead_job):
    html = reviewer_client.get(reverse("dashboard:job", args=[dead_job.id])).content.decode()
    assert "Retry this job" in html
    response = reviewer_client.post(reverse("dashboard:job-retry", args=[dead_job.id]))
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard:job", args=[dead_job.id])
    job = Job.objects.get(id=dead_job.id)
    assert job.status == JobStatus.PENDING and job.attempts == 0
    audit = MemoryHistory.objects.get(memory_id=job.memory_id, event="job_retried")
    assert audit.changed_by == "rita"
    follow = reviewer_client.get(response["Location"]).content.decode()
    assert "Job sent back to the queue" in follow


def test_reviewer_retries_with_htmx_and_gets_the_polling_fragment(reviewer_client, dead_job, hx):
    response = reviewer_client.post(reverse("dashboard:job-retry", args=[dead_job.id]), **hx)
    assert response.status_code == 200
    body = response.content.decode()
    assert "<html" not in body
    assert 'hx-trigger="every 2s"' in body
    assert "Job sent back to the queue" in body
    assert Job.objects.get(id=dead_job.id).status == JobStatus.PENDING


def test_retrying_a_job_that_is_not_dead_changes_nothing(reviewer_client, done_job, hx):
    response = reviewer_client.post(reverse("dashboard:job-retry", args=[done_job.id]), **hx)
    assert response.status_code == 200
    assert "Nothing to retry" in response.content.decode()
    assert Job.objects.get(id=done_job.id).status == JobStatus.COMPLETED


def test_retry_needs_post(reviewer_client, dead_job):
    assert (
        reviewer_client.get(reverse("dashboard:job-retry", args=[dead_job.id])).status_code == 405
    )


# --- live pages (issue 11) ------------------------------------------------------------------------


def test_an_idle_jobs_list_still_checks_for_new_jobs(viewer_client, done_job, hx):
    body = viewer_client.get(reverse("dashboard:jobs")).content.decode()
    assert 'id="job-list" data-refreshing-list hx-get="/jobs/" hx-trigger="every 15s"' in body
    remember("Carol runs the on-call rotation for payments.", actor=AGENT)
    fragment = viewer_client.get(reverse("dashboard:jobs"), **hx).content.decode()
    assert 'hx-trigger="every 5s"' in fragment and "Carol runs the on-call rotation" in fragment


def test_a_running_job_shows_each_model_call_as_it_happens(viewer_client, hx):
    from pipeline.llm import CallRecord
    from pipeline.writes import jobs as job_writes

    job = remember("Carol runs the on-call rotation for payments.", actor=AGENT).job
    claim = job_writes.claim_job(job.id)
    calls = job_writes.LiveCalls(job.id)
    calls.append(CallRecord("extract", "offline", "offline-model", prompt="the prompt"))
    body = viewer_client.get(reverse("dashboard:job", args=[job.id]), **hx).content.decode()
    assert "A worker is running this job" in body and 'hx-trigger="every 2s"' in body
    assert body.count('data-testid="llm-call"') == 1
    # The end of the attempt logs what was not logged yet: nothing twice.
    calls.append(CallRecord("decide", "offline", "offline-model", prompt="p2", fact_index=0))
    job_writes.fail_job(claim, "boom", calls)
    assert LlmCall.objects.filter(job_id=job.id).count() == 2


def test_the_job_page_says_where_its_proposals_stand_now(viewer_client, done_job):
    from pipeline.models import Proposal

    proposals = Proposal.objects.filter(job=done_job)
    body = viewer_client.get(reverse("dashboard:job", args=[done_job.id])).content.decode()
    assert "when the job ran" in body and 'data-testid="statuses-now"' in body
    for status in set(proposals.values_list("status", flat=True)):
        assert f"{proposals.filter(status=status).count()} {status}</span>" in body


def test_a_job_that_failed_before_it_finished_is_not_timed_from_creation(viewer_client, done_job):
    # A job recorded before its write kept the finishing attempt's lease: no time is known.
    result = {k: v for k, v in done_job.result.items() if k != "leasedAt"}
    Job.objects.filter(id=done_job.id).update(
        failed_at=done_job.created_at,
        attempts=2,
        created_at=done_job.created_at - timedelta(hours=3),
        result=result,
    )
    body = viewer_client.get(reverse("dashboard:job", args=[done_job.id])).content.decode()
    assert '<span class="muted">finished</span> after 2 attempts' in body
    assert '<span class="muted">took</span>' not in body


def test_a_job_that_died_and_was_retried_reports_the_time_of_the_attempt_that_finished(
    viewer_client, reviewer_client
):
    from pipeline.writes import jobs as job_writes

    job = remember("Carol runs the on-call rotation for payments.", actor=AGENT).job
    claim = job_writes.claim_job(job.id)
    job_writes.fail_job(claim, "boom", [])
    Job.objects.filter(id=job.id).update(status=JobStatus.DEAD)
    reviewer_client.post(reverse("dashboard:job-retry", args=[job.id]))
    process_pending()
    job.refresh_from_db()
    assert parse_datetime(job.result["leasedAt"]) >= job.failed_at  # the retried attempt's lease
    # It lay dead for an hour after it was created; the attempt that finished took 42 seconds.
    leased_at = job.completed_at - timedelta(seconds=42)
    Job.objects.filter(id=job.id).update(
        created_at=job.created_at - timedelta(hours=1),
        result={**job.result, "leasedAt": leased_at.isoformat()},
    )
    assert job.status == JobStatus.COMPLETED and job.failed_at is not None

    body = viewer_client.get(reverse("dashboard:job", args=[job.id])).content.decode()
    assert '<span class="muted">took</span> 42 s in its last attempt' in body
    listing = viewer_client.get(reverse("dashboard:jobs")).content.decode()
    assert "42 s in its last attempt" in listing


def test_the_job_write_keeps_the_lease_of_the_attempt_that_finished(done_job):
    leased_at = parse_datetime(done_job.result["leasedAt"])
    assert done_job.created_at <= leased_at <= done_job.completed_at


def test_the_jobs_list_shows_no_template_comment(viewer_client, done_job, hx):
    """Issue 19, defect 10: a multi-line {# #} is not a Django comment and was shown as text."""
    for headers in ({}, hx):
        body = viewer_client.get(reverse("dashboard:jobs"), **headers).content.decode()
        assert "{#" not in body and "The list refreshes itself" not in body


def test_a_job_waiting_while_the_pipeline_is_disabled_says_why(viewer_client):
    """Found by a QA pass: it said "Waiting for a worker to pick this job up" while no worker
    would until an admin turned the pipeline back on."""
    from pipeline.writes.config import update_config

    job = remember("Kenji owns the billing API.", actor=Actor("x", "agent")).job
    page = viewer_client.get(reverse("dashboard:job", args=[job.id])).content.decode()
    assert "Waiting for a worker to pick this job up" in page
    update_config({"enabled": False}, changed_by="ada", reason="pause")
    page = viewer_client.get(reverse("dashboard:job", args=[job.id])).content.decode()
    assert "the pipeline is disabled" in page and "Waiting for a worker" not in page


def test_a_job_completed_after_a_failed_attempt_shows_what_went_wrong(viewer_client):
    from tests.fault_tasks import failing_after_proposal

    result = remember("Kenji deploys billing-api with Terraform every Friday.", actor=AGENT)
    with failing_after_proposal(0, RuntimeError("database or disk is full")):
        process_pending()
    Job.objects.filter(id=result.job.id).update(next_attempt_at=timezone.now())
    process_pending()
    job = Job.objects.get(id=result.job.id)
    assert job.status == "completed" and job.error is None
    page = viewer_client.get(reverse("dashboard:job", args=[job.id])).content.decode()
    assert "An earlier attempt failed" in page
    assert "write failed: RuntimeError: database or disk is full" in page
