"""What every reviewer action on a proposal shares: the `reviewed` audit it writes under the raw
memory (and under the memory a keep both or a keep existing kept, and its undo there), and the
refusal that says who decided a proposal (and when) when it is no longer open."""

from __future__ import annotations

from memory.models import MemoryHistory
from memory.moments import iso
from memory.writes import Actor, Refused, audit
from pipeline.models import Action, Proposal, ProposalStatus


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
        decidedAt=iso(proposal.decided_at),
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


def kept_audit(proposal: Proposal, reviewer: Actor, note: str, at) -> None:
    """A rejected UPDATE or DELETE (the workbench's "Keep existing") says on the memory it would
    have changed that a reviewer kept it as it is: that memory's own timeline shows the decision,
    as a "keep both" does (the rejection's audit row is on the raw memory). `note` is the
    reviewer's own words, "" when none were given."""
    if proposal.target_memory_id is None or proposal.action not in (Action.UPDATE, Action.DELETE):
        return
    audit(
        proposal.target_memory_id,
        "reviewed",
        actor=reviewer,
        reason=f"kept as it is: the proposed {proposal.action.upper()} was rejected"
        + (f": {note}" if note else ""),
        metadata={"proposalId": proposal.id, "decision": "kept", "rejectedAction": proposal.action},
        at=at,
    )


def kept_undone_audit(proposal: Proposal, reviewer: Actor, at) -> None:
    """The kept memory's trail says the rejection that kept it no longer holds (kept_audit)."""
    reason = f"rejection undone: the proposed {proposal.action.upper()} is pending again"
    target_decision_undone(proposal, "kept", reviewer, reason, at)


def target_decision_undone(
    proposal: Proposal, decision: str, reviewer: Actor, reason: str, at
) -> None:
    """A decision written on the target memory's own trail (`decision`: keep_both, kept) no
    longer holds once undone: the same trail says so, as `<decision>_undone` (it went on
    saying the decision stood)."""
    target_id = proposal.target_memory_id
    if not target_id:
        return
    written = MemoryHistory.objects.filter(
        memory_id=target_id, event="reviewed", metadata__proposalId=proposal.id
    ).filter(metadata__decision=decision)
    if written.exists():
        audit(
            target_id,
            "reviewed",
            actor=reviewer,
            reason=reason,
            metadata={"proposalId": proposal.id, "decision": f"{decision}_undone"},
            at=at,
        )
