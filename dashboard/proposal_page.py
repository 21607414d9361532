"""The proposal page (dashboard/proposal.html) and what it shows: drawn for a visit, and again
after a decision it refused, with what the reviewer typed (dashboard.views.proposal and
dashboard.views.review both answer with it)."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse

from dashboard import wording
from memory.models import MemoryCold
from pipeline import queues
from pipeline import review as reviewing
from pipeline.models import LlmCall, Proposal
from pipeline.trail import trail_of


def render_proposal(request, proposal_id: str, refused=None, note: str = "") -> HttpResponse:
    """The proposal's page; after a refused decision (`refused`: its bound DecideForm, `note`:
    why), with what the reviewer typed and each error next to its field."""
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
        "extract_call": extract_call,
        "decide_call": decide_call,
        "warnings": result.get("warnings", []),
        "siblings": Proposal.objects.filter(job_id=p.job_id).exclude(id=p.id).order_by("position"),
        # The version the target moved on from, since the decision or since its own change.
        "target_changed_from": reviewing.target_changed_since(p),
        # What was (or would be) written: the reviewer's edit, else the model's text.
        "applied_text": p.applied_content or p.fact_content,
        "mode_note": wording.mode_note(p.mode),
        "in_queues": queues.queues_of(p, queues.saved_queues()),
        # Who proposed, decided, undid, withdrew, took over or reverted it (a QA pass: those
        # rows were only on the raw memory's timeline).
        "trail": trail_of(p),
        # The raw memory's text as its job read it, when an edit since archived it.
        "source_then": (
            MemoryCold.objects.filter(memory_id=p.source_memory_id, version=p.source_version)
            .order_by("-archived_at")
            .values_list("content", flat=True)
            .first()
            if p.source_changed
            else None
        ),
        "refused": refused,
        "refused_note": note,
        # Where a triple's decision comes back to without htmx: the page's own address (after a
        # refused decision the page is drawn at the decision's POST-only one).
        "next": reverse("dashboard:proposal", args=[p.id]),
    }
    return render(request, "dashboard/proposal.html", context)
