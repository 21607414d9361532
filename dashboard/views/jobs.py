"""Jobs pages: the queue by status, one job with everything it did (facts, proposals, warnings,
the exact model calls), and sending a dead job back to the queue."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseStopPolling

from dashboard.access import reviewer_actor, role_required
from dashboard.forms import JobFilterForm
from dashboard.roles import has_role
from memory.models import Job, JobStatus
from pipeline import apply
from pipeline.models import LlmCall

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


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def job_timing(job: Job, now) -> tuple[str, str]:
    """(label, duration) of a job: how long it took, is running, or has been waiting."""
    if job.status == JobStatus.LEASED and job.leased_at:
        return "running", format_seconds((now - job.leased_at).total_seconds())
    if job.status == JobStatus.PENDING:
        return "waiting", format_seconds((now - job.created_at).total_seconds())
    end = job.completed_at or job.failed_at
    if end is None:
        return "", "–"
    return "took", format_seconds((end - job.created_at).total_seconds())


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
        Job.objects.select_related("memory")
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
    template = "dashboard/jobs.html"
    if request.htmx:
        template += "#job-list"
    return render(request, template, context)


# --- detail ---------------------------------------------------------------------------------------


def _job_context(request, job: Job, *, notice: tuple[str, str] | None = None) -> dict:
    result = job.result or {}
    calls = list(LlmCall.objects.filter(job_id=job.id).order_by("created_at", "id"))
    for call in calls:
        call.seconds = format_seconds(call.duration_ms / 1000)
    proposals = list(
        job.proposals.only(
            "id", "action", "status", "fact_content", "fact_type", "fact_confidence", "confidence",
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
        "can_retry": job.status == JobStatus.DEAD and has_role(request.user, "reviewer"),
        "facts": result.get("facts") or [],
        "entities": result.get("entities") or [],
        "warnings": result.get("warnings") or [],
        "write_mode": result.get("writeMode"),
        "write_stats": write_stats,
        "write_total": sum(s["value"] for s in write_stats if isinstance(s["value"], int | float)),
        "cancelled": result.get("cancelled"),
        "result_model": result.get("model"),
        "result_provider": result.get("provider"),
        "proposals": proposals,
        "calls": calls,
        "notice": notice,
    }


def _get_job(job_id: str) -> Job:
    return get_object_or_404(Job.objects.select_related("memory"), id=job_id)


@role_required("viewer")
@require_GET
def job(request, job_id: str):
    job = _get_job(job_id)
    context = _job_context(request, job)
    if not request.htmx:
        return render(request, "dashboard/job.html", context)
    # htmx: the status fragment, which polls itself while the job is pending or leased.
    fragment = "dashboard/job.html#job-status"
    if context["live"]:
        return render(request, fragment, context)
    return HttpResponseStopPolling(render_to_string(fragment, context, request=request))


@require_POST
@role_required("reviewer")
def retry(request, job_id: str):
    job = _get_job(job_id)
    retried = apply.retry_dead_job(job.id, actor=reviewer_actor(request))
    if retried:
        text, level = "Job sent back to the queue with a fresh attempt budget.", "ok"
    else:
        text, level = f"Nothing to retry: the job is {job.status}, not dead.", "bad"
    if request.htmx:
        job = _get_job(job_id)
        return render(
            request,
            "dashboard/job.html#job-status",
            _job_context(request, job, notice=(level, text)),
        )
    (messages.success if retried else messages.error)(request, text)
    return redirect("dashboard:job", job_id=job.id)
