"""Claims on the review queue and the proposal page: a reviewer claims a proposal by focusing or
opening it (or takes it over on purpose), lets go by leaving the page, and every open queue
polls who is reviewing which of its rows. The rules and writes are in pipeline.review."""

from __future__ import annotations

from django.http import Http404, HttpResponse
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_POST

from dashboard.access import reviewer_actor, role_required
from dashboard.htmx import toast
from memory.roles import has_role
from memory.writes import Refused
from pipeline import claims
from pipeline import review as reviewing

MARKER = "dashboard/review.html#claim"


def _markers(request, states: list[claims.ClaimState], *, oob: bool) -> HttpResponse:
    """Each row's claim marker. Rendered without the request: a poll runs no context processor
    (no banner counts), so it costs its one query whatever the page shows."""
    can_review = has_role(request.user, "reviewer")
    body = "".join(
        render_to_string(MARKER, {"c": state, "oob": oob, "can_review": can_review})
        for state in states
    )
    response = HttpResponse(body)
    response["Cache-Control"] = "no-store"
    return response


@role_required("reviewer")
@require_POST
def claim(request, proposal_id: str):
    """Claim on focus or open (`takeover=1`: take another reviewer's claim over, audited);
    answers the row's marker as it is now."""
    takeover = request.POST.get("takeover") == "1"
    try:
        state = reviewing.claim(
            proposal_id,
            reviewer_actor(request),
            page=request.POST.get("page", ""),
            takeover=takeover,
        )
    except Refused as refused:
        raise Http404(refused.message) from None
    response = _markers(request, [state], oob=False)
    if takeover and state.state == claims.State.MINE:
        toast(response, "You are reviewing it now: the other reviewer sees your name on it.")
    return response


@role_required("reviewer")
@require_POST
def release(request, proposal_id: str):
    """The page that claimed it was left (a beacon): let go of that page's claim."""
    reviewing.release(proposal_id, reviewer_actor(request), page=request.POST.get("page", ""))
    return HttpResponse(status=204)


@role_required("viewer")
@require_GET
def poll(request):
    """Who is reviewing the rows a queue page shows (`shown`: their ids), swapped out of band."""
    ids = request.GET.get("shown", "").split()[: claims.MAX_ROWS]
    states = claims.states(ids, request.user.get_username()) if ids else []
    return _markers(request, states, oob=True)
