"""JSON shapes of DESIGN §7 (camelCase keys) for memories and their history."""

from __future__ import annotations

from memory.models import Memory, MemoryHistory


def iso(value):
    return value.isoformat().replace("+00:00", "Z") if value else None


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
    }


def history_json(row: MemoryHistory) -> dict:
    return {
        "id": row.id,
        "event": row.event,
        "oldContent": row.old_content,
        "newContent": row.new_content,
        "changedBy": row.changed_by,
        "actorType": row.actor_type,
        "reason": row.reason,
        "metadata": row.metadata,
        "createdAt": iso(row.created_at),
    }
