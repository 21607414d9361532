"""One proposal: its source, target and diff, the candidates and model calls behind it, and the
decision form (decisions post to review.decide, undo and revert to proposal_actions)."""

from __future__ import annotations

from django.views.decorators.http import require_GET

from dashboard.access import role_required
from dashboard.proposal_page import render_proposal


@role_required("viewer")
@require_GET
def proposal(request, proposal_id: str):
    return render_proposal(request, proposal_id)
