"""A relation line of our export (`"kind": "relation"`, memory.export.relation_records) read as a
relation to write, or `Bad` naming its field. No database here."""

from __future__ import annotations

from memory import linker
from memory.imported_relations import MAX_MENTIONS, IncomingRelation
from memory.models import Entity, Relation
from pipeline.imports.fields import TYPE_CHARS, Bad, number_of, string_of, time_of

NAME_CHARS = Entity._meta.get_field("name").max_length
RELATION_CHARS = Relation._meta.get_field("relation_type").max_length


def from_export(line: int, obj: dict, agent: str) -> IncomingRelation:
    """One relation record of our export, for `agent` (the file's, or the one the import
    sends every line to)."""
    source, target = _name(obj, "source"), _name(obj, "target")
    kind = string_of(obj, "relation", RELATION_CHARS)
    if kind is None or not kind.strip():
        raise Bad("relation", "is required: what the source is to the target (uses, owns, ...)")
    mentions = obj.get("mentions", 1)
    if (
        isinstance(mentions, bool)
        or not isinstance(mentions, int)
        or not 1 <= mentions <= MAX_MENTIONS
    ):
        raise Bad("mentions", f"must be a whole number from 1 to {MAX_MENTIONS}")
    confidence = obj.get("confidence", 0.5)
    return IncomingRelation(
        line=line,
        agent_id=agent,
        source=source,
        source_type=_type(obj, "sourceType"),
        target=target,
        target_type=_type(obj, "targetType"),
        relation_type=kind.strip(),
        confidence=number_of(confidence, "confidence", 0, 1),
        mentions=mentions,
        created_at=time_of(obj.get("createdAt"), "createdAt"),
        updated_at=time_of(obj.get("updatedAt"), "updatedAt"),
    )


def _name(obj: dict, key: str) -> str:
    name = string_of(obj, key, NAME_CHARS)
    if name is None or not name.strip():
        raise Bad(key, "is required: the name of an entity")
    if linker.is_erasure_marker(name):
        # As for a remember's triples (memory.graph): a marker stands for different people, and
        # linking by it would join them.
        raise Bad(key, f"{name.strip()!r} is what an erasure left, not an entity's name")
    return " ".join(name.split())


def _type(obj: dict, key: str) -> str:
    kind = string_of(obj, key, TYPE_CHARS)
    return (kind or "").strip() or "unknown"
