"""An import's relations in the store: each a relation between two entities of an agent, as our
export writes them (memory.export.relation_records), written only between entities a memory of
the agent mentions (the import's memories come first in the file and bring their entities). A
relation already stored is left as it is (an import is idempotent: the same file imported twice
counts nothing twice). Runs in its caller's transaction (pipeline.writes.imports opens one per
batch); nothing here opens a transaction or does network I/O."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Exists, OuterRef

from memory import linker
from memory.imported import DEDUPED, DONE, Outcome
from memory.models import (
    Entity,
    MemoryEntityMention,
    MemoryHistory,
    Relation,
    RelationStatement,
)

# The most `mentions` an import takes (and an export writes: a count above it is written as it).
# Far below the column's range (2**31 - 1 on PostgreSQL): a later remember of the same triple
# adds to the count, and at the range's end that addition failed every such remember.
MAX_MENTIONS = 1_000_000

# An entity it names is one no memory of its agent mentions, or no one memory mentions both.
UNLINKED = "unlinked"


@dataclass(frozen=True)
class IncomingRelation:
    """One relation of an import file, validated (pipeline.imports.relations)."""

    line: int
    agent_id: str
    source: str
    source_type: str
    target: str
    target_type: str
    relation_type: str
    confidence: float
    mentions: int
    created_at: datetime | None = None
    updated_at: datetime | None = None
    # The file's memories that stated it (their ids as imported); None: the line does not say.
    stated_by: tuple[str, ...] | None = None

    def words(self) -> str:
        """The relation as the import's report writes it: `Kenji -deploys-> billing-api`."""
        return f"{self.source} -{self.relation_type}-> {self.target}"


def write_in_transaction(
    relations: list[IncomingRelation], *, at, run_id: str | None = None
) -> list[Outcome]:
    """Write the batch's relations inside the caller's transaction, in file order: each one is
    imported, deduped to the relation already stored between the same two entities (or an
    earlier line's), or UNLINKED (`unlinked` names the side, or "relation") when an entity it
    names is one no memory of the agent mentions, or when no memory this import (`run_id`)
    wrote mentions both (of those its `statedBy` names, when it names them). A relation
    belongs with the memories that state it, and those memories state it from then on
    (relation_statements): a purge of them all deletes it. A memory stored before the import
    never takes one: a review imported an old export after a purge and the purged relation came
    back, stated by an innocent memory that mentioned the same two names."""
    if not relations:
        return []
    ids = _mentioned_entities(relations)
    wanted = [_key(relation, ids) for relation in relations]
    keys = [key for key in wanted if isinstance(key, tuple)]
    speakers = _speakers(relations, keys, run_id)
    stored = _stored(keys)
    outcomes, new, statements = [], [], []
    for relation, key in zip(relations, wanted, strict=True):
        said_by = _said_by(relation, key, speakers)
        if isinstance(key, tuple) and not said_by and key not in stored:
            key = "relation"
        if isinstance(key, str):
            outcomes.append(
                Outcome(relation.line, UNLINKED, "", relation=relation.words(), unlinked=key)
            )
            continue
        status = DEDUPED if key in stored else DONE
        outcomes.append(Outcome(relation.line, status, "", relation=relation.words()))
        statements += [(key, memory_id) for memory_id in sorted(said_by)]
        if status == DONE:
            stored[key] = 0
            source, target, kind = key
            new.append(
                Relation(
                    source_id=source,
                    target_id=target,
                    relation_type=kind,
                    confidence=relation.confidence,
                    mentions=relation.mentions,
                    created_at=relation.created_at or at,
                    updated_at=relation.updated_at or relation.created_at or at,
                )
            )
    # A concurrent writer's same edge, committed after the read above, wins (its count stays).
    Relation.objects.bulk_create(new, ignore_conflicts=True)
    if statements:
        stored = _stored([key for key, _ in statements])
        RelationStatement.objects.bulk_create(
            [
                RelationStatement(memory_id=memory_id, relation_id=stored[key])
                for key, memory_id in sorted(set(statements))
            ],
            ignore_conflicts=True,  # a memory that stated it already keeps its count
        )
    return outcomes


def _said_by(
    relation: IncomingRelation, key, speakers: dict[tuple[int, int], set[str]]
) -> set[str]:
    """The memories this import wrote that state the relation: those mentioning both of its
    entities, of the ones its `statedBy` names when it names them."""
    if not isinstance(key, tuple):
        return set()
    found = speakers.get(key[:2], set())
    return found if relation.stated_by is None else found & set(relation.stated_by)


def _stored(keys: list[tuple[int, int, str]]) -> dict[tuple[int, int, str], int]:
    """The relation id of each key already stored."""
    rows = Relation.objects.filter(
        source_id__in={source for source, _, _ in keys},
        target_id__in={target for _, target, _ in keys},
    ).values_list("source_id", "target_id", "relation_type", "pk")
    return {(source, target, kind): pk for source, target, kind, pk in rows}


def _speakers(
    relations: list[IncomingRelation], keys: list[tuple[int, int, str]], run_id: str | None
) -> dict[tuple[int, int], set[str]]:
    """(source entity, target entity) -> the memories this import wrote (by their import audits)
    that mention both, in one query; only among those the lines' `statedBy` name when every
    line names them (an export's do), so a pair many stored memories mention costs nothing."""
    if not keys or run_id is None:
        return {}
    written_now = MemoryHistory.objects.filter(
        memory_id=OuterRef("memory_id"), metadata__import__run=run_id
    )
    query = MemoryEntityMention.objects.filter(
        Exists(written_now),
        entity_id__in={source for source, _, _ in keys},
        memory__entity_mentions__entity_id__in={target for _, target, _ in keys},
    )
    if all(relation.stated_by is not None for relation in relations):
        query = query.filter(
            memory_id__in={memory_id for r in relations for memory_id in r.stated_by}
        )
    found: dict[tuple[int, int], set[str]] = {}
    for source, target, memory_id in query.values_list(
        "entity_id", "memory__entity_mentions__entity_id", "memory_id"
    ):
        found.setdefault((source, target), set()).add(memory_id)
    return found


def _key(relation: IncomingRelation, ids: dict[tuple[str, str], int]) -> tuple[int, int, str] | str:
    """The relation's row key, or the side ("source", "target") whose entity no memory of its
    agent mentions."""
    agent = relation.agent_id
    source = ids.get((agent, linker.canonical_name(relation.source)))
    target = ids.get((agent, linker.canonical_name(relation.target)))
    if source is None:
        return "source"
    if target is None:
        return "target"
    return source, target, relation.relation_type


def _mentioned_entities(relations: list[IncomingRelation]) -> dict[tuple[str, str], int]:
    """(agent, canonical name) -> entity id of the entities the relations name that a memory of
    their agent mentions (the import's own memories included: they were written first). Only
    read: the entities come with the memories, so an import of relations takes no entity lock."""
    names: dict[str, set[str]] = {}
    for relation in relations:
        for name in (relation.source, relation.target):
            names.setdefault(relation.agent_id, set()).add(linker.canonical_name(name))
    ids: dict[tuple[str, str], int] = {}
    for agent_id in sorted(names):
        rows = Entity.objects.filter(
            agent_id=agent_id,
            canonical_name__in=sorted(names[agent_id]),
            memory_mentions__isnull=False,
        ).values_list("canonical_name", "id")
        ids.update({(agent_id, canonical): pk for canonical, pk in rows})
    return ids
