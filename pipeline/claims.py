"""Claims: a reviewer who focuses or opens a proposal holds it for review.claimMinutes, so two
reviewers never work on one row. What a row shows about it (ClaimState), the refusal another
reviewer's decision meets, and the state of a page of rows in one query. pipeline.writes.claims
writes them: a claim ends on a decision, when its reviewer moves to another, or when it expires."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from django.core.exceptions import ObjectDoesNotExist
from django.utils import timezone

from memory.moments import iso
from memory.writes import Refused
from pipeline.models import Claim, Proposal

MAX_ROWS = 200  # a poll asks about one page of rows, never more


class State(StrEnum):
    FREE = "free"  # nobody holds it (or a claim expired)
    MINE = "mine"  # this reviewer holds it
    OTHER = "other"  # another reviewer holds it: skipped, decided only after a takeover
    DECIDED = "decided"  # no longer open: someone decided it since the page was drawn


@dataclass(frozen=True)
class ClaimState:
    """A row's claim as one reviewer sees it: `by` holds it (or decided it) `until` a time."""

    proposal_id: str
    state: State
    by: str = ""
    until: datetime | None = None
    status: str = ""  # the proposal's status, once decided

    @property
    def held_by_other(self) -> bool:
        return self.state == State.OTHER


def held(proposal: Proposal, now: datetime | None = None) -> Claim | None:
    """The proposal's live claim, or None (select_related("claim") reads it with the row)."""
    try:
        claim = proposal.claim
    except ObjectDoesNotExist:
        return None
    return claim if claim.expires_at > (now or timezone.now()) else None


def state_of(proposal: Proposal, reviewer: str | None, now: datetime | None = None) -> ClaimState:
    """The proposal's claim as `reviewer` sees it (reads status, decided_by and the claim)."""
    if not proposal.is_open:
        return ClaimState(
            proposal.id, State.DECIDED, proposal.decided_by or "", None, proposal.status
        )
    claim = held(proposal, now)
    if claim is None:
        return ClaimState(proposal.id, State.FREE)
    state = State.MINE if claim.by == reviewer else State.OTHER
    return ClaimState(proposal.id, state, claim.by, claim.expires_at)


def states(ids: list[str], reviewer: str) -> list[ClaimState]:
    """The claim of each of these proposals (a page of rows) as `reviewer` sees it: one query."""
    rows = (
        Proposal.objects.filter(id__in=ids[:MAX_ROWS])
        .select_related("claim")
        .only("id", "status", "decided_by", "claim__by", "claim__expires_at")
    )
    now = timezone.now()
    return [state_of(proposal, reviewer, now) for proposal in rows]


def refusal(proposal_id: str, reviewer: str, now: datetime) -> Refused | None:
    """The refusal a decision meets on a proposal another reviewer holds, or None."""
    claim = Claim.objects.filter(proposal_id=proposal_id, expires_at__gt=now).first()
    if claim is None or claim.by == reviewer:
        return None
    return Refused(
        "claimed",
        f"this proposal is being reviewed by {claim.by} (until {claim.expires_at:%H:%M} UTC): "
        "take it over to decide it",
        claimedBy=claim.by,
        claimedUntil=iso(claim.expires_at),
    )


def held_by_others(ids: list[str], reviewer: str) -> dict[str, str]:
    """Proposal id -> who holds it, for those of `ids` another reviewer holds now."""
    return dict(
        Claim.objects.filter(proposal_id__in=ids, expires_at__gt=timezone.now())
        .exclude(by=reviewer)
        .values_list("proposal_id", "by")
    )


def ids_held_by_others(proposals, reviewer: str):
    """The ids of these proposals (a queryset) another reviewer holds now, which a bulk skips
    (a queryset)."""
    live = proposals.filter(claim__expires_at__gt=timezone.now())
    return live.exclude(claim__by=reviewer).values_list("id", flat=True)
