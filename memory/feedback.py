"""Agent feedback on a recalled memory: one audit row (event "feedback") saying it was used,
ignored or contradicted; the memory itself and its version never change."""

from __future__ import annotations

from django.db import transaction

from memory.models import MemoryHistory
from memory.refused import Refused
from memory.writes import Actor, audit, locked_memory

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
    its version do not change, so feedback never conflicts with an edit. A purged memory refuses
    it (409 `purged`).
    """
    if verdict not in FEEDBACK_VERDICTS:
        raise Refused("invalid_verdict", f"verdict must be one of {', '.join(FEEDBACK_VERDICTS)}")
    with transaction.atomic():
        memory = locked_memory(memory_id)
        if memory.is_purged:
            # A tombstone keeps who, when and why only: a note here would be text no erasure
            # reaches again (purge and redaction skip a purged memory).
            raise Refused("purged", "memory was purged: its text is gone for good")
        return audit(
            memory.id,
            FEEDBACK_EVENT,
            actor=actor,
            reason=note,
            metadata={"verdict": verdict, "version": memory.version, **(metadata or {})},
        )
