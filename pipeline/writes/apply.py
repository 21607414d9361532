"""The apply step the job write, a reviewer's approval and the bulk path share: the one rule that
refuses a stale or pinned target and its sibling for a stale raw memory, the memory an ADD
derives, and the guarded UPDATE/DELETE.

Nothing here opens a transaction: each function runs inside its caller's write.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory import writes
from memory.models import ActorType, Authority, Memory
from memory.writes import Actor, Refused, Vector
from pipeline.approvals import TWO_PERSON_RULE, needs_two
from pipeline.config import PIPELINE_NAME
from pipeline.models import SOURCE_CHANGED, Proposal

# A proposal's blocked reasons for a target it may not change now.
TARGET_DELETED = "target_deleted"
TARGET_CHANGED = "target_changed"
PINNED_TARGET = "pinned_target"
# ... and, in full mode, for a target a person asserted: the pipeline never changes it by itself.
PERSON_ASSERTED = "person_asserted"
# ... and, in full mode under the two-person rule, for every change it holds: TWO_PERSON_RULE.
# ... and for a raw memory that changed since its job read it (any action): SOURCE_CHANGED.
# The emergency brake's refusal of every reviewer apply (proposals and entity triples).
FROZEN_MESSAGE = "mutations are frozen: nothing can be applied until an admin lifts the brake"


@dataclass(frozen=True)
class TargetRefusal:
    """Why a proposal may not be applied now (its target, or for source_refusal its raw memory,
    moved on; or a pinned target): `reason` is the blocked reason."""

    reason: str
    # The target is pinned and no force was given. Also set beside a stale reason: the bulk path
    # leaves every pinned target for a one-by-one decision, stale or not.
    pinned: bool = False

    @property
    def stale(self) -> bool:
        """The target changed or went away since the decision: never applied blindly."""
        return self.reason not in {PINNED_TARGET, PERSON_ASSERTED, TWO_PERSON_RULE}

    def refused(self, proposal: Proposal, moved: Memory) -> Refused:
        """The 409 `stale` a reviewer meets: what moved on (`moved`), from which version to which,
        and its text now."""
        if self.reason == SOURCE_CHANGED:
            return Refused(
                "stale",
                "the raw memory this fact came from changed since its job; compare and re-decide",
                staleReason=self.reason,
                sourceMemoryId=moved.id,
                sourceVersion=proposal.source_version,
                currentSourceVersion=moved.version,
                currentSourceContent=moved.content,
            )
        return Refused(
            "stale",
            "the target memory changed since the decision; compare and re-decide",
            staleReason=self.reason,
            currentVersion=moved.version,
            targetVersion=proposal.target_version,
            currentContent=moved.content,
        )


def is_person_asserted(memory: Memory | None) -> bool:
    """A person asserted this memory (in the dashboard, by a reviewer's edit, or relayed by an
    agent with the `assert` scope): the pipeline never UPDATEs or DELETEs it by itself."""
    return memory is not None and memory.asserted_by == Authority.PERSON


def target_refusal(
    proposal: Proposal,
    target: Memory | None,
    force: bool,
    *,
    automatic: bool = False,
    approvals: int = 1,
) -> TargetRefusal | None:
    """The refusal a change of `target` meets, or None: stale first (gone or deleted, or its
    version differs from the one decided on), then pinned without `force`, then, for the
    pipeline's own (`automatic`) apply, a memory a person asserted, and a change the two-person
    rule holds (review.destructiveApprovals passed as `approvals`): those wait for reviewers."""
    pinned = target is not None and target.pinned and not force
    if target is None or target.is_deleted:
        return TargetRefusal(TARGET_DELETED, pinned)
    if target.version != proposal.target_version:
        return TargetRefusal(TARGET_CHANGED, pinned)
    if pinned:
        return TargetRefusal(PINNED_TARGET, pinned)
    if automatic and is_person_asserted(target):
        return TargetRefusal(PERSON_ASSERTED)
    if automatic and needs_two(proposal.action, target, approvals):
        return TargetRefusal(TWO_PERSON_RULE)
    return None


def source_refusal(proposal: Proposal, source: Memory) -> TargetRefusal | None:
    """The stale refusal any apply of `proposal` meets from its raw memory, or None: the source's
    version differs from the one its job wrote the proposal at (an edit, a forget and recover).
    Its facts may be corrected away, so it is never applied blindly, whatever the action.
    Proposals recorded before source versions were kept (None) are not checked; a forgotten
    source is refused on its own (`source_forgotten`) by the callers."""
    if proposal.source_version is not None and source.version != proposal.source_version:
        return TargetRefusal(SOURCE_CHANGED)
    return None


def derived_fields(proposal: Proposal, agent_id: str) -> dict:
    """How a memory an ADD derives is described (who, why, type, source, audit metadata)."""
    return {
        "type": proposal.fact_type,
        "agent_id": agent_id,
        "source_id": proposal.source_memory_id,
        "who": PIPELINE_NAME,
        "why": "extracted-fact",
        "importance": proposal.fact_confidence,
        "extraction_model": proposal.model,
        "metadata": {
            "proposalId": proposal.id,
            "proposedAction": proposal.action,
            "sourceMemoryId": proposal.source_memory_id,
            "decisionConfidence": proposal.confidence,
            "factConfidence": proposal.fact_confidence,
            "extractionModel": proposal.model,
        },
    }


def inherited(derived: writes.Derived, source: Memory) -> writes.Derived:
    """A derived memory as the job writes it: it expires when its raw memory does (as the raw
    memory is when the job writes: the source it read under the write lock)."""
    derived.memory.expires_at = source.expires_at
    return derived


def authority_of(proposal: Proposal, content: str, actor: Actor) -> str:
    """Who asserts the text a proposal writes: the model, unless a reviewer wrote their own (an
    agent's, through a token no person holds and without the `assert` scope: a QA pass made a
    person's memory so, which only that scope may)."""
    if actor.type != ActorType.OPERATOR or content == proposal.fact_content:
        return Authority.MODEL
    return Authority.PERSON if actor.asserts else Authority.AGENT


def derive_memory(
    proposal: Proposal, content: str, actor: Actor, vector: Vector | None, *, reason: str
) -> writes.RememberResult:
    """The memory an ADD creates (or the active duplicate it meets), inside the caller's write."""
    return writes.derive_in_transaction(
        content,
        **derived_fields(proposal, proposal.source_memory.agent_id),
        actor=actor,
        reason=reason,
        vector=vector,
        asserted_by=authority_of(proposal, content, actor),
        expires_at=proposal.source_memory.expires_at,  # it expires with its raw memory
    )


def apply_destructive(
    proposal: Proposal,
    target: Memory,
    content: str,
    actor: Actor,
    vector: Vector | None,
    *,
    action: str,
    reason: str | None = None,
    approvals: list[str] | None = None,
) -> None:
    """UPDATE through the modify path, DELETE through the forget path (soft, cold copy first).
    `action` is the one applied: the proposal's, or the one a reviewer chose instead;
    `approvals`, the two reviewers of the two-person rule, go on the memory's own trail."""
    metadata = {"proposalId": proposal.id, "sourceMemoryId": proposal.source_memory_id}
    if approvals:
        metadata["approvals"] = approvals
    if action == "update":
        authority = authority_of(proposal, content, actor)
        writes.modify_in_transaction(
            target,
            {"content": content, "type": proposal.fact_type, "asserted_by": authority},
            actor=actor,
            reason=reason or proposal.reason,
            if_version=proposal.target_version,
            vector=vector,
            archive_reason="superseded",
            metadata=metadata,
        )
        proposal.updated_memory = target
    else:
        writes.forget_in_transaction(
            target,
            actor=actor,
            reason=reason or proposal.reason,
            # A reviewer who got past target_refusal confirmed a pinned target; the pipeline never.
            force=actor.type == ActorType.OPERATOR,
            if_version=proposal.target_version,
            archive_reason="pipeline_delete"
            if actor.type == ActorType.PIPELINE
            else "review_delete",
            metadata=metadata,
        )
        proposal.deleted_memory = target
