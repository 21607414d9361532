"""Undoing reviewer work: revert an applied proposal (and undo the revert), undo a rejection,
unsuppress a proposal a rejection fingerprint held back, and revert everything derived from one
raw memory. Every write goes through pipeline.apply; these views only check intent and report.

Each single-proposal action answers htmx with a toast (HX-Trigger `toast` + `review-changed`) and
the re-rendered queue row when the request targets it (HX-Target `p-<id>`), else 204; a plain POST
redirects to the proposal page (or a safe `next`) with a message.
"""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import truncatechars
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from dashboard.access import reviewer_actor, role_required
from memory.models import Memory
from memory.writes import Refused
from pipeline import apply
from pipeline.models import Proposal, ProposalStatus
from pipeline.review import revert_once

REASON_MAX = 2000
ROW_TEMPLATE = "dashboard/review.html#row"


# --- intent-checked actions (shared with the JSON API) -------------------------------------------


def undo_url(proposal: Proposal) -> str | None:
    """Where the undo toast posts after a reviewer decision, if the outcome can be undone."""
    if proposal.status == ProposalStatus.APPLIED and proposal.reverted_at is None:
        return reverse("dashboard:revert", args=[proposal.id])
    if proposal.status == ProposalStatus.REJECTED:
        return reverse("dashboard:reopen", args=[proposal.id])
    return None


def affected_memory_id(proposal: Proposal) -> str | None:
    return proposal.created_memory_id or proposal.updated_memory_id or proposal.deleted_memory_id


# --- responses ----------------------------------------------------------------------------------


def _reason(request) -> str | None:
    return (request.POST.get("reason") or "").strip()[:REASON_MAX] or None


def _next_url(request) -> str | None:
    target = request.POST.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return None


def _refusal_html(refused: Refused) -> str:
    """The refusal for a page message; a memory that changed since gets a link to open it."""
    memory_id = refused.details.get("memoryId")
    if refused.code == "changed_since" and memory_id:
        return format_html(
            '{} (now version {}). <a href="{}">Open the memory</a>.',
            refused.message,
            refused.details.get("currentVersion"),
            reverse("dashboard:memory", args=[memory_id]),
        )
    return refused.message


def _answer(
    request,
    proposal_id: str,
    *,
    message: str,
    refused: Refused | None = None,
    row_note: bool = True,
) -> HttpResponse:
    if request.htmx:
        trigger = {"review-changed": True, "toast": {"message": message}}
        if request.htmx.target == f"p-{proposal_id}":
            proposal = Proposal.objects.select_related("target_memory", "source_memory").get(
                id=proposal_id
            )
            context = {"p": proposal, "can_review": True}
            if row_note or refused is not None:
                context.update(note=message, note_css="bad" if refused else "ok")
            response = render(request, ROW_TEMPLATE, context)
        else:
            response = HttpResponse(status=204)
        response["HX-Trigger"] = json.dumps(trigger)
        return response
    if refused is None:
        messages.success(request, message)
    else:
        messages.error(request, format_html("{}: {}", message, _refusal_html(refused)))
    return redirect(_next_url(request) or reverse("dashboard:proposal", args=[proposal_id]))


# --- views --------------------------------------------------------------------------------------

_REVERTED = {
    "add": "the memory it created is soft-deleted",
    "update": "the previous content is back",
    "delete": "the memory is recovered",
}
_REAPPLIED = {
    "add": "the memory is back",
    "update": "the approved content is back",
    "delete": "the memory is deleted again",
}


def _revert(request, proposal_id: str, *, undo: bool) -> HttpResponse:
    get_object_or_404(Proposal.objects.only("id"), id=proposal_id)
    actor = reviewer_actor(request)
    try:
        proposal = revert_once(proposal_id, actor, undo=undo, reason=_reason(request))
    except Refused as refused:
        verb = "Revert not undone" if undo else "Not reverted"
        if request.htmx:
            return _answer(
                request, proposal_id, message=f"{verb}: {refused.message}", refused=refused
            )
        return _answer(request, proposal_id, message=verb, refused=refused)
    if undo:
        message = f"Revert undone by {actor.name}: {_REAPPLIED.get(proposal.action, 'done')}."
    else:
        message = f"Reverted by {actor.name}: {_REVERTED.get(proposal.action, 'done')}."
    return _answer(request, proposal_id, message=message)


@role_required("reviewer")
@require_POST
def revert(request, proposal_id: str):
    return _revert(request, proposal_id, undo=False)


@role_required("reviewer")
@require_POST
def undo_revert(request, proposal_id: str):
    return _revert(request, proposal_id, undo=True)


@role_required("reviewer")
@require_POST
def reopen(request, proposal_id: str):
    """Undo a rejection: the proposal is pending again and its fingerprint is lifted."""
    get_object_or_404(Proposal.objects.only("id"), id=proposal_id)
    actor = reviewer_actor(request)
    try:
        apply.reopen(proposal_id, reviewer=actor)
    except Refused as refused:
        if request.htmx:
            message = f"Rejection not undone: {refused.message}"
            return _answer(request, proposal_id, message=message, refused=refused)
        return _answer(request, proposal_id, message="Rejection not undone", refused=refused)
    # The row comes back as it was before the rejection: open for a new decision.
    return _answer(
        request, proposal_id, message=f"Rejection undone by {actor.name}.", row_note=False
    )


@role_required("reviewer")
@require_POST
def unsuppress(request, proposal_id: str):
    """A suppressed proposal goes back to the pending queue; its fingerprint stops matching."""
    get_object_or_404(Proposal.objects.only("id"), id=proposal_id)
    actor = reviewer_actor(request)
    try:
        apply.unsuppress(proposal_id, reviewer=actor)
    except Refused as refused:
        if request.htmx:
            message = f"Not unsuppressed: {refused.message}"
            return _answer(request, proposal_id, message=message, refused=refused)
        return _answer(request, proposal_id, message="Not unsuppressed", refused=refused)
    return _answer(
        request,
        proposal_id,
        message=f"Unsuppressed by {actor.name}: back in the pending queue.",
    )


def _label(proposal: Proposal) -> str:
    return format_html(
        '<a href="{}">{} “{}”</a>',
        reverse("dashboard:proposal", args=[proposal.id]),
        proposal.action.upper(),
        truncatechars(proposal.fact_content, 80),
    )


@role_required("reviewer")
@require_POST
def revert_derived(request, memory_id: str):
    """Revert every applied, not yet reverted proposal of one raw memory, newest first, each in
    its own transaction: one refusal (a memory edited since) never blocks the others."""
    memory = get_object_or_404(Memory.objects.only("id"), id=memory_id)
    actor = reviewer_actor(request)
    reason = _reason(request) or f"reverting everything derived from raw memory {memory.id}"
    proposals = list(
        Proposal.objects.filter(
            source_memory=memory, status=ProposalStatus.APPLIED, reverted_at__isnull=True
        ).order_by("-decided_at", "-created_at", "-position")
    )
    reverted = 0
    for proposal in proposals:
        try:
            revert_once(proposal.id, actor, reason=reason)
        except Refused as refused:
            messages.error(
                request,
                format_html("Not reverted: {}: {}", _label(proposal), _refusal_html(refused)),
            )
        else:
            reverted += 1
            messages.success(
                request,
                format_html(
                    "Reverted {}: {}.", _label(proposal), _REVERTED.get(proposal.action, "done")
                ),
            )
    if not proposals:
        messages.info(request, "Nothing to revert: no applied proposal of this raw memory.")
    else:
        messages.info(
            request,
            f"Reverted {reverted} of {len(proposals)} proposal{'s' if len(proposals) != 1 else ''} "
            "derived from this raw memory.",
        )
    target = reverse("dashboard:memory", args=[memory.id])
    if request.htmx:
        response = HttpResponse(status=204)
        response["HX-Redirect"] = target
        response["HX-Trigger"] = json.dumps({"review-changed": True})
        return response
    return redirect(target)
