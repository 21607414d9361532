"""Claims' writes, each one short transaction: claim a proposal (or take it over, audited),
release it, and end it inside a decision's transaction. The rules are read in pipeline.claims."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from memory.moments import iso
from memory.writes import Actor, Refused
from pipeline import approvals, claims
from pipeline.config import get_config
from pipeline.models import Claim, Proposal
from pipeline.writes.reviewed import review_audit


def claim(
    proposal_id: str, reviewer: Actor, *, page: str = "", takeover: bool = False
) -> claims.ClaimState:
    """Hold an open proposal for review.claimMinutes and let go of the reviewer's other claims
    (they moved on). Another reviewer's live claim stays, unless `takeover`: then it passes to
    this reviewer and the audit says from whom. A decided proposal is claimed by nobody; nor, short
    of a takeover, is one whose first approval this reviewer gave (its second is someone else's)."""
    with transaction.atomic():
        proposal = (
            Proposal.objects.select_for_update()
            .only("id", "status", "decided_by", "source_memory_id", "action")
            .filter(id=proposal_id)
            .first()
        )
        if proposal is None:
            raise Refused("not_found", f"proposal {proposal_id} not found")
        now = timezone.now()
        if not proposal.is_open:
            return claims.state_of(proposal, reviewer.name, now)
        current = Claim.objects.filter(proposal=proposal, expires_at__gt=now).first()
        theirs = current is not None and current.by != reviewer.name
        if theirs and not takeover:
            return claims.ClaimState(
                proposal.id, claims.State.OTHER, current.by, current.expires_at
            )
        if current is None and approvals.awaits_another_reviewer(proposal.id, reviewer.name):
            # Their first approval ended their claim. A claim sent before it (focusing the row)
            # that lands after it must not hold the row from the second reviewer. (Taking it over
            # on purpose, to reject it, stays possible, and so does the claim it gives.)
            Claim.objects.filter(by=reviewer.name).delete()
            return claims.ClaimState(proposal.id, claims.State.FREE)
        if theirs:
            review_audit(
                proposal,
                reviewer,
                "taken_over",
                f"took the review over from {current.by}",
                {"from": current.by, "claimedUntil": iso(current.expires_at)},
                now,
            )
        Claim.objects.filter(by=reviewer.name).exclude(proposal=proposal).delete()
        until = now + timedelta(minutes=get_config().claim_minutes)
        Claim.objects.update_or_create(
            proposal=proposal,
            defaults={
                "by": reviewer.name,
                "page": page[:64],
                "claimed_at": now,
                "expires_at": until,
            },
        )
    return claims.ClaimState(proposal_id, claims.State.MINE, reviewer.name, until)


def release(proposal_id: str, reviewer: Actor, *, page: str = "") -> bool:
    """Let go of this reviewer's claim (from that page only, when `page` is given: a newer
    claim the reviewer made from the next page stays). Whether one was let go."""
    with transaction.atomic():
        mine = Claim.objects.filter(proposal_id=proposal_id, by=reviewer.name)
        if page:
            mine = mine.filter(page=page)
        deleted, _ = mine.delete()
    return bool(deleted)


def end(proposal_id: str) -> None:
    """Inside a decision's transaction: whoever held the proposal, the claim ends with it."""
    Claim.objects.filter(proposal_id=proposal_id).delete()
