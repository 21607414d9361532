"""Review pages: overview, the review queue with bulk actions, proposal detail, contradictions."""

from __future__ import annotations

import json
from datetime import timedelta

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Count, Min, Q
from django.http import HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dashboard import charts
from dashboard.access import reviewer_actor, role_required
from dashboard.review_forms import BulkForm, DecideForm, QueueFilterForm
from dashboard.views.revert import undo_url
from memory.models import Job, Memory
from memory.writes import Refused
from pipeline import review as reviewing
from pipeline.models import LlmCall, Proposal, ProposalStatus
from pipeline.safety import has_secret
from pipeline.status import banner_context

PAGE_SIZE = 25
BULK_CHUNK = 25


# --- overview -------------------------------------------------------------------------------------


@role_required("viewer")
@require_GET
def overview(request):
    jobs = dict(
        Job.objects.values_list("status").annotate(n=Count("id")).values_list("status", "n")
    )
    counts = Proposal.objects.aggregate(
        pending=Count("id", filter=Q(status="pending")),
        review_needed=Count("id", filter=Q(status="pending", review_needed=True)),
        stale=Count("id", filter=Q(status="stale")),
        skipped=Count("id", filter=Q(status="skipped")),
        oldest=Min("created_at", filter=Q(status="pending")),
    )
    memories = Memory.objects.aggregate(
        live=Count("id", filter=Q(is_deleted=False)),
        derived=Count("id", filter=Q(is_deleted=False, source_type="pipeline-v2")),
        deleted=Count("id", filter=Q(is_deleted=True)),
    )
    days, by_action, by_status = charts.per_day(30)
    context = {
        "jobs": {
            status: jobs.get(status, 0)
            for status in ("pending", "leased", "completed", "dead", "cancelled")
        },
        "counts": counts,
        "memories": memories,
        "action_chart": charts.stacked_bars(
            days, by_action, charts.ACTION_COLOURS, "Proposals per day by action"
        ),
        "outcome_chart": charts.stacked_bars(
            days, by_status, charts.OUTCOME_COLOURS, "Proposals per day by outcome"
        ),
        "action_colours": charts.ACTION_COLOURS,
        "outcome_colours": charts.OUTCOME_COLOURS,
        "approval": charts.approval_rates(),
        "histogram": charts.confidence_histogram(),
    }
    return render(request, "dashboard/overview.html", context)


@role_required("viewer")
@require_GET
def banner(request):
    return render(request, "base.html#banner", banner_context())


# --- review queue -----------------------------------------------------------------------------------


def filtered_queue(data: QueryDict) -> tuple[QueueFilterForm, object]:
    """The queue for a filter form's data; an invalid form filters by its valid fields only."""
    form = QueueFilterForm(data or None)
    form.is_valid()
    f = getattr(form, "cleaned_data", {})
    status = f.get("status") or "pending"
    query = Proposal.objects.filter(status=status)
    if f.get("action"):
        query = query.filter(action=f["action"])
    if f.get("review_needed") in {"yes", "no"}:
        query = query.filter(review_needed=f["review_needed"] == "yes")
    if f.get("conf_min") is not None:
        query = query.filter(fact_confidence__gte=f["conf_min"])
    if f.get("conf_max") is not None:
        query = query.filter(fact_confidence__lte=f["conf_max"])
    for field, column in (
        ("agent", "agent_id"),
        ("model", "model"),
        ("source", "source_memory_id"),
    ):
        if f.get(field):
            query = query.filter(**{column: f[field].strip()})
    now = timezone.now()
    age = f.get("age")
    if age in {"1h", "24h", "7d"}:
        query = query.filter(
            created_at__gte=now
            - {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7)}[age]
        )
    elif age == "older":
        query = query.filter(created_at__lt=now - timedelta(days=7))
    flag = f.get("flag")
    if flag == "unsupported":
        query = query.filter(supported=False)
    elif flag == "safety":
        query = query.exclude(safety_kinds="")
    elif flag:
        query = query.filter(safety_kinds__contains=flag)
    sort = f.get("sort") or "risk"
    order = {
        "risk": ("risk", "fact_confidence", "created_at", "id"),
        "confidence": ("fact_confidence", "created_at", "id"),
        "age": ("created_at", "id"),
        "newest": ("-created_at", "-id"),
    }[sort]
    query = query.order_by(*order)
    return form, query


@role_required("viewer")
@require_GET
def review(request):
    form, query = filtered_queue(request.GET)
    query = query.select_related("target_memory", "source_memory")
    page = Paginator(query, PAGE_SIZE).get_page(request.GET.get("page"))
    filters = request.GET.copy()
    filters.pop("page", None)
    by_action = dict(query.order_by().values_list("action").annotate(n=Count("id")))
    context = {
        "form": form,
        "page": page,
        "filters": filters.urlencode(),
        "total": page.paginator.count,
        "by_action": by_action,
    }
    template = "dashboard/review.html"
    if request.htmx and request.htmx.target == "queue":
        template += "#queue"
    return render(request, template, context)


def _outcome_note(proposal: Proposal, reviewer: str) -> tuple[str, str]:
    if proposal.status == ProposalStatus.APPLIED:
        verb = {"add": "added", "update": "updated", "delete": "deleted"}.get(
            proposal.action, "applied"
        )
        return "ok", f"Approved by {reviewer}: memory {verb}."
    if proposal.status == ProposalStatus.DEDUPED:
        return "ok", f"Approved by {reviewer}: the store already had it (deduplicated)."
    if proposal.status == ProposalStatus.REJECTED:
        return "ok", f"Rejected by {reviewer}: {proposal.review_note}"
    return "", proposal.status


def _decide(request, proposal: Proposal, form: DecideForm) -> tuple[str, str]:
    """Run one reviewer decision; returns (css, message) describing the outcome."""
    actor = reviewer_actor(request)
    data = form.cleaned_data
    decision, content, reason = (
        data["decision"],
        data.get("content") or None,
        (data.get("reason") or "").strip(),
    )
    if decision != "reject" and has_secret(proposal.safety) and not data.get("confirm_secret"):
        return "confirm", "This fact contains a secret. Approve it anyway?"
    try:
        if decision == "reject":
            decided = reviewing.reject(proposal.id, actor, reason=reason)
        elif decision == "keep_both":
            decided = reviewing.approve(
                proposal.id, actor, content=content, action="add", note=reason or "kept both"
            )
        elif decision == "delete_old":
            decided = reviewing.approve(
                proposal.id, actor, action="delete", note=reason or "deleted the old memory"
            )
        elif decision == "merge":
            decided = reviewing.approve(
                proposal.id, actor, content=content, action="update", note=reason or "merged"
            )
        elif decision == "redecide":
            decided = reviewing.approve(
                proposal.id,
                actor,
                content=content,
                note=reason or "re-decided on the current version",
                redecide=True,
            )
        else:
            decided = reviewing.approve(proposal.id, actor, content=content, note=reason or None)
    except Refused as refused:
        return "bad", refused.message
    return _outcome_note(decided, actor.name)


def _row_response(request, proposal_id: str, css: str, message: str, template: str) -> HttpResponse:
    proposal = Proposal.objects.select_related("target_memory", "source_memory").get(id=proposal_id)
    response = render(
        request, template, {"p": proposal, "note": message, "note_css": css, "can_review": True}
    )
    toast = {"message": message}
    undo = undo_url(proposal) if css == "ok" else None
    if undo:
        # The toast's Undo reverts an approval or reopens a rejection, re-rendering this row.
        toast["undo"] = undo
        if template.endswith("#row"):
            toast["row"] = f"p-{proposal.id}"
    response["HX-Trigger"] = json.dumps({"review-changed": True, "toast": toast})
    return response


@role_required("reviewer")
@require_POST
def decide(request, proposal_id: str):
    proposal = get_object_or_404(Proposal, id=proposal_id)
    form = DecideForm(request.POST)
    target = request.POST.get("from", "row")
    templates = {
        "row": "dashboard/review.html#row",
        "card": "dashboard/contradictions.html#card",
    }
    if not form.is_valid():
        errors = "; ".join(error for errors in form.errors.values() for error in errors)
        if request.htmx and target in templates:
            return _row_response(request, proposal_id, "bad", errors, templates[target])
        messages.error(request, errors)
        return redirect("dashboard:proposal", proposal_id=proposal_id)
    css, message = _decide(request, proposal, form)
    if request.htmx and target in templates:
        return _row_response(request, proposal_id, css, message, templates[target])
    (messages.error if css == "bad" else messages.success)(request, message)
    return redirect("dashboard:proposal", proposal_id=proposal_id)


# --- bulk -------------------------------------------------------------------------------------------


@role_required("reviewer")
@require_POST
def bulk(request):
    """preview: counts per action before anything happens; apply: one chunk, then the next."""
    form = BulkForm(request.POST)
    filters = QueryDict(request.POST.get("filters", ""))
    if not form.is_valid():
        return render(
            request,
            "dashboard/review.html#bulk-panel",
            {"bulk_form": form, "filters": filters.urlencode()},
        )
    data = form.cleaned_data
    _, query = filtered_queue(filters)
    if data["scope"] == "selected":
        query = query.filter(id__in=form.id_list())
    if data["step"] == "preview":
        by_action = dict(query.order_by().values_list("action").annotate(n=Count("id")))
        context = {
            "bulk_form": form,
            "preview": {"by_action": by_action, "total": sum(by_action.values())},
            "filters": filters.urlencode(),
            "data": data,
        }
        return render(request, "dashboard/review.html#bulk-panel", context)
    # Apply one chunk in a stable order (id cursor), so proposals that fail stay behind once.
    after = data.get("after") or ""
    chunk = list(
        query.order_by("id").filter(id__gt=after).values_list("id", flat=True)[:BULK_CHUNK]
    )
    actor = reviewer_actor(request)
    done, failed = data.get("done") or 0, data.get("failed") or 0
    errors = []
    secret_ids = set(
        Proposal.objects.filter(id__in=chunk, safety_kinds__contains="secret").values_list(
            "id", flat=True
        )
    )
    for proposal_id in chunk:
        if data["decision"] == "approve" and proposal_id in secret_ids:
            failed += 1
            errors.append("A proposal containing a secret was left for a one-by-one approval.")
            continue
        try:
            if data["decision"] == "approve":
                reviewing.approve(
                    proposal_id, actor, note=(data.get("reason") or "").strip() or "bulk approval"
                )
            else:
                reviewing.reject(proposal_id, actor, reason=data["reason"])
            done += 1
        except Refused as refused:
            failed += 1
            errors.append(refused.message)
    total = data.get("total") or (done + failed)
    finished = len(chunk) < BULK_CHUNK
    context = {
        "progress": {
            "done": done,
            "failed": failed,
            "total": max(total, done + failed),
            "finished": finished,
            "after": chunk[-1] if chunk else after,
            "errors": errors[:5],
            "percent": int(100 * (done + failed) / max(total, 1)),
        },
        "data": data,
        "filters": filters.urlencode(),
        "ids": data.get("ids") or "",
    }
    response = render(request, "dashboard/review.html#bulk-progress", context)
    if finished:
        response["HX-Trigger"] = json.dumps(
            {
                "review-changed": True,
                "toast": {
                    "message": f"Bulk {data['decision']}: {done} done, {failed} not applied."
                },
            }
        )
    return response


# --- proposal detail -----------------------------------------------------------------------------------


@role_required("viewer")
@require_GET
def proposal(request, proposal_id: str):
    p = get_object_or_404(
        Proposal.objects.select_related("source_memory", "target_memory", "job", "created_memory"),
        id=proposal_id,
    )
    calls = list(LlmCall.objects.filter(job_id=p.job_id).order_by("created_at", "id"))
    # After a retry the job logged calls of several attempts; the last ones made this proposal.
    extract_call = next((c for c in reversed(calls) if c.kind == "extract"), None)
    decide_call = next(
        (c for c in reversed(calls) if c.kind == "decide" and c.fact_index == p.position), None
    )
    result = p.job.result or {}
    context = {
        "p": p,
        "has_secret": has_secret(p.safety),
        "extract_call": extract_call,
        "decide_call": decide_call,
        "warnings": result.get("warnings", []),
        "siblings": Proposal.objects.filter(job_id=p.job_id).exclude(id=p.id).order_by("position"),
        "target_changed": bool(p.target_memory and p.target_memory.version != p.target_version),
    }
    return render(request, "dashboard/proposal.html", context)


# --- contradictions ---------------------------------------------------------------------------------


@role_required("viewer")
@require_GET
def contradictions(request):
    flagged = (
        Proposal.objects.filter(status="pending", review_needed=True)
        .select_related("target_memory", "source_memory")
        .order_by("created_at", "id")
    )
    stale = (
        Proposal.objects.filter(status="stale")
        .select_related("target_memory", "source_memory")
        .order_by("created_at", "id")
    )
    page = Paginator(flagged, 20).get_page(request.GET.get("page"))
    return render(
        request,
        "dashboard/contradictions.html",
        {"page": page, "stale": stale[:50], "stale_count": stale.count()},
    )
