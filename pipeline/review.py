"""The one door from the interfaces (api/, dashboard/) to the pipeline's writes: reviewer
decisions (embed edited text before the write, the decisions in the reviewer's words, the bulk
rules of pipeline.safety.KINDS, claims and the two-person rule), undo and revert exactly as asked,
claims, suppressions, entity triples, a job's retry, a config change, a purge and a redaction.
Neither interface imports pipeline.writes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, F, Q, QuerySet, TextChoices

from memory.models import Job
from memory.writes import CHANGE_EVENTS, Actor, Refused
from pipeline import approvals, claims, memory_ops, redaction, safety
from pipeline import purge as purging
from pipeline.approvals import awaiting_another, needs_two_q, open_approvals
from pipeline.config import get_config
from pipeline.models import Action, Proposal, ProposalStatus, TripleReview
from pipeline.tasks import hand_off_waiting
from pipeline.writes import claims as claim_writes
from pipeline.writes import config as config_writes
from pipeline.writes import jobs as job_writes
from pipeline.writes import review as review_writes
from pipeline.writes import triples as triple_writes
from pipeline.writes.apply import target_refusal
from pipeline.writes.approvals import AS_PROPOSED
from pipeline.writes.review import RETIRED_REASON  # noqa: F401  (the lineage tells it from a note)

PINNED_LEFT_FOR_ONE_BY_ONE = (
    "A proposal that would change or delete a pinned memory was left for a one-by-one approval."
)


CONTRADICTING_NONE_LEFT_FOR_THE_WORKBENCH = (
    "A NONE whose fact contradicts its memory was left for the workbench: it applies nothing "
    "as it is (Replace, Keep both or Delete the old one decide it)."
)


def left_for_one_by_one(kind: safety.Kind) -> str:
    """Why bulk left a proposal out whose kind is never approved in bulk."""
    return f"A proposal containing {kind.noun} was left for a one-by-one approval."


def left_out(kind: safety.Kind) -> str:
    """Why bulk left a proposal out whose kind needs the reviewer's opt-in."""
    return (
        f"A proposal with {kind.noun} was left out: tick “include {kind.words}” to approve it in "
        "bulk, or approve it one by one."
    )


class Decision(TextChoices):
    """A reviewer's decision on one proposal, in the reviewer's words."""

    APPROVE = "approve", "Approve"
    # The proposed action, said by the reviewer (the workbench's Replace): a second approval of
    # a first that applied another action is refused, not turned into that action.
    REPLACE = "replace", "Replace"
    REJECT = "reject", "Reject"
    KEEP_BOTH = "keep_both", "Keep both"
    DELETE_OLD = "delete_old", "Delete the old one"
    MERGE = "merge", "Merge"
    REDECIDE = "redecide", "Apply to the current version"


# A decision other than reject -> (the action applied, the note when none is given).
DECISIONS: dict[str, tuple[str | None, str | None]] = {
    Decision.APPROVE: (None, None),
    Decision.REPLACE: (AS_PROPOSED, None),
    Decision.KEEP_BOTH: (Action.ADD, "kept both"),
    Decision.DELETE_OLD: (Action.DELETE, "deleted the old memory"),
    Decision.MERGE: (Action.UPDATE, "merged"),
    Decision.REDECIDE: (None, "re-decided on the current version"),
}


@dataclass(frozen=True)
class BulkOutcome:
    """One proposal of a bulk decision: `error` says why it was not decided (None: done), `code`
    is the refusal's; `awaiting` says the approval was recorded as the first of two."""

    proposal_id: str
    error: str | None = None
    code: str | None = None
    awaiting: bool = False
    decided_by: str | None = None  # who decided it first, when that is why it was refused

    @property
    def done(self) -> bool:
        return self.error is None

    @property
    def decided_elsewhere(self) -> bool:
        """Refused because someone had decided it meanwhile: nothing is left to do about it (a
        stale, skipped or recorded one still waits for a decision one by one)."""
        return self.code == "already_decided" and bool(self.decided_by)

    @property
    def claimed(self) -> bool:
        """Skipped: another reviewer holds it (pipeline.claims)."""
        return self.code == "claimed"

    @property
    def yours(self) -> bool:
        """Left out: this reviewer gave it the first of two approvals, and it waits for another's
        (found so before the write, or by it: the same reviewer's token approved it meanwhile)."""
        return self.code in ("approved_by_you", "same_approver")


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
    """Approve (optionally edited / as another action). `force` confirms changing or deleting a
    pinned target. The reviewer never waits on the embedding server: the change is committed
    first, then the written memory's vector is queued (memory_ops.embed_later)."""
    approved = review_writes.approve(
        proposal_id,
        reviewer=reviewer,
        content=content,
        action=action,
        note=note,
        redecide=redecide,
        force=force,
    )
    for memory_id in (approved.created_memory_id, approved.updated_memory_id):
        if memory_id:
            memory_ops.embed_later(memory_id)
    return approved


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
    """One decision in the reviewer's words (a Decision), the dashboard's door. A fact with a
    finding whose kind needs confirmation (a secret: safety.KINDS) is approved only `confirmed`:
    otherwise Refused("confirm_secret") and nothing happens. The API approves through approve(),
    which asks no confirmation (see safety.Kind). Changing or deleting a pinned memory needs
    `force`: otherwise Refused("pinned_requires_force")."""
    if decision == Decision.REJECT:
        return reject(proposal_id, reviewer, reason=reason)
    if decision not in DECISIONS:
        raise Refused("invalid_decision", f"unknown decision '{decision}'")
    kind = None if confirmed else confirmation_needed(proposal_id)
    if kind is not None:
        raise Refused(
            "confirm_secret",
            f"this fact contains {kind.noun}: approve it anyway?",
            finding=kind.noun,
        )
    action, default_note = DECISIONS[decision]
    return approve(
        proposal_id,
        reviewer,
        content=content,
        action=action,
        note=reason or default_note,
        redecide=decision == Decision.REDECIDE,
        force=force,
    )


def confirmation_needed(proposal_id: str) -> safety.Kind | None:
    """The kind of finding in this proposal's fact that the dashboard asks to confirm, if any."""
    kinds = Proposal.objects.filter(id=proposal_id).values_list("safety_kinds", flat=True).first()
    return safety.to_confirm(kinds)


def count_by_action(proposals: QuerySet[Proposal]) -> dict[str, int]:
    """How many of these proposals propose each action: COUNT(*), so the (status, action) index
    answers it alone (no table read for 100k pending proposals)."""
    return dict(proposals.order_by().values_list("action").annotate(n=Count("*")))


def as_previewed(
    proposals: QuerySet[Proposal], previewed_at: datetime | None
) -> QuerySet[Proposal]:
    """The proposals a bulk preview taken at `previewed_at` counted: a reviewer confirms what the
    preview showed, so a proposal made after it, or changed since (put back to pending by an undo,
    a reopen or an unsuppress, approved once by another reviewer, redacted), is left for review.
    A job stamps its proposals just before its write commits: one that commits in the
    milliseconds between that stamp and the preview's count is the one gap left."""
    if previewed_at is None:
        return proposals
    return proposals.filter(created_at__lte=previewed_at, updated_at__lte=previewed_at)


def arrived_since(proposals: QuerySet[Proposal], previewed_at: datetime) -> int:
    """How many of these proposals were made after a bulk preview (left for review by it)."""
    return proposals.filter(created_at__gt=previewed_at).count()


def bulk_summary(proposals: QuerySet[Proposal], reviewer: str = "") -> dict:
    """What a bulk decision over these proposals meets: counts by action and by safety kind, and
    how many a bulk approval leaves out (kinds never approved in bulk and changes to pinned
    memories always, kinds that need an opt-in unless opted in), with those kinds in words; how
    many another reviewer holds (skipped), how many need a second reviewer's approval, and how
    many a bulk approval (without and with the opt-in) and a bulk rejection would decide."""
    by_action = count_by_action(proposals)
    total = sum(by_action.values())
    kinds: Counter[str] = Counter()
    never, opt_in = set(), set()
    flagged = proposals.exclude(safety_kinds="").values_list("id", "safety_kinds")
    for proposal_id, joined in flagged:
        kinds.update(set(joined.split(",")))
        rule, _ = safety.bulk_rule(joined)
        if rule == safety.Bulk.NEVER:
            never.add(proposal_id)
        elif rule == safety.Bulk.OPT_IN:
            opt_in.add(proposal_id)
    pinned = set(changes_pinned(proposals))
    moved = set(_moved(proposals))
    claimed = set(claims.ids_held_by_others(proposals, reviewer))
    contradicting = set(_contradicting_nones(proposals))
    # Approved already by this reviewer, waiting for another: approving again is refused.
    mine = awaiting_another(proposals, reviewer)
    # What each decision would decide: a proposal left out for several reasons counts once.
    left_out = never | pinned | claimed | moved | contradicting
    return {
        "by_action": by_action,
        "total": total,
        "findings": dict(sorted(kinds.items())),
        "never_in_bulk": len(never),
        "never_in_bulk_words": safety.words_of(safety.Bulk.NEVER),
        "opt_in": len(opt_in),
        "opt_in_words": safety.words_of(safety.Bulk.OPT_IN),
        "pinned": len(pinned),
        "moved": len(moved - never - pinned - claimed),
        "claimed": len(claimed),
        "contradicting_none": len(contradicting - never - pinned - claimed - moved),
        "approved_by_you": len(mine - left_out),
        # Of those a bulk approval touches: one it leaves out is not approved at all.
        "two_person": len(_two_person(proposals) - left_out - opt_in - mine),
        "approves": total - len(left_out | opt_in | mine),
        "approves_with_opt_in": total - len(left_out | mine),
        "rejects": total - len(claimed),
    }


def _moved(proposals: QuerySet[Proposal]):
    """Ids of those whose memories changed since the decision (the target's or the raw memory's
    version moved on, or the target is gone): an approval marks them stale, to re-decide one by
    one. A QA pass saw the preview count one as approved, and the result not."""
    target_moved = Q(target_memory__isnull=False) & (
        ~Q(target_memory__version=F("target_version")) | Q(target_memory__is_deleted=True)
    )
    source_moved = Q(source_version__isnull=False) & ~Q(source_memory__version=F("source_version"))
    return proposals.filter(target_moved | source_moved).values_list("id", flat=True)


def _contradicting_nones(proposals):
    """Ids of the NONEs whose fact contradicts their memory: approved as they are they apply
    nothing (pipeline.writes.review refuses it), so bulk leaves them to the workbench."""
    return proposals.filter(action=Action.NONE, review_needed=True).values_list("id", flat=True)


def _two_person(proposals: QuerySet[Proposal]) -> set[str]:
    """Ids of those the two-person rule holds for two approvals: by their action and target, and
    the UPDATEs whose text another memory holds (approving retires the target)."""
    setting = get_config().destructive_approvals
    held = set(proposals.filter(needs_two_q(setting)).values_list("id", flat=True))
    updates = proposals.filter(action=Action.UPDATE).only(
        "id", "action", "agent_id", "fact_content", "target_memory_id"
    )
    return held | approvals.retiring(updates, setting)


def bulk_approve(
    proposal_ids: list[str], reviewer: Actor, *, note: str, include_personal_data: bool = False
) -> list[BulkOutcome]:
    """Approve each proposal on its own; a kind never approved in bulk (a secret) or a change to a
    pinned memory is left out, a kind that needs an opt-in (personal data) unless
    `include_personal_data`, and one another reviewer holds is skipped. Under the two-person
    rule this reviewer's approval counts once: the first is recorded, a second applies."""
    flagged = dict(
        Proposal.objects.filter(id__in=proposal_ids)
        .exclude(safety_kinds="")
        .values_list("id", "safety_kinds")
    )
    pinned = _pinned_targets(proposal_ids)
    contradicting = set(_contradicting_nones(Proposal.objects.filter(id__in=proposal_ids)))
    held = claims.held_by_others(proposal_ids, reviewer.name)
    mine = awaiting_another(proposal_ids, reviewer.name)
    outcomes = []
    for proposal_id in proposal_ids:
        rule, kind = safety.bulk_rule(flagged.get(proposal_id, ""))
        if proposal_id in held:
            outcomes.append(BulkOutcome(proposal_id, held_by(held[proposal_id]), "claimed"))
        elif rule == safety.Bulk.NEVER:
            outcomes.append(BulkOutcome(proposal_id, left_for_one_by_one(kind)))
        elif proposal_id in pinned:
            outcomes.append(BulkOutcome(proposal_id, PINNED_LEFT_FOR_ONE_BY_ONE))
        elif proposal_id in contradicting:
            outcomes.append(BulkOutcome(proposal_id, CONTRADICTING_NONE_LEFT_FOR_THE_WORKBENCH))
        elif proposal_id in mine:  # left out, as the preview said (after the kinds above, too)
            outcomes.append(BulkOutcome(proposal_id, APPROVED_BY_YOU, "approved_by_you"))
        elif rule == safety.Bulk.OPT_IN and not include_personal_data:
            outcomes.append(BulkOutcome(proposal_id, left_out(kind)))
        else:
            outcomes.append(_attempt(proposal_id, lambda p: approve(p, reviewer, note=note)))
    return outcomes


def _pinned_targets(proposal_ids: list[str]) -> set[str]:
    """Ids of the UPDATE/DELETE proposals whose target target_refusal finds pinned (stale or not)."""
    destructive = (
        Proposal.objects.filter(id__in=proposal_ids, action__in=[Action.UPDATE, Action.DELETE])
        .select_related("target_memory")
        .only(
            "target_version",
            "target_memory__version",
            "target_memory__is_deleted",
            "target_memory__pinned",
        )
    )
    return {
        p.id
        for p in destructive
        if (refusal := target_refusal(p, p.target_memory, force=False)) and refusal.pinned
    }


def changes_pinned(proposals: QuerySet[Proposal]) -> QuerySet:
    """Ids of the proposals that would change or delete a pinned memory (one by one only)."""
    return proposals.filter(
        action__in=[Action.UPDATE, Action.DELETE], target_memory__pinned=True
    ).values_list("id", flat=True)


APPROVED_BY_YOU = (
    "you approved it already: it waits for another reviewer's approval (the two-person rule)"
)


def bulk_reject(proposal_ids: list[str], reviewer: Actor, *, reason: str) -> list[BulkOutcome]:
    """Reject each proposal on its own; one another reviewer holds is skipped."""
    held = claims.held_by_others(proposal_ids, reviewer.name)
    return [
        BulkOutcome(proposal_id, held_by(held[proposal_id]), "claimed")
        if proposal_id in held
        else _attempt(proposal_id, lambda p: reject(p, reviewer, reason=reason))
        for proposal_id in proposal_ids
    ]


def held_by(name: str) -> str:
    """Why bulk skipped a proposal another reviewer holds."""
    return f"Skipped: {name} is reviewing it."


def _attempt(proposal_id: str, decide) -> BulkOutcome:
    try:
        decided = decide(proposal_id)
    except Refused as refused:
        decided_by = refused.details.get("decidedBy")
        return BulkOutcome(proposal_id, refused.message, refused.code, decided_by=decided_by)
    return BulkOutcome(proposal_id, awaiting=decided.awaiting_second_approval)


def can_undo(proposal: Proposal, reviewer: str | None = None) -> bool:
    """Whether a reviewer's decision can be taken back to pending (the toast's Undo), or
    `reviewer`'s first approval under the two-person rule withdrawn."""
    if reviewer and proposal.awaiting_second_approval:
        return any(a.by == reviewer for a in open_approvals(proposal))
    if proposal.status == ProposalStatus.APPLIED:
        return proposal.reverted_at is None and bool(proposal.decided_by)
    return proposal.status in {ProposalStatus.REJECTED, ProposalStatus.DEDUPED} and bool(
        proposal.decided_by
    )


def target_changed_since(proposal: Proposal) -> int | None:
    """The target's version it moved on from, or None when it has not moved on: from the version
    the decision saw, or, once the proposal applied its change (or reverted it), from the version
    that change wrote, read from the target's own trail: an applied UPDATE moved it on itself."""
    target = proposal.target_memory
    if target is None:
        return None
    expected = proposal.target_version
    if proposal.status == ProposalStatus.APPLIED:
        written = (
            target.history.filter(event__in=CHANGE_EVENTS, metadata__proposalId=proposal.id)
            .order_by("-created_at", "-id")
            .values_list("metadata", flat=True)
            .first()
        )
        expected = (written or {}).get("version", expected)
    return expected if target.version != expected else None


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


# --- claims: who is reviewing a proposal now ------------------------------------------------------


def claim(
    proposal_id: str, reviewer: Actor, *, page: str = "", takeover: bool = False
) -> claims.ClaimState:
    """Hold a proposal while looking at it (review.claimMinutes); `takeover` takes another
    reviewer's claim over, audited. Answers the claim as this reviewer now sees it."""
    return claim_writes.claim(proposal_id, reviewer, page=page, takeover=takeover)


def release(proposal_id: str, reviewer: Actor, *, page: str = "") -> bool:
    """Let go of this reviewer's claim (the page that made it was left)."""
    return claim_writes.release(proposal_id, reviewer, page=page)


# --- suppressions, triples, jobs and config: the same door -----------------------------------------


def reopen(proposal_id: str, reviewer: Actor) -> Proposal:
    """Undo a rejection: the proposal is pending again and its fingerprint is lifted."""
    return review_writes.reopen(proposal_id, reviewer=reviewer)


def unsuppress(proposal_id: str, reviewer: Actor) -> Proposal:
    """A suppressed proposal goes back to the pending queue; its fingerprint stops matching."""
    return review_writes.unsuppress(proposal_id, reviewer=reviewer)


def decide_triple(
    triple_id: int, reviewer: Actor, *, approve: bool, note: str | None = None
) -> TripleReview:
    """Approve an entity triple (entities, relation and mentions into the graph) or reject it."""
    return triple_writes.decide_triple(triple_id, reviewer=reviewer, approve=approve, note=note)


def retry_job(job_id: str, actor: Actor) -> Job:
    """Send a dead or cancelled job back to the queue with a fresh attempt budget."""
    return job_writes.retry_job(job_id, actor=actor)


def retryable(job: Job) -> bool:
    """Whether retry_job would send this job back to the queue now."""
    return job_writes.retry_refusal(job) is None


def update_config(changes: dict[str, Any], *, changed_by: str, reason: str) -> dict[str, Any]:
    """Save a config change (validated first, logged with who, when, why, before and after) and
    return the whole config JSON; a ConfigError names the first problem. Enabling the pipeline
    again hands the jobs that waited to the workers (pipeline.tasks.hand_off_waiting)."""
    was_enabled = get_config().enabled
    saved = config_writes.update_config(changes, changed_by=changed_by, reason=reason)
    if saved["enabled"] and not was_enabled:
        hand_off_waiting()
    return saved


# --- purge: an admin's erasure (pipeline.purge), through the same door -----------------------------


def purge(
    request: purging.Request, *, reason, actor: Actor, dry_run: bool = False
) -> purging.Receipt:
    """Purge what the request names and answer with the erasure receipt (a dry run writes
    nothing); Refused, with nothing written, for a bad request."""
    return purging.purge(request, reason=reason, actor=actor, dry_run=dry_run)


# --- redaction: a reviewer's erasure of a span (pipeline.redaction), through the same door ---------


def redaction_plan(request: redaction.Request) -> redaction.Plan:
    """What redacting the span would rewrite (the confirmation); Refused for a bad request."""
    return redaction.plan(request)


def proposals_rewritten_by(receipt: redaction.Receipt):
    """The open proposals a redaction rewrote (a page showing them redraws their rows)."""
    return redaction.open_proposals_rewritten(receipt)


def redact(request: redaction.Request, *, reason, actor: Actor) -> redaction.Receipt:
    """Replace the span by `[redacted:<kind>]` in every copy, verify, answer with the receipt;
    Refused, with nothing written, for a bad request."""
    return redaction.redact(request, reason=reason, actor=actor)
