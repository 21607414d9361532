"""Reviewer actions shared by the dashboard and the API: embed edited text first, then apply."""

from __future__ import annotations

from memory.content import normalize
from memory.writes import Actor
from pipeline import apply
from pipeline.embedders import embed_or_none
from pipeline.models import Proposal


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
