"""Taking reviewer work back, each exactly as asked in one transaction: revert an applied proposal
(and undo the revert), and undo a reviewer's decision (the proposal pending again)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from memory import writes
from memory.models import Memory
from memory.moments import iso
from memory.writes import Actor, Refused
from pipeline.config import get_config
from pipeline.models import APPROVABLE, Proposal, ProposalStatus, RejectionFingerprint
from pipeline.writes import approvals as approval_writes
from pipeline.writes.reviewed import kept_undone_audit, review_audit, target_decision_undone

# --- revert ---------------------------------------------------------------------------------------


def _affected_memory(proposal: Proposal) -> Memory | None:
    memory_id = (
        proposal.created_memory_id or proposal.updated_memory_id or proposal.deleted_memory_id
    )
    return Memory.objects.select_for_update().filter(id=memory_id).first() if memory_id else None


def revert(proposal_id: str, *, reviewer: Actor, reason: str | None = None) -> Proposal:
    """Undo an applied proposal as new audited events (never a history rewrite), or undo a revert.

    ADD -> the derived memory is forgotten; UPDATE -> the target's previous content comes back
    from its cold snapshot; DELETE -> the target is recovered. Refused when the memory changed
    since, so a later human edit is never overwritten.
    """
    with transaction.atomic():
        proposal = Proposal.objects.select_for_update().filter(id=proposal_id).first()
        if proposal is None:
            raise Refused("not_found", f"proposal {proposal_id} not found")
        _revert_locked(proposal, reviewer, reason)
    return Proposal.objects.get(id=proposal_id)


def _revert_locked(proposal: Proposal, reviewer: Actor, reason: str | None) -> Memory:
    """revert's work on a proposal the caller locked, inside its transaction; returns the memory."""
    memory = _revertible_memory(proposal)
    undoing = proposal.reverted_at is not None
    now = timezone.now()
    note = (reason or "").strip() or ("revert undone" if undoing else "reverted, no reason given")
    metadata = {"proposalId": proposal.id, "revert": not undoing, "undoRevert": undoing}
    audited = {"actor": reviewer, "reason": note, "metadata": metadata, "at": now}
    applied = proposal.applied_action  # what the approval did, which may not be the proposal
    if applied == "update":
        if undoing:
            # Who asserted the applied text comes back with it (a reviewer's edit stays a
            # person's, which full mode never rewrites), from the snapshot the revert archived.
            restored = {
                "content": proposal.applied_content or proposal.fact_content,
                "type": proposal.fact_type,
                "asserted_by": _previous_text(memory)["asserted_by"],
            }
        else:
            restored = _previous_text(memory)
        writes.modify_in_transaction(memory, restored, archive_reason="reverted", **audited)
    # Reverting an ADD forgets the memory and reverting a DELETE recovers it; undoing, the reverse.
    elif (applied == "add") != undoing:
        writes.forget_in_transaction(memory, force=True, archive_reason="reverted", **audited)
    else:
        writes.recover_in_transaction(memory, **audited)
    Proposal.objects.filter(id=proposal.id).update(
        reverted_at=None if undoing else now,
        reverted_by=None if undoing else reviewer.name,
        updated_at=now,
    )
    review_audit(
        proposal,
        reviewer,
        "revert_undone" if undoing else "reverted",
        note,
        {"memoryId": memory.id},
        now,
    )
    return memory


def _revertible_memory(proposal: Proposal) -> Memory:
    """The memory a revert changes, locked; refused when nothing may be reverted, or when the
    memory changed since the proposal was applied (a later human edit is never overwritten)."""
    if get_config().mutations_frozen:
        raise Refused(
            "frozen", "mutations are frozen: nothing can be reverted until the brake is lifted"
        )
    if proposal.status != ProposalStatus.APPLIED:
        raise Refused(
            "not_applied",
            f"only applied proposals can be reverted; this one is {proposal.status}",
        )
    memory = _affected_memory(proposal)
    if memory is None:
        raise Refused("not_found", "the memory this proposal changed no longer exists")
    # Changes only: feedback and review notes on the memory's trail are not edits.
    changes = memory.history.filter(event__in=writes.CHANGE_EVENTS)
    last = changes.order_by("-created_at", "-id").first()
    last_proposal = (last.metadata or {}).get("proposalId") if last else None
    if last_proposal != proposal.id:
        raise Refused(
            "changed_since",
            "the memory changed after this proposal was applied; open it and decide by hand",
            memoryId=memory.id,
            currentVersion=memory.version,
        )
    return memory


def _previous_text(memory: Memory) -> dict:
    """The content and type an UPDATE replaced, from the cold snapshot it archived."""
    snapshot = (
        memory.cold_snapshots.filter(version=memory.version - 1).order_by("-archived_at").first()
    )
    if snapshot is None:
        raise Refused("no_snapshot", "no cold snapshot of the previous version exists")
    authority = (snapshot.original_row_json or {}).get("asserted_by")
    return {"content": snapshot.content, "type": snapshot.type, "asserted_by": authority}


def revert_once(
    proposal_id: str, *, reviewer: Actor, undo: bool = False, reason: str | None = None
) -> Proposal:
    """Revert (or, with undo, undo the revert of) an applied proposal, exactly as asked.

    revert toggles; a double-clicked Undo or a retried API call must not flip the change back,
    so the caller says which way it means and the check runs in the same transaction.
    """
    with transaction.atomic():
        proposal = (
            Proposal.objects.select_for_update()
            .filter(id=proposal_id)
            .only("status", "reverted_at", "reverted_by")
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
                    revertedAt=iso(proposal.reverted_at),
                )
        return revert(proposal_id, reviewer=reviewer, reason=reason)


# --- undo a reviewer's decision --------------------------------------------------------------------

UNDOABLE = {ProposalStatus.APPLIED, ProposalStatus.REJECTED, ProposalStatus.DEDUPED}


def undo_decision(proposal_id: str, *, reviewer: Actor, reason: str | None = None) -> Proposal:
    """Take a reviewer's decision back: the proposal is pending again, as the model proposed it.

    An applied change is reverted first (refused, like a revert, when the memory changed since);
    a rejection's fingerprint stops suppressing. After a revert the target reads as it did at
    decision time, so the proposal is re-based on the target's new version and can be re-decided.
    A first approval under the two-person rule is withdrawn: the round ends, nothing was applied.
    """
    with transaction.atomic():
        proposal = Proposal.objects.select_for_update().filter(id=proposal_id).first()
        if proposal is None:
            raise Refused("not_found", f"proposal {proposal_id} not found")
        now = timezone.now()
        if proposal.status in APPROVABLE and approval_writes.withdraw(proposal, reviewer, now):
            note = (reason or "").strip() or "first approval withdrawn"
            review_audit(proposal, reviewer, "approval_withdrawn", note, {}, now)
            return Proposal.objects.get(id=proposal_id)
        if proposal.status not in UNDOABLE or not proposal.decided_by:
            raise Refused(
                "not_undoable",
                f"this proposal is {proposal.status}: there is no reviewer decision to undo",
            )
        if proposal.status == ProposalStatus.APPLIED and proposal.reverted_at is not None:
            raise Refused(
                "already_reverted",
                f"this proposal was already reverted by {proposal.reverted_by}: "
                "undo the revert from its page first",
            )
        note = (reason or "").strip() or "decision undone"
        rebase: dict[str, Any] = {}
        if proposal.status == ProposalStatus.APPLIED:
            memory = _revert_locked(proposal, reviewer, note)
            approval_writes.undone(proposal.id)
            if memory.id == proposal.target_memory_id:
                memory.refresh_from_db(fields=["version", "content"])
                rebase = {"target_version": memory.version, "target_content": memory.content}
        Proposal.objects.filter(id=proposal.id, status=proposal.status).update(
            status=ProposalStatus.PENDING,
            applied_as=None,
            decided_by=None,
            decided_at=None,
            review_note=None,
            applied_content=None,
            created_memory=None,
            updated_memory=None,
            deleted_memory=None,
            deduped_existing=None,
            reverted_at=None,
            reverted_by=None,
            updated_at=now,
            **rebase,
        )
        review_audit(proposal, reviewer, "undone", note, {"undoneStatus": proposal.status}, now)
        _undo_keep_both_audit(proposal, reviewer, note, now)
        if proposal.status == ProposalStatus.REJECTED:
            rejection_undone(proposal, reviewer, now)
    return Proposal.objects.get(id=proposal_id)


def rejection_undone(proposal: Proposal, reviewer: Actor, at) -> None:
    """What follows once a rejection no longer holds (its undo, or a reopen), inside the
    caller's transaction: its fingerprint suppresses nothing, its approval rounds settled
    nothing, and the memory it kept says so on its own trail."""
    RejectionFingerprint.objects.filter(
        agent_id=proposal.agent_id, fingerprint=proposal.fingerprint, proposal=proposal
    ).update(active=False, updated_at=at)
    approval_writes.reopened(proposal.id)
    kept_undone_audit(proposal, reviewer, at)


def _undo_keep_both_audit(proposal: Proposal, reviewer: Actor, note: str, at) -> None:
    """A "keep both" wrote on the old memory's own trail that a reviewer kept it beside the new
    fact: once that decision is undone, the same trail says so."""
    if proposal.applied_as == "add":
        reason = f"{note}: the keep both of proposal {proposal.id} no longer holds"
        target_decision_undone(proposal, "keep_both", reviewer, reason, at)
