"""The contradiction workbench: each flagged fact beside the memory it contradicts, and the stale
proposals whose target changed since the decision. Cards decide through review.decide."""

from __future__ import annotations

from django.views.decorators.http import require_GET

from dashboard.access import role_required
from dashboard.htmx import render_page
from dashboard.paging import cursor_page
from pipeline.models import Proposal, ProposalStatus

PAGE_SIZE = 20
STALE_SHOWN = 50
ORDER = ("created_at", "id")


@role_required("viewer")
@require_GET
def contradictions(request):
    cards = (
        Proposal.objects.select_related("target_memory", "source_memory")
        .prefetch_related("approvals")  # a card waiting on a second approval says whose
        .order_by(*ORDER)
    )
    flagged = cards.filter(status=ProposalStatus.PENDING, review_needed=True)
    stale = cards.filter(status=ProposalStatus.STALE)
    if card := request.GET.get("card"):
        # One card asked for by a link (a flagged NONE's "Decide on the workbench"): the pages
        # run oldest first, and its card may be on none of the first.
        flagged = flagged.filter(id=card)
    context = {
        "one_card": card,
        # Keyset pages: resolving cards never pushes the next page's first card out of sight.
        "page": cursor_page(
            flagged,
            ORDER,
            PAGE_SIZE,
            after=request.GET.get("after"),
            before=request.GET.get("before"),
        ),
        "stale": stale[:STALE_SHOWN],
        "stale_count": stale.count(),
    }
    return render_page(request, "dashboard/contradictions.html", "cards", context)
