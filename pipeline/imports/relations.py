"""A relation line of our export (`"kind": "relation"`, memory.export.relation_records) read as a
relation to write, or `Bad` naming its field. No database here."""

from __future__ import annotations

import re

from memory import linker
from memory.imported_relations import MAX_MENTIONS, IncomingRelation
from memory.models import Entity, Relation
from pipeline.imports import copies
from pipeline.imports.fields import TYPE_CHARS, Bad, number_of, string_of, time_of

NAME_CHARS = Entity._meta.get_field("name").max_length
RELATION_CHARS = Relation._meta.get_field("relation_type").max_length


def from_export(line: int, obj: dict, agent: str, copy_for: str | None = None) -> IncomingRelation:
    """One relation record of our export, for `agent` (the file's, or the one the import
    sends every line to; `copy_for`: that agent when the line is another agent's, whose
    `statedBy` then names the copies of its memories)."""
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
    stated_by = _stated_by(obj)
    if stated_by is not None and copy_for is not None:
        stated_by = tuple(copies.copy_id(memory_id, copy_for) for memory_id in stated_by)
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
        stated_by=stated_by,
    )


_MEMORY_ID = re.compile(r"^[0-9A-Za-z-]{1,36}$")


def _stated_by(obj: dict) -> tuple[str, ...] | None:
    """The ids of the file's memories that stated the relation (None: the line does not say)."""
    ids = obj.get("statedBy")
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(
        isinstance(memory_id, str) and _MEMORY_ID.match(memory_id) for memory_id in ids
    ):
        raise Bad("statedBy", "must be a list of the ids of the file's memories that stated it")
    return tuple(dict.fromkeys(ids))


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
