"""What every dashboard page shows: the mode banner and the number of items waiting for review."""

from __future__ import annotations

from pipeline.config import get_config, mode_of
from pipeline.models import Proposal, ProposalStatus

BANNERS = {
    "disabled": ("DISABLED", "No job is processed: new memories are stored and their jobs wait."),
    "shadow": (
        "SHADOW",
        "The pipeline proposes, nothing is written to memories until a reviewer approves.",
    ),
    "controlled-write": (
        "CONTROLLED-WRITE",
        "Confident ADDs are applied automatically; UPDATE and DELETE wait for review.",
    ),
    "full": (
        "FULL",
        "ADD, UPDATE and DELETE are applied automatically (pinned and contradictions still wait).",
    ),
    "frozen": (
        "FROZEN",
        "Emergency brake: no pipeline write and no reviewer apply. Raw ingestion continues.",
    ),
}


def banner_mode(config) -> str:
    """Like mode_of, but the emergency brake gets its own banner."""
    if config.enabled and config.mutations_frozen:
        return "frozen"
    return mode_of(config)


def review_counts() -> dict[str, int]:
    """Three index-only counts: cheaper at 100k pending than one aggregate reading every row."""
    pending = Proposal.objects.filter(status=ProposalStatus.PENDING)
    return {
        "pending": pending.count(),
        "review_needed": pending.filter(review_needed=True).count(),
        "stale": Proposal.objects.filter(status=ProposalStatus.STALE).count(),
    }


def banner_context() -> dict:
    config = get_config()
    key = banner_mode(config)
    label, meaning = BANNERS[key]
    return {
        "pipeline_config": config,
        "banner": {"key": key, "label": label, "meaning": meaning},
        "review_counts": review_counts(),
    }
