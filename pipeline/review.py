"""Reviewer actions shared by the dashboard and the API: embed edited text first, then apply."""

from __future__ import annotations

from django.db import transaction

from memory.content import normalize
from memory.writes import Actor, Refused
from pipeline import apply
from pipeline.embedders import embed_or_none
from pipeline.models import Proposal, ProposalStatus


def approve(
    proposal_id: str,
    reviewer: Actor,
    *,
    content: str | None = None,
    action: str | None = None,
    note: str | None = None,
    redecide: bool = False,
) -> Proposal:
    """Approve (optionally edited / as another action). The vector is computed before the write."""
    proposal = Proposal.objects.filter(id=proposal_id).only("fact_content", "action").first()
    vector = None
    if proposal is not None and (action or proposal.action) in {"add", "update"}:
        vector = embed_or_none(
            normalize(content if content and content.strip() else proposal.fact_content).storage
        )
    return apply.approve(
        proposal_id,
        reviewer=reviewer,
        content=content,
        vector=vector,
        action=action,
        note=note,
        redecide=redecide,
    )


def reject(proposal_id: str, reviewer: Actor, *, reason: str | None = None) -> Proposal:
    return apply.reject(proposal_id, reviewer=reviewer, reason=reason)


def revert_once(
    proposal_id: str, reviewer: Actor, *, undo: bool = False, reason: str | None = None
) -> Proposal:
    """Revert (or, with undo, undo the revert of) an applied proposal, exactly as asked.

    apply.revert toggles; a double-clicked Undo or a retried API call must not flip the change
    back, so the caller says which way it means and the check runs in the same transaction.
    """
    with transaction.atomic():
        proposal = (
            Proposal.objects.filter(id=proposal_id).only("status", "reverted_at", "reverted_by")
        ).first()
        if proposal is None:
            raise Refused("not_found", f"proposal {proposal_id} not found")
        if proposal.status == ProposalStatus.APPLIED:
            if undo and proposal.reverted_at is None:
                raise Refused("not_reverted", "this proposal is not reverted: nothing to undo")
            if not undo and proposal.reverted_at is not None:
                raise Refused(
                    "already_reverted",
                    f"this proposal was already reverted by {proposal.reverted_by} at "
                    f"{proposal.reverted_at:%Y-%m-%d %H:%M:%S} UTC",
                    revertedBy=proposal.reverted_by,
                    revertedAt=proposal.reverted_at.isoformat(),
                )
        return apply.revert(proposal_id, reviewer=reviewer, reason=reason)
