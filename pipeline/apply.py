"""Every pipeline write: job claims and outcomes, proposals and their audits, reviewer decisions,
config changes. Each public function is one short transaction; nothing here calls a model.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from memory import writes
from memory.content import normalize
from memory.models import ActorType, ExtractionStatus, Job, JobStatus, Memory
from memory.writes import Actor, Refused, Vector, audit
from pipeline import grounding, safety
from pipeline.config import get_config, mode_of
from pipeline.models import (
    RISK_OF,
    ConfigChange,
    LlmCall,
    PipelineConfig,
    Proposal,
    ProposalStatus,
    RejectionFingerprint,
    TripleReview,
    TripleStatus,
)
from pipeline.parsing import PROMPT_VERSION

PIPELINE_ACTOR = Actor("pipeline-v2", ActorType.PIPELINE)
SHADOW_ACTOR = Actor("pipeline-shadow", ActorType.PIPELINE)


# --- config -------------------------------------------------------------------------------------


def save_config(values: dict[str, Any], *, changed_by: str, reason: str) -> PipelineConfig:
    """Apply validated field values and log before/after in one transaction."""
    from pipeline.config import config_json

    with transaction.atomic():
        config = get_config()
        before = config_json(config)
        for attr, value in values.items():
            setattr(config, attr, value)
        config.save()
        ConfigChange.objects.create(
            changed_by=changed_by,
            changed_at=timezone.now(),
            before=before,
            after=config_json(config),
            reason=reason,
        )
    return config


def mark_maintenance_run(at: datetime) -> None:
    PipelineConfig.objects.filter(pk=1).update(last_maintenance_at=at)


# --- jobs ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    job_id: str
    memory_id: str | None
    leased_at: datetime
    attempts: int
    max_attempts: int


def claim_job(job_id: str) -> Claim | None:
    """pending -> leased with one conditional UPDATE; the attempt is counted here, not at the end,
    so a job that kills its worker still runs out of attempts."""
    config = get_config()
    if not config.enabled:
        return None
    now = timezone.now()
    due = Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now)
    # A lease older than the timeout belongs to a dead worker: a re-delivered task may take it over.
    # Out of attempts, it is left for the sweep to bury (a job that kills its worker must end).
    expired = Q(
        status=JobStatus.LEASED,
        leased_at__lt=now - timedelta(seconds=config.lease_timeout_seconds),
        attempts__lt=F("max_attempts"),
    )
    with transaction.atomic():
        claimed = Job.objects.filter(
            (due & Q(status=JobStatus.PENDING)) | expired, id=job_id
        ).update(
            status=JobStatus.LEASED,
            leased_at=now,
            attempts=F("attempts") + 1,
            max_attempts=config.max_attempts,
            updated_at=now,
        )
        if claimed != 1:
            return None
        job = Job.objects.get(id=job_id)
    return Claim(job.id, job.memory_id, now, job.attempts, job.max_attempts)


def _held(claim: Claim) -> Job | None:
    """The job row if this claim still holds its lease (a reclaimed lease changes leased_at)."""
    return Job.objects.filter(
        id=claim.job_id, status=JobStatus.LEASED, leased_at=claim.leased_at
    ).first()


def mark_handed_off(job_ids: list[str]) -> None:
    """Note a re-queued hand-off, so the next sweep does not queue the same job again at once."""
    if job_ids:
        Job.objects.filter(id__in=job_ids, status=JobStatus.PENDING).update(
            updated_at=timezone.now(), next_attempt_at=None
        )


def backoff(attempts: int) -> timedelta:
    return timedelta(seconds=min(5 * 2**attempts, 120))


def _log_calls(job_id: str, calls: list, at: datetime) -> None:
    LlmCall.objects.bulk_create(
        [
            LlmCall(
                job_id=job_id,
                kind=call.kind,
                provider=call.provider,
                model=call.model,
                prompt=call.prompt,
                raw_response=call.raw_response or "",
                duration_ms=call.duration_ms,
                prompt_tokens=call.prompt_tokens,
                completion_tokens=call.completion_tokens,
                error=call.error,
                fact_index=call.fact_index,
                created_at=at,
            )
            for call in calls
        ]
    )


def fail_job(claim: Claim, error: str, calls: list) -> str | None:
    """Back to pending with backoff, or dead after max attempts (the memory is kept, marked failed)."""
    now = timezone.now()
    with transaction.atomic():
        job = _held(claim)
        if job is None:
            return None
        _log_calls(job.id, calls, now)
        if job.attempts >= job.max_attempts:
            Job.objects.filter(id=job.id).update(
                status=JobStatus.DEAD, error=error, failed_at=now, leased_at=None, updated_at=now
            )
            if job.memory_id:
                Memory.objects.filter(id=job.memory_id).update(
                    extraction_status=ExtractionStatus.FAILED
                )
            return JobStatus.DEAD
        Job.objects.filter(id=job.id).update(
            status=JobStatus.PENDING,
            error=error,
            failed_at=now,
            leased_at=None,
            next_attempt_at=now + backoff(job.attempts),
            updated_at=now,
        )
        return JobStatus.PENDING


def reclaim_stale_leases(lease_timeout: timedelta) -> dict[str, int]:
    """Leases older than the timeout belong to a worker that died: retry or bury them."""
    now = timezone.now()
    cutoff = now - lease_timeout
    with transaction.atomic():
        stale = Job.objects.filter(status=JobStatus.LEASED, leased_at__lt=cutoff)
        dead_ids = list(stale.filter(attempts__gte=F("max_attempts")).values_list("id", flat=True))
        dead = Job.objects.filter(id__in=dead_ids).update(
            status=JobStatus.DEAD,
            error="lease expired: the worker died or timed out on every attempt",
            failed_at=now,
            leased_at=None,
            updated_at=now,
        )
        Memory.objects.filter(jobs__id__in=dead_ids).update(
            extraction_status=ExtractionStatus.FAILED
        )
        retried = stale.exclude(id__in=dead_ids).update(
            status=JobStatus.PENDING,
            error="lease expired: the worker died or timed out; retrying",
            leased_at=None,
            next_attempt_at=now,
            updated_at=now,
        )
    return {"dead": dead, "retried": retried}


def retry_dead_job(job_id: str, *, actor: Actor) -> bool:
    """A person sends a dead job back to the queue with a fresh attempt budget."""
    now = timezone.now()
    with transaction.atomic():
        job = Job.objects.filter(id=job_id, status=JobStatus.DEAD).first()
        if job is None:
            return False
        Job.objects.filter(id=job_id).update(
            status=JobStatus.PENDING,
            attempts=0,
            next_attempt_at=None,
            leased_at=None,
            updated_at=now,
        )
        if job.memory_id:
            Memory.objects.filter(id=job.memory_id).update(
                extraction_status=ExtractionStatus.PENDING
            )
            audit(
                job.memory_id,
                "job_retried",
                actor=actor,
                reason="dead job sent back to the queue",
                metadata={"jobId": job.id, "lastError": job.error},
                at=now,
            )
        transaction.on_commit(lambda: _hand_off(job_id))
    return True


def _hand_off(job_id: str) -> None:
    from memory.queue import hand_off

    hand_off(job_id)


def purge_old(before: datetime) -> dict[str, int]:
    """Delete completed/cancelled jobs' model-call logs and the jobs themselves past retention.

    Jobs that produced proposals are kept (proposals reference them); their call logs go.
    """
    with transaction.atomic():
        old = Job.objects.filter(
            status__in=[JobStatus.COMPLETED, JobStatus.CANCELLED], updated_at__lt=before
        )
        calls, _ = LlmCall.objects.filter(
            Q(job__in=old) | Q(job__isnull=True, created_at__lt=before)
        ).delete()
        jobs, _ = old.filter(proposals__isnull=True).delete()
    return {"calls": calls, "jobs": jobs}


# --- proposals ----------------------------------------------------------------------------------


@dataclass
class JobOutcome:
    """Everything a job computed outside the transaction, ready for one atomic write."""

    claim: Claim
    provider: str
    model: str
    facts: list = field(default_factory=list)
    entities: list = field(default_factory=list)
    decisions: list = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    calls: list = field(default_factory=list)
    source_vector: Vector | None = None
    fact_vectors: dict[str, Vector] = field(default_factory=dict)
    mode: str = "shadow"


def _blank_stats() -> dict[str, int]:
    return dict.fromkeys(
        (
            "added",
            "updated",
            "deleted",
            "deduped",
            "skippedLowConfidence",
            "blockedDestructive",
            "reviewNeeded",
            "stale",
            "pending",
            "recorded",
            "embeddingsAdded",
        ),
        0,
    )


def record_job(outcome: JobOutcome, *, fail_inside=None) -> dict | None:
    """The job's one write: proposals, audits, applied changes, vectors, call log, completion.

    The source memory and the mode are read again inside the transaction: a memory forgotten or
    a brake pulled while the model was thinking wins over what the job decided.
    """
    now = timezone.now()
    with transaction.atomic():
        job = _held(outcome.claim)
        if job is None:
            return None
        _log_calls(job.id, outcome.calls, now)
        source = Memory.objects.get(id=job.memory_id)
        if source.is_deleted:
            result = {"cancelled": "source memory was forgotten", "warnings": outcome.warnings}
            Job.objects.filter(id=job.id).update(
                status=JobStatus.CANCELLED,
                result=result,
                completed_at=now,
                leased_at=None,
                updated_at=now,
            )
            return result
        config = get_config()
        mode = mode_of(config)
        if mode == "disabled":
            mode = "shadow"  # disabled while running: record, never write
        stats = _blank_stats()
        if outcome.source_vector is not None:
            writes.upsert_embedding(source, outcome.source_vector, at=now)
            Memory.objects.filter(id=source.id).update(embedding_model=outcome.source_vector.model)
        proposals = []
        for decided in outcome.decisions:
            # position = the fact's index in the extraction, so the decide call log lines up.
            proposal = _decide_and_apply(
                decided, decided.fact_index, job, source, config, mode, outcome, stats, now
            )
            proposals.append(proposal)
            if fail_inside is not None:
                fail_inside(decided.fact_index)
        TripleReview.objects.bulk_create(
            [
                TripleReview(
                    job=job,
                    source_memory=source,
                    position=index,
                    source=triple.source,
                    source_type=triple.source_type,
                    relationship=triple.relationship,
                    target=triple.target,
                    target_type=triple.target_type,
                    confidence=triple.confidence,
                    created_at=now,
                )
                for index, triple in enumerate(outcome.entities)
            ]
        )
        result = {
            "facts": [fact.as_dict() for fact in outcome.facts],
            "entities": [entity.as_dict() for entity in outcome.entities],
            "proposals": [
                {
                    "id": p.id,
                    "action": p.action,
                    "status": p.status,
                    "fact": {
                        "content": p.fact_content,
                        "type": p.fact_type,
                        "confidence": p.fact_confidence,
                    },
                    "targetMemoryId": p.target_memory_id,
                    "targetContent": p.target_content,
                    "confidence": p.confidence,
                    "reason": p.reason,
                    "reviewNeeded": p.review_needed,
                    "blockedReason": p.blocked_reason,
                    "skippedReason": p.skipped_reason,
                    "createdMemoryId": p.created_memory_id,
                    "updatedMemoryId": p.updated_memory_id,
                    "deletedMemoryId": p.deleted_memory_id,
                    "dedupedExistingId": p.deduped_existing_id,
                    "supported": p.supported,
                    "safety": p.safety_kinds,
                }
                for p in proposals
            ],
            "writeMode": mode,
            "writeStats": stats,
            "warnings": outcome.warnings,
            "provider": outcome.provider,
            "model": outcome.model,
        }
        Memory.objects.filter(id=source.id).update(
            extraction_status=ExtractionStatus.COMPLETED, extraction_model=outcome.model
        )
        Job.objects.filter(id=job.id).update(
            status=JobStatus.COMPLETED,
            result=result,
            completed_at=now,
            leased_at=None,
            error=None,
            updated_at=now,
        )
    return result


def _decision_audit(
    proposal: Proposal, source: Memory, actor: Actor, outcome: JobOutcome, at
) -> None:
    contradiction = proposal.contradiction or {}
    audit(
        source.id,
        "none",
        actor=actor,
        reason=proposal.reason,
        metadata={
            "proposalId": proposal.id,
            "status": proposal.status,
            "shadow": actor is SHADOW_ACTOR,
            "proposedAction": proposal.action,
            "targetMemoryId": proposal.target_memory_id,
            "targetContent": proposal.target_content,
            "confidence": proposal.confidence,
            "fact": {
                "content": proposal.fact_content,
                "type": proposal.fact_type,
                "confidence": proposal.fact_confidence,
            },
            "extractionModel": outcome.model,
            "factCount": len(outcome.facts),
            "entityCount": len(outcome.entities),
            "createdMemoryId": proposal.created_memory_id,
            "updatedMemoryId": proposal.updated_memory_id,
            "deletedMemoryId": proposal.deleted_memory_id,
            "dedupedExistingId": proposal.deduped_existing_id,
            "blockedReason": proposal.blocked_reason,
            "reviewNeeded": proposal.review_needed,
            "contradictionRisk": bool(contradiction.get("flagged")),
            "skippedReason": proposal.skipped_reason,
        },
        at=at,
    )


def _decide_and_apply(
    decided, position, job, source, config, mode, outcome, stats, now
) -> Proposal:
    fact = decided.fact
    target = decided.target
    flagged = decided.contradiction
    proposal = Proposal(
        job=job,
        source_memory=source,
        agent_id=source.agent_id,
        action=decided.action,
        fact_content=fact.content,
        fact_type=fact.type,
        fact_confidence=fact.confidence,
        target_memory_id=target.candidate.memory_id if target else None,
        target_version=target.version if target else None,
        target_content=target.candidate.content if target else None,
        confidence=decided.confidence,
        reason=decided.reason,
        review_needed=bool(flagged and flagged.flagged),
        contradiction=flagged.as_dict() if flagged else None,
        candidates=[c.as_dict() for c in decided.candidates],
        model=outcome.model,
        prompt_version=PROMPT_VERSION,
        mode=mode,
        position=position,
        created_at=now,
        updated_at=now,
    )
    actor = SHADOW_ACTOR if mode == "shadow" else PIPELINE_ACTOR
    vector = outcome.fact_vectors.get(normalize(fact.content).hash)
    if proposal.review_needed:
        stats["reviewNeeded"] += 1
    annotate(proposal, source.content)
    suppressed = suppression_for(proposal)
    if decided.action == "none":
        proposal.status = ProposalStatus.RECORDED
        stats["recorded"] += 1
    elif suppressed is not None:
        # A reviewer already rejected this exact proposal: record it, do not queue it again.
        proposal.status = ProposalStatus.SUPPRESSED
        proposal.skipped_reason = "rejected_before"
        RejectionFingerprint.objects.filter(pk=suppressed.pk).update(
            hits=F("hits") + 1, updated_at=now
        )
        stats["suppressed"] = stats.get("suppressed", 0) + 1
    elif mode != "shadow" and safety.needs_review(proposal.safety):
        proposal.status, proposal.blocked_reason = ProposalStatus.PENDING, "safety_review"
        stats["blockedDestructive" if proposal.is_destructive else "heldForSafety"] = (
            stats.get("blockedDestructive" if proposal.is_destructive else "heldForSafety", 0) + 1
        )
    elif decided.action == "add":
        _gate_add(proposal, config, mode, vector, stats, source)
    else:
        _gate_destructive(proposal, config, mode, stats, vector)
    if proposal.status == ProposalStatus.PENDING:
        stats["pending"] += 1
    proposal.save(force_insert=True)
    _decision_audit(proposal, source, actor, outcome, now)
    return proposal


def _gate_add(
    proposal: Proposal, config, mode: str, vector: Vector | None, stats, source: Memory
) -> None:
    text = normalize(proposal.fact_content)
    existing = writes.active_duplicate(source.agent_id, text.hash)
    if existing is not None:
        proposal.status = ProposalStatus.DEDUPED
        proposal.deduped_existing = existing
        stats["deduped"] += 1
        return
    if mode == "shadow":
        proposal.status = ProposalStatus.PENDING
        proposal.blocked_reason = "mutations_frozen" if config.mutations_frozen else "shadow_mode"
        return
    if proposal.fact_confidence < config.min_fact_confidence_for_write:
        proposal.status, proposal.skipped_reason = ProposalStatus.SKIPPED, "low_fact_confidence"
        stats["skippedLowConfidence"] += 1
        return
    if not text.normalized.strip(".,!?;: ") or not normalize(text.storage).normalized:
        proposal.status, proposal.skipped_reason = ProposalStatus.SKIPPED, "empty_fact_content"
        stats["skippedLowConfidence"] += 1
        return
    created, existing = create_derived_memory(
        source, proposal, proposal.fact_content, PIPELINE_ACTOR, vector, reason=proposal.reason
    )
    if created is None:
        proposal.status, proposal.deduped_existing = ProposalStatus.DEDUPED, existing
        stats["deduped"] += 1
        return
    proposal.status, proposal.created_memory = ProposalStatus.APPLIED, created
    proposal.decided_by, proposal.decided_at = PIPELINE_ACTOR.name, proposal.created_at
    stats["added"] += 1
    if vector is not None:
        stats["embeddingsAdded"] += 1


def _gate_destructive(proposal: Proposal, config, mode: str, stats, vector: Vector | None) -> None:
    if mode == "shadow":
        proposal.status = ProposalStatus.PENDING
        proposal.blocked_reason = "mutations_frozen" if config.mutations_frozen else "shadow_mode"
        return
    if proposal.review_needed:
        # Flagged contradictions are never applied automatically, in any mode.
        proposal.status, proposal.blocked_reason = ProposalStatus.PENDING, "contradiction_review"
        stats["blockedDestructive"] += 1
        return
    if mode == "controlled-write":
        proposal.status = ProposalStatus.PENDING
        proposal.blocked_reason = "destructive_mutations_disabled"
        stats["blockedDestructive"] += 1
        return
    target = Memory.objects.filter(id=proposal.target_memory_id).first()
    if target is None or target.is_deleted or target.version != proposal.target_version:
        proposal.status = ProposalStatus.STALE
        proposal.blocked_reason = (
            "target_deleted" if target is None or target.is_deleted else "target_changed"
        )
        stats["stale"] += 1
        return
    if target.pinned:
        proposal.status, proposal.blocked_reason = ProposalStatus.PENDING, "pinned_target"
        stats["blockedDestructive"] += 1
        return
    if proposal.fact_confidence < config.min_fact_confidence_for_write:
        proposal.status, proposal.skipped_reason = ProposalStatus.SKIPPED, "low_fact_confidence"
        stats["skippedLowConfidence"] += 1
        return
    try:
        with transaction.atomic():  # savepoint: a refusal leaves no cold snapshot behind
            _apply_destructive(proposal, target, proposal.fact_content, PIPELINE_ACTOR, vector)
    except Refused as refused:
        proposal.status = ProposalStatus.SKIPPED
        proposal.skipped_reason = f"{proposal.action}_{refused.code}"
        return
    proposal.status = ProposalStatus.APPLIED
    proposal.decided_by, proposal.decided_at = PIPELINE_ACTOR.name, proposal.created_at
    stats["updated" if proposal.action == "update" else "deleted"] += 1


def _apply_destructive(
    proposal: Proposal,
    target: Memory,
    content: str,
    actor: Actor,
    vector: Vector | None,
    *,
    reason: str | None = None,
) -> None:
    metadata = {"proposalId": proposal.id, "sourceMemoryId": proposal.source_memory_id}
    if proposal.action == "update":
        writes.modify_in_transaction(
            target,
            {"content": content, "type": proposal.fact_type},
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
            force=actor.type == ActorType.OPERATOR,
            if_version=proposal.target_version,
            archive_reason="pipeline_delete"
            if actor.type == ActorType.PIPELINE
            else "review_delete",
            metadata=metadata,
        )
        proposal.deleted_memory = target


def create_derived_memory(
    source: Memory,
    proposal: Proposal,
    content: str,
    actor: Actor,
    vector: Vector | None,
    *,
    reason: str,
) -> tuple[Memory | None, Memory | None]:
    """(new memory, None) or (None, existing duplicate). Runs inside the caller's transaction."""
    text = normalize(content)
    existing = writes.active_duplicate(source.agent_id, text.hash)
    if existing is not None:
        return None, existing
    now = timezone.now()
    try:
        with transaction.atomic():  # savepoint: a UNIQUE race becomes a dedupe, not a failed job
            memory = Memory.objects.create(
                content=text.storage,
                normalized_content=text.normalized,
                content_hash=text.hash,
                type=proposal.fact_type,
                who="pipeline-v2",
                why="extracted-fact",
                agent_id=source.agent_id,
                importance=proposal.fact_confidence,
                source_type="pipeline-v2",
                source_id=source.id,
                extraction_status=ExtractionStatus.COMPLETED,
                extraction_model=proposal.model,
                embedding_model=vector.model if vector else None,
                created_at=now,
                updated_at=now,
                updated_by=actor.name,
            )
    except IntegrityError:
        return None, writes.active_duplicate(source.agent_id, text.hash)
    audit(
        memory.id,
        "created",
        actor=actor,
        reason=reason,
        new_content=memory.content,
        metadata={
            "proposalId": proposal.id,
            "proposedAction": proposal.action,
            "sourceMemoryId": source.id,
            "decisionConfidence": proposal.confidence,
            "factConfidence": proposal.fact_confidence,
            "extractionModel": proposal.model,
        },
        at=now,
    )
    writes.link_existing_entities(memory, at=now)
    if vector is not None:
        writes.upsert_embedding(memory, vector, at=now)
    return memory, None


# --- reviewer decisions ---------------------------------------------------------------------------

APPROVABLE = {ProposalStatus.PENDING, ProposalStatus.SKIPPED}
REJECTABLE = {ProposalStatus.PENDING, ProposalStatus.STALE}


def _already_decided(proposal: Proposal) -> Refused:
    who = proposal.decided_by or "nobody"
    when = (
        proposal.decided_at.strftime("%Y-%m-%d %H:%M:%S UTC")
        if proposal.decided_at
        else "an earlier run"
    )
    if proposal.decided_by:
        message = f"this proposal is already {proposal.status} (by {who} at {when})"
    else:
        # Nobody decided it: the pipeline recorded it this way (stale, deduped, suppressed, ...).
        message = f"this proposal is {proposal.status}, as the pipeline recorded it; it cannot be decided here"
        if proposal.status == ProposalStatus.STALE:
            message = "this proposal is stale: its target changed since the decision; compare and re-decide"
    return Refused(
        "already_decided",
        message,
        # Not `status`: the API's error() already takes the HTTP status under that name.
        currentStatus=proposal.status,
        decidedBy=proposal.decided_by,
        decidedAt=proposal.decided_at.isoformat() if proposal.decided_at else None,
    )


def _review_audit(
    proposal: Proposal, reviewer: Actor, decision: str, note: str | None, extra: dict, at
) -> None:
    audit(
        proposal.source_memory_id,
        "reviewed",
        actor=reviewer,
        reason=note or f"{decision} by reviewer",
        metadata={
            "proposalId": proposal.id,
            "decision": decision,
            "action": proposal.action,
            **extra,
        },
        at=at,
    )


def approve(
    proposal_id: str,
    *,
    reviewer: Actor,
    content: str | None = None,
    vector: Vector | None = None,
    action: str | None = None,
    note: str | None = None,
    redecide: bool = False,
) -> Proposal:
    """Apply a proposal through the same guarded write the pipeline uses, exactly once.

    The confidence gate does not apply to a human; every other guard does. `action` lets the
    contradiction workbench keep both (add) or delete instead; `redecide` re-targets a stale
    proposal at the target's current version after the reviewer saw it side by side.
    """
    stale_refusal = None
    with transaction.atomic():
        proposal = Proposal.objects.select_related("source_memory").filter(id=proposal_id).first()
        if proposal is None:
            raise Refused("not_found", f"proposal {proposal_id} not found")
        if get_config().mutations_frozen:
            raise Refused(
                "frozen",
                "mutations are frozen: nothing can be applied until an admin lifts the brake",
            )
        allowed = APPROVABLE | ({ProposalStatus.STALE} if redecide else set())
        if proposal.status not in allowed:
            raise _already_decided(proposal)
        if proposal.source_memory.is_deleted:
            raise Refused("source_forgotten", "the raw memory this fact came from was forgotten")
        previous_status = proposal.status
        effective = action or proposal.action
        if effective not in {"add", "update", "delete"}:
            raise Refused("invalid_action", f"cannot approve a '{effective}' proposal")
        now = timezone.now()
        text = content if content is not None and content.strip() else proposal.fact_content
        edited = text != proposal.fact_content
        extra: dict[str, Any] = {"edited": edited, "appliedAction": effective}
        if effective == "add":
            created, existing = create_derived_memory(
                proposal.source_memory,
                proposal,
                text,
                reviewer,
                vector,
                reason=note or f"approved: {proposal.reason}",
            )
            if created is None:
                status, proposal.deduped_existing = ProposalStatus.DEDUPED, existing
            else:
                status, proposal.created_memory = ProposalStatus.APPLIED, created
        else:
            target = Memory.objects.filter(id=proposal.target_memory_id).first()
            if target is None:
                raise Refused("not_found", "the target memory no longer exists")
            if redecide:
                proposal.target_version, proposal.target_content = target.version, target.content
            if target.is_deleted or target.version != proposal.target_version:
                stale_refusal = Refused(
                    "stale",
                    "the target memory changed since the decision; compare and re-decide",
                    currentVersion=target.version,
                    targetVersion=proposal.target_version,
                    currentContent=target.content,
                )
                Proposal.objects.filter(id=proposal.id, status=previous_status).update(
                    status=ProposalStatus.STALE,
                    blocked_reason="target_deleted" if target.is_deleted else "target_changed",
                    updated_at=now,
                )
                _review_audit(
                    proposal, reviewer, "stale", note, {"currentVersion": target.version}, now
                )
            else:
                proposal.action = effective
                _apply_destructive(
                    proposal,
                    target,
                    text if effective == "update" else "",
                    reviewer,
                    vector,
                    reason=note or f"approved: {proposal.reason}",
                )
                status = ProposalStatus.APPLIED
        if stale_refusal is None:
            claimed = Proposal.objects.filter(id=proposal.id, status=previous_status).update(
                status=status,
                action=effective,
                risk=RISK_OF[effective],
                decided_by=reviewer.name,
                decided_at=now,
                review_note=note,
                applied_content=text,
                target_version=proposal.target_version,
                target_content=proposal.target_content,
                created_memory=proposal.created_memory,
                updated_memory=proposal.updated_memory,
                deleted_memory=proposal.deleted_memory,
                deduped_existing=proposal.deduped_existing,
                updated_at=now,
            )
            if claimed != 1:
                raise _already_decided(Proposal.objects.get(id=proposal.id))
            _review_audit(proposal, reviewer, "approved", note, {**extra, "outcome": status}, now)
    if stale_refusal is not None:
        raise stale_refusal
    return Proposal.objects.get(id=proposal_id)


def reject(proposal_id: str, *, reviewer: Actor, reason: str | None = None) -> Proposal:
    """Record a rejection with its reason; nothing is written to memories."""
    with transaction.atomic():
        proposal = Proposal.objects.filter(id=proposal_id).first()
        if proposal is None:
            raise Refused("not_found", f"proposal {proposal_id} not found")
        if proposal.status not in REJECTABLE:
            raise _already_decided(proposal)
        now = timezone.now()
        note = (reason or "").strip() or "rejected by reviewer"
        claimed = Proposal.objects.filter(id=proposal.id, status=proposal.status).update(
            status=ProposalStatus.REJECTED,
            decided_by=reviewer.name,
            decided_at=now,
            review_note=note,
            updated_at=now,
        )
        if claimed != 1:
            raise _already_decided(Proposal.objects.get(id=proposal.id))
        remember_rejection(proposal, now)
        _review_audit(proposal, reviewer, "rejected", note, {}, now)
    return Proposal.objects.get(id=proposal_id)


# --- beyond review: fingerprints, grounding, safety, suppression, revert, triples -----------------


def fingerprint(action: str, fact: str, target_id: str | None) -> str:
    """Same action + same normalised fact + same target = the same proposal."""
    basis = f"{action}|{normalize(fact).normalized}|{target_id or ''}"
    return hashlib.sha256(basis.encode("utf-8")).hexdigest()


def annotate(proposal: Proposal, raw: str) -> None:
    """Fingerprint, supporting spans of the raw memory and safety findings (no model call)."""
    proposal.fingerprint = fingerprint(
        proposal.action, proposal.fact_content, proposal.target_memory_id
    )
    proposal.grounding = grounding.spans(raw, proposal.fact_content)
    proposal.supported = grounding.is_supported(proposal.grounding)
    proposal.safety = [finding.as_dict() for finding in safety.scan(proposal.fact_content)]
    proposal.safety_kinds = ",".join(sorted({finding["kind"] for finding in proposal.safety}))


def suppression_for(proposal: Proposal) -> RejectionFingerprint | None:
    if proposal.action == "none":
        return None
    return RejectionFingerprint.objects.filter(
        agent_id=proposal.agent_id, fingerprint=proposal.fingerprint, active=True
    ).first()


def remember_rejection(proposal: Proposal, at) -> None:
    """Called inside the reject transaction: later identical proposals become suppressed."""
    if proposal.action == "none" or not proposal.fingerprint:
        return
    RejectionFingerprint.objects.update_or_create(
        agent_id=proposal.agent_id,
        fingerprint=proposal.fingerprint,
        defaults={"proposal": proposal, "active": True, "created_at": at, "updated_at": at},
    )


def unsuppress(proposal_id: str, *, reviewer: Actor) -> Proposal:
    """Queue a suppressed proposal for review again and lift its fingerprint."""
    with transaction.atomic():
        proposal = Proposal.objects.filter(id=proposal_id).first()
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
        _review_audit(proposal, reviewer, "unsuppressed", "queued again for review", {}, now)
    return Proposal.objects.get(id=proposal_id)


def reopen(proposal_id: str, *, reviewer: Actor) -> Proposal:
    """Undo a rejection: back to pending, and its fingerprint no longer suppresses anything."""
    with transaction.atomic():
        proposal = Proposal.objects.filter(id=proposal_id).first()
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
        RejectionFingerprint.objects.filter(
            agent_id=proposal.agent_id, fingerprint=proposal.fingerprint, proposal=proposal
        ).update(active=False, updated_at=now)
        _review_audit(proposal, reviewer, "reopened", "rejection undone", {}, now)
    return Proposal.objects.get(id=proposal_id)


def _affected_memory(proposal: Proposal) -> Memory | None:
    memory_id = (
        proposal.created_memory_id or proposal.updated_memory_id or proposal.deleted_memory_id
    )
    return Memory.objects.filter(id=memory_id).first() if memory_id else None


def revert(proposal_id: str, *, reviewer: Actor, reason: str | None = None) -> Proposal:
    """Undo an applied proposal as new audited events (never a history rewrite), or undo a revert.

    ADD -> the derived memory is forgotten; UPDATE -> the target's previous content comes back
    from its cold snapshot; DELETE -> the target is recovered. Refused when the memory changed
    since, so a later human edit is never overwritten.
    """
    with transaction.atomic():
        proposal = Proposal.objects.filter(id=proposal_id).first()
        if proposal is None:
            raise Refused("not_found", f"proposal {proposal_id} not found")
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
        undoing = proposal.reverted_at is not None
        last = memory.history.order_by("-created_at", "-id").first()
        last_proposal = (last.metadata or {}).get("proposalId") if last else None
        if last_proposal != proposal.id:
            raise Refused(
                "changed_since",
                "the memory changed after this proposal was applied; open it and decide by hand",
                memoryId=memory.id,
                currentVersion=memory.version,
            )
        now = timezone.now()
        note = (reason or "").strip() or ("revert undone" if undoing else "reverted by reviewer")
        metadata = {"proposalId": proposal.id, "revert": not undoing, "undoRevert": undoing}
        if proposal.action == "add":
            if not undoing:
                writes.forget_in_transaction(
                    memory,
                    actor=reviewer,
                    reason=note,
                    force=True,
                    archive_reason="reverted",
                    metadata=metadata,
                    at=now,
                )
            else:
                writes.recover_in_transaction(
                    memory, actor=reviewer, reason=note, metadata=metadata, at=now
                )
        elif proposal.action == "update":
            if not undoing:
                snapshot = (
                    memory.cold_snapshots.filter(version=memory.version - 1)
                    .order_by("-archived_at")
                    .first()
                )
                if snapshot is None:
                    raise Refused("no_snapshot", "no cold snapshot of the previous version exists")
                writes.modify_in_transaction(
                    memory,
                    {"content": snapshot.content, "type": snapshot.type},
                    actor=reviewer,
                    reason=note,
                    archive_reason="reverted",
                    metadata=metadata,
                    at=now,
                )
            else:
                writes.modify_in_transaction(
                    memory,
                    {
                        "content": proposal.applied_content or proposal.fact_content,
                        "type": proposal.fact_type,
                    },
                    actor=reviewer,
                    reason=note,
                    archive_reason="reverted",
                    metadata=metadata,
                    at=now,
                )
        else:
            if not undoing:
                writes.recover_in_transaction(
                    memory, actor=reviewer, reason=note, metadata=metadata, at=now
                )
            else:
                writes.forget_in_transaction(
                    memory,
                    actor=reviewer,
                    reason=note,
                    force=True,
                    archive_reason="reverted",
                    metadata=metadata,
                    at=now,
                )
        Proposal.objects.filter(id=proposal.id).update(
            reverted_at=None if undoing else now,
            reverted_by=None if undoing else reviewer.name,
            updated_at=now,
        )
        _review_audit(
            proposal,
            reviewer,
            "revert_undone" if undoing else "reverted",
            note,
            {"memoryId": memory.id},
            now,
        )
    return Proposal.objects.get(id=proposal_id)


def decide_triple(
    triple_id: int, *, reviewer: Actor, approve: bool, note: str | None = None
) -> TripleReview:
    """Approve (entities, relation and mentions through the explicit graph path) or reject."""
    with transaction.atomic():
        triple = TripleReview.objects.select_related("source_memory").filter(id=triple_id).first()
        if triple is None:
            raise Refused("not_found", f"triple {triple_id} not found")
        if triple.status != TripleStatus.PENDING:
            raise Refused(
                "already_decided",
                f"this triple is already {triple.status} (by {triple.decided_by})",
            )
        now = timezone.now()
        if approve:
            writes.persist_triples(
                triple.source_memory,
                [
                    writes.Triple(
                        triple.source,
                        triple.relationship,
                        triple.target,
                        triple.source_type,
                        triple.target_type,
                        triple.confidence,
                    )
                ],
                at=now,
            )
        status = TripleStatus.APPROVED if approve else TripleStatus.REJECTED
        claimed = TripleReview.objects.filter(id=triple.id, status=TripleStatus.PENDING).update(
            status=status, decided_by=reviewer.name, decided_at=now, note=note
        )
        if claimed != 1:
            raise Refused("already_decided", "another reviewer decided this triple first")
        audit(
            triple.source_memory_id,
            "reviewed",
            actor=reviewer,
            reason=note or f"entity triple {status}",
            metadata={"tripleId": triple.id, "decision": status, "triple": str(triple)},
            at=now,
        )
    return TripleReview.objects.get(id=triple_id)
