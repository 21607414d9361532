"""Jobs pages: the queue by status, one job with everything it did (facts, proposals, warnings,
the exact model calls), and sending a dead or cancelled job back to the queue."""

from __future__ import annotations

from collections import Counter

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.db.models.fields.json import KeyTextTransform
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseStopPolling

from dashboard import wording
from dashboard.access import reviewer_actor, role_required
from dashboard.forms import JobFilterForm
from dashboard.htmx import render_page, wants_fragment
from dashboard.templatetags.curation import duration
from memory.models import Job, JobStatus
from memory.roles import has_role
from memory.writes import Refused
from pipeline import review as reviewing
from pipeline.models import DigestRun, LlmCall

PAGE_SIZE = 50
LIVE = {JobStatus.PENDING, JobStatus.LEASED}
STATUS_BADGES = {
    JobStatus.PENDING: "badge-status",
    JobStatus.LEASED: "badge-warn",
    JobStatus.COMPLETED: "badge-add",
    JobStatus.DEAD: "badge-delete",
    JobStatus.CANCELLED: "badge-none",
}
STAT_CLASSES = {JobStatus.LEASED: "warn", JobStatus.DEAD: "bad"}


def job_timing(job: Job, now) -> tuple[str, str]:
    """(label, duration) of a job: how long it took, is running, or has been waiting."""
    if job.status == JobStatus.LEASED and job.leased_at:
        return "running", duration((now - job.leased_at).total_seconds())
    if job.status == JobStatus.PENDING:
        return "waiting", duration((now - job.created_at).total_seconds())
    end = job.completed_at or job.failed_at
    if end is None:
        return "", "–"
    if job.completed_at and job.failed_at:
        # It failed before it finished: created -> completed would count the backoff and the time
        # it lay dead as if the job had been working. Time the attempt that finished, if recorded.
        leased_at = parse_datetime(getattr(job, "finishing_lease", None) or "")
        if leased_at is None:
            return "finished", f"after {job.attempts} attempts"
        took = duration((job.completed_at - leased_at).total_seconds())
        return "took", f"{took} in its last attempt"
    return "took", duration((end - job.created_at).total_seconds())


def with_finishing_lease(jobs):
    """Annotate `finishing_lease`: when the attempt that completed a job took its lease (the job
    write keeps it in the result; completion clears leased_at). Read without loading the result."""
    return jobs.annotate(finishing_lease=KeyTextTransform("leasedAt", "result"))


def _decorate(job: Job, now) -> Job:
    job.badge = STATUS_BADGES.get(job.status, "badge-none")
    job.timing_label, job.timing = job_timing(job, now)
    return job


# --- list -----------------------------------------------------------------------------------------


@role_required("viewer")
@require_GET
def jobs(request):
    form = JobFilterForm(request.GET)
    status = form.cleaned_data["status"] if form.is_valid() else ""
    counts = Job.objects.aggregate(
        total=Count("id"), **{s: Count("id", filter=Q(status=s)) for s in JobStatus.values}
    )
    rows = (
        with_finishing_lease(Job.objects.select_related("memory"))
        .defer("result", "memory__normalized_content", "memory__tags")
        .order_by("-created_at", "-id")
    )
    if status:
        rows = rows.filter(status=status)
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    now = timezone.now()
    for job in page.object_list:
        _decorate(job, now)
    stats = [
        {
            "status": s,
            "count": counts[s],
            "css": STAT_CLASSES.get(s, "") if counts[s] else "",
            "active": s == status,
        }
        for s in JobStatus.values
    ]
    context = {
        "form": form,
        "status": status,
        "page": page,
        "stats": stats,
        "total": counts["total"],
        "live": bool(counts[JobStatus.PENDING] or counts[JobStatus.LEASED]),
    }
    if not wants_fragment(request):
        context["digests"] = list(DigestRun.objects.defer("payload")[:5])
    return render_page(request, "dashboard/jobs.html", "job-list", context)


# --- detail ---------------------------------------------------------------------------------------


def _job_context(request, job: Job, *, notice: tuple[str, str] | None = None) -> dict:
    result = job.result or {}
    calls = list(LlmCall.objects.filter(job_id=job.id).order_by("created_at", "id"))
    proposals = list(
        job.proposals.only(
            "id", "action", "applied_as", "status", "fact_content", "fact_type", "fact_confidence", "confidence",
            "review_needed", "blocked_reason", "skipped_reason", "reason", "target_memory_id",
            "position", "created_at", "job_id",
        ).order_by("position", "created_at")
    )  # fmt: skip
    write_stats = [
        {"key": key, "value": value} for key, value in (result.get("writeStats") or {}).items()
    ]
    return {
        "job": _decorate(job, timezone.now()),
        "live": job.status in LIVE,
        "running": job.status == JobStatus.LEASED,  # a worker holds its lease now
        "can_retry": has_role(request.user, "reviewer") and reviewing.retryable(job),
        "facts": result.get("facts") or [],
        "entities": result.get("entities") or [],
        "warnings": result.get("warnings") or [],
        "write_mode": result.get("writeMode"),
        "write_mode_note": wording.mode_note(result.get("writeMode")),
        "write_stats": write_stats,
        "write_total": sum(s["value"] for s in write_stats if isinstance(s["value"], int | float)),
        "cancelled": result.get("cancelled"),
        "result_model": result.get("model"),
        "result_provider": result.get("provider"),
        "proposals": proposals,
        # write_stats is what the write did then; this is where its proposals stand now.
        "statuses_now": Counter(p.status for p in proposals).most_common(),
        "calls": calls,
        "notice": notice,
    }


def _get_job(job_id: str) -> Job:
    return get_object_or_404(with_finishing_lease(Job.objects.select_related("memory")), id=job_id)


@role_required("viewer")
@require_GET
def job(request, job_id: str):
    job = _get_job(job_id)
    context = _job_context(request, job)
    response = render_page(request, "dashboard/job.html", "job-status", context)
    if wants_fragment(request) and not context["live"]:
        # The fragment polls itself while the job is pending or leased; 286 stops the polling.
        response.status_code = HttpResponseStopPolling.status_code
    return response


@require_POST
@role_required("reviewer")
def retry(request, job_id: str):
    job = _get_job(job_id)
    try:
        reviewing.retry_job(job.id, reviewer_actor(request))
    except Refused as refused:
        text, level, retried = f"{refused.message[:1].upper()}{refused.message[1:]}.", "bad", False
    else:
        text, level, retried = "Job sent back to the queue with a fresh attempt budget.", "ok", True
    if request.htmx:
        job = _get_job(job_id)
        return render(
            request,
            "dashboard/job.html#job-status",
            _job_context(request, job, notice=(level, text)),
        )
    (messages.success if retried else messages.error)(request, text)
    return redirect("dashboard:job", job_id=job.id)
