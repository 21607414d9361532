"""Taking reviewer work back: undo a decision (back to pending), revert an applied proposal (and
undo the revert), undo a rejection, unsuppress, and revert everything derived from one raw memory.
Every write runs in pipeline.review; these views only report.

Each single-proposal action answers htmx with a toast (and `review-changed`) and the re-rendered
queue row when the request targets it (HX-Target `p-<id>`), else 204; a plain POST redirects to
the proposal page (or a safe `next`) with a message.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import truncatechars
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from dashboard.access import reviewer_actor, role_required
from dashboard.htmx import review_changed, toast
from memory.models import Memory
from memory.writes import Refused
from pipeline import review as reviewing
from pipeline.models import Action, Proposal

REASON_MAX = 2000
ROW = "dashboard/review.html#row"
CARD = "dashboard/contradictions.html#card"

REVERTED = {
    Action.ADD: "the memory it created is soft-deleted",
    Action.UPDATE: "the previous content is back",
    Action.DELETE: "the memory is recovered",
}
REAPPLIED = {
    Action.ADD: "the memory is back",
    Action.UPDATE: "the approved content is back",
    Action.DELETE: "the memory is deleted again",
}


# --- responses ------------------------------------------------------------------------------------


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
        fragment = {f"p-{proposal_id}": ROW, f"c-{proposal_id}": CARD}.get(request.htmx.target)
        if fragment:  # the queue's row or the workbench's card, drawn again as it is now
            proposal = Proposal.objects.select_related("target_memory", "source_memory").get(
                id=proposal_id
            )
            context = {"p": proposal, "can_review": True}
            if row_note or refused is not None:
                context.update(note=message, note_css="bad" if refused else "ok")
            response = render(request, fragment, context)
        else:
            response = HttpResponse(status=204)
        return toast(review_changed(response), message)
    if refused is None:
        messages.success(request, message)
    else:
        messages.error(request, format_html("{}: {}", message, _refusal_html(refused)))
    return redirect(_next_url(request) or reverse("dashboard:proposal", args=[proposal_id]))


def _refused(request, proposal_id: str, verb: str, refused: Refused) -> HttpResponse:
    """A refusal: the toast carries the whole sentence, a page message links what it can."""
    if request.htmx:
        return _answer(request, proposal_id, message=f"{verb}: {refused.message}", refused=refused)
    return _answer(request, proposal_id, message=verb, refused=refused)


# --- undo a decision ------------------------------------------------------------------------------


@role_required("reviewer")
@require_POST
def undo_decision(request, proposal_id: str):
    """Undo a decision (the toast's, the proposal page's): the change is reverted and the
    proposal is pending; or this reviewer's first approval under the two-person rule withdrawn."""
    before = get_object_or_404(Proposal.objects.only("id", "status"), id=proposal_id)
    actor = reviewer_actor(request)
    try:
        proposal = reviewing.undo(proposal_id, actor, reason=_reason(request))
    except Refused as refused:
        return _refused(request, proposal_id, "Not undone", refused)
    if before.is_open:  # nothing was decided yet: it was a first approval
        message = f"First approval withdrawn by {actor.name}: the {proposal.action.upper()} "
        message += "waits for two approvals again."
    else:
        message = f"Decision undone by {actor.name}: {proposal.action.upper()} is pending again."
    # The row comes back open, ready for a new decision.
    return _answer(request, proposal_id, message=message, row_note=False)


# --- revert ---------------------------------------------------------------------------------------


def _revert(request, proposal_id: str, *, undo: bool) -> HttpResponse:
    get_object_or_404(Proposal.objects.only("id"), id=proposal_id)
    actor = reviewer_actor(request)
    try:
        proposal = reviewing.revert_once(proposal_id, actor, undo=undo, reason=_reason(request))
    except Refused as refused:
        return _refused(
            request, proposal_id, "Revert not undone" if undo else "Not reverted", refused
        )
    if undo:
        message = (
            f"Revert undone by {actor.name}: {REAPPLIED.get(proposal.applied_action, 'done')}."
        )
    else:
        message = f"Reverted by {actor.name}: {REVERTED.get(proposal.applied_action, 'done')}."
    return _answer(request, proposal_id, message=message)


@role_required("reviewer")
@require_POST
def revert(request, proposal_id: str):
    return _revert(request, proposal_id, undo=False)


@role_required("reviewer")
@require_POST
def undo_revert(request, proposal_id: str):
    return _revert(request, proposal_id, undo=True)


# --- rejections and suppressions ------------------------------------------------------------------


@role_required("reviewer")
@require_POST
def reopen(request, proposal_id: str):
    """Undo a rejection: the proposal is pending again and its fingerprint is lifted."""
    get_object_or_404(Proposal.objects.only("id"), id=proposal_id)
    actor = reviewer_actor(request)
    try:
        reviewing.reopen(proposal_id, actor)
    except Refused as refused:
        return _refused(request, proposal_id, "Rejection not undone", refused)
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
        reviewing.unsuppress(proposal_id, actor)
    except Refused as refused:
        return _refused(request, proposal_id, "Not unsuppressed", refused)
    return _answer(
        request,
        proposal_id,
        message=f"Unsuppressed by {actor.name}: back in the pending queue.",
    )


# --- everything derived from one raw memory -------------------------------------------------------


def _label(proposal: Proposal) -> str:
    """The proposal as a link: its action (and the one applied, when a reviewer chose another)."""
    applied = f" applied as {proposal.applied_as.upper()}" if proposal.applied_as else ""
    return format_html(
        '<a href="{}">{}{} “{}”</a>',
        reverse("dashboard:proposal", args=[proposal.id]),
        proposal.action.upper(),
        applied,
        truncatechars(proposal.fact_content, 80),
    )


@role_required("reviewer")
@require_POST
def revert_derived(request, memory_id: str):
    """Report pipeline.review.revert_derived, one message per proposal, on the memory's page."""
    memory = get_object_or_404(Memory.objects.only("id"), id=memory_id)
    results = reviewing.revert_derived(memory.id, reviewer_actor(request), reason=_reason(request))
    for result in results:
        if result.refused is not None:
            messages.error(
                request,
                format_html(
                    "Not reverted: {}: {}", _label(result.proposal), _refusal_html(result.refused)
                ),
            )
        else:
            messages.success(
                request,
                format_html(
                    "Reverted {}: {}.",
                    _label(result.proposal),
                    REVERTED.get(result.proposal.applied_action, "done"),
                ),
            )
    if not results:
        messages.info(request, "Nothing to revert: no applied proposal of this raw memory.")
    else:
        reverted = sum(1 for result in results if result.refused is None)
        messages.info(
            request,
            f"Reverted {reverted} of {len(results)} proposal{'s' if len(results) != 1 else ''} "
            "derived from this raw memory.",
        )
    target = reverse("dashboard:memory", args=[memory.id])
    if request.htmx:
        return review_changed(HttpResponseClientRedirect(target))
    return redirect(target)
