"""A line of our export sent to another agent is a copy of its memory, not that memory: the ids
its copy takes, the same at every import of the file, so the import stays idempotent."""

from __future__ import annotations

import uuid

from memory.models import DERIVED_SOURCE_TYPE

# The namespace of the copies' name-based ids.
_COPIES = uuid.UUID("5b0c6f52-7d0e-4c39-9a57-2f3f1c1e8a11")


def copy_id(memory_id: str, agent: str) -> str:
    """The id of `memory_id`'s copy for `agent` (its original keeps its own)."""
    return str(uuid.uuid5(_COPIES, f"{agent}\n{memory_id}"))


def ids_of_copy(
    memory_id: str | None, source_type: str, source_id: str | None, agent: str
) -> tuple[str | None, str | None]:
    """(id, source id) of a line's copy for `agent`: a derived memory's copy names its raw
    memory's copy, so the copied lineage holds together and a purge of it reaches every copy
    (a raw memory's source id is the caller's own reference, kept as it is)."""
    if source_type == DERIVED_SOURCE_TYPE and source_id:
        source_id = copy_id(source_id, agent)
    return (copy_id(memory_id, agent) if memory_id else None), source_id
