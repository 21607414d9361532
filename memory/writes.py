"""Every write to the store. Each public function is one short transaction; none does network I/O.

Callers compute vectors (model calls) before calling; functions here only take finished data.
Refusals raise `Refused` with a stable code that the API maps to an HTTP status.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, connections, models, transaction
from django.db.models import AutoField, Q
from django.forms.models import model_to_dict
from django.utils import timezone

from memory import linker, queue, vectors
from memory.backend import lock_contents
from memory.content import NormalizedContent, is_effectively_empty, normalize
from memory.models import (
    DERIVED_SOURCE_TYPE,
    ActorType,
    Embedding,
    Entity,
    ExtractionStatus,
    Job,
    JobStatus,
    Memory,
    MemoryCold,
    MemoryEntityMention,
    MemoryHistory,
    Relation,
)
from memory.vectors import Vector, vector_to_blob

_INSERTS: dict[tuple[type, str], tuple[str, list]] = {}
# Fields whose values the job's write already holds in their database form: passed as they are.
_PLAIN_FIELDS = (
    models.CharField,
    models.TextField,
    models.IntegerField,
    models.FloatField,
    models.BooleanField,
)


def _converter(field, database):
    """value -> database value for one field: `get_db_prep_save` except for plain scalar fields
    (most of the job's values), whose per-value conversion is most of bulk_create's cost."""
    if field.is_relation or isinstance(field, _PLAIN_FIELDS):
        return None
    if isinstance(field, models.DateTimeField):
        adapt = database.ops.adapt_datetimefield_value
        # A write stamps most of its rows with one `now`: it is converted once, not per row. The
        # (value, converted) pair is swapped in whole, so threads sharing it never see a mix.
        last = [(None, None)]

        def convert_time(value):
            if value is None:
                return None
            seen, converted = last[0]
            if seen is not value:
                converted = adapt(value)
                last[0] = (value, converted)
            return converted

        return convert_time
    return lambda value: field.get_db_prep_save(value, database)


def insert_rows(model, objects: list) -> None:
    """`bulk_create` for the job's write, where the write lock is held: one executemany of an
    INSERT built once per model. Plain scalar values go as they are; other fields through their
    own `get_db_prep_save`. No ids are read back, so auto-increment keys stay unset on the
    objects: the callers set their own keys or never read them."""
    if not objects:
        return
    database = connections[DEFAULT_DB_ALIAS]
    key = (model, database.vendor)
    if key not in _INSERTS:
        fields = [
            f
            for f in model._meta.concrete_fields
            if not (f.primary_key and isinstance(f, AutoField)) and not f.generated
        ]
        if any(getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False) for f in fields):
            raise ValueError(f"{model.__name__} has auto_now fields: use bulk_create")
        quote = database.ops.quote_name
        _INSERTS[key] = (
            f"INSERT INTO {quote(model._meta.db_table)} "
            f"({', '.join(quote(f.column) for f in fields)}) "
            f"VALUES ({', '.join(['%s'] * len(fields))})",
            [(f.attname, _converter(f, database)) for f in fields],
        )
    sql, columns = _INSERTS[key]
    rows = [
        [
            getattr(obj, attname) if convert is None else convert(getattr(obj, attname))
            for attname, convert in columns
        ]
        for obj in objects
    ]
    with database.bulk_cursor() as cursor:
        cursor.executemany(sql, rows)
    for obj in objects:
        obj._state.adding = False
        obj._state.db = database.alias


def update_rows(model, ids: list, columns: dict[str, Any]) -> int:
    """`model.objects.filter(pk__in=ids).update(**columns)` for plain values, written out: the
    job's write runs these under the write lock, where the ORM took several times longer to build
    an UPDATE than the database to run it. Values go through the same conversion as insert_rows;
    returns the number of rows changed (-1 inside memory.backend.pipelined: not known yet)."""
    if not ids:
        return 0
    database = connections[DEFAULT_DB_ALIAS]
    quote = database.ops.quote_name
    fields = [model._meta.get_field(name) for name in columns]
    values = []
    for model_field, value in zip(fields, columns.values(), strict=True):
        convert = _converter(model_field, database)
        values.append(value if convert is None else convert(value))
    with database.bulk_cursor() as cursor:
        cursor.execute(
            f"UPDATE {quote(model._meta.db_table)} "
            f"SET {', '.join(f'{quote(f.column)} = %s' for f in fields)} "
            f"WHERE {quote(model._meta.pk.column)} IN ({', '.join(['%s'] * len(ids))})",
            [*values, *ids],
        )
        return cursor.rowcount


class Refused(Exception):
    """A write that was not done, with a stable machine code and a message for people."""

    def __init__(self, code: str, message: str, **details: Any):
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


@dataclass(frozen=True)
class Actor:
    name: str
    type: str = ActorType.OPERATOR


@dataclass
class Triple:
    source: str
    relationship: str
    target: str
    source_type: str = "unknown"
    target_type: str = "unknown"
    confidence: float = 0.5


@dataclass
class RememberResult:
    memory: Memory
    deduped: bool
    job: Job | None
    linked_entity_ids: list[int] = field(default_factory=list)


def audit(
    memory_id: str,
    event: str,
    *,
    actor: Actor,
    reason: str | None,
    old_content: str | None = None,
    new_content: str | None = None,
    metadata: dict | None = None,
    at=None,
) -> MemoryHistory:
    """Append one row to memory_history. Call only inside a write transaction."""
    return MemoryHistory.objects.create(
        memory_id=memory_id,
        event=event,
        old_content=old_content,
        new_content=new_content,
        changed_by=actor.name,
        actor_type=actor.type,
        reason=reason,
        metadata=metadata or {},
        created_at=at or timezone.now(),
    )


def upsert_embedding(memory: Memory, vector: Vector, *, at=None) -> Embedding:
    """Store the vector for memory's content hash and mirror it into the KNN index."""
    embedding, _ = Embedding.objects.update_or_create(
        content_hash=memory.content_hash,
        defaults={
            "vector": vector_to_blob(vector.values),
            "dimensions": int(vector.values.shape[0]),
            "model": vector.model,
            "source_memory": memory,
            "created_at": at or timezone.now(),
        },
    )
    vectors.index_vector(embedding.id, vector.values, vector.model)
    return embedding


def archive_to_cold(memory: Memory, reason: str, *, at=None) -> MemoryCold:
    """Copy the row as it is now; call inside the transaction of the change it precedes."""
    row = model_to_dict(memory)
    row.update(id=memory.id, created_at=memory.created_at, updated_at=memory.updated_at)
    row_json = {
        key: (value.isoformat() if hasattr(value, "isoformat") else value)
        for key, value in row.items()
    }
    return MemoryCold.objects.create(
        memory=memory,
        content=memory.content,
        normalized_content=memory.normalized_content,
        content_hash=memory.content_hash,
        type=memory.type,
        who=memory.who,
        why=memory.why,
        agent_id=memory.agent_id,
        pinned=memory.pinned,
        importance=memory.importance,
        tags=memory.tags,
        source_type=memory.source_type,
        source_id=memory.source_id,
        version=memory.version,
        extraction_status=memory.extraction_status,
        extraction_model=memory.extraction_model,
        embedding_model=memory.embedding_model,
        original_created_at=memory.created_at,
        original_row_json=row_json,
        archived_reason=reason,
        archived_at=at or timezone.now(),
    )


def active_duplicate(agent_id: str, content_hash: str, *, exclude_id: str | None = None):
    query = Memory.objects.filter(agent_id=agent_id, content_hash=content_hash, is_deleted=False)
    if exclude_id:
        query = query.exclude(id=exclude_id)
    return query.first()


# --- entities -----------------------------------------------------------------------------------


def link_existing_entities(memory: Memory, *, at) -> list[int]:
    """Inline linker: mention only entities that already exist for the memory's agent."""
    names = linker.candidate_names(memory.content)
    if not names:
        return []
    by_canonical = {linker.canonical_name(name): name for name in names}
    # In id order, like every write that counts mentions of several entities (link_entities_of):
    # on PostgreSQL two transactions taking the same rows' locks in different orders deadlock.
    entities = list(
        Entity.objects.filter(
            agent_id=memory.agent_id, canonical_name__in=list(by_canonical)
        ).order_by("pk")
    )
    linked = []
    for entity in entities:
        _, created = MemoryEntityMention.objects.get_or_create(
            memory=memory,
            entity=entity,
            defaults={
                "mention_text": by_canonical[entity.canonical_name],
                "confidence": 0.8,
                "created_at": at,
            },
        )
        if created:
            Entity.objects.filter(pk=entity.pk).update(mentions=entity.mentions + 1, updated_at=at)
            linked.append(entity.pk)
    return linked


def _upsert_entity(name: str, entity_type: str, agent_id: str, at) -> Entity:
    canonical = linker.canonical_name(name)
    entity = Entity.objects.filter(agent_id=agent_id, canonical_name=canonical).first()
    if entity is None:
        return Entity.objects.create(
            name=" ".join(name.split()),
            canonical_name=canonical,
            entity_type=entity_type or "unknown",
            agent_id=agent_id,
            mentions=0,
            created_at=at,
            updated_at=at,
        )
    if entity.entity_type in {"unknown", "extracted"} and entity_type not in {"", "unknown"}:
        entity.entity_type = entity_type
        entity.save(update_fields=["entity_type"])
    return entity


def persist_triples(memory: Memory, triples: list[Triple], *, at) -> list[int]:
    """Explicit graph write: entities, relations and mentions for structured triples."""
    touched: list[int] = []
    for triple in triples:
        source = _upsert_entity(triple.source, triple.source_type, memory.agent_id, at)
        target = _upsert_entity(triple.target, triple.target_type, memory.agent_id, at)
        relation = Relation.objects.filter(
            source=source, target=target, relation_type=triple.relationship
        ).first()
        if relation is None:
            Relation.objects.create(
                source=source,
                target=target,
                relation_type=triple.relationship,
                confidence=triple.confidence,
                mentions=1,
                created_at=at,
                updated_at=at,
            )
        else:
            n = relation.mentions
            relation.confidence = (relation.confidence * n + triple.confidence) / (n + 1)
            relation.mentions = n + 1
            relation.updated_at = at
            relation.save(update_fields=["confidence", "mentions", "updated_at"])
        for entity, text in ((source, triple.source), (target, triple.target)):
            _, created = MemoryEntityMention.objects.get_or_create(
                memory=memory,
                entity=entity,
                defaults={"mention_text": text, "confidence": triple.confidence, "created_at": at},
            )
            if created:
                entity.mentions += 1
                entity.updated_at = at
                entity.save(update_fields=["mentions", "updated_at"])
            touched.append(entity.pk)
    return sorted(set(touched))


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
) -> RememberResult:
    """Raw-first: memory row, FTS (trigger), inline links, pending job, in one transaction.

    The job is handed to the queue only after commit, so a worker never sees an uncommitted row.
    An exact duplicate of an active memory of the same agent returns that memory (deduped).
    """
    text = normalize(content)
    if not text.storage:
        raise Refused("invalid_content", "content is empty after normalisation")
    try:
        with transaction.atomic():
            lock_contents(agent_id, [text.hash])
            existing = active_duplicate(agent_id, text.hash)
            if existing is not None:
                return RememberResult(existing, deduped=True, job=None)
            now = timezone.now()
            memory = _insert(
                text,
                actor=actor,
                reason=why or "remember",
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
            )
            linked = link_existing_entities(memory, at=now)
            if triples:
                linked = sorted(set(linked) | set(persist_triples(memory, triples, at=now)))
            job = None
            if create_job:
                job = Job.objects.create(memory=memory, created_at=now, updated_at=now)
                transaction.on_commit(lambda: queue.hand_off(job.id))
            return RememberResult(memory, deduped=False, job=job, linked_entity_ids=linked)
    except IntegrityError:
        # A concurrent remember of the same content won the partial UNIQUE index: same answer
        # as the dedupe check above.
        existing = active_duplicate(agent_id, text.hash)
        if existing is None:
            raise
        return RememberResult(existing, deduped=True, job=None)


def _insert(
    text: NormalizedContent,
    *,
    actor: Actor,
    reason: str,
    at,
    metadata: dict | None = None,
    **columns: Any,
) -> Memory:
    """The row of a new memory and its `created` audit: what remember and derive share."""
    memory = Memory.objects.create(
        content=text.storage,
        normalized_content=text.normalized,
        content_hash=text.hash,
        created_at=at,
        updated_at=at,
        updated_by=actor.name,
        **columns,
    )
    audit(
        memory.id,
        "created",
        actor=actor,
        reason=reason,
        new_content=memory.content,
        metadata=metadata,
        at=at,
    )
    return memory


def _require_visible_text(content: str) -> None:
    """The empty-content gate of every write that sets a memory's text (API, dashboard, a
    reviewer's approval, the pipeline): punctuation or hidden characters alone are no content."""
    if is_effectively_empty(content):
        raise Refused("invalid_content", "content is empty after normalisation")


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
) -> RememberResult:
    """A memory derived from the raw memory `source_id`, inside the caller's transaction.

    An active memory of the agent with the same content is returned instead (deduped), also when
    a concurrent write wins the UNIQUE index. The vector, when given, was computed beforehand.
    """
    _require_visible_text(content)
    text = normalize(content)
    lock_contents(agent_id, [text.hash])
    existing = active_duplicate(agent_id, text.hash)
    if existing is not None:
        return RememberResult(existing, deduped=True, job=None)
    now = timezone.now()
    try:
        with transaction.atomic():  # savepoint: a UNIQUE race becomes a dedupe, not a failed write
            memory = _insert(
                text,
                actor=actor,
                reason=reason,
                at=now,
                metadata=metadata,
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
            )
    except IntegrityError:
        return RememberResult(active_duplicate(agent_id, text.hash), deduped=True, job=None)
    link_existing_entities(memory, at=now)
    if vector is not None:
        upsert_embedding(memory, vector, at=now)
    return RememberResult(memory, deduped=False, job=None)


def set_extraction_status(
    memory_ids, status: str, *, model: str | None = None, embedding_model: str | None = None
) -> int:
    """Where the extraction of these memories stands (ids or a subquery of ids): bookkeeping of
    the job, so no version change and no audit. `model` also records which model extracted,
    `embedding_model` which model made the vector stored for them in the same write."""
    columns: dict[str, Any] = {"extraction_status": status}
    if model is not None:
        columns["extraction_model"] = model
    if embedding_model is not None:
        columns["embedding_model"] = embedding_model
    if not isinstance(memory_ids, list | tuple):
        return Memory.objects.filter(id__in=memory_ids).update(**columns)
    return update_rows(Memory, memory_ids, columns)


# --- modify / forget / recover --------------------------------------------------------------------


def _locked_memory(memory_id: str) -> Memory:
    # Locked on PostgreSQL (SQLite already holds its write lock): checks see the latest version.
    memory = Memory.objects.select_for_update().filter(id=memory_id).first()
    if memory is None:
        raise Refused("not_found", f"memory {memory_id} not found")
    return memory


def _check_version(memory: Memory, if_version: int | None) -> None:
    if if_version is not None and memory.version != if_version:
        raise Refused(
            "version_conflict",
            f"memory is at version {memory.version}, not {if_version}",
            currentVersion=memory.version,
        )


MODIFIABLE_FIELDS = ("content", "type", "tags", "importance", "pinned")


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
    if memory.is_deleted:
        raise Refused("deleted", "memory is deleted; recover it first")
    _check_version(memory, if_version)
    now = at or timezone.now()
    updates: dict[str, Any] = {}
    old_content = memory.content
    content_changed = False
    if "content" in changes and changes["content"] is not None:
        _require_visible_text(changes["content"])
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
    for name in ("type", "tags", "importance", "pinned"):
        if name in changes and changes[name] is not None and changes[name] != getattr(memory, name):
            updates[name] = changes[name]
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
    updates.update(updated_at=now, updated_by=actor.name, version=memory.version + 1)
    rows = Memory.objects.filter(id=memory.id, version=memory.version, is_deleted=False).update(
        **updates
    )
    if rows != 1:
        raise Refused("version_conflict", "memory changed while it was being modified")
    for name, value in updates.items():
        setattr(memory, name, value)
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
    """Edit content/type/tags/importance/pinned; version +1; old row archived when content changes."""
    with transaction.atomic():
        return modify_in_transaction(
            _locked_memory(memory_id),
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
    rows = Memory.objects.filter(id=memory.id, version=memory.version, is_deleted=False).update(
        is_deleted=True,
        deleted_at=now,
        updated_at=now,
        updated_by=actor.name,
        version=memory.version + 1,
    )
    if rows != 1:
        raise Refused("version_conflict", "memory changed while it was being forgotten")
    memory.is_deleted, memory.deleted_at, memory.version = True, now, memory.version + 1
    memory.updated_at, memory.updated_by = now, actor.name
    cancelled = Job.objects.filter(memory=memory, status=JobStatus.PENDING).update(
        status=JobStatus.CANCELLED, error="source memory was forgotten", updated_at=now
    )
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
            _locked_memory(memory_id),
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
    rows = Memory.objects.filter(id=memory.id, version=memory.version, is_deleted=True).update(
        is_deleted=False,
        deleted_at=None,
        updated_at=now,
        updated_by=actor.name,
        version=memory.version + 1,
    )
    if rows != 1:
        raise Refused("version_conflict", "memory changed while it was being recovered")
    memory.is_deleted, memory.deleted_at, memory.version = False, None, memory.version + 1
    memory.updated_at, memory.updated_by = now, actor.name
    job = _queue_unfinished_extraction(memory, at=now)
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


def _queue_unfinished_extraction(memory: Memory, *, at) -> Job | None:
    """A fresh job for a raw memory whose extraction never ran to the end: forgetting it cancelled
    its job, and nothing else would ever pick it up again. None when a job is still live or one
    completed (or the memory never wanted one); the hand-off waits for the commit."""
    if memory.extraction_status != ExtractionStatus.PENDING:
        return None
    live_or_done = [JobStatus.PENDING, JobStatus.LEASED, JobStatus.COMPLETED]
    if Job.objects.filter(memory=memory, status__in=live_or_done).exists():
        return None
    job = Job.objects.create(memory=memory, created_at=at, updated_at=at)
    transaction.on_commit(lambda: queue.hand_off(job.id))
    return job


def recover(memory_id: str, *, actor: Actor, reason: str, if_version: int | None = None) -> Memory:
    """Undo a soft delete within the recovery window."""
    with transaction.atomic():
        return recover_in_transaction(
            _locked_memory(memory_id), actor=actor, reason=reason, if_version=if_version
        )


def store_vector_in_transaction(memory: Memory, vector: Vector, *, at=None) -> None:
    """The memory's vector and the model that made it, inside the caller's transaction."""
    upsert_embedding(memory, vector, at=at)
    Memory.objects.filter(id=memory.id).update(embedding_model=vector.model)


def store_vector(memory_id: str, content_hash: str, vector: Vector) -> bool:
    """Attach a vector computed outside any transaction, unless the content changed meanwhile."""
    with transaction.atomic():
        memory = Memory.objects.filter(id=memory_id, content_hash=content_hash).first()
        if memory is None:
            return False
        store_vector_in_transaction(memory, vector)
        return True


# --- agent feedback -------------------------------------------------------------------------------

FEEDBACK_EVENT = "feedback"
FEEDBACK_VERDICTS = ("used", "ignored", "contradicted")


def record_feedback(
    memory_id: str,
    *,
    actor: Actor,
    verdict: str,
    note: str | None = None,
    metadata: dict | None = None,
) -> MemoryHistory:
    """An agent's report that a recalled memory was used, ignored or contradicted by what it saw.

    One audit row on the memory (event "feedback", the note as its reason); the memory itself and
    its version do not change, so feedback never conflicts with an edit.
    """
    if verdict not in FEEDBACK_VERDICTS:
        raise Refused("invalid_verdict", f"verdict must be one of {', '.join(FEEDBACK_VERDICTS)}")
    with transaction.atomic():
        memory = _locked_memory(memory_id)
        return audit(
            memory.id,
            FEEDBACK_EVENT,
            actor=actor,
            reason=note,
            metadata={"verdict": verdict, "version": memory.version, **(metadata or {})},
        )


# --- the pipeline job's write, batched -------------------------------------------------------------


@dataclass
class Derived:
    """A derived memory made ready before the write (no database): its row, its `created` audit,
    the names the inline linker will look up, its vector."""

    memory: Memory
    audit: MemoryHistory
    names: dict[str, str]  # canonical name -> the name as written
    vector: Vector | None


def derived(
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
    at,
    vector: Vector | None = None,
    metadata: dict | None = None,
) -> Derived:
    """What `derive_in_transaction` would write for a fact with no active duplicate, prepared
    outside the write so the transaction only inserts it (`BatchedWrite.add`)."""
    _require_visible_text(content)
    text = normalize(content)
    memory = Memory(
        content=text.storage,
        normalized_content=text.normalized,
        content_hash=text.hash,
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
        created_at=at,
        updated_at=at,
        updated_by=actor.name,
    )
    created = MemoryHistory(
        memory_id=memory.id,
        event="created",
        new_content=memory.content,
        changed_by=actor.name,
        actor_type=actor.type,
        reason=reason,
        metadata=metadata or {},
        created_at=at,
    )
    names = {linker.canonical_name(n): n for n in linker.candidate_names(memory.content)}
    return Derived(memory, created, names, vector)


class BatchedWrite:
    """The rows of one job's write, collected and then written with one statement per table:
    derived memories (with their `created` audits and inline entity links), vectors, and the
    decision audits. Every row the one-by-one functions above write is written here too.

    The caller dedupes before `add` (inside the same transaction); `flush_memories` before
    anything that reads or changes memories by content (the guarded UPDATE/DELETE path).
    """

    def __init__(self, *, at, entities: dict[tuple[str, str], int] | None = None) -> None:
        self.at = at
        # (agent, canonical name) -> entity id, read before the write (`entity_ids`): linking
        # then costs the transaction no lookup. None: looked up inside, at the flush.
        self.entities = entities
        self.derived: list[Derived] = []
        self.audits: list[MemoryHistory] = []
        self.vectors: dict[str, tuple[Memory, Vector]] = {}  # content hash -> (memory, vector)
        self.vector_models: dict[str, str] = {}  # memory id -> model, for memories already stored

    def audit(self, memory_id: str, event: str, *, actor: Actor, reason, metadata=None, **rest):
        self.audits.append(
            MemoryHistory(
                memory_id=memory_id,
                event=event,
                old_content=rest.get("old_content"),
                new_content=rest.get("new_content"),
                changed_by=actor.name,
                actor_type=actor.type,
                reason=reason,
                metadata=metadata or {},
                created_at=self.at,
            )
        )

    def add(self, prepared: Derived) -> Memory:
        """A derived memory (see `derived`), written at the next flush."""
        self.derived.append(prepared)
        self.audits.append(prepared.audit)
        if prepared.vector is not None:
            memory = prepared.memory
            self.vectors[memory.content_hash] = (memory, prepared.vector)
        return prepared.memory

    def store_vector(self, memory: Memory, vector: Vector, *, mark_model: bool = True) -> None:
        """The vector of a memory that is already stored, and (unless the caller records it in
        an update of its own: `mark_model=False`) the model that made it."""
        self.vectors[memory.content_hash] = (memory, vector)
        if mark_model:
            self.vector_models[memory.id] = vector.model

    def flush_memories(self) -> None:
        """Insert the memories added so far (one statement) and link their entities."""
        prepared, self.derived = self.derived, []
        if prepared:
            insert_rows(Memory, [p.memory for p in prepared])
            link_entities_of(
                [(p.memory, p.names) for p in prepared], at=self.at, entities=self.entities
            )

    def flush(self) -> None:
        """Everything still collected: memories, audits, vectors (one upsert + the KNN index).
        The vectors go last: their upsert reads its rows' ids back, which in a pipelined write
        (memory.backend.pipelined) waits for the server to finish everything sent before it."""
        self.flush_memories()
        audits, self.audits = self.audits, []
        insert_rows(MemoryHistory, audits)
        for model in set(self.vector_models.values()):
            ids = [mid for mid, m in self.vector_models.items() if m == model]
            Memory.objects.filter(id__in=ids).update(embedding_model=model)
        self.vector_models = {}
        upsert_embeddings(list(self.vectors.values()), at=self.at)
        self.vectors = {}


def entity_ids(linked: list[tuple[Memory, dict[str, str]]]) -> dict[tuple[str, str], int]:
    """(agent, canonical name) -> entity id of the known entities these memories name: the
    lookup of `link_entities_of`, which a caller may run before its write transaction. An entity
    removed in between makes the write fail on its foreign key (and the job retry)."""
    wanted: dict[str, set[str]] = {}  # agent -> canonical names
    for memory, names in linked:
        if names:
            wanted.setdefault(memory.agent_id, set()).update(names)
    if not wanted:
        return {}
    query = Q()
    for agent_id, names in wanted.items():
        query |= Q(agent_id=agent_id, canonical_name__in=sorted(names))
    return {
        (agent_id, canonical): pk
        for pk, agent_id, canonical in Entity.objects.filter(query).values_list(
            "pk", "agent_id", "canonical_name"
        )
    }


def link_entities_of(
    linked: list[tuple[Memory, dict[str, str]]],
    *,
    at,
    entities: dict[tuple[str, str], int] | None = None,
) -> None:
    """`link_existing_entities` for many new memories, each with its candidate names (canonical
    -> as written): one lookup (none when `entities` came from `entity_ids`), one insert, one
    counter update."""
    if not any(names for _, names in linked):
        return
    if entities is None:
        entities = entity_ids(linked)
    mentions, added = [], Counter()
    for memory, names in linked:
        for canonical, text in names.items():
            entity_id = entities.get((memory.agent_id, canonical))
            if entity_id is not None:
                mentions.append(
                    MemoryEntityMention(
                        memory_id=memory.id,
                        entity_id=entity_id,
                        mention_text=text,
                        confidence=0.8,
                        created_at=at,
                    )
                )
                added[entity_id] += 1
    if not mentions:
        return
    insert_rows(MemoryEntityMention, mentions)
    with connection.bulk_cursor() as cursor:
        cursor.executemany(
            "UPDATE entities SET mentions = mentions + %s, updated_at = %s WHERE id = %s",
            # In id order, as link_existing_entities takes them (see there).
            [
                (n, connection.ops.adapt_datetimefield_value(at), pk)
                for pk, n in sorted(added.items())
            ],
        )


def upsert_embeddings(items: list[tuple[Memory, Vector]], *, at) -> None:
    """`upsert_embedding` for many memories: one upsert by content hash, then the KNN index."""
    if not items:
        return
    # In content-hash order: two writes upserting some of the same vectors (the table is shared by
    # every agent) then lock their rows in one order and cannot deadlock on each other.
    rows = {memory.content_hash: (memory, vector) for memory, vector in items}
    rows = dict(sorted(rows.items()))
    values = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * len(rows))
    params: list = []
    for content_hash, (memory, vector) in rows.items():
        params += [
            content_hash,
            vector_to_blob(vector.values),
            int(vector.values.shape[0]),
            vector.model,
            memory.id,
            connection.ops.adapt_datetimefield_value(at),
        ]
    with connection.bulk_cursor() as cursor:
        cursor.execute(
            "INSERT INTO embeddings (content_hash, vector, dimensions, model, source_memory_id, "
            f"created_at) VALUES {values} ON CONFLICT (content_hash) DO UPDATE SET "
            "vector = excluded.vector, dimensions = excluded.dimensions, model = excluded.model, "
            "source_memory_id = excluded.source_memory_id, created_at = excluded.created_at "
            "RETURNING id, content_hash",
            params,
        )
        ids = {content_hash: embedding_id for embedding_id, content_hash in cursor.fetchall()}
    # Every id's previous index row goes (replacing=None): one statement, cheaper than asking
    # which of them had one.
    vectors.index_vectors([(ids[h], v.values, v.model) for h, (_, v) in rows.items()])
