"""Reviewer decisions on proposals, each exactly once in one transaction: approve (the apply step
the job shares, writes/apply.py), reject (remembered as a suppression fingerprint), reopen,
unsuppress. Revert and undo are in writes/revert.py, entity triples in writes/triples.py (their
callers still reach both here)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from memory import writes
from memory.content import normalize
from memory.models import Memory
from memory.reviewer_names import name_asserts
from memory.writes import Actor, Refused, Vector, audit
from pipeline import claims
from pipeline.approvals import needs_two
from pipeline.config import get_config
from pipeline.models import (
    APPROVABLE,
    REJECTABLE,
    ApprovalOutcome,
    PipelineConfig,
    Proposal,
    ProposalStatus,
    RejectionFingerprint,
)
from pipeline.writes import approvals as approval_writes
from pipeline.writes import claims as claim_writes
from pipeline.writes.apply import (
    FROZEN_MESSAGE,
    TargetRefusal,
    apply_destructive,
    derive_memory,
    source_refusal,
    target_refusal,
)
from pipeline.writes.revert import rejection_undone, revert, revert_once, undo_decision  # noqa: F401
from pipeline.writes.reviewed import already_decided, kept_audit, review_audit
from pipeline.writes.triples import decide_triple  # noqa: F401  (its callers still reach it here)

# The reason a replace by retiring is audited with when the reviewer gave no note.
RETIRED_REASON = "replaced: the new text is already memory "

# --- approve / reject -----------------------------------------------------------------------------


def approve(
    proposal_id: str,
    *,
    reviewer: Actor,
    content: str | None = None,
    vector: Vector | None = None,
    action: str | None = None,
    note: str | None = None,
    redecide: bool = False,
    force: bool = False,
) -> Proposal:
    """Apply a proposal through the same guarded write the pipeline uses, exactly once.

    The confidence gate does not apply to a human; every other guard does. `action` lets the
    contradiction workbench keep both (add) or delete instead; `redecide` re-targets a stale
    proposal at the current versions of its target and its raw memory after the reviewer saw
    them side by side. Changing or deleting a pinned target needs `force`, the reviewer's
    explicit confirmation.
    """
    # A stale target or raw memory is recorded (marked stale, audited, committed) before refusing.
    stale_refusal = status = None
    with transaction.atomic():
        proposal, config = _locked_for_approval(proposal_id, redecide, reviewer)
        now = timezone.now()
        first = _open_round(proposal, redecide, reviewer, now)
        action = _redecided(proposal, redecide, action, first)
        action, content = _as_approved(proposal, first, config, reviewer, action, content)
        writer = _text_writer(reviewer, first)
        effective = action or proposal.action
        if effective not in {"add", "update", "delete"}:
            raise Refused("invalid_action", _unapprovable(proposal, effective))
        if effective != "add" and not proposal.target_memory_id:
            raise Refused(
                "invalid_action",
                f"this {proposal.action.upper()} proposal names no memory to {effective}: "
                "approve it as it is (an ADD), or reject it",
            )
        source, target = _locked_memories(proposal, effective, redecide)
        text = content if content is not None and content.strip() else proposal.fact_content
        extra: dict[str, Any] = {
            "edited": text != proposal.fact_content,
            "appliedAction": effective,
            "proposedAction": proposal.action,
        }
        if (refusal := source_refusal(proposal, source)) is not None:
            stale_refusal = _mark_stale(proposal, refusal, source, reviewer, note, now)
        elif effective == "add":
            status = _approve_add(proposal, text, writer, vector, note, now)
        elif (refusal := target_refusal(proposal, target, force)) is not None and refusal.stale:
            stale_refusal = _mark_stale(proposal, refusal, target, reviewer, note, now)
        elif refusal is not None:
            raise Refused(
                "pinned_requires_force",
                f"the target memory is pinned: confirm with force to {effective} it",
                targetMemoryId=target.id,
            )
        elif not (
            needs_two(
                "delete" if (holder := _text_holder(target, effective, text)) else effective,
                target,
                config.destructive_approvals,
            )
            and _first_of_two(proposal, first, reviewer, effective, text, note, now, extra)
        ):
            # The holder read once: the rule and the write see the same store.
            effective = _approve_change(
                proposal, target, effective, text, holder, writer, vector, note, now, extra
            )
            status = ProposalStatus.APPLIED
        if status is not None:
            _claim_approval(proposal, status, effective, text, reviewer, note, now)
            approval_writes.applied(proposal, first, reviewer, effective, text, note, now)
            audited = {**extra, "outcome": status, "appliedAs": effective}
            review_audit(proposal, reviewer, "approved", note, audited, now)
        # Read under this write's lock: what this approval did, not what a second reviewer's,
        # committed a moment later, made of it (a QA pass: 200 "pending" for a first approval).
        decided = Proposal.objects.prefetch_related("approvals").get(id=proposal_id)
    if stale_refusal is not None:
        raise stale_refusal
    return decided


def _text_writer(reviewer: Actor, first) -> Actor:
    """Who the applied text is asserted by: whoever wrote it, the first approver when this
    approval completes a round (a review: a token without `assert` gave the text, a person the
    second approval, and the memory was a person's)."""
    return replace(reviewer, asserts=name_asserts(first.by)) if first is not None else reviewer


def _redecided(proposal: Proposal, redecide: bool, action: str | None, first) -> str | None:
    """ "Apply to the current version" of a flagged NONE is its Replace, on the memory as it is
    now (a review: a stale one could only be rejected), unless it completes a round (then what
    the first approved); any other approval's action as given."""
    if redecide and action is None and first is None and proposal.contradicting_none:
        return "update"
    return action


def _unapprovable(proposal: Proposal, action: str) -> str:
    """Why approving as `action` applies nothing, and what would."""
    if action == "none" and proposal.review_needed:
        return (
            "the model proposed no change, but the fact contradicts the memory it names: approve "
            "it as an update (Replace), an add (Keep both) or a delete (Delete the old one), or "
            "reject it to keep the memory as it is"
        )
    return f"cannot approve a '{action}' proposal"


def _as_approved(proposal: Proposal, first, config, reviewer: Actor, action, content):
    """(action, text) this approval applies: under the two-person rule, what the first approved.
    Your own first approval, while the rule is on, is said to be yours before another action or
    text is refused (pipeline.approvals.standing reads the same)."""
    if first is not None and config.destructive_approvals >= 2:
        approval_writes.refuse_same_approver(first, reviewer)
    if action == approval_writes.AS_PROPOSED:
        # A flagged NONE's fact replaces the memory it contradicts: the workbench's Replace.
        action = "update" if proposal.action == "none" else proposal.action
    return approval_writes.as_approved(first, action, content)


def _locked_for_approval(
    proposal_id: str, redecide: bool, reviewer: Actor
) -> tuple[Proposal, PipelineConfig]:
    """The proposal, locked, once every refusal that needs no memory has been ruled out (the
    brake, a decided proposal, another reviewer's claim), with the config it was checked under."""
    proposal = Proposal.objects.select_for_update().filter(id=proposal_id).first()
    if proposal is None:
        raise Refused("not_found", f"proposal {proposal_id} not found")
    config = get_config()
    if config.mutations_frozen:
        raise Refused("frozen", FROZEN_MESSAGE)
    allowed = APPROVABLE | ({ProposalStatus.STALE} if redecide else set())
    if proposal.status not in allowed:
        raise already_decided(proposal)
    if (held := claims.refusal(proposal.id, reviewer.name, timezone.now())) is not None:
        raise held
    return proposal, config


def _open_round(proposal: Proposal, redecide: bool, reviewer: Actor, at):
    """The first approval this one would complete, if any. Re-deciding re-bases the proposal on
    its memories as they are now: an approval given to them as they stood does not carry over
    once either moved, so that round ends as stale and this approval is the first of a new one."""
    first = approval_writes.first_of_round(proposal)
    if redecide and first is not None and _moved_since(proposal):
        approval_writes.close_round(proposal.id, ApprovalOutcome.STALE, reviewer, at)
        why = f"re-decided after its memories changed: {first.by}'s first approval no longer counts"
        review_audit(proposal, reviewer, "stale", why, {"endedRound": first.by}, at)
        return None
    return first


def _moved_since(proposal: Proposal) -> bool:
    """Whether its raw memory or its target moved on from the versions it was decided at (both
    locked, in id order, as _locked_memories locks them)."""
    ids = {proposal.source_memory_id, proposal.target_memory_id} - {None}
    versions = dict(
        Memory.objects.select_for_update()
        .filter(id__in=ids)
        .order_by("id")
        .values_list("id", "version")
    )
    # None: a proposal older than source versions; source_refusal does not judge it either.
    if proposal.source_version is not None and (
        versions.get(proposal.source_memory_id) != proposal.source_version
    ):
        return True
    return bool(proposal.target_memory_id) and (
        versions.get(proposal.target_memory_id) != proposal.target_version
    )


def _first_of_two(
    proposal: Proposal, first, reviewer: Actor, action: str, text: str, note, at, extra: dict
) -> bool:
    """A change the two-person rule holds: this approval is recorded as the first (True: nothing
    is applied yet, the claim ends), or it completes another reviewer's first approval (False:
    apply it). The same reviewer approving twice is refused."""
    approval_writes.refuse_same_approver(first, reviewer)
    if first is not None:
        extra["approvals"] = [first.by, reviewer.name]
        return False
    approval_writes.record_first(proposal, reviewer, action, text, note, at)
    claim_writes.end(proposal.id)
    # The versions it was approved at (re-decided: the memories' current ones): the second
    # approval finds it stale if either moves on before it.
    rebased = {
        "source_version": proposal.source_version,
        "target_version": proposal.target_version,
        "target_content": proposal.target_content,
    }
    # A stale one re-decided, or a skipped one, waits for its second approval in the queue's
    # default view (pending), no longer said to be stale or skipped.
    if proposal.status in (ProposalStatus.STALE, ProposalStatus.SKIPPED):
        rebased.update(status=ProposalStatus.PENDING, blocked_reason=None, skipped_reason=None)
    Proposal.objects.filter(id=proposal.id).update(updated_at=at, **rebased)
    audited = {**extra, "outcome": "awaiting_second_approval", "approvals": [reviewer.name]}
    reason = note or "first of two approvals (the two-person rule): a second reviewer applies it"
    review_audit(proposal, reviewer, "approved_first", reason, audited, at)
    return True


def _locked_memories(
    proposal: Proposal, effective: str, redecide: bool
) -> tuple[Memory, Memory | None]:
    """The raw memory and, for an UPDATE or DELETE, the target, locked in id order (two approvals
    locking the same two memories never wait on each other in a cycle). Re-deciding re-bases
    the proposal on their current versions."""
    ids = {proposal.source_memory_id}
    if effective != "add":
        ids.add(proposal.target_memory_id)
    locked = {m.id: m for m in Memory.objects.select_for_update().filter(id__in=ids).order_by("id")}
    source = locked[proposal.source_memory_id]
    if source.is_deleted:
        raise Refused("source_forgotten", "the raw memory this fact came from was forgotten")
    proposal.source_memory = source
    if redecide:
        proposal.source_version = source.version
    if effective == "add":
        return source, None
    target = locked.get(proposal.target_memory_id)
    if target is None:
        raise Refused("not_found", "the target memory no longer exists")
    if redecide:
        proposal.target_version, proposal.target_content = target.version, target.content
    return source, target


def _approve_add(
    proposal: Proposal, text: str, reviewer: Actor, vector: Vector | None, note: str | None, at
) -> str:
    """The approved ADD (or keep both): the derived memory, or the duplicate it meets."""
    derived = derive_memory(
        proposal, text, reviewer, vector, reason=note or f"approved: {proposal.reason}"
    )
    if derived.deduped:
        status, proposal.deduped_existing = ProposalStatus.DEDUPED, derived.memory
    else:
        status, proposal.created_memory = ProposalStatus.APPLIED, derived.memory
    if proposal.target_memory_id and proposal.action in {"update", "delete"}:
        _keep_both_audit(proposal, derived.memory, reviewer, note, at)
    return status


def _mark_stale(
    proposal: Proposal,
    refusal: TargetRefusal,
    moved: Memory,
    reviewer: Actor,
    note: str | None,
    at,
) -> Refused:
    """The target or the raw memory (`moved`) moved on: the proposal becomes stale (kept: the
    caller commits, then raises the returned refusal) so the reviewer compares and re-decides."""
    Proposal.objects.filter(id=proposal.id, status=proposal.status).update(
        status=ProposalStatus.STALE, blocked_reason=refusal.reason, updated_at=at
    )
    approval_writes.close_round(proposal.id, ApprovalOutcome.STALE, reviewer, at)
    audited = {"staleReason": refusal.reason, "currentVersion": moved.version}
    review_audit(proposal, reviewer, "stale", note, audited, at)
    return refusal.refused(proposal, moved)


def _text_holder(target: Memory, effective: str, text: str) -> Memory | None:
    """For an UPDATE, the agent's other live memory that already holds the new text: approving
    then retires the target, a DELETE (the two-person rule counts it as one)."""
    if effective != "update":
        return None
    return writes.active_duplicate(target.agent_id, normalize(text).hash, exclude_id=target.id)


def _approve_change(
    proposal: Proposal,
    target: Memory,
    effective: str,
    text: str,
    same_text: Memory | None,
    reviewer: Actor,
    vector: Vector | None,
    note: str | None,
    at,
    extra: dict,
) -> str:
    """The approved UPDATE or DELETE of a target nothing refuses (`same_text`: the memory that
    holds an UPDATE's text already, see _text_holder); returns the action applied."""
    if same_text is not None:
        # The new text is already a memory (often the raw memory itself): replacing retires the
        # old memory and links it to the one that holds the text.
        _retire_for(proposal, target, same_text, reviewer, note, at, extra.get("approvals"))
        extra["replacedBy"] = same_text.id
        return "delete"
    apply_destructive(
        proposal,
        target,
        text if effective == "update" else "",
        reviewer,
        vector,
        action=effective,
        reason=note or f"approved: {proposal.reason}",
        approvals=extra.get("approvals"),
    )
    return effective


def _claim_approval(
    proposal: Proposal, status: str, effective: str, text: str, reviewer: Actor, note, at
) -> None:
    """Record the decision, exactly once: a reviewer who lost the race is told who won. `action`
    stays the model's proposal; `applied_as` says what was applied when that differs."""
    claimed = Proposal.objects.filter(id=proposal.id, status=proposal.status).update(
        status=status,
        applied_as=effective if effective != proposal.action else None,
        decided_by=reviewer.name,
        decided_at=at,
        review_note=note,
        applied_content=text,
        target_version=proposal.target_version,
        target_content=proposal.target_content,
        source_version=proposal.source_version,
        created_memory=proposal.created_memory,
        updated_memory=proposal.updated_memory,
        deleted_memory=proposal.deleted_memory,
        deduped_existing=proposal.deduped_existing,
        updated_at=at,
    )
    if claimed != 1:
        raise already_decided(Proposal.objects.get(id=proposal.id))
    claim_writes.end(proposal.id)


def _retire_for(
    proposal: Proposal,
    target: Memory,
    holder: Memory,
    reviewer: Actor,
    note: str | None,
    at,
    approvals: list[str] | None = None,
) -> None:
    """Replace by retiring: soft-delete the target, its audit naming the memory with the text.
    An expired holder is live again (as a remember of its text revives it), with the target's
    expiry: the text it now carries alone is found again."""
    if holder.is_expired:
        holder = writes.revive_in_transaction(
            holder, expires_at=target.expires_at, actor=reviewer, reason="replaced a memory", at=at
        )
    writes.forget_in_transaction(
        target,
        actor=reviewer,
        reason=note or f"{RETIRED_REASON}{holder.id}",
        force=True,
        if_version=proposal.target_version,
        archive_reason="review_delete",
        metadata={
            "proposalId": proposal.id,
            "sourceMemoryId": proposal.source_memory_id,
            "replacedBy": holder.id,
            **({"approvals": approvals} if approvals else {}),
        },
        at=at,
    )
    proposal.deleted_memory, proposal.deduped_existing = target, holder


def _keep_both_audit(
    proposal: Proposal, kept_with: Memory, reviewer: Actor, note: str | None, at
) -> None:
    """Keep both: the old memory's own trail says a reviewer kept it beside the new text."""
    audit(
        proposal.target_memory_id,
        "reviewed",
        actor=reviewer,
        reason=note or "kept both: a reviewer kept this memory beside the new fact",
        metadata={"proposalId": proposal.id, "decision": "keep_both", "keptWith": kept_with.id},
        at=at,
    )


def reject(proposal_id: str, *, reviewer: Actor, reason: str | None = None) -> Proposal:
    """Record a rejection with its reason; nothing is written to memories. Under the two-person
    rule a rejection by either reviewer ends the round a first approval opened."""
    with transaction.atomic():
        proposal = Proposal.objects.select_for_update().filter(id=proposal_id).first()
        if proposal is None:
            raise Refused("not_found", f"proposal {proposal_id} not found")
        if proposal.status not in REJECTABLE:
            raise already_decided(proposal)
        now = timezone.now()
        if (held := claims.refusal(proposal.id, reviewer.name, now)) is not None:
            raise held
        note = (reason or "").strip() or "rejected, no reason given"
        claimed = Proposal.objects.filter(id=proposal.id, status=proposal.status).update(
            status=ProposalStatus.REJECTED,
            decided_by=reviewer.name,
            decided_at=now,
            review_note=note,
            updated_at=now,
        )
        if claimed != 1:
            raise already_decided(Proposal.objects.get(id=proposal.id))
        _remember_rejection(proposal, now)
        claim_writes.end(proposal.id)
        approval_writes.close_round(proposal.id, ApprovalOutcome.REJECTED, reviewer, now)
        review_audit(proposal, reviewer, "rejected", note, {}, now)
        # A microsecond later: the trail, ordered by time, shows the rejection first.
        kept_audit(proposal, reviewer, (reason or "").strip(), now + timedelta(microseconds=1))
    return Proposal.objects.get(id=proposal_id)


# --- suppression fingerprints ---------------------------------------------------------------------


def _remember_rejection(proposal: Proposal, at) -> None:
    """Inside the reject transaction: later identical proposals become suppressed."""
    if (proposal.action == "none" and not proposal.review_needed) or not proposal.fingerprint:
        return  # a flagged NONE rejected ("keep existing") stays rejected when stated again
    RejectionFingerprint.objects.update_or_create(
        agent_id=proposal.agent_id,
        fingerprint=proposal.fingerprint,
        defaults={"proposal": proposal, "active": True, "created_at": at, "updated_at": at},
    )


def unsuppress(proposal_id: str, *, reviewer: Actor) -> Proposal:
    """Queue a suppressed proposal for review again and lift its fingerprint."""
    with transaction.atomic():
        proposal = Proposal.objects.select_for_update().filter(id=proposal_id).first()
        if proposal is None:
            raise Refused("not_found", f"proposal {proposal_id} not found")
        if proposal.status != ProposalStatus.SUPPRESSED:
            raise Refused("not_suppressed", f"this proposal is {proposal.status}, not suppressed")
        now = timezone.now()
        Proposal.objects.filter(id=proposal.id, status=ProposalStatus.SUPPRESSED).update(
            status=ProposalStatus.PENDING, skipped_reason=None, updated_at=now
        )
        RejectionFingerprint.objects.filter(
            agent_id=proposal.agent_id, fingerprint=proposal.fingerprint
        ).update(active=False, updated_at=now)
        review_audit(proposal, reviewer, "unsuppressed", "queued again for review", {}, now)
    return Proposal.objects.get(id=proposal_id)


def reopen(proposal_id: str, *, reviewer: Actor) -> Proposal:
    """Undo a rejection: back to pending, and its fingerprint no longer suppresses anything."""
    with transaction.atomic():
        proposal = Proposal.objects.select_for_update().filter(id=proposal_id).first()
        if proposal is None:
            raise Refused("not_found", f"proposal {proposal_id} not found")
        if proposal.status != ProposalStatus.REJECTED:
            raise Refused("not_rejected", f"this proposal is {proposal.status}, not rejected")
        now = timezone.now()
        Proposal.objects.filter(id=proposal.id, status=ProposalStatus.REJECTED).update(
            status=ProposalStatus.PENDING,
            decided_by=None,
            decided_at=None,
            review_note=None,
            updated_at=now,
        )
        review_audit(proposal, reviewer, "reopened", "rejection undone", {}, now)
        rejection_undone(proposal, reviewer, now)
    return Proposal.objects.get(id=proposal_id)
