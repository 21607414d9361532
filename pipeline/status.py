"""What every dashboard page shows: the mode banner and the number of items waiting for review."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Count
from django.utils import timezone

from pipeline.config import FROZEN, Mode, get_config, mode_of, policy_mode
from pipeline.models import Proposal, ProposalStatus

BANNERS = {
    Mode.DISABLED: (
        "DISABLED",
        "No job is processed: new memories are stored and their jobs wait.",
    ),
    Mode.SHADOW: (
        "SHADOW",
        "The pipeline proposes, nothing is written to memories until a reviewer approves.",
    ),
    Mode.CONTROLLED_WRITE: (
        "CONTROLLED-WRITE",
        "Confident ADDs are applied automatically; UPDATE and DELETE wait for review.",
    ),
    Mode.FULL: (
        "FULL",
        "ADD, UPDATE and DELETE are applied automatically (pinned, person-asserted and "
        "contradicting changes still wait).",
    ),
    FROZEN: (
        "FROZEN",
        "Emergency brake: no pipeline write and no reviewer apply. Raw ingestion continues.",
    ),
}


def banner_mode(config) -> str:
    """Like mode_of, but the emergency brake gets its own banner."""
    return policy_mode(mode_of(config), mutations_frozen=config.mutations_frozen)


def review_counts() -> dict[str, int]:
    """Three index-only counts: cheaper at 100k pending than one aggregate reading every row."""
    pending = Proposal.objects.filter(status=ProposalStatus.PENDING)
    return {
        ProposalStatus.PENDING: pending.count(),
        "review_needed": pending.filter(review_needed=True).count(),
        ProposalStatus.STALE: Proposal.objects.filter(status=ProposalStatus.STALE).count(),
    }


def recent_volume(days: int = 7) -> dict[str, int]:
    """Proposals per action in the last `days` that a mode could apply: a deduplicated ADD (the
    store already had the text) or a suppressed repeat would write nothing in any mode."""
    since = timezone.now() - timedelta(days=days)
    return dict(
        Proposal.objects.filter(created_at__gte=since)
        .exclude(status__in=[ProposalStatus.DEDUPED, ProposalStatus.SUPPRESSED])
        .values_list("action")
        .annotate(n=Count("id"))
        .values_list("action", "n")
    )


# Full mode under the two-person rule (review.destructiveApprovals 2): a DELETE is never applied
# by the pipeline alone (pipeline.writes.apply), so the banner does not say it is (a QA pass).
FULL_TWO_PERSON = (
    "ADD and UPDATE are applied automatically; DELETE waits for two reviewers (the two-person "
    "rule), and pinned, person-asserted and contradicting changes wait too."
)


def mode_words(
    key: str, *, mutations_frozen: bool, destructive_approvals: int = 1
) -> tuple[str, str]:
    """(label, meaning) of a banner mode `key` (banner_mode), with the brake said when disabled
    shows first (nothing runs) and the brake still stops every reviewer's apply, and full
    mode's DELETE said to wait under the two-person rule."""
    label, meaning = BANNERS[key]
    if key == Mode.DISABLED and mutations_frozen:
        meaning += " The emergency brake is on too: no reviewer's approval is applied."
    if key == Mode.FULL and destructive_approvals >= 2:
        meaning = FULL_TWO_PERSON
    return label, meaning


def banner_context() -> dict:
    config = get_config()
    key = banner_mode(config)
    label, meaning = mode_words(
        key,
        mutations_frozen=config.mutations_frozen,
        destructive_approvals=config.destructive_approvals,
    )
    return {
        "pipeline_config": config,
        # brake: the emergency brake holds every reviewer's apply, whatever the mode shown.
        "banner": {
            "key": key,
            "label": label,
            "meaning": meaning,
            "brake": config.mutations_frozen,
        },
        "review_counts": review_counts(),
    }
