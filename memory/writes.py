"""Every write to the store. Each public function is one short transaction; none does network I/O.

Callers compute vectors (model calls) first. A refusal raises `Refused`, with a stable code the API
maps to a status; rows are built in memory.batch (re-exported here), a job's status in memory.jobs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from memory import jobs
from memory.backend import lock_contents, pipelined

# The row builders and writers, and the job's bookkeeping, as callers have always named them.
from memory.batch import (  # noqa: F401
    BatchedWrite,
    Derived,
    LinkRead,
    archive_to_cold,
    derived,
    entity_ids,
    history_row,
    insert_rows,
    link_entities_of,
    link_existing_entities,
    linked_mentions,
    memory_row,
    require_visible_text,
    upsert_embedding,
    upsert_embeddings,
    write_mentions,
)
from memory.content import normalize
from memory.expiry import as_changed
from memory.field_changes import field_changes
from memory.graph import Triple, persist_triples  # noqa: F401
from memory.jobs import set_extraction_status  # noqa: F401
from memory.models import (
    DERIVED_SOURCE_TYPE,
    ActorType,
    Authority,
    Embedding,
    ExtractionStatus,
    Job,
    Memory,
    MemoryHistory,
    RowRead,
    holding,
)
from memory.moments import iso
from memory.refused import Refused
from memory.vectors import Vector  # noqa: F401

# The history events that change a memory (its row and version), filed by the store's writes;
# every other event (feedback, a review note, a decision) says something about it: no change.
CHANGE_EVENTS = ("created", "updated", "deleted", "recovered")


@dataclass(frozen=True)
class Actor:
    name: str
    type: str = ActorType.OPERATOR
    asserts: bool = True  # an operator's own words are a person's (not a holderless token's)


@dataclass
class RememberResult:
    memory: Memory
    deduped: bool
    job: Job | None
    linked_entity_ids: list[int] = field(default_factory=list)


def audit(memory_id: str, event: str, *, actor: Actor, at=None, **fields: Any) -> MemoryHistory:
    """Append one row to memory_history: `history_row`'s (reason, old and new content, metadata),
    made now unless `at` says when. Call only inside a write transaction."""
    row = history_row(memory_id, event, actor=actor, at=at or timezone.now(), **fields)
    row.save(force_insert=True)
    return row


def active_duplicate(agent_id: str, content_hash: str, *, exclude_id: str | None = None):
    query = holding([agent_id], [content_hash])
    if exclude_id:
        query = query.exclude(id=exclude_id)
    return query.first()


# --- remember -----------------------------------------------------------------------------------


def remember(
    content: str,
    *,
    actor: Actor,
    who: str | None = None,
    why: str = "",
    type: str = "fact",
    agent_id: str = "default",
    pinned: bool = False,
    importance: float = 0.5,
    tags: list[str] | None = None,
    source_type: str = "manual",
    source_id: str | None = None,
    triples: list[Triple] | None = None,
    create_job: bool = True,
    asserted_by: str = Authority.AGENT,
    expires_at=None,
) -> RememberResult:
    """Raw-first: memory row, FTS (trigger), inline links, pending job, in one transaction.

    The job is handed to the queue only after commit, so a worker never sees an uncommitted row.
    An exact duplicate of an active memory of the same agent returns that memory (deduped).
    On PostgreSQL its reads reach the server in one round trip and its writes in another
    (memory.backend.pipelined), as in the job's write.
    """
    text = normalize(content)
    if not text.storage:
        raise Refused("invalid_content", "content is empty after normalisation")
    now = timezone.now()
    memory = memory_row(
        text,
        actor=actor,
        at=now,
        type=type,
        who=who if who is not None else actor.name,
        why=why,
        agent_id=agent_id,
        pinned=pinned,
        importance=importance,
        tags=tags or [],
        source_type=source_type,
        source_id=source_id,
        extraction_status=ExtractionStatus.PENDING if create_job else ExtractionStatus.NONE,
        asserted_by=asserted_by,
        expires_at=expires_at,
    )
    try:
        with transaction.atomic():
            with pipelined():  # a writer of the same text waited for, the duplicate, the entities
                lock_contents(agent_id, [text.hash])
                duplicate = RowRead(
                    Memory,
                    "agent_id = %s AND content_hash = %s AND NOT is_deleted",
                    [agent_id, text.hash],
                )
                links = None if triples else LinkRead(memory)
            if (existing := duplicate.get()) is not None:
                if existing.is_expired:  # said again: true again, with this write's expiry
                    existing = revive_in_transaction(
                        existing, expires_at=expires_at, actor=actor, at=now
                    )
                return RememberResult(existing, deduped=True, job=None)
            with pipelined():  # writes (and the triples' entity reads): no round trip each
                reason = why or "remember"
                linked = _remembered(memory, reason, actor, now, links=links, triples=triples)
                job = jobs.create_in_transaction(memory, at=now) if create_job else None
            return RememberResult(memory, deduped=False, job=job, linked_entity_ids=linked)
    except IntegrityError:
        # A concurrent remember of the same content won the partial UNIQUE index: same answer
        # as the dedupe check above.
        existing = active_duplicate(agent_id, text.hash)
        if existing is None:
            raise
        return RememberResult(existing, deduped=True, job=None)


def _remembered(memory, reason: str, actor: Actor, at, *, links=None, triples=None, metadata=None):
    """A new memory's rows: memory, `created` audit, and its inline links (`links`) or the
    triples' entities, counted in one pass in id order; returns the ids of entities linked."""
    created = {"new_content": memory.content, "metadata": metadata}
    insert_rows(Memory, [memory])
    insert_rows(
        MemoryHistory,
        [history_row(memory.id, "created", actor=actor, reason=reason, at=at, **created)],
    )
    if triples:
        inline = linked_mentions(memory, at=at)
        named = persist_triples(memory, triples, at=at, linked=inline)
        return sorted({m.entity_id for m in inline} | set(named))
    return write_mentions(links.mentions(at=at) if links is not None else [], at=at)


def derive_in_transaction(
    content: str,
    *,
    type: str,
    agent_id: str,
    source_id: str,
    who: str,
    why: str,
    importance: float,
    extraction_model: str | None,
    actor: Actor,
    reason: str,
    vector: Vector | None = None,
    metadata: dict | None = None,
    asserted_by: str = Authority.MODEL,
    expires_at=None,
) -> RememberResult:
    """A memory derived from the raw memory `source_id`, inside the caller's transaction.

    An active memory of the agent with the same content is returned instead (deduped), also when
    a concurrent write wins the UNIQUE index. The vector, when given, was computed beforehand.
    """
    require_visible_text(content)
    text = normalize(content)
    lock_contents(agent_id, [text.hash])
    existing = active_duplicate(agent_id, text.hash)
    if existing is not None:
        if existing.is_expired:
            existing = revive_in_transaction(
                existing, expires_at=expires_at, actor=actor, reason=reason
            )
        return RememberResult(existing, deduped=True, job=None)
    now = timezone.now()
    try:
        with transaction.atomic():  # savepoint: a UNIQUE race becomes a dedupe, not a failed write
            memory = memory_row(
                text,
                actor=actor,
                at=now,
                type=type,
                who=who,
                why=why,
                agent_id=agent_id,
                importance=importance,
                source_type=DERIVED_SOURCE_TYPE,
                source_id=source_id,
                extraction_status=ExtractionStatus.COMPLETED,
                extraction_model=extraction_model,
                embedding_model=vector.model if vector else None,
                asserted_by=asserted_by,
                expires_at=expires_at,
            )
            _remembered(memory, reason, actor, now, metadata=metadata)
    except IntegrityError:
        return RememberResult(active_duplicate(agent_id, text.hash), deduped=True, job=None)
    link_existing_entities(memory, at=now)
    if vector is not None:
        upsert_embedding(memory, vector, at=now)
    return RememberResult(memory, deduped=False, job=None)


# --- modify / forget / recover --------------------------------------------------------------------


REVIVED = "written again after it expired"


def revive_in_transaction(
    memory: Memory, *, expires_at, actor: Actor, reason: str = "", at=None
) -> Memory:
    """An expired memory whose very text is written again (it holds the text's one place among
    the agent's memories): live again, with the new write's expiry (None: none), as an audited
    edit, so what was said again is found again. One no longer expired, or a write whose own
    expiry has passed too (an approval of a fact whose raw memory expired since), leaves it as
    it is."""
    locked = locked_memory(memory.id)
    if not locked.is_expired or (expires_at is not None and expires_at <= timezone.now()):
        return locked  # live already, or said again by a write that has expired too
    why = f"{reason}: {REVIVED}" if reason else REVIVED
    return modify_in_transaction(locked, {"expires_at": expires_at}, actor=actor, reason=why, at=at)


def locked_memory(memory_id: str) -> Memory:
    """The memory, inside the caller's write (Refused not_found when there is none)."""
    # Locked on PostgreSQL (SQLite already holds its write lock): checks see the latest version.
    memory = Memory.objects.select_for_update().filter(id=memory_id).first()
    if memory is None:
        raise Refused("not_found", f"memory {memory_id} not found")
    return memory


def _check_editable(memory: Memory) -> None:
    """A forgotten memory is recovered before an edit; a purged one never is (recover refuses
    it, so "recover it first" would send the caller round)."""
    if memory.is_purged:
        raise Refused("purged", "memory was purged: its text is gone for good")
    if memory.is_deleted:
        raise Refused("deleted", "memory is deleted; recover it first")


def _check_version(memory: Memory, if_version: int | None) -> None:
    if if_version is not None and memory.version != if_version:
        raise Refused(
            "version_conflict",
            f"memory is at version {memory.version}, not {if_version}",
            currentVersion=memory.version,
        )


def _set_at_version(memory: Memory, *, deleted: bool, doing: str, actor: Actor, at, **columns):
    """The version compare-and-set of modify, forget and recover: the columns are written only if
    the row is still at the version (and deleted state) the checks saw, with version +1 and the
    stamp; the in-memory object then matches the row. Anything else is a version_conflict."""
    columns.update(updated_at=at, updated_by=actor.name, version=memory.version + 1)
    rows = Memory.objects.filter(id=memory.id, version=memory.version, is_deleted=deleted).update(
        **columns
    )
    if rows != 1:
        raise Refused("version_conflict", f"memory changed while it was being {doing}")
    for name, value in columns.items():
        setattr(memory, name, value)


def _set_content_at_version(memory: Memory, *, actor: Actor, at, **columns):
    """_set_at_version for a new text: a concurrent write of the same text that committed after
    the duplicate check (PostgreSQL's writers do not take turns) wins the partial UNIQUE index,
    and the edit is refused as if the check had seen it, not failed (the savepoint keeps the
    caller's transaction usable)."""
    try:
        with transaction.atomic():
            _set_at_version(memory, deleted=False, doing="modified", actor=actor, at=at, **columns)
    except IntegrityError:
        duplicate = active_duplicate(memory.agent_id, columns["content_hash"], exclude_id=memory.id)
        if duplicate is None:
            raise
        raise Refused(
            "duplicate_content_hash",
            "another active memory already has this content",
            duplicateMemoryId=duplicate.id,
        ) from None


MODIFIABLE_FIELDS = ("content", "type", "tags", "importance", "pinned", "expires_at")
# The fields an `updated` audit keeps [before, after] of: the authority follows a new text.
BEFORE_AND_AFTER = (*MODIFIABLE_FIELDS[1:], "asserted_by")


def _field_updates(memory: Memory, changes: dict[str, Any]) -> dict[str, Any]:
    """The fields but content that `changes` does change: None leaves a field as it is, except
    expires_at, where None lifts the expiry."""
    updates = {}
    for name in MODIFIABLE_FIELDS[1:]:
        value = changes.get(name, getattr(memory, name))
        if value != getattr(memory, name) and (value is not None or name == "expires_at"):
            updates[name] = value
    return updates


def modify_in_transaction(
    memory: Memory,
    changes: dict[str, Any],
    *,
    actor: Actor,
    reason: str,
    if_version: int | None = None,
    vector: Vector | None = None,
    archive_reason: str = "edited",
    metadata: dict | None = None,
    at=None,
) -> Memory:
    """The modify path for callers that already hold a transaction (the pipeline's one write)."""
    if not reason or not reason.strip():
        raise Refused("reason_required", "reason is required")
    _check_editable(memory)
    _check_version(memory, if_version)
    now = at or timezone.now()
    changes = as_changed(memory.expires_at, changes, now)
    updates: dict[str, Any] = {}
    old_content = memory.content
    content_changed = False
    if "content" in changes and changes["content"] is not None:
        require_visible_text(changes["content"])
        text = normalize(changes["content"])
        if text.storage != memory.content:
            duplicate = active_duplicate(memory.agent_id, text.hash, exclude_id=memory.id)
            if duplicate is not None:
                raise Refused(
                    "duplicate_content_hash",
                    "another active memory already has this content",
                    duplicateMemoryId=duplicate.id,
                )
            updates.update(
                content=text.storage, normalized_content=text.normalized, content_hash=text.hash
            )
            content_changed = True
            # Who asserted the memory follows its text: given with a new text, it is the new one's.
            if changes.get("asserted_by") and changes["asserted_by"] != memory.asserted_by:
                updates["asserted_by"] = changes["asserted_by"]
    updates.update(_field_updates(memory, changes))
    if not updates:
        raise Refused("no_changes", "nothing to change", currentVersion=memory.version)
    if content_changed:
        archive_to_cold(memory, archive_reason, at=now)
        # Vectors are keyed by content: text that was stored before (a revert) already has one.
        updates["embedding_model"] = (
            vector.model
            if vector
            else Embedding.objects.filter(content_hash=updates["content_hash"])
            .values_list("model", flat=True)
            .first()
        )
    changed_fields = sorted(updates)
    was = {name: getattr(memory, name) for name in BEFORE_AND_AFTER if name in updates}
    if content_changed:
        _set_content_at_version(memory, actor=actor, at=now, **updates)
    else:
        _set_at_version(memory, deleted=False, doing="modified", actor=actor, at=now, **updates)
    if content_changed and vector is not None:
        upsert_embedding(memory, vector, at=now)
    audit(
        memory.id,
        "updated",
        actor=actor,
        reason=reason,
        old_content=old_content if content_changed else None,
        new_content=memory.content if content_changed else None,
        metadata={
            "changedFields": [f for f in changed_fields if f in MODIFIABLE_FIELDS],
            "ifVersion": if_version,
            "contentChanged": content_changed,
            "version": memory.version,
            **({"expiresAt": iso(updates["expires_at"])} if "expires_at" in updates else {}),
            **({"changes": field_changes(was, updates)} if was else {}),
            **(metadata or {}),
        },
        at=now,
    )
    return memory


def modify(
    memory_id: str,
    changes: dict[str, Any],
    *,
    actor: Actor,
    reason: str,
    if_version: int | None = None,
    vector: Vector | None = None,
) -> Memory:
    """Edit MODIFIABLE_FIELDS (expires_at None: no expiry); version +1; content changes archived."""
    with transaction.atomic():
        return modify_in_transaction(
            locked_memory(memory_id),
            changes,
            actor=actor,
            reason=reason,
            if_version=if_version,
            vector=vector,
        )


def forget_in_transaction(
    memory: Memory,
    *,
    actor: Actor,
    reason: str,
    force: bool = False,
    if_version: int | None = None,
    archive_reason: str = "forgotten",
    metadata: dict | None = None,
    at=None,
) -> Memory:
    """Soft delete inside the caller's transaction; pending jobs of the memory are cancelled."""
    if not reason or not reason.strip():
        raise Refused("reason_required", "reason is required")
    if memory.is_deleted:
        raise Refused("already_deleted", "memory is already deleted", currentVersion=memory.version)
    _check_version(memory, if_version)
    if memory.pinned and not force:
        raise Refused("pinned_requires_force", "memory is pinned; pass force to forget it")
    if memory.pinned and actor.type == ActorType.PIPELINE:
        raise Refused(
            "autonomous_force_denied", "the pipeline may never force-forget a pinned memory"
        )
    now = at or timezone.now()
    archive_to_cold(memory, archive_reason, at=now)
    _set_at_version(
        memory,
        deleted=False,
        doing="forgotten",
        actor=actor,
        at=now,
        is_deleted=True,
        deleted_at=now,
    )
    cancelled = jobs.cancel_pending_in_transaction(memory, at=now)
    audit(
        memory.id,
        "deleted",
        actor=actor,
        reason=reason,
        old_content=memory.content,
        metadata={
            "force": force,
            "ifVersion": if_version,
            "version": memory.version,
            "cancelledJobs": cancelled,
            **(metadata or {}),
        },
        at=now,
    )
    return memory


def forget(
    memory_id: str,
    *,
    actor: Actor,
    reason: str,
    force: bool = False,
    if_version: int | None = None,
) -> Memory:
    """Soft delete (never a hard delete); pinned needs force; the pipeline can never force."""
    with transaction.atomic():
        return forget_in_transaction(
            locked_memory(memory_id),
            actor=actor,
            reason=reason,
            force=force,
            if_version=if_version,
        )


def recover_in_transaction(
    memory: Memory,
    *,
    actor: Actor,
    reason: str,
    if_version: int | None = None,
    metadata: dict | None = None,
    at=None,
) -> Memory:
    if not reason or not reason.strip():
        raise Refused("reason_required", "reason is required")
    if not memory.is_deleted:
        raise Refused("not_deleted", "memory is not deleted", currentVersion=memory.version)
    if memory.is_purged:
        raise Refused("purged", "memory was purged: its text is gone for good")
    _check_version(memory, if_version)
    now = at or timezone.now()
    window = timedelta(days=settings.MEMORY_RECOVER_DAYS)
    if memory.deleted_at and now - memory.deleted_at > window:
        raise Refused(
            "retention_expired",
            f"memory was deleted more than {settings.MEMORY_RECOVER_DAYS} days ago",
        )
    duplicate = active_duplicate(memory.agent_id, memory.content_hash, exclude_id=memory.id)
    if duplicate is not None:
        raise Refused(
            "duplicate_content_hash",
            "an active memory with the same content exists",
            duplicateMemoryId=duplicate.id,
        )
    _set_at_version(
        memory,
        deleted=True,
        doing="recovered",
        actor=actor,
        at=now,
        is_deleted=False,
        deleted_at=None,
    )
    job = jobs.requeue_unfinished_in_transaction(memory, at=now)
    audit(
        memory.id,
        "recovered",
        actor=actor,
        reason=reason,
        new_content=memory.content,
        metadata={
            "ifVersion": if_version,
            "version": memory.version,
            "queuedJobId": job.id if job else None,
            **(metadata or {}),
        },
        at=now,
    )
    return memory


def recover(memory_id: str, *, actor: Actor, reason: str, if_version: int | None = None) -> Memory:
    """Undo a soft delete within the recovery window."""
    with transaction.atomic():
        return recover_in_transaction(
            locked_memory(memory_id), actor=actor, reason=reason, if_version=if_version
        )


def store_vector_in_transaction(memory: Memory, vector: Vector, *, at=None) -> None:
    """The memory's vector and the model that made it, inside the caller's transaction."""
    upsert_embedding(memory, vector, at=at or timezone.now())
    Memory.objects.filter(id=memory.id).update(embedding_model=vector.model)


def store_vector(memory_id: str, content_hash: str, vector: Vector) -> bool:
    """Attach a vector computed outside any transaction, unless the content changed meanwhile."""
    with transaction.atomic():
        memory = Memory.objects.filter(id=memory_id, content_hash=content_hash).first()
        if memory is None:
            return False
        store_vector_in_transaction(memory, vector)
        return True
