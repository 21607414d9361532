"""The explicit graph write: entities, relations and mentions for a memory's structured triples
(a remember's, a reviewer's approved entity triple). Rows are built and counted through
memory.batch's mention writer; nothing here opens a transaction or does network I/O."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from memory import linker
from memory.backend import lock_contents
from memory.batch import mention_row, write_mentions
from memory.models import Entity, Memory, MemoryEntityMention, Relation


@dataclass
class Triple:
    source: str
    relationship: str
    target: str
    source_type: str = "unknown"
    target_type: str = "unknown"
    confidence: float = 0.5


# Entity types a structured payload may overwrite: the placeholders, not a type someone chose.
_PLACEHOLDER_TYPES = frozenset({"unknown", "extracted"})


def persist_triples(
    memory: Memory,
    triples: list[Triple],
    *,
    at,
    linked: list[MemoryEntityMention] | None = None,
) -> list[int]:
    """Explicit graph write: entities, relations and mentions for structured triples, in at most
    TRIPLE_STATEMENTS statements however many triples there are (remember runs it under the
    write lock, where a statement per entity and relation held every other writer up).
    `linked`: the inline linker's mentions of this new memory, not written yet (`linked_mentions`):
    they are counted with the triples' in the one pass over the entity rows, in id order.
    Returns the ids of the entities the triples name, in id order."""
    linked = linked or []
    # A marker an erasure left names nobody: linking by it would join the people it hides.
    triples = [
        triple
        for triple in triples
        if not (linker.is_erasure_marker(triple.source) or linker.is_erasure_marker(triple.target))
    ]
    if not triples:
        write_mentions(linked, at=at)
        return []
    ids, retyped = _upsert_entities(memory.agent_id, triples, at)
    # One row per edge: an edge named twice counts twice, its confidences averaged.
    edges: dict[tuple[int, int, str], list[float]] = {}
    # entity id -> its new mention: the first triple naming an entity gives its text.
    mentions: dict[int, MemoryEntityMention] = {}
    for triple in triples:
        source = ids[linker.canonical_name(triple.source)]
        target = ids[linker.canonical_name(triple.target)]
        edges.setdefault((source, target, triple.relationship), []).append(triple.confidence)
        for pk, text in ((source, triple.source), (target, triple.target)):
            mentions.setdefault(pk, mention_row(memory.id, pk, text, triple.confidence, at=at))
    relation_ids = _upsert_relations(edges, at)
    _state_relations(memory.id, {relation_ids[key]: len(edges[key]) for key in edges})
    # Entities the memory already mentions (the inline linker's) keep that mention and its count.
    known = {mention.entity_id for mention in linked} | set(
        MemoryEntityMention.objects.filter(memory=memory, entity_id__in=list(mentions)).values_list(
            "entity_id", flat=True
        )
    )
    new = [m for pk, m in mentions.items() if pk not in known]
    write_mentions([*linked, *new], at=at, retyped=retyped)
    return sorted(set(ids.values()))


# persist_triples' statements at most: entities read, inserted, read again; relations upserted,
# their statements upserted; mentions read, inserted, counted with the retyping
# (tests/test_triple_write_bound.py holds it).
TRIPLE_STATEMENTS = 8


def _upsert_entities(
    agent_id: str, triples: list[Triple], at
) -> tuple[dict[str, int], dict[int, str]]:
    """canonical name -> entity id of every entity the triples name, created when new (with
    the name as first written), and entity id -> the first known type the triples state for
    the stored ones that have only a placeholder (written by write_mentions). New rows go in
    one INSERT that skips names a concurrent writer has just created; the second read then
    finds those too."""
    named: dict[str, tuple[str, str]] = {}  # canonical -> (name as first written, type)
    for triple in triples:
        for name, kind in (
            (triple.source, triple.source_type),
            (triple.target, triple.target_type),
        ):
            canonical = linker.canonical_name(name)
            first_name, first_kind = named.get(canonical, (" ".join(name.split()), "unknown"))
            if first_kind == "unknown" and kind not in {"", "unknown"}:
                first_kind = kind
            named[canonical] = (first_name, first_kind)
    return upsert_named_entities(agent_id, named, at)


def upsert_named_entities(
    agent_id: str, named: dict[str, tuple[str, str]], at
) -> tuple[dict[str, int], dict[int, str]]:
    """The entity rows of the agent for canonical name -> (name as first written, type): their
    ids, created when new, and the new types of those that had a placeholder (see
    _upsert_entities, which names them from triples; an import names them from its file)."""
    wanted = sorted(named)  # one order for every writer: PostgreSQL's inserts then never deadlock

    def stored(names: list[str]) -> dict[str, tuple[int, str]]:
        rows = Entity.objects.filter(agent_id=agent_id, canonical_name__in=names)
        return {c: (pk, t) for pk, c, t in rows.values_list("pk", "canonical_name", "entity_type")}

    found = stored(wanted)
    new = [canonical for canonical in wanted if canonical not in found]
    if new:
        Entity.objects.bulk_create(
            [
                Entity(
                    name=named[canonical][0],
                    canonical_name=canonical,
                    entity_type=named[canonical][1],
                    agent_id=agent_id,
                    mentions=0,
                    created_at=at,
                    updated_at=at,
                )
                for canonical in new
            ],
            ignore_conflicts=True,
        )
        found.update(stored(new))
    # Retyped with the mention counts (write_mentions), in the one pass over the entity rows.
    retyped = {
        pk: named[canonical][1]
        for canonical, (pk, kind) in found.items()
        if kind in _PLACEHOLDER_TYPES and named[canonical][1] not in {"unknown", kind}
    }
    return {canonical: pk for canonical, (pk, _) in found.items()}, retyped


def _upsert_relations(
    edges: dict[tuple[int, int, str], list[float]], at
) -> dict[tuple[int, int, str], int]:
    """Every edge in one upsert: a new relation, or one seen again whose count grows in SQL and
    whose confidence becomes the mean over all its mentions (a count read earlier would lose a
    concurrent writer's). Rows in key order, so PostgreSQL writers lock them in one order.
    Returns each edge's relation id."""
    rows = sorted(edges.items())
    stamp = connection.ops.adapt_datetimefield_value(at)
    params: list = []
    for (source, target, kind), confidences in rows:
        params += [source, target, kind, sum(confidences) / len(confidences), len(confidences)]
        params += [stamp, stamp]
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s)"] * len(rows))
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO relations (source_id, target_id, relation_type, confidence, mentions, "
            f"created_at, updated_at) VALUES {values} "
            "ON CONFLICT (source_id, target_id, relation_type) DO UPDATE SET "
            "confidence = (relations.confidence * relations.mentions "
            "+ excluded.confidence * excluded.mentions) / (relations.mentions + excluded.mentions), "
            "mentions = relations.mentions + excluded.mentions, updated_at = excluded.updated_at "
            "RETURNING id, source_id, target_id, relation_type",
            params,
        )
        return {(source, target, kind): pk for pk, source, target, kind in cursor.fetchall()}


def _state_relations(memory_id: str, counts: dict[int, int]) -> None:
    """The memory states these relations (relation id -> times): one upsert that adds to what it
    stated before (an approved triple on a memory that already stated it). In relation id order,
    as the relations were locked."""
    rows = sorted(counts.items())
    values = ", ".join(["(%s, %s, %s)"] * len(rows))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO relation_statements (memory_id, relation_id, mentions) VALUES {values} "
            "ON CONFLICT (memory_id, relation_id) DO UPDATE SET "
            "mentions = relation_statements.mentions + excluded.mentions",
            [value for pk, times in rows for value in (memory_id, pk, times)],
        )


def rename_entity(pk: int, changes: dict[str, str]) -> None:
    """Give an entity the name a scrub wrote (`changes`: name and canonical_name). When another
    entity of its agent already has that canonical name (two names redacted to one marker), it
    takes the first free "name (2)", "name (3)"...: the entities stay apart as they were (and the
    name stays unique per agent)."""
    row = Entity.objects.filter(pk=pk).values_list("agent_id", "name", "canonical_name").first()
    if row is None:
        return
    agent_id, _, canonical = row
    canonical = changes.get("canonical_name", canonical)
    # Only the lowercase form held the text (the name's case differed): the name would keep it.
    name = changes.get("name", canonical)
    # On PostgreSQL two renames of one agent's entities wait for each other: both would see the
    # same numbers taken, and the second would fail on the name's uniqueness.
    lock_contents(agent_id, ["entity renames"])
    taken = set(
        Entity.objects.filter(agent_id=agent_id, canonical_name__startswith=canonical[:200])
        .exclude(pk=pk)
        .values_list("canonical_name", flat=True)
    )
    numbered, number = (name, canonical), 1
    while numbered[1] in taken:
        number += 1
        suffix = f" ({number})"
        numbered = tuple(
            f"{part[: _NAME_LENGTH - len(suffix)]}{suffix}" for part in (name, canonical)
        )
    Entity.objects.filter(pk=pk).update(
        **{**changes, "name": numbered[0], "canonical_name": numbered[1]}
    )


_NAME_LENGTH = 300  # Entity.name and canonical_name


def retype_relation(pk: int, relation_type: str) -> None:
    """Give a relation the words a scrub wrote (cut to the column's length: a marker can be
    longer than what it replaces). When its two entities already have an edge of those words
    (two relation words scrubbed to one marker), this one joins it as the graph's own upsert
    joins a mention: mentions added, confidence averaged by them, its statements too; then it
    is deleted."""
    relation_type = relation_type[: Relation._meta.get_field("relation_type").max_length]
    row = (
        Relation.objects.filter(pk=pk)
        .values_list("source_id", "target_id", "mentions", "confidence")
        .first()
    )
    if row is None:
        return
    source_id, target_id, mentions, confidence = row
    same = (
        Relation.objects.filter(
            source_id=source_id, target_id=target_id, relation_type=relation_type
        )
        .exclude(pk=pk)
        .first()
    )
    if same is None:
        Relation.objects.filter(pk=pk).update(relation_type=relation_type)
        return
    total = same.mentions + mentions
    Relation.objects.filter(pk=same.pk).update(
        mentions=total,
        confidence=(same.confidence * same.mentions + confidence * mentions) / total,
    )
    with connection.cursor() as cursor:
        # The WHERE also tells SQLite's parser that ON CONFLICT is the upsert's, not a join's.
        cursor.execute(
            "INSERT INTO relation_statements (memory_id, relation_id, mentions) "
            "SELECT memory_id, %s, mentions FROM relation_statements WHERE relation_id = %s "
            "ON CONFLICT (memory_id, relation_id) DO UPDATE SET "
            "mentions = relation_statements.mentions + excluded.mentions",
            [same.pk, pk],
        )
    Relation.objects.filter(pk=pk).delete()  # its own statements cascade
