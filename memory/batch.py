"""How a memory, audit, mention and vector row is written: one builder per table and one statement
for one row or many. memory.writes' one-at-a-time writes are these batches of one; the job's write
batches many (`BatchedWrite`). Nothing here opens a transaction: every function runs in its
caller's, and none does network I/O."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.models import AutoField
from django.forms.models import model_to_dict
from django.utils import timezone

from memory import linker, vectors
from memory.content import NormalizedContent, is_effectively_empty, normalize
from memory.models import (
    DERIVED_SOURCE_TYPE,
    Entity,
    ExtractionStatus,
    Memory,
    MemoryCold,
    MemoryEntityMention,
    MemoryHistory,
    RowsRead,
    default_authority,
)
from memory.refused import Refused
from memory.vectors import Vector, vector_to_blob

if TYPE_CHECKING:
    from memory.writes import Actor

# Confidence of a mention the inline linker found by name (no model involved).
LINKED_CONFIDENCE = 0.8

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


# --- row builders (no database) -------------------------------------------------------------------


def memory_row(text: NormalizedContent, *, actor: Actor, at, **columns: Any) -> Memory:
    """A new memory's row (not saved): its text in its three stored forms, made `at` by `actor`."""
    columns.setdefault("asserted_by", default_authority(columns.get("source_type")))
    return Memory(
        content=text.storage,
        normalized_content=text.normalized,
        content_hash=text.hash,
        created_at=at,
        updated_at=at,
        updated_by=actor.name,
        **columns,
    )


def history_row(
    memory_id: str,
    event: str,
    *,
    actor: Actor,
    reason: str | None,
    at,
    old_content: str | None = None,
    new_content: str | None = None,
    metadata: dict | None = None,
) -> MemoryHistory:
    """One memory_history row (not saved): the audit of `event` on the memory, by `actor`."""
    return MemoryHistory(
        memory_id=memory_id,
        event=event,
        old_content=old_content,
        new_content=new_content,
        changed_by=actor.name,
        actor_type=actor.type,
        reason=reason,
        metadata=metadata or {},
        created_at=at,
    )


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


def require_visible_text(content: str) -> None:
    """The empty-content gate of every write that sets a memory's text (API, dashboard, a
    reviewer's approval, the pipeline): punctuation or hidden characters alone are no content."""
    if is_effectively_empty(content):
        raise Refused("invalid_content", "content is empty after normalisation")


def mention_row(
    memory_id: str, entity_id: int, text: str, confidence: float, *, at
) -> MemoryEntityMention:
    """One memory_entity_mentions row (not saved): the memory names the entity as `text`."""
    return MemoryEntityMention(
        memory_id=memory_id,
        entity_id=entity_id,
        mention_text=text,
        confidence=confidence,
        created_at=at,
    )


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
    outside the write so the transaction only inserts it (`BatchedWrite.add`). Refused, as
    there, when the text has nothing visible."""
    require_visible_text(content)
    memory = memory_row(
        normalize(content),
        actor=actor,
        at=at,
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
    created = history_row(
        memory.id,
        "created",
        actor=actor,
        reason=reason,
        new_content=memory.content,
        metadata=metadata,
        at=at,
    )
    names = {linker.canonical_name(n): n for n in linker.candidate_names(memory.content)}
    return Derived(memory, created, names, vector)


# --- mentions -----------------------------------------------------------------------------------


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
    # Written out: the ORM took longer to build this query than the database to answer it.
    conditions, params = [], []
    for agent_id, names in sorted(wanted.items()):
        conditions.append(
            f"(agent_id = %s AND canonical_name IN ({', '.join(['%s'] * len(names))}))"
        )
        params += [agent_id, *sorted(names)]
    rows = RowsRead(
        f"SELECT id, agent_id, canonical_name FROM {Entity._meta.db_table} "
        f"WHERE {' OR '.join(conditions)}",
        params,
    ).all()
    return {(agent_id, canonical): pk for pk, agent_id, canonical in rows}


def link_entities_of(
    linked: list[tuple[Memory, dict[str, str]]],
    *,
    at,
    entities: dict[tuple[str, str], int] | None = None,
) -> list[int]:
    """The inline linker for new memories, each with its candidate names (canonical -> as
    written): mentions of the entities that already exist for the memory's agent, never new
    entities. One lookup (none when `entities` came from `entity_ids`), then `write_mentions`.
    Returns the ids of the entities linked, in id order."""
    return write_mentions(_linked_rows(linked, at=at, entities=entities), at=at)


def _linked_rows(
    linked: list[tuple[Memory, dict[str, str]]],
    *,
    at,
    entities: dict[tuple[str, str], int] | None = None,
) -> list[MemoryEntityMention]:
    """link_entities_of's mention rows, not written."""
    if not any(names for _, names in linked):
        return []
    if entities is None:
        entities = entity_ids(linked)
    mentions = []
    for memory, names in linked:
        for canonical, text in names.items():
            entity_id = entities.get((memory.agent_id, canonical))
            if entity_id is not None:
                mentions.append(mention_row(memory.id, entity_id, text, LINKED_CONFIDENCE, at=at))
    return mentions


def linked_mentions(memory: Memory, *, at) -> list[MemoryEntityMention]:
    """The inline linker's mentions of one new memory, not written yet: for a write that counts
    them together with others (persist_triples' `linked`)."""
    names = {linker.canonical_name(n): n for n in linker.candidate_names(memory.content)}
    return _linked_rows([(memory, names)], at=at)


class LinkRead:
    """The inline linker's lookup for one new memory, sent now (in a pipelined block, beside the
    write's other reads: no round trip of its own on PostgreSQL); `mentions` are its rows."""

    def __init__(self, memory: Memory):
        self.memory = memory
        self.names = {linker.canonical_name(n): n for n in linker.candidate_names(memory.content)}
        self.read = None
        if self.names:
            marks = ", ".join(["%s"] * len(self.names))
            self.read = RowsRead(
                f"SELECT canonical_name, id FROM {Entity._meta.db_table} "
                f"WHERE agent_id = %s AND canonical_name IN ({marks})",
                [memory.agent_id, *sorted(self.names)],
            )

    def mentions(self, *, at) -> list[MemoryEntityMention]:
        """The mention rows of the entities found (what `linked_mentions` would make)."""
        found = dict(self.read.all()) if self.read is not None else {}
        return [
            mention_row(self.memory.id, found[canonical], text, LINKED_CONFIDENCE, at=at)
            for canonical, text in self.names.items()
            if canonical in found
        ]


def link_existing_entities(memory: Memory, *, at) -> list[int]:
    """Inline linker: mention only entities that already exist for the memory's agent (the batch
    of one of `link_entities_of`); returns their ids in id order."""
    return write_mentions(linked_mentions(memory, at=at), at=at)


def write_mentions(
    mentions: list[MemoryEntityMention], *, at, retyped: dict[int, str] | None = None
) -> list[int]:
    """Insert new mention rows (none of them stored yet) and count them on their entities, in SQL
    (`mentions = mentions + n`: a count read earlier would lose concurrent writers' mentions),
    with the entity types `retyped` gives (entity id -> type) in the same pass. Every entity row
    is updated once, in entity id order: two PostgreSQL transactions locking the same entity rows
    in different orders deadlock. Returns the ids of the entities counted, in id order."""
    retyped = retyped or {}
    if not mentions and not retyped:
        return []
    insert_rows(MemoryEntityMention, mentions)
    added = Counter(mention.entity_id for mention in mentions)
    stamp = connection.ops.adapt_datetimefield_value(at)
    rows = [
        (added.get(pk, 0), retyped.get(pk), added.get(pk, 0), stamp, pk)
        for pk in sorted(set(added) | set(retyped))
    ]
    with connection.bulk_cursor() as cursor:
        cursor.executemany(
            "UPDATE entities SET mentions = mentions + %s, "
            "entity_type = COALESCE(%s, entity_type), "
            "updated_at = CASE WHEN %s > 0 THEN %s ELSE updated_at END WHERE id = %s",
            rows,
        )
    return sorted(added)


# --- vectors ------------------------------------------------------------------------------------


def upsert_embeddings(items: list[tuple[Memory, Vector]], *, at) -> None:
    """Store each vector for its memory's content hash (one upsert) and mirror it into the KNN
    index."""
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


def upsert_embedding(memory: Memory, vector: Vector, *, at) -> None:
    """The vector of one memory: `upsert_embeddings` of one."""
    upsert_embeddings([(memory, vector)], at=at)


# --- the pipeline job's write -------------------------------------------------------------------


class BatchedWrite:
    """The rows of one job's write, collected and then written with one statement per table:
    derived memories (with their `created` audits and inline entity links), vectors, and the
    decision audits, through the same builders and writers as the one-by-one writes.

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
        """An audit row (`history_row`), written at the flush."""
        self.audits.append(
            history_row(
                memory_id, event, actor=actor, reason=reason, metadata=metadata, at=self.at, **rest
            )
        )

    def add(self, prepared: Derived) -> Memory:
        """A derived memory (see memory.writes.derived), written at the next flush."""
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
