"""JSON shapes of DESIGN §7 for proposals and jobs."""

from __future__ import annotations

from api.serializers import iso
from memory.models import Job
from pipeline.models import Proposal


def proposal_json(p: Proposal) -> dict:
    return {
        "id": p.id,
        "jobId": p.job_id,
        "sourceMemoryId": p.source_memory_id,
        "agentId": p.agent_id,
        "action": p.action,
        "fact": {"content": p.fact_content, "type": p.fact_type, "confidence": p.fact_confidence},
        "targetMemoryId": p.target_memory_id,
        "targetVersion": p.target_version,
        "targetContent": p.target_content,
        "confidence": p.confidence,
        "reason": p.reason,
        "status": p.status,
        "reviewNeeded": p.review_needed,
        "contradiction": p.contradiction,
        "blockedReason": p.blocked_reason,
        "skippedReason": p.skipped_reason,
        "createdMemoryId": p.created_memory_id,
        "updatedMemoryId": p.updated_memory_id,
        "deletedMemoryId": p.deleted_memory_id,
        "dedupedExistingId": p.deduped_existing_id,
        "model": p.model,
        "promptVersion": p.prompt_version,
        "mode": p.mode,
        "decidedBy": p.decided_by,
        "decidedAt": iso(p.decided_at),
        "reviewNote": p.review_note,
        "appliedContent": p.applied_content,
        "createdAt": iso(p.created_at),
    }


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
