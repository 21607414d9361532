"""The overview page (counts and charts of the whole store) and the mode banner every page polls."""

from __future__ import annotations

from django.db.models import Count, Min, Q
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard import charts, prefs
from dashboard.access import role_required
from memory import expiry
from memory.models import DERIVED_SOURCE_TYPE, Job, JobStatus, Memory
from pipeline import queues
from pipeline.models import Proposal, ProposalStatus
from pipeline.status import banner_context


@role_required("viewer")
@require_GET
def overview(request):
    jobs = dict(
        Job.objects.values_list("status").annotate(n=Count("id")).values_list("status", "n")
    )
    counts = Proposal.objects.aggregate(
        pending=Count("id", filter=Q(status=ProposalStatus.PENDING)),
        review_needed=Count("id", filter=Q(status=ProposalStatus.PENDING, review_needed=True)),
        stale=Count("id", filter=Q(status=ProposalStatus.STALE)),
        skipped=Count("id", filter=Q(status=ProposalStatus.SKIPPED)),
        oldest=Min("created_at", filter=Q(status=ProposalStatus.PENDING)),
    )
    live = Q(is_deleted=False) & expiry.unexpired()  # an expired memory is out of recall
    memories = Memory.objects.aggregate(
        live=Count("id", filter=live),
        derived=Count("id", filter=live & Q(source_type=DERIVED_SOURCE_TYPE)),
        expired=Count("id", filter=Q(is_deleted=False) & expiry.expired()),
        deleted=Count("id", filter=Q(is_deleted=True)),
    )
    days, by_action, by_status = charts.per_day(30)
    context = {
        "jobs": {status: jobs.get(status, 0) for status in JobStatus.values},
        "counts": counts,
        "memories": memories,
        "action_chart": charts.stacked_bars(
            days, by_action, charts.ACTION_COLOURS, "Proposals per day by action"
        ),
        "outcome_chart": charts.stacked_bars(
            days, by_status, charts.OUTCOME_COLOURS, "Proposals per day by outcome"
        ),
        "action_colours": charts.ACTION_COLOURS,
        "outcome_colours": charts.OUTCOME_COLOURS,
        "approval": charts.approval_rates(),
        "histogram": charts.confidence_histogram(),
        # "Start here": until the person dismisses it, and only when something waits.
        "start_here": bool(counts["pending"]) and not prefs.of(request).overview_hint_dismissed,
        "queues": queues.counts(queues.saved_queues()),
    }
    return render(request, "dashboard/overview.html", context)


@role_required("viewer")
@require_GET
def banner(request):
    """The banner, plus the nav's review counts swapped out of band: both show the same numbers."""
    return render(request, "base.html#mode-banner", {**banner_context(), "nav_counts_oob": True})
