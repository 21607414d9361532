"""JSON shapes of DESIGN section 7: one serializer per shape (memory, history, proposal, job)."""

from __future__ import annotations

from memory.erasure_details import for_one_agent
from memory.models import Job, Memory, MemoryHistory
from memory.moments import iso
from pipeline.approvals import open_approvals
from pipeline.models import Proposal


def memory_json(memory: Memory) -> dict:
    return {
        "id": memory.id,
        "content": memory.content,
        "normalizedContent": memory.normalized_content,
        "contentHash": memory.content_hash,
        "type": memory.type,
        "who": memory.who,
        "why": memory.why,
        "agentId": memory.agent_id,
        "pinned": memory.pinned,
        "importance": memory.importance,
        "tags": memory.tags,
        "sourceType": memory.source_type,
        "sourceId": memory.source_id,
        "isDeleted": memory.is_deleted,
        "deletedAt": iso(memory.deleted_at),
        "version": memory.version,
        "extractionStatus": memory.extraction_status,
        "extractionModel": memory.extraction_model,
        "embeddingModel": memory.embedding_model,
        "createdAt": iso(memory.created_at),
        "updatedAt": iso(memory.updated_at),
        "updatedBy": memory.updated_by,
        "assertedBy": memory.asserted_by,
        "expiresAt": iso(memory.expires_at),
        "expired": memory.is_expired,
    }


def history_json(row: MemoryHistory, *, every_agent: bool = True) -> dict:
    """One audit row; `every_agent` False leaves out an erasure's cross-agent details."""
    metadata = row.metadata if every_agent else for_one_agent(row.event, row.metadata)
    return {
        "id": row.id,
        "event": row.event,
        "oldContent": row.old_content,
        "newContent": row.new_content,
        "changedBy": row.changed_by,
        "actorType": row.actor_type,
        "reason": row.reason,
        "metadata": metadata,
        "createdAt": iso(row.created_at),
    }


def proposal_json(p: Proposal) -> dict:
    """The API's proposal: `Proposal.summary()` plus who, where, when and how it was decided."""
    return {
        **p.summary(),
        "jobId": p.job_id,
        "sourceMemoryId": p.source_memory_id,
        "agentId": p.agent_id,
        "targetVersion": p.target_version,
        "contradiction": p.contradiction,
        "model": p.model,
        "promptVersion": p.prompt_version,
        "mode": p.mode,
        "decidedBy": p.decided_by,
        "decidedAt": iso(p.decided_at),
        "reviewNote": p.review_note,
        "appliedContent": p.applied_content,
        # `action` is what the model proposed; this is what a reviewer applied instead (None: as
        # proposed, or nothing applied).
        "appliedAs": p.applied_as,
        # Under the two-person rule: the approvals of the round waiting for its second one.
        "approvals": approvals_json(p),
        "createdAt": iso(p.created_at),
    }


def approvals_json(p: Proposal) -> list[dict]:
    """`[{by, at}]`: who approved a proposal that waits for a second approval, and when."""
    return [{"by": a.by, "at": iso(a.at)} for a in open_approvals(p)] if p.can_approve else []


def job_json(job: Job) -> dict:
    result = job.result or {}
    return {
        "id": job.id,
        "memoryId": job.memory_id,
        "jobType": job.job_type,
        "status": job.status,
        "attempts": job.attempts,
        "maxAttempts": job.max_attempts,
        "error": job.error,
        "leasedAt": iso(job.leased_at),
        "nextAttemptAt": iso(job.next_attempt_at),
        "completedAt": iso(job.completed_at),
        "failedAt": iso(job.failed_at),
        "createdAt": iso(job.created_at),
        "updatedAt": iso(job.updated_at),
        "result": {
            "facts": result.get("facts", []),
            "entities": result.get("entities", []),
            "proposals": result.get("proposals", []),
            "writeMode": result.get("writeMode"),
            "writeStats": result.get("writeStats", {}),
            "warnings": result.get("warnings", []),
            **({"cancelled": result["cancelled"]} if "cancelled" in result else {}),
            "model": result.get("model"),
            "provider": result.get("provider"),
        },
    }
