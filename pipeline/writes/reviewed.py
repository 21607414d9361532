"""What every reviewer action on a proposal shares: the `reviewed` audit it writes under the raw
memory, and the refusal that says who decided a proposal (and when) when it is no longer open."""

from __future__ import annotations

from memory.writes import Actor, Refused, audit
from pipeline.models import Proposal, ProposalStatus


def already_decided(proposal: Proposal) -> Refused:
    who = proposal.decided_by or "nobody"
    when = (
        proposal.decided_at.strftime("%Y-%m-%d %H:%M:%S UTC")
        if proposal.decided_at
        else "an earlier run"
    )
    if proposal.decided_by:
        message = f"this proposal is already {proposal.status} (by {who} at {when})"
    else:
        # Nobody decided it: the pipeline recorded it this way (stale, deduped, suppressed, ...).
        message = f"this proposal is {proposal.status}, as the pipeline recorded it; it cannot be decided here"
        if proposal.status == ProposalStatus.STALE:
            moved = "raw memory" if proposal.stale_source else "target"
            message = f"this proposal is stale: its {moved} changed after the decision; re-decide"
    return Refused(
        "already_decided",
        message,
        # Not `status`: the API's error() already takes the HTTP status under that name.
        currentStatus=proposal.status,
        decidedBy=proposal.decided_by,
        decidedAt=proposal.decided_at.isoformat() if proposal.decided_at else None,
    )


def review_audit(
    proposal: Proposal, reviewer: Actor, decision: str, note: str | None, extra: dict, at
) -> None:
    audit(
        proposal.source_memory_id,
        "reviewed",
        actor=reviewer,
        reason=note or f"{decision}, no note given",  # who: changed_by
        metadata={
            "proposalId": proposal.id,
            "decision": decision,
            "action": proposal.action,
            **extra,
        },
        at=at,
    )
