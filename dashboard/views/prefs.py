"""Each person's display preferences: compact queue rows on or off, the overview hint dismissed."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST
from django_htmx.http import trigger_client_event

from dashboard import prefs
from dashboard.access import role_required


@role_required("viewer")
@require_POST
def density(request):
    """Toggle compact queue rows (or set them: compact=1 / compact=0); app.js applies the answer's
    `density` event to the page, so the focus and the scroll position stay where they are."""
    wanted = request.POST.get("compact")
    compact = not prefs.of(request).compact_rows if wanted is None else wanted == "1"
    prefs.remember(request, compact_rows=compact)
    if not request.htmx:  # the plain form (no script): back to the queue, drawn the new way
        return redirect("dashboard:review")
    return trigger_client_event(HttpResponse(status=200), "density", {"compact": compact})


@role_required("viewer")
@require_POST
def dismiss_hint(request):
    """The overview's "Start here" hint, dismissed for good; htmx swaps the hint away."""
    prefs.remember(request, overview_hint_dismissed=True)
    return HttpResponse("") if request.htmx else redirect("dashboard:overview")
