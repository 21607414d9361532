"""Redaction (reviewers): the confirmation of a span's redaction (exactly what it replaces and
where), the redaction itself answered where it was asked (the queue row swapped in place; the
memory's or the proposal's page refreshed by htmx, the page kept), and the receipt of any
redaction. Every rule and write is pipeline.redaction's, reached through pipeline.review."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from dashboard import wording
from dashboard.access import reviewer_actor, role_required
from dashboard.htmx import render_page, review_changed, toast
from dashboard.redact_forms import RedactForm
from memory.models import Memory, MemoryHistory
from memory.redaction import REDACTED_EVENT
from memory.roles import ADMIN, has_role
from memory.writes import Refused
from pipeline import approvals, review, safety
from pipeline.models import Proposal

PAGE = "dashboard/redact.html"
ROW = "dashboard/review.html#row"
ROWS_OUT_OF_BAND = "dashboard/review.html#rows-out-of-band"
LISTED = 10  # memories the confirmation lists (the count says how many in all)


@require_POST
@role_required("reviewer")
def redact(request):
    form = RedactForm(request.POST)
    any_span = has_role(request.user, ADMIN)  # a reviewer redacts a finding's span only
    planned = None
    if form.is_valid():
        try:
            planned = review.redaction_plan(form.redaction_request(any_span=any_span))
        except Refused as refused:
            form.add_refusal(refused.code, refused.message)
    if planned is None or form.cleaned_data["step"] == "preview":
        return _panel(request, form, planned)
    try:
        receipt = review.redact(
            form.redaction_request(any_span=any_span),
            reason=form.cleaned_data["reason"],
            actor=reviewer_actor(request),
        )
    except Refused as refused:
        form.add_refusal(refused.code, refused.message)
        return _panel(request, form, planned)
    return _done(request, form, receipt)


def _panel(request, form: RedactForm, planned) -> HttpResponse:
    """The confirmation (or the request's errors) where the reviewer asked for it. htmx swaps
    only a 2xx answer: errors come back as 200 to it, into the confirmation's slot."""
    context = {"form": form, "planned": planned, "listed": LISTED}
    if planned is not None:
        context["noun"] = safety.KINDS[planned.kind].noun
        context["reason"] = form.data.get("reason") or f"{context['noun']} in the text"
    if not request.htmx:
        return render(request, PAGE, context, status=400 if form.errors else 200)
    response = render(request, f"{PAGE}#redact-panel", context)
    slot = form.cleaned_data.get("slot") if hasattr(form, "cleaned_data") else None
    if slot:  # the confirm button aims at the row or the page: a refusal stays in the panel
        response["HX-Retarget"] = f"#redact-{slot}"
        response["HX-Reswap"] = "innerHTML"
    return response


def _done(request, form: RedactForm, receipt) -> HttpResponse:
    data = form.cleaned_data
    message = wording.redacted(receipt, safety.KINDS[receipt.kind].noun)
    receipt_url = reverse("dashboard:redaction-receipt", args=[receipt.event])
    if not request.htmx:
        messages.success(request, message)
        return redirect(receipt_url)
    if data["origin"] == "row" and data["proposal"]:
        proposal = Proposal.objects.select_related("target_memory", "source_memory").get(
            id=data["proposal"]
        )
        # The proposal is still open: the row comes back ready for a decision, the toast says
        # what was done; a check that found copies stays in the row, as a refusal would.
        context = {"p": proposal, "can_review": True}
        if not receipt.verified:
            context.update(note=message, note_css="bad")
        response = render(request, ROW, context)
        response.write(_other_rows(request, receipt, proposal.id))
        return toast(review_changed(response), message)
    # The page the reviewer is on, fetched again by htmx into its main part: nothing reloads.
    if data["origin"] == "proposal" and data["proposal"]:
        messages.success(request, message)
        path, part = reverse("dashboard:proposal", args=[data["proposal"]]), "main.page"
    else:
        path, part = reverse("dashboard:memory", args=[data["memory"]]), "#memory-main"
    response = HttpResponse(status=200)
    response["HX-Location"] = json.dumps(
        {"path": path, "target": part, "select": part, "swap": "outerHTML", "push": "false"}
    )
    return toast(response, message)


def _other_rows(request, receipt, shown_id: str) -> str:
    """The other open proposals the redaction rewrote, swapped in place out of band where the
    page shows them (`shown`, the queue page's rows: one not on the page had no place to go,
    and htmx said so in the console); <template>: a <tr> parses only inside a table or a
    template."""
    others = review.proposals_rewritten_by(receipt).exclude(id=shown_id)
    if shown := request.POST.get("shown", "").split():
        others = others.filter(id__in=shown)
    others = others.select_related("target_memory", "source_memory", "claim").prefetch_related(
        "approvals"
    )[:200]
    rows = list(others)
    retiring = approvals.retiring(rows)  # each row's two-person badge, in one query
    context = {
        "rows": [{"p": p} for p in rows],
        "can_review": True,
        "oob": True,
        "retiring": retiring,
    }
    return render_to_string(ROWS_OUT_OF_BAND, context, request)


@require_GET
@role_required("viewer")
def redaction_receipt(request, event_id: str):
    event = get_object_or_404(
        MemoryHistory.objects.select_related("memory"), id=event_id, event=REDACTED_EVENT
    )
    receipt = (event.metadata or {}).get("receipt")
    others = (receipt or {}).get("otherMemories", [])
    context = {
        "event": event,
        "receipt": receipt,
        "rows": sorted((receipt or {}).get("rows", {}).items()),
        "kind_words": safety.KINDS[event.metadata["kind"]].words
        if event.metadata.get("kind") in safety.KINDS
        else event.metadata.get("kind"),
        # Where the same text is still held: each memory's page offers its own redaction.
        "others": Memory.objects.filter(id__in=others).order_by("created_at", "id"),
        "receipt_json": json.dumps(
            {k: v for k, v in (receipt or {}).items() if k != "checks"}, indent=2
        ),
    }
    return render_page(request, PAGE, "receipt-main", context)
