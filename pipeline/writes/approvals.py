"""The two-person rule's writes, inside the approve, reject and undo transactions of
writes/review.py and writes/revert.py (they lock the proposal first, so two approvals of one
proposal never interleave): a first approval recorded, the second checked against it, and the
round closed with how it ended. Which changes the rule holds: pipeline.approvals."""

from __future__ import annotations

from memory.moments import iso
from memory.writes import Actor, Refused
from pipeline.approvals import open_approvals
from pipeline.models import Approval, ApprovalOutcome, Proposal


def first_of_round(proposal: Proposal) -> Approval | None:
    """The round's first approval, still waiting for its second (None: no round is open)."""
    current = open_approvals(proposal)
    return current[0] if current else None


# An approval's action: the proposal's own, asked for by name (None: as the round stands).
AS_PROPOSED = "as_proposed"


def as_approved(
    first: Approval | None, action: str | None, content: str | None
) -> tuple[str | None, str | None]:
    """What a second approval applies: what the first approved. Asking for another action or
    another text is refused (`approval_differs`): reject it to end the round, then decide anew."""
    if first is None:
        return action, content
    asked_text = content if content is not None and content.strip() else None
    if (action and action != first.action) or (asked_text and asked_text != first.content):
        raise Refused(
            "approval_differs",
            f"{first.by} approved this as {first.action.upper()} with the text shown, and a second "
            "approval applies exactly that: approve it as it is, or reject it to start over",
            firstApproval={"by": first.by, "at": iso(first.at), "action": first.action},
        )
    return first.action, first.content


def refuse_same_approver(first: Approval | None, reviewer: Actor) -> None:
    if first is not None and first.by == reviewer.name:
        raise Refused(
            "same_approver",
            f"you already approved this proposal ({first.at:%Y-%m-%d %H:%M} UTC): the two-person "
            "rule needs a second, different reviewer to approve it",
            approvals=[{"by": first.by, "at": iso(first.at)}],
        )


def record_first(
    proposal: Proposal, reviewer: Actor, action: str, text: str, note: str | None, at
) -> Approval:
    return Approval.objects.create(
        proposal=proposal,
        by=reviewer.name,
        at=at,
        position=1,
        action=action,
        content=text,
        note=note or "",
    )


def close_round(proposal_id: str, outcome: str, by: Actor, at) -> int:
    """End the open round of this proposal (applied, rejected, stale, withdrawn)."""
    return Approval.objects.filter(proposal_id=proposal_id, outcome=ApprovalOutcome.OPEN).update(
        outcome=outcome, ended_by=by.name, ended_at=at
    )


def applied(
    proposal: Proposal,
    first: Approval | None,
    reviewer: Actor,
    action: str,
    text: str,
    note: str | None,
    at,
) -> None:
    """The approval that applied the change ends the round; when it completed another
    reviewer's first approval, it is kept as the second (the agreement analytics read it)."""
    if first is None:
        return
    close_round(proposal.id, ApprovalOutcome.APPLIED, reviewer, at)
    if first.by != reviewer.name:
        Approval.objects.create(
            proposal=proposal,
            by=reviewer.name,
            at=at,
            position=2,
            action=action,
            content=text,
            note=note or "",
            outcome=ApprovalOutcome.APPLIED,
            ended_by=reviewer.name,
            ended_at=at,
        )


def withdraw(proposal: Proposal, reviewer: Actor, at) -> bool:
    """The first approver takes their approval back (the toast's Undo): the round ends."""
    return bool(
        Approval.objects.filter(
            proposal=proposal, by=reviewer.name, outcome=ApprovalOutcome.OPEN
        ).update(outcome=ApprovalOutcome.WITHDRAWN, ended_by=reviewer.name, ended_at=at)
    )


def undone(proposal_id: str) -> None:
    """An applied decision was undone: its rounds count as overturned."""
    Approval.objects.filter(proposal_id=proposal_id, outcome=ApprovalOutcome.APPLIED).update(
        outcome=ApprovalOutcome.UNDONE
    )


def reopened(proposal_id: str) -> None:
    """A rejection was undone: its rounds settled nothing, and the outcome that counts is the one
    the proposal reaches next (they counted as overturned, beside the round that applied it)."""
    Approval.objects.filter(proposal_id=proposal_id, outcome=ApprovalOutcome.REJECTED).update(
        outcome=ApprovalOutcome.REOPENED
    )
