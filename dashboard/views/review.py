"""The review queue: filters, keyset pages, one decision per row (or contradiction card, or the
proposal page), and bulk decisions with a counted confirmation. Decisions run in pipeline.review."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_GET, require_POST

from dashboard import prefs, wording
from dashboard.access import reviewer_actor, role_required
from dashboard.htmx import render_page, review_changed, toast
from dashboard.paging import beyond, cursor_page
from dashboard.proposal_page import render_proposal
from dashboard.review_forms import BulkForm, DecideForm, queue_for
from memory.writes import Refused
from pipeline import approvals
from pipeline import review as reviewing
from pipeline.models import Proposal, ProposalStatus, queue_order
from pipeline.review import Decision

PAGE_SIZE = 25
BULK_CHUNK = 25
# How often an open queue asks who is reviewing its rows (dashboard.views.claims.poll): a claim
# shows on another reviewer's page within this many seconds.
CLAIMS_POLL_SECONDS = 5


# --- the queue ------------------------------------------------------------------------------------


def _queue_end(request, form, query) -> HttpResponse:
    """Asked when j or n finds no next page: say this is the end, and how many proposals arrived
    (since the reviewer opened the queue's first page) on the pages before this one."""
    since = parse_datetime(request.GET.get("since") or "")
    order = queue_order(form.filters()["sort"])
    fresh = query.filter(created_at__gt=since) if since else query.none()
    first = request.GET.get("first")
    anchor = (
        Proposal.objects.filter(pk=first).values(*(key.lstrip("-") for key in order)).first()
        if first
        else None
    )
    if anchor:
        fresh = fresh.filter(beyond(order, anchor, forward=False))
    context = {"fresh": fresh.count(), "filters": _filters(request)}
    response = render(request, "dashboard/review.html#queue-end", context)
    return toast(response, wording.queue_end(context["fresh"]))


def _filters(request) -> str:
    """The queue's filters as a query string, without its cursors."""
    filters = request.GET.copy()
    for cursor in ("after", "before", "page", "end", "since", "first", "counts"):
        filters.pop(cursor, None)
    return filters.urlencode()


@role_required("viewer")
@require_GET
def review(request):
    form, query = queue_for(request.GET)
    if request.htmx and request.GET.get("end"):
        return _queue_end(request, form, query)
    if request.htmx and request.GET.get("counts"):
        return HttpResponse(_counts_out_of_band(request, query))
    by_action = reviewing.count_by_action(query)
    page = cursor_page(
        query.select_related("target_memory", "source_memory", "claim").prefetch_related(
            "approvals"
        ),
        queue_order(form.filters()["sort"]),
        PAGE_SIZE,
        after=request.GET.get("after"),
        before=request.GET.get("before"),
        count=sum(by_action.values()),  # the counts by action already read every match
    )
    context = {
        "form": form,
        "page": page,
        "retiring": approvals.retiring(page.object_list),
        "filters": _filters(request),
        "loaded_at": timezone.now().isoformat(),
        "total": page.count,
        "by_action": by_action,
        "saved_queue": form.saved_queue(),
        "compact": prefs.of(request).compact_rows,
        "claims_poll_seconds": CLAIMS_POLL_SECONDS,
    }
    return render_page(request, "dashboard/review.html", "queue", context)


# --- one decision ---------------------------------------------------------------------------------

ROWS_OUT_OF_BAND = "dashboard/review.html#rows-out-of-band"
ANSWERS = {  # where a decision came from -> the fragment that answers it
    "row": "dashboard/review.html#row",
    "card": "dashboard/contradictions.html#card",
}


FORCE_ERROR = "The memory this changes is pinned: tick this and decide again to apply it."


def _decide(request, proposal: Proposal, form: DecideForm) -> tuple[str, str]:
    """Run one reviewer decision; returns (css, message) describing the outcome (a refusal's
    code is left on the form as `refused_code`, for the row that keeps a typed edit)."""
    actor = reviewer_actor(request)
    data = form.cleaned_data
    try:
        decided = reviewing.decide(
            proposal.id,
            actor,
            data["decision"],
            content=data.get("content") or None,
            reason=(data.get("reason") or "").strip(),
            confirmed=bool(data.get("confirm_secret")),
            force=bool(data.get("force")),
        )
    except Refused as refused:
        form.refused_code = refused.code
        if refused.code == "pinned_requires_force":  # said by the checkbox that answers it
            form.add_error("force", FORCE_ERROR)
        if refused.code == "confirm_secret":
            finding = refused.details["finding"]
            return "confirm", f"This fact contains {finding}. Approve it anyway?"
        return "bad", wording.refusal(refused)
    return "ok", wording.outcome(decided, actor.name)


def _kept_edit(form: DecideForm, css: str) -> dict | None:
    """A refused edit-and-approve: the text the reviewer typed, so the row gives it back (open
    and focused) instead of losing it, and why it was refused (pinned: tick force and save)."""
    content = (form.cleaned_data.get("content") or "") if hasattr(form, "cleaned_data") else ""
    if css == "ok" or not content.strip():
        return None
    code = getattr(form, "refused_code", None)
    return {"content": content, "force": code == "pinned_requires_force", "code": code}


def undo_url(proposal: Proposal, reviewer: str | None = None) -> str | None:
    """Where the toast's Undo posts after a decision: back to pending, if it can be undone (or
    `reviewer`'s first approval under the two-person rule withdrawn)."""
    if not reviewing.can_undo(proposal, reviewer):
        return None
    if proposal.status == ProposalStatus.REJECTED:
        return reverse("dashboard:reopen", args=[proposal.id])
    return reverse("dashboard:undo-decision", args=[proposal.id])


def _answer(
    request,
    proposal_id: str,
    css: str,
    message: str,
    fragment: str,
    kept: dict | None = None,
    form: DecideForm | None = None,
) -> HttpResponse:
    proposal = Proposal.objects.select_related("target_memory", "source_memory").get(id=proposal_id)
    context = {"p": proposal, "note": message, "note_css": css, "can_review": True, "kept": kept}
    if css != "ok":
        context["refused"] = form  # a card gives back what was typed, errors next to their fields
    response = render(request, fragment, context)
    extra = {}
    undo = undo_url(proposal, request.user.get_username()) if css == "ok" else None
    if undo:
        # The toast's Undo puts the proposal back to pending, re-rendering this row.
        extra["undo"] = undo
        if fragment.endswith("#row"):
            extra["row"] = f"p-{proposal.id}"
        elif fragment.endswith("#card"):  # a contradiction card comes back open the same way
            extra["row"] = f"c-{proposal.id}"
    return toast(review_changed(response), message, **extra)


@role_required("reviewer")
@require_POST
def decide(request, proposal_id: str):
    proposal = get_object_or_404(Proposal, id=proposal_id)
    form = DecideForm(request.POST)
    fragment = ANSWERS.get(request.POST.get("from", "row")) if request.htmx else None
    if form.is_valid():
        css, message = _decide(request, proposal, form)
    else:
        css = "bad"
        message = "; ".join(error for errors in form.errors.values() for error in errors)
    if fragment:
        return _answer(request, proposal_id, css, message, fragment, _kept_edit(form, css), form)
    if css != "ok":  # the page again, with what was typed: a redirect would lose it
        return render_proposal(request, proposal_id, refused=form, note=message)
    messages.success(request, message)
    return redirect("dashboard:proposal", proposal_id=proposal_id)


# --- bulk -----------------------------------------------------------------------------------------


def _rows_out_of_band(request, outcomes: list[reviewing.BulkOutcome], actor) -> bytes:
    """The ticked rows of this chunk again, each with what happened to it (decided, or why not),
    swapped in place out of band: the reviewer sees every row's outcome where it was ticked."""
    proposals = (
        Proposal.objects.select_related("target_memory", "source_memory", "claim")
        .prefetch_related("approvals")
        .in_bulk([outcome.proposal_id for outcome in outcomes])
    )
    rows = []
    for outcome in outcomes:
        proposal = proposals.get(outcome.proposal_id)
        if proposal is None:
            continue
        note = wording.outcome(proposal, actor.name) if outcome.done else outcome.error
        rows.append({"p": proposal, "note": note, "note_css": "ok" if outcome.done else "bad"})
    retiring = approvals.retiring(proposals.values())
    context = {"rows": rows, "can_review": True, "oob": True, "retiring": retiring}
    return render_to_string(ROWS_OUT_OF_BAND, context, request).encode()


def _reason_error_out_of_band(request, form: BulkForm) -> bytes:
    """The bulk reason's error (or none) by the reason box in the queue's bar, out of band."""
    context = {"oob": True, "reason_error": " ".join(form.errors.get("reason", []))}
    return render_to_string("dashboard/review.html#bulk-reason-error", context, request).encode()


def _counts_out_of_band(request, matching) -> bytes:
    """The bulk bar's counts of the queue as it is now, swapped in place out of band."""
    by_action = reviewing.count_by_action(matching)
    context = {"total": sum(by_action.values()), "by_action": by_action, "oob": True}
    return "".join(
        render_to_string(f"dashboard/review.html#{name}", context, request)
        for name in ("queue-counts", "scope-all-count")
    ).encode()


def _deciders(form: BulkForm, actor) -> list[str]:
    """Who else decided ticked proposals before the bulk action reached them."""
    if form.cleaned_data["scope"] != "selected":
        return []
    decided = Proposal.objects.filter(id__in=form.id_list()).exclude(decided_by__isnull=True)
    names = decided.exclude(decided_by=actor.name).values_list("decided_by", flat=True)
    return sorted(set(names))


@role_required("reviewer")
@require_POST
def bulk(request):
    """preview: counts per action and safety finding before anything happens; apply: one chunk,
    then the next (the panel posts again until the last chunk)."""
    form = BulkForm(request.POST)
    filters = QueryDict(request.POST.get("filters", ""))
    panel = "dashboard/review.html#bulk-panel"
    if not form.is_valid():
        response = render(request, panel, {"bulk_form": form, "filters": filters.urlencode()})
        response.content += _reason_error_out_of_band(request, form)
        return response
    data = form.cleaned_data
    previewed_at = data.get("previewed_at")
    # A run counts its filter's ages back from its preview: "older than 7 days" takes in no
    # proposal that grew old during the run.
    _, matching = queue_for(filters, now=previewed_at)
    query = matching
    if data["scope"] == "selected":
        query = query.filter(id__in=form.id_list())
    if data["step"] == "preview":
        counted_at = timezone.now()  # before the count: what arrives after it is not counted
        summary = reviewing.bulk_summary(query, request.user.get_username())
        context = {
            "bulk_form": form,
            "preview": summary,
            # How many the confirmation decides (those left out are said apart).
            "decides": summary["approves" if data["decision"] == Decision.APPROVE else "rejects"],
            "previewed_at": counted_at.isoformat(),
            "filters": filters.urlencode(),
            "data": data,
        }
        response = render(request, panel, context)
        response.content += _reason_error_out_of_band(request, form)  # clears an earlier one
        return response
    query = reviewing.as_previewed(query, previewed_at)
    # One chunk in a stable order (id cursor), so proposals that fail stay behind only once.
    after = data.get("after") or ""
    chunk = list(
        query.order_by("id").filter(id__gt=after).values_list("id", flat=True)[:BULK_CHUNK]
    )
    actor = reviewer_actor(request)
    if data["decision"] == Decision.APPROVE:
        outcomes = reviewing.bulk_approve(
            chunk,
            actor,
            note=(data.get("reason") or "").strip() or "bulk approval",
            include_personal_data=data.get("include_personal_data") or False,
        )
    else:
        outcomes = reviewing.bulk_reject(chunk, actor, reason=data["reason"])
    progress = _progress(request, form, outcomes, finished=len(chunk) < BULK_CHUNK)
    progress["after"] = chunk[-1] if chunk else after
    progress["previewed_at"] = previewed_at.isoformat() if previewed_at else ""
    if progress["finished"] and previewed_at and data["scope"] == "all":
        progress["arrived"] = wording.bulk_arrived(reviewing.arrived_since(matching, previewed_at))
    context = {
        "progress": progress,
        "data": data,
        "filters": filters.urlencode(),
        "ids": data.get("ids") or "",
    }
    response = render(request, panel, context)
    # The rows on the page (the ticked ones, or for "all matching" those the page shows) say
    # what happened to them, and the match count is the queue's as it is now.
    shown = set(request.POST.get("shown", "").split())
    if shown or data["scope"] == "selected":
        on_page = [o for o in outcomes if not shown or o.proposal_id in shown]
        response.content += _rows_out_of_band(request, on_page, actor)
    response.content += _counts_out_of_band(request, matching)
    if progress["finished"]:
        toast(review_changed(response), wording.bulk_toast(data["decision"], progress))
    return response


def _progress(request, form: BulkForm, outcomes: list[reviewing.BulkOutcome], *, finished) -> dict:
    """The bulk bar after this chunk: the counts carried from chunk to chunk by the panel's form
    (done, not applied, skipped because another reviewer holds them, recorded as the first of
    two approvals), plus this chunk's outcomes."""
    data = form.cleaned_data
    # Decided by someone meanwhile: nothing is left to do one by one ("gone" says who).
    errors = [
        o.error
        for o in outcomes
        if not o.done and not o.claimed and not o.yours and not o.decided_elsewhere
    ]
    claimed = (data.get("claimed") or 0) + sum(o.claimed for o in outcomes)
    # Approved by this reviewer already: they wait for another reviewer, not for one by one.
    yours = (data.get("yours") or 0) + sum(o.yours for o in outcomes)
    awaiting = (data.get("awaiting") or 0) + sum(o.awaiting for o in outcomes)
    done = (data.get("done") or 0) + sum(o.done for o in outcomes)
    failed = (data.get("failed") or 0) + len(errors)
    counted = done + failed + claimed + yours
    total = max(data.get("total") or 0, counted)
    # Proposals of the confirmed count that were gone when their turn came (another reviewer
    # decided them, or they left the filter): said, so the bar does not stop short unexplained.
    gone = total - counted if finished else 0
    actor = reviewer_actor(request)
    return {
        "done": done,
        "failed": failed,
        "claimed": claimed,
        "yours": yours,
        "awaiting": awaiting,
        "total": total,
        "finished": finished,
        # Every chunk's reasons, carried from chunk to chunk by the panel's form.
        "errors": list(dict.fromkeys([*request.POST.getlist("reasons"), *errors]))[:10],
        "percent": 100 if finished else int(100 * counted / max(total, 1)),
        "verb": wording.BULK_DONE[data["decision"]],
        "gone": wording.bulk_gone(gone, _deciders(form, actor) if gone else []),
    }
