"""Saved review queues read together: each queue's pending count and oldest item in one query,
and the queues one proposal is in (pipeline.team.SavedQueue holds each queue's filter)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Min, Q

from pipeline.models import Proposal, ProposalStatus
from pipeline.team import SavedQueue


@dataclass(frozen=True)
class QueueCount:
    queue: SavedQueue
    pending: int
    oldest: datetime | None  # when its longest-waiting proposal was made


def saved_queues() -> list[SavedQueue]:
    return list(SavedQueue.objects.prefetch_related("reviewers"))


def counts(queues: list[SavedQueue], *, where: Q | None = None) -> list[QueueCount]:
    """Each queue's pending proposals (matching `where` too, when given) and its oldest, in one
    aggregate query however many queues there are."""
    if not queues:
        return []
    aggregates = {}
    for n, queue in enumerate(queues):
        condition = queue.condition()
        aggregates[f"n{n}"] = Count("id", filter=condition)
        aggregates[f"o{n}"] = Min("created_at", filter=condition)
    pending = Proposal.objects.filter(status=ProposalStatus.PENDING)
    if where is not None:
        pending = pending.filter(where)
    row = pending.aggregate(**aggregates)
    return [QueueCount(q, row[f"n{n}"], row[f"o{n}"]) for n, q in enumerate(queues)]


def queues_of(proposal: Proposal, queues: list[SavedQueue]) -> list[SavedQueue]:
    """The queues a pending proposal is in (one query); none for a decided one."""
    if not queues:
        return []
    row = Proposal.objects.filter(pk=proposal.pk, status=ProposalStatus.PENDING).aggregate(
        **{f"n{n}": Count("id", filter=q.condition()) for n, q in enumerate(queues)}
    )
    return [q for n, q in enumerate(queues) if row[f"n{n}"]]


def by_slug(slug: str | None) -> SavedQueue | None:
    return SavedQueue.objects.filter(slug=slug).first() if slug else None
