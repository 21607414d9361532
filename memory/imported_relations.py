"""An import's relations in the store: each a relation between two entities of an agent, as our
export writes them (memory.export.relation_records). An entity the agent has no row for is
created; a relation already stored is left as it is (an import is idempotent: the same file
imported twice counts nothing twice), as is an entity's type someone chose. Runs in its
caller's transaction (pipeline.writes.imports opens one per batch); nothing here opens a
transaction or does network I/O."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from memory import linker
from memory.graph import upsert_named_entities
from memory.imported import DEDUPED, DONE, Outcome
from memory.models import Entity, Relation


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

    def words(self) -> str:
        """The relation as the import's report writes it: `Kenji -deploys-> billing-api`."""
        return f"{self.source} -{self.relation_type}-> {self.target}"


def write_in_transaction(relations: list[IncomingRelation], *, at) -> list[Outcome]:
    """Write the batch's relations inside the caller's transaction, in file order: each one is
    imported, or deduped to the relation already stored between the same two entities (or an
    earlier line's)."""
    if not relations:
        return []
    ids = _entities(relations, at)
    keys = [_key(relation, ids) for relation in relations]
    stored = set(
        Relation.objects.filter(
            source_id__in={source for source, _, _ in keys},
            target_id__in={target for _, target, _ in keys},
        ).values_list("source_id", "target_id", "relation_type")
    )
    outcomes, new = [], []
    for relation, key in zip(relations, keys, strict=True):
        status = DEDUPED if key in stored else DONE
        outcomes.append(Outcome(relation.line, status, "", relation=relation.words()))
        if status == DONE:
            stored.add(key)
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
    return outcomes


def _key(relation: IncomingRelation, ids: dict[tuple[str, str], int]) -> tuple[int, int, str]:
    agent = relation.agent_id
    return (
        ids[(agent, linker.canonical_name(relation.source))],
        ids[(agent, linker.canonical_name(relation.target))],
        relation.relation_type,
    )


def _entities(relations: list[IncomingRelation], at) -> dict[tuple[str, str], int]:
    """(agent, canonical name) -> entity id for every entity the relations name, created when
    new with the file's name and type; a stored entity with only a placeholder type takes the
    file's."""
    named: dict[str, dict[str, tuple[str, str]]] = {}
    for relation in relations:
        for name, kind in (
            (relation.source, relation.source_type),
            (relation.target, relation.target_type),
        ):
            named.setdefault(relation.agent_id, {}).setdefault(
                linker.canonical_name(name), (" ".join(name.split()), kind or "unknown")
            )
    ids: dict[tuple[str, str], int] = {}
    for agent_id in sorted(named):  # one order for every writer (PostgreSQL's locks)
        found, retyped = upsert_named_entities(agent_id, named[agent_id], at)
        ids.update({(agent_id, canonical): pk for canonical, pk in found.items()})
        for pk, kind in sorted(retyped.items()):
            Entity.objects.filter(pk=pk).update(entity_type=kind, updated_at=at)
    return ids
