"""Reviewer decisions on extracted entity triples (shown on the job and proposal pages): approve
puts the entities, the relation and the mentions in the graph, reject adds nothing."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from dashboard.access import reviewer_actor, role_required
from dashboard.htmx import toast
from memory.writes import Refused
from pipeline import review as reviewing
from pipeline.models import TripleReview, TripleStatus
from pipeline.review import Decision

NOTE_CHARS = 1000


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
    if decision not in {Decision.APPROVE, Decision.REJECT}:
        message = "Choose approve or reject."
    else:
        try:
            triple = reviewing.decide_triple(
                triple.id, reviewer_actor(request), approve=decision == Decision.APPROVE, note=note
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
        return toast(response, message)
    (messages.success if css == "ok" else messages.error)(request, message)
    return redirect(_next_url(request, triple))
