"""The store's rows of purged memories, found (`plan_store`, reads only) and erased
(`erase_store_in_transaction`, inside the caller's transaction), and copies of purged texts
scrubbed in place in any row (`scrub_copies_in_transaction`). How each field is cleared is the
PLACES table of memory.erasure; nothing here opens a transaction or calls a model."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from django.apps import apps
from django.db import connection
from django.db.models import F, Q
from django.db.models.functions import Coalesce

from memory import graph, jobs, keyword, vectors
from memory.content import hashes_ever
from memory.erasure import (
    HASHERS,
    PURGED,
    PURGED_EVENT,
    Copies,
    How,
    Place,
    Texts,
    scrub,
    text_values_purged,
)
from memory.erasure_parts import quoted_part, scrub_parts
from memory.models import (
    DERIVED_SOURCE_TYPE,
    Embedding,
    Entity,
    Job,
    Memory,
    MemoryCold,
    MemoryEntityMention,
    MemoryHistory,
    Relation,
    RelationStatement,
    lock_rows,
)

TYPE_CHARS = Memory._meta.get_field("type").max_length

# The change events whose old and new content are versions of the memory's text.
TEXT_EVENTS = ("created", "updated", "deleted", "recovered")


@dataclass
class StorePlan:
    """What a purge of these memories erases in the store, as row ids per table."""

    memory_ids: list[str]
    history_ids: list[str] = field(default_factory=list)
    cold_ids: list[str] = field(default_factory=list)
    embeddings: list[tuple[int, str, int]] = field(default_factory=list)  # id, model, dimensions
    mention_ids: list[int] = field(default_factory=list)
    entity_ids: list[int] = field(default_factory=list)  # left without a mention: deleted
    # Deleted with those entities or as only these memories stated them, or counted down.
    relations: int = 0
    statement_ids: list[int] = field(default_factory=list)  # which relations they stated
    # Relations only these memories stated, between entities that stay: deleted.
    unstated_ids: list[int] = field(default_factory=list)
    # (relation id, times these memories stated it) of relations others state too: counted down.
    restated: list[tuple[int, int]] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)
    # (memory id, its `why`): the writer's free text, copied into its "created" audit's reason.
    whys: list[tuple[str, str]] = field(default_factory=list)

    def rows(self) -> dict[str, int]:
        counts = {
            Memory._meta.db_table: len(self.memory_ids),
            MemoryHistory._meta.db_table: len(self.history_ids),
            MemoryCold._meta.db_table: len(self.cold_ids),
            Embedding._meta.db_table: len(self.embeddings),
            MemoryEntityMention._meta.db_table: len(self.mention_ids),
            Entity._meta.db_table: len(self.entity_ids),
            Relation._meta.db_table: self.relations,
            RelationStatement._meta.db_table: len(self.statement_ids),
            Job._meta.db_table: len(self.job_ids),
        }
        return {table: n for table, n in counts.items() if n}


STORE_LISTS = (
    "history_ids",
    "cold_ids",
    "embeddings",
    "mention_ids",
    "entity_ids",
    "statement_ids",
    "unstated_ids",
    "restated",
    "job_ids",
    "whys",
)


def texts_of(memory_ids: list[str]) -> list[str]:
    """Every text these memories ever held: their content, the cold copies of earlier versions
    and the old and new content of their change events (read 500 memories at a time)."""
    texts: list[str | None] = []
    for start in range(0, len(memory_ids), 500):
        ids = memory_ids[start : start + 500]
        texts += Memory.objects.filter(id__in=ids).values_list("content", flat=True)
        texts += MemoryCold.objects.filter(memory_id__in=ids).values_list("content", flat=True)
        for old, new in MemoryHistory.objects.filter(
            memory_id__in=ids, event__in=TEXT_EVENTS
        ).values_list("old_content", "new_content"):
            texts += [old, new]
    return [text for text in dict.fromkeys(texts) if text and text != PURGED]


def plan_store(memory_ids: list[str], texts: list[str]) -> StorePlan:
    """The store's rows a purge of these memories erases (reads only)."""
    ids = sorted(set(memory_ids))
    plan = StorePlan(ids)
    plan.history_ids = list(
        MemoryHistory.objects.filter(memory_id__in=ids).order_by("id").values_list("id", flat=True)
    )
    plan.cold_ids = list(MemoryCold.objects.filter(memory_id__in=ids).values_list("pk", flat=True))
    hashes = {digest for text in texts for digest in hashes_ever(text)}
    hashes |= set(Memory.objects.filter(id__in=ids).values_list("content_hash", flat=True))
    # A memory that stays and holds the same text keeps its vector (it is that memory's too).
    shared = set(
        Memory.objects.filter(content_hash__in=hashes)
        .exclude(id__in=ids)
        .values_list("content_hash", flat=True)
    )
    plan.embeddings = list(
        Embedding.objects.filter(content_hash__in=hashes - shared)
        .order_by("id")
        .values_list("id", "model", "dimensions")
    )
    mentions = list(
        MemoryEntityMention.objects.filter(memory_id__in=ids).values_list("pk", "entity_id")
    )
    plan.mention_ids = [pk for pk, _ in mentions]
    mentioned = {entity_id for _, entity_id in mentions}
    still = set(
        MemoryEntityMention.objects.filter(entity_id__in=mentioned)
        .exclude(memory_id__in=ids)
        .values_list("entity_id", flat=True)
    )
    plan.entity_ids = sorted(mentioned - still)
    with_entities = set(
        Relation.objects.filter(
            Q(source_id__in=plan.entity_ids) | Q(target_id__in=plan.entity_ids)
        ).values_list("pk", flat=True)
    )
    _plan_statements(plan, with_entities)
    plan.relations = len(with_entities) + len(plan.unstated_ids) + len(plan.restated)
    plan.job_ids = list(Job.objects.filter(memory_id__in=ids).values_list("id", flat=True))
    plan.whys = [
        (pk, why)
        for pk, why in Memory.objects.filter(id__in=ids).values_list("id", "why")
        if why and why.strip()
    ]
    return plan


def _plan_statements(plan: StorePlan, with_entities: set[int]) -> None:
    """The purged memories' statements of relations: a relation no other memory states goes
    (it said what only they said), one others state too is counted down by theirs."""
    stated = list(
        RelationStatement.objects.filter(memory_id__in=plan.memory_ids).values_list(
            "pk", "relation_id", "mentions"
        )
    )
    plan.statement_ids = sorted(pk for pk, _, _ in stated)
    times = Counter()
    for _, relation_id, mentions in stated:
        times[relation_id] += mentions
    _lock_relations(list(times))
    others = set(
        RelationStatement.objects.filter(relation_id__in=list(times))
        .exclude(memory_id__in=plan.memory_ids)
        .values_list("relation_id", flat=True)
    )
    left = sorted(set(times) - with_entities)
    plan.unstated_ids = [pk for pk in left if pk not in others]
    plan.restated = [(pk, times[pk]) for pk in left if pk in others]


def _lock_relations(ids: list[int]) -> None:
    """Inside a purge's transaction on PostgreSQL, lock the relations its memories stated, in
    the order the graph's upsert locks them (source, target, words), before reading who else
    states them: two purges of two memories stating one relation would each see the other's
    statement and each only count it down, leaving a relation nothing states; and a remember
    upserting the same relations waits instead of deadlocking. SQLite has one writer."""
    if not ids or not connection.in_atomic_block or not connection.features.has_select_for_update:
        return
    list(
        Relation.objects.filter(pk__in=ids)
        .order_by("source_id", "target_id", "relation_type")
        .select_for_update()
        .values_list("pk", flat=True)
    )


def stop_jobs_in_transaction(memory_ids: list[str], *, at) -> None:
    """First in a purge: the memories' running jobs are cancelled (and their rows locked on
    PostgreSQL), and the running jobs of their agents' other memories started again (one may
    have read a purged text as a candidate), so none logs or records a copy of the text after
    the purge has planned."""
    jobs.cancel_purged_in_transaction(memory_ids, at=at)
    jobs.restart_leased_in_transaction(
        memory_ids,
        reason="a memory it may have read as a candidate was purged while it ran: a new job "
        "reads the store without it",
        at=at,
        sparing=memory_ids,
    )


def erase_store_in_transaction(plan: StorePlan, texts: Texts, *, by: str, at) -> None:
    """Erase the planned rows: each memory row stays as a tombstone ([purged], deleted, purged
    at `at`), its audits keep who, when, event and reason, every other row goes or is wiped."""
    ids = plan.memory_ids
    if (locking := lock_rows(Memory, ids)) is not None:
        locking.all()
    Memory.objects.filter(id__in=ids).update(
        content=PURGED,
        normalized_content=PURGED,
        content_hash="",
        why="",
        tags=[],
        pinned=False,
        is_deleted=True,
        deleted_at=Coalesce("deleted_at", at),
        purged_at=at,
        version=F("version") + 1,
        updated_at=at,
        updated_by=by,
        embedding_model=None,
    )
    # The caller's own reference (sourceId: "dm with ... re her allergy") goes with the text; a
    # derived memory's names its raw memory (lineage) and stays.
    Memory.objects.filter(id__in=ids).exclude(source_type=DERIVED_SOURCE_TYPE).update(
        source_id=None
    )
    # Who wrote it stays on the tombstone, less a copy of its text ("saw <the key>" made every
    # purge of the key fail its check, with no way to clear it). Only the purged rows: a name
    # elsewhere is a person's or a token's, which reviews and the trail know them by.
    # So are a key or a run of its words in who and type (a QA pass: "ssn 078-05-1120" as type).
    for pk, who, kind in Memory.objects.filter(id__in=ids).values_list("id", "who", "type"):
        cleaned = scrub_parts(scrub(who, texts), texts)
        tidy = (scrub_parts(scrub(kind, texts), texts) or "")[:TYPE_CHARS]
        if (cleaned, tidy) != (who, kind):
            Memory.objects.filter(id=pk).update(who=cleaned, type=tidy)
    _wipe_audits(plan.history_ids, texts, dict(plan.whys))
    MemoryCold.objects.filter(pk__in=plan.cold_ids).delete()
    _drop_statements(plan)
    _drop_mentions(plan)
    _drop_vectors([eid for eid, _, _ in plan.embeddings])
    _wipe_jobs(plan.job_ids, texts)


def _wipe_audits(history_ids: list[str], texts: Texts, whys: dict[str, str]) -> None:
    rows = MemoryHistory.objects.filter(id__in=history_ids).values_list(
        "id", "memory_id", "old_content", "new_content", "reason", "changed_by", "metadata"
    )
    prepare = MemoryHistory._meta.get_field("metadata").get_db_prep_save
    # A reason or a changer repeating a key or a run of the text's words loses that part too
    # (a QA pass: "rotated: tulip-9934 replaced by rose-5521" stayed on the purged trail).
    changed = [
        (
            None if old is None else PURGED,
            None if new is None else PURGED,
            scrub_parts(_without_why(scrub(reason, texts), whys.get(memory_id)), texts),
            scrub_parts(scrub(changed_by, texts), texts),
            prepare(text_values_purged(metadata), connection),
            pk,
        )
        for pk, memory_id, old, new, reason, changed_by, metadata in rows
    ]
    if changed:
        with connection.cursor() as cursor:
            cursor.executemany(
                "UPDATE memory_history SET old_content = %s, new_content = %s, reason = %s, "
                "changed_by = %s, metadata = %s WHERE id = %s",
                changed,
            )


def _without_why(reason: str | None, why: str | None) -> str | None:
    """An audit reason of a purged memory without the writer's `why` (its "created" event's
    reason is that text: emptied on the memory, it went on being shown there)."""
    if not reason or not why:
        return reason
    if reason.strip() == why.strip():
        return PURGED
    return scrub(reason, Texts.of([why]))


def _drop_statements(plan: StorePlan) -> None:
    RelationStatement.objects.filter(pk__in=plan.statement_ids).delete()
    Relation.objects.filter(pk__in=plan.unstated_ids).delete()
    if plan.restated:
        with connection.cursor() as cursor:  # locked by the plan (_lock_relations)
            cursor.executemany(
                "UPDATE relations SET mentions = CASE WHEN mentions > %s THEN mentions - %s "
                "ELSE 1 END WHERE id = %s",
                [(times, times, pk) for pk, times in sorted(plan.restated)],
            )


def _drop_mentions(plan: StorePlan) -> None:
    counts = Counter(
        MemoryEntityMention.objects.filter(pk__in=plan.mention_ids).values_list(
            "entity_id", flat=True
        )
    )
    MemoryEntityMention.objects.filter(pk__in=plan.mention_ids).delete()
    kept = sorted(set(counts) - set(plan.entity_ids))
    if kept:
        with connection.cursor() as cursor:  # in id order, as every writer of entities
            cursor.executemany(
                "UPDATE entities SET mentions = CASE WHEN mentions > %s THEN mentions - %s "
                "ELSE 0 END WHERE id = %s",
                [(counts[pk], counts[pk], pk) for pk in kept],
            )
    if plan.entity_ids:
        Entity.objects.filter(pk__in=plan.entity_ids).delete()  # relations and mentions cascade


def _drop_vectors(embedding_ids: list[int]) -> None:
    if embedding_ids:
        vectors.remove(embedding_ids)
        Embedding.objects.filter(id__in=embedding_ids).delete()


def _wipe_jobs(job_ids: list[str], texts: Texts) -> None:
    prepare = Job._meta.get_field("result").get_db_prep_save
    rows = Job.objects.filter(id__in=job_ids).values_list("id", "result", "error")
    changed = [
        (
            prepare(text_values_purged(result), connection) if result is not None else None,
            scrub(error, texts) if error else error,
            pk,
        )
        for pk, result, error in rows
    ]
    if changed:
        with connection.cursor() as cursor:
            cursor.executemany(
                "UPDATE memory_jobs SET result = %s, error = %s WHERE id = %s", changed
            )


# --- copies anywhere ---------------------------------------------------------------------------------


def scrub_copies_in_transaction(
    places: list[Place], copies: dict[str, Copies], texts: Texts, replacement: str = PURGED
) -> dict[str, int]:
    """Replace the copies `find_copies` found, in place: each field that holds one is scrubbed
    and the hashes of its row (REHASHED places) recomputed. Places that keep their text when
    found elsewhere (a kept memory's own text) are left: a receipt names them. Rows per table."""
    by_model: dict[str, dict[str, Place]] = {}
    for place in places:
        by_model.setdefault(place.model, {})[place.field] = place
    counts: dict[str, int] = {}
    for label, found in copies.items():
        fields = by_model[label]
        model = apps.get_model(label)
        rehash = [p for p in fields.values() if p.how == How.REHASHED]
        done = 0
        for pk, holding in found.rows.items():
            names = [name for name in holding if fields[name].elsewhere]
            if not names:
                continue
            row = model._default_manager.filter(pk=pk).values(*names, *[p.of for p in rehash])
            values = row.first()
            if values is None:
                continue
            changes = {name: scrub(values[name], texts, replacement) for name in names}
            for place in rehash:
                if place.of in changes:
                    changes[place.field] = HASHERS[place.hasher](changes[place.of])
            if model is Entity and "canonical_name" in changes:
                # Two names scrubbed to one marker would break the name's uniqueness.
                graph.rename_entity(pk, changes)
            elif model is Relation and "relation_type" in changes:
                graph.retype_relation(pk, changes["relation_type"])  # the same, for an edge
            else:
                model._default_manager.filter(pk=pk).update(**changes)
            done += 1
        if done:
            counts[model._meta.db_table] = done
    return counts


_HOLDS_CONTENT = (Q(old_content__isnull=False) & ~Q(old_content=PURGED)) | (
    Q(new_content__isnull=False) & ~Q(new_content=PURGED)
)


def _telling(texts: Texts, *values: str | None) -> bool:
    """Whether any of these free texts holds a purged text, a key of it or a run of its words
    (each field alone: that is how the purge scrubs them)."""
    return any(value and (texts.held_in(value) or quoted_part(value, texts)) for value in values)


def store_leftovers(plan: StorePlan, texts: Texts) -> list[tuple[str, int]]:
    """The purged memories' own rows still holding anything, by id: (where, count) of memories
    that are not tombstones, audits with content, cold copies, mentions, statements and the
    relations only they stated, running jobs, vectors (rows and index), and full-text index entries that still find a memory by a purged word."""
    counts: Counter[str] = Counter()
    whys = dict(plan.whys)
    vectors_left = [e for e, _, _ in plan.embeddings]
    # Every relation they stated: each must be gone or still stated by another memory.
    stated_only = [*plan.unstated_ids, *(pk for pk, _ in plan.restated)]
    for start in range(0, max(len(plan.memory_ids), len(vectors_left), len(stated_only)), 500):
        ids = plan.memory_ids[start : start + 500]
        counts["memories"] += (
            Memory.objects.filter(id__in=ids)
            .exclude(
                content=PURGED, normalized_content=PURGED, content_hash="", purged_at__isnull=False
            )
            .count()
        )
        counts["memory_history.old_content/new_content"] += (
            MemoryHistory.objects.filter(memory_id__in=ids).filter(_HOLDS_CONTENT).count()
        )
        counts["memories_cold"] += MemoryCold.objects.filter(memory_id__in=ids).count()
        counts["memory_entity_mentions"] += MemoryEntityMention.objects.filter(
            memory_id__in=ids
        ).count()
        counts["relation_statements"] += RelationStatement.objects.filter(memory_id__in=ids).count()
        counts["relations (only the purged memories stated them)"] += Relation.objects.filter(
            pk__in=stated_only[start : start + 500], statements__isnull=True
        ).count()
        counts["memory_jobs"] += Job.objects.filter(
            memory_id__in=ids, status__in=jobs.RUNNING
        ).count()
        counts["embeddings"] += Embedding.objects.filter(
            id__in=vectors_left[start : start + 500]
        ).count()
        counts["memories_fts"] += keyword.still_indexed(ids, list(texts.needles), but=PURGED)
        # The tombstone's own reason (the admin's, written after) may say the same words.
        said = MemoryHistory.objects.filter(memory_id__in=[i for i in ids if i in whys])
        counts["memory_history.reason (the writer's why)"] += sum(
            1
            for memory_id, reason in said.exclude(event=PURGED_EVENT).values_list(
                "memory_id", "reason"
            )
            if reason and reason == whys[memory_id]
        )
        counts["memory_history.reason/changed_by (a key or a run of the text's words)"] += sum(
            1
            for reason, changed_by in MemoryHistory.objects.filter(memory_id__in=ids)
            .exclude(event=PURGED_EVENT)
            .values_list("reason", "changed_by")
            if _telling(texts, reason, changed_by)
        )
        counts["memories.who/type (the text, a key or a run of its words)"] += sum(
            1
            for who, kind in Memory.objects.filter(id__in=ids).values_list("who", "type")
            if _telling(texts, who, kind)
        )
        counts["memories.source_id (the caller's reference)"] += (
            Memory.objects.filter(id__in=ids, source_id__isnull=False)
            .exclude(source_type=DERIVED_SOURCE_TYPE)
            .count()
        )
    return [(where, n) for where, n in counts.items() if n]
