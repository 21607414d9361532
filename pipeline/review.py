"""Reviewer entry points shared by the dashboard and the API: embed edited text before the write,
the decisions in the reviewer's words, the bulk rules (never bulk-approve a secret, personal data
only on purpose), undo and revert exactly as asked."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from django.db.models import Count, QuerySet

from memory.content import normalize
from memory.writes import Actor, Refused
from pipeline.llm import embed_or_none
from pipeline.models import Action, Proposal, ProposalStatus
from pipeline.writes import review as review_writes

SECRET_LEFT_FOR_ONE_BY_ONE = "A proposal containing a secret was left for a one-by-one approval."
PINNED_LEFT_FOR_ONE_BY_ONE = (
    "A proposal that would change or delete a pinned memory was left for a one-by-one approval."
)
PERSONAL_DATA_LEFT_OUT = (
    "A proposal with personal data was left out: tick “include personal data” to approve it in "
    "bulk, or approve it one by one."
)
# The reviewer's words for a decision -> (the action applied, the note when none is given).
DECISIONS: dict[str, tuple[str | None, str | None]] = {
    "approve": (None, None),
    "keep_both": ("add", "kept both"),
    "delete_old": ("delete", "deleted the old memory"),
    "merge": ("update", "merged"),
    "redecide": (None, "re-decided on the current version"),
}
# Safety kinds approved only on purpose: a secret after a confirmation and never in bulk; personal
# data in bulk only when the reviewer opted in (one by one the reviewer sees it on the row).
CONFIRM_ONE_BY_ONE = frozenset({"secret"})
NEVER_IN_BULK = frozenset({"secret"})
BULK_OPT_IN = frozenset({"pii"})


@dataclass(frozen=True)
class BulkOutcome:
    """One proposal of a bulk decision: `error` says why it was not decided (None: done)."""

    proposal_id: str
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.error is None


def approve(
    proposal_id: str,
    reviewer: Actor,
    *,
    content: str | None = None,
    action: str | None = None,
    note: str | None = None,
    redecide: bool = False,
    force: bool = False,
) -> Proposal:
    """Approve (optionally edited / as another action). The vector is computed before the write.
    `force` confirms changing or deleting a pinned target."""
    proposal = Proposal.objects.filter(id=proposal_id).only("fact_content", "action").first()
    vector = None
    if proposal is not None and (action or proposal.action) in {"add", "update"}:
        vector = embed_or_none(
            normalize(content if content and content.strip() else proposal.fact_content).storage
        )
    return review_writes.approve(
        proposal_id,
        reviewer=reviewer,
        content=content,
        vector=vector,
        action=action,
        note=note,
        redecide=redecide,
        force=force,
    )


def reject(proposal_id: str, reviewer: Actor, *, reason: str | None = None) -> Proposal:
    return review_writes.reject(proposal_id, reviewer=reviewer, reason=reason)


def decide(
    proposal_id: str,
    reviewer: Actor,
    decision: str,
    *,
    content: str | None = None,
    reason: str = "",
    confirmed: bool = False,
    force: bool = False,
) -> Proposal:
    """One decision in the reviewer's words (DECISIONS or "reject"). A fact with a secret is
    approved only `confirmed`: otherwise Refused("confirm_secret") and nothing happens. Changing
    or deleting a pinned memory needs `force`: otherwise Refused("pinned_requires_force")."""
    if decision == "reject":
        return reject(proposal_id, reviewer, reason=reason)
    if decision not in DECISIONS:
        raise Refused("invalid_decision", f"unknown decision '{decision}'")
    if not confirmed and confirmation_needed(proposal_id):
        raise Refused("confirm_secret", "this fact contains a secret: approve it anyway?")
    action, default_note = DECISIONS[decision]
    return approve(
        proposal_id,
        reviewer,
        content=content,
        action=action,
        note=reason or default_note,
        redecide=decision == "redecide",
        force=force,
    )


def confirmation_needed(proposal_id: str) -> bool:
    kinds = Proposal.objects.filter(id=proposal_id).values_list("safety_kinds", flat=True).first()
    return bool(set((kinds or "").split(",")) & CONFIRM_ONE_BY_ONE)


def count_by_action(proposals: QuerySet[Proposal]) -> dict[str, int]:
    """How many of these proposals propose each action: COUNT(*), so the (status, action) index
    answers it alone (no table read for 100k pending proposals)."""
    return dict(proposals.order_by().values_list("action").annotate(n=Count("*")))


def bulk_summary(proposals: QuerySet[Proposal]) -> dict:
    """What a bulk decision over these proposals meets: counts by action and by safety kind, and
    how many a bulk approval leaves out (secrets and changes to pinned memories always, personal
    data unless opted in)."""
    by_action = count_by_action(proposals)
    kinds: Counter[str] = Counter()
    never = opt_in = 0
    for joined in proposals.exclude(safety_kinds="").values_list("safety_kinds", flat=True):
        row = set(joined.split(","))
        kinds.update(row)
        if row & NEVER_IN_BULK:
            never += 1
        elif row & BULK_OPT_IN:
            opt_in += 1
    return {
        "by_action": by_action,
        "total": sum(by_action.values()),
        "findings": dict(sorted(kinds.items())),
        "never_in_bulk": never,
        "opt_in": opt_in,
        "pinned": changes_pinned(proposals).count(),
    }


def bulk_approve(
    proposal_ids: list[str], reviewer: Actor, *, note: str, include_personal_data: bool = False
) -> list[BulkOutcome]:
    """Approve each proposal on its own; a secret or a change to a pinned memory is never approved
    in bulk, personal data only with `include_personal_data`."""
    flagged = dict(
        Proposal.objects.filter(id__in=proposal_ids)
        .exclude(safety_kinds="")
        .values_list("id", "safety_kinds")
    )
    pinned = set(changes_pinned(Proposal.objects.filter(id__in=proposal_ids)))
    outcomes = []
    for proposal_id in proposal_ids:
        kinds = set(flagged.get(proposal_id, "").split(","))
        if kinds & NEVER_IN_BULK:
            outcomes.append(BulkOutcome(proposal_id, SECRET_LEFT_FOR_ONE_BY_ONE))
        elif proposal_id in pinned:
            outcomes.append(BulkOutcome(proposal_id, PINNED_LEFT_FOR_ONE_BY_ONE))
        elif kinds & BULK_OPT_IN and not include_personal_data:
            outcomes.append(BulkOutcome(proposal_id, PERSONAL_DATA_LEFT_OUT))
        else:
            outcomes.append(_attempt(proposal_id, lambda p: approve(p, reviewer, note=note)))
    return outcomes


def changes_pinned(proposals: QuerySet[Proposal]) -> QuerySet:
    """Ids of the proposals that would change or delete a pinned memory (one by one only)."""
    return proposals.filter(
        action__in=[Action.UPDATE, Action.DELETE], target_memory__pinned=True
    ).values_list("id", flat=True)


def bulk_reject(proposal_ids: list[str], reviewer: Actor, *, reason: str) -> list[BulkOutcome]:
    return [
        _attempt(proposal_id, lambda p: reject(p, reviewer, reason=reason))
        for proposal_id in proposal_ids
    ]


def _attempt(proposal_id: str, decide) -> BulkOutcome:
    try:
        decide(proposal_id)
    except Refused as refused:
        return BulkOutcome(proposal_id, refused.message)
    return BulkOutcome(proposal_id)


def can_undo(proposal: Proposal) -> bool:
    """Whether a reviewer's decision can be taken back to pending (the toast's Undo)."""
    if proposal.status == ProposalStatus.APPLIED:
        return proposal.reverted_at is None and bool(proposal.decided_by)
    return proposal.status in {ProposalStatus.REJECTED, ProposalStatus.DEDUPED} and bool(
        proposal.decided_by
    )


def undo(proposal_id: str, reviewer: Actor, *, reason: str | None = None) -> Proposal:
    """Take a reviewer's decision back: the proposal is pending again, an applied change reverted."""
    return review_writes.undo_decision(proposal_id, reviewer=reviewer, reason=reason)


def revert_once(
    proposal_id: str, reviewer: Actor, *, undo: bool = False, reason: str | None = None
) -> Proposal:
    """Revert (or, with undo, undo the revert of) an applied proposal, exactly as asked."""
    return review_writes.revert_once(proposal_id, reviewer=reviewer, undo=undo, reason=reason)


@dataclass(frozen=True)
class Reverted:
    """One proposal of "revert everything derived": `refused` says why it was not reverted."""

    proposal: Proposal
    refused: Refused | None = None


def revert_derived(memory_id: str, reviewer: Actor, *, reason: str | None = None) -> list[Reverted]:
    """Revert every applied, not yet reverted proposal of one raw memory, newest first, each in
    its own transaction: one refusal (a memory edited since) never blocks the others."""
    reason = reason or f"reverting everything derived from raw memory {memory_id}"
    proposals = Proposal.objects.filter(
        source_memory_id=memory_id, status=ProposalStatus.APPLIED, reverted_at__isnull=True
    ).order_by("-decided_at", "-created_at", "-position")
    done = []
    for proposal in proposals:
        try:
            revert_once(proposal.id, reviewer, reason=reason)
        except Refused as refused:
            done.append(Reverted(proposal, refused))
        else:
            done.append(Reverted(proposal))
    return done
