"""Reviewer analytics (page + CSV export) and reviewer decisions on extracted entity triples."""

from __future__ import annotations

import csv
import json

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from dashboard.access import reviewer_actor, role_required
from memory.writes import Refused
from pipeline import analytics, apply
from pipeline.models import TripleReview, TripleStatus

NOTE_CHARS = 1000


# --- analytics ----------------------------------------------------------------------------------------


@role_required("viewer")
@require_GET
def analytics_page(request):
    filters = analytics.parse_filters(request.GET)
    context = {
        **analytics.report(filters),
        "options": analytics.filter_options(),
        "day_choices": analytics.DAY_CHOICES,
        "outcome_colours": analytics.OUTCOME_COLOURS,
        "auto_colours": analytics.AUTO_COLOURS,
        "auto_name": analytics.AUTO,
        "csv_query": filters.querystring(),
    }
    return render(request, "dashboard/analytics.html", context)


@role_required("viewer")
@require_GET
def analytics_csv(request):
    filters = analytics.parse_filters(request.GET)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d")
    response["Content-Disposition"] = (
        f'attachment; filename="reviewer-analytics-{filters.days_param}-{stamp}.csv"'
    )
    writer = csv.writer(response)
    writer.writerow(analytics.CSV_HEADER)
    for row in analytics.csv_rows(filters):
        writer.writerow([analytics.csv_safe(cell) for cell in row])
    return response


# --- entity triples -----------------------------------------------------------------------------------


def _next_url(request, triple: TripleReview) -> str:
    target = request.POST.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return reverse("dashboard:job", args=[triple.job_id]) + f"#triple-{triple.id}"


def _decided_message(triple: TripleReview) -> str:
    when = triple.decided_at.strftime("%Y-%m-%d %H:%M UTC") if triple.decided_at else "earlier"
    return f"This triple is already {triple.status} by {triple.decided_by or 'someone'} ({when})."


@role_required("reviewer")
@require_POST
def decide_triple(request, triple_id: int):
    """Approve (entities, relation and mentions through the explicit graph path) or reject."""
    triple = get_object_or_404(TripleReview, id=triple_id)
    decision = request.POST.get("decision", "")
    note = (request.POST.get("note") or "").strip()[:NOTE_CHARS] or None
    css = "bad"
    if decision not in {"approve", "reject"}:
        message = "Choose approve or reject."
    else:
        try:
            triple = apply.decide_triple(
                triple.id,
                reviewer=reviewer_actor(request),
                approve=decision == "approve",
                note=note,
            )
        except Refused as refused:
            triple = TripleReview.objects.get(id=triple.id)
            message = (
                _decided_message(triple)
                if triple.status != TripleStatus.PENDING
                else refused.message
            )
        else:
            css = "ok"
            if triple.status == TripleStatus.APPROVED:
                message = (
                    f"Approved by {triple.decided_by}: {triple.source} and {triple.target} "
                    f"are in the entity graph, linked to the raw memory."
                )
            else:
                message = f"Rejected by {triple.decided_by}: nothing was added to the graph."
    if request.htmx:
        response = render(
            request,
            "dashboard/job.html#triple-row",
            {
                "t": triple,
                "note": message,
                "note_css": css,
                "can_review": True,
                "next": request.POST.get("next") or "",
            },
        )
        response["HX-Trigger"] = json.dumps({"toast": {"message": message}})
        return response
    (messages.success if css == "ok" else messages.error)(request, message)
    return redirect(_next_url(request, triple))
