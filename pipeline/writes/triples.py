"""A reviewer's decision on an entity triple, exactly once in one transaction: approved, it
enters the graph through the store's explicit graph path (refused under the emergency brake, like
every reviewer apply); rejected, nothing is written."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from memory import writes
from memory.writes import Actor, Refused, audit
from pipeline.config import get_config
from pipeline.models import TripleReview, TripleStatus
from pipeline.writes.apply import FROZEN_MESSAGE


def decide_triple(
    triple_id: int, *, reviewer: Actor, approve: bool, note: str | None = None
) -> TripleReview:
    """Approve (entities, relation and mentions through the explicit graph path) or reject."""
    with transaction.atomic():
        triple = (
            TripleReview.objects.select_related("source_memory")
            .select_for_update(of=("self",))
            .filter(id=triple_id)
            .first()
        )
        if triple is None:
            raise Refused("not_found", f"triple {triple_id} not found")
        if triple.status != TripleStatus.PENDING:
            raise Refused(
                "already_decided",
                f"this triple is already {triple.status} (by {triple.decided_by})",
            )
        if approve and get_config().mutations_frozen:
            # The emergency brake stops every reviewer apply, graph writes included.
            raise Refused("frozen", FROZEN_MESSAGE)
        now = timezone.now()
        if approve:
            writes.persist_triples(
                triple.source_memory,
                [
                    writes.Triple(
                        triple.source,
                        triple.relationship,
                        triple.target,
                        triple.source_type,
                        triple.target_type,
                        triple.confidence,
                    )
                ],
                at=now,
            )
        status = TripleStatus.APPROVED if approve else TripleStatus.REJECTED
        claimed = TripleReview.objects.filter(id=triple.id, status=TripleStatus.PENDING).update(
            status=status, decided_by=reviewer.name, decided_at=now, note=note
        )
        if claimed != 1:
            raise Refused("already_decided", "another reviewer decided this triple first")
        audit(
            triple.source_memory_id,
            "reviewed",
            actor=reviewer,
            reason=note or f"entity triple {status}",
            metadata={"tripleId": triple.id, "decision": status, "triple": str(triple)},
            at=now,
        )
    return TripleReview.objects.get(id=triple_id)
