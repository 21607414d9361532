"""Expiry in the domain: an expired memory is purged `retention.expiredPurgeDays` days after it
expired (0: never), by the maintenance schedule (pipeline.tasks.maintenance, which
`autonomous.frozen` stops), through the purge's one entry (pipeline.purge.purge_memories) with a
system actor and a reason naming expiry: each gets the tombstone and the receipt a manual purge
leaves. Until then it stays, out of recall and candidate search (memory.expiry)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from memory import expiry
from memory.models import ActorType, Memory
from memory.writes import Actor, Refused
from pipeline import purge
from pipeline.config import get_config, maintenance_allowed

log = logging.getLogger(__name__)

EXPIRY_ACTOR = Actor("expiry", ActorType.SYSTEM)
SCOPE = "expiry"  # the tombstones' scope: what the receipt page says the purge was
# Memories purged by one maintenance run, in one purge (one receipt); the rest wait for the next.
BATCH = 100


@dataclass(frozen=True)
class Outlook:
    """A memory's expiry as its page tells it."""

    expires_at: datetime
    expired: bool
    purge_at: datetime | None  # when maintenance purges it; None: never (retention 0)
    purge_due: bool  # purge_at has come: the next maintenance run purges it
    days: int  # retention.expiredPurgeDays
    paused: bool  # the maintenance schedule does not run now (autonomous.*)


def outlook(memory: Memory) -> Outlook | None:
    """The memory's expiry, when it is purged and whether maintenance runs (None: the memory
    does not expire, or is purged already)."""
    if memory.expires_at is None or memory.is_purged:
        return None
    config = get_config()
    days = config.expired_purge_days
    try:
        purge_at = memory.expires_at + timedelta(days=days) if days > 0 else None
    except OverflowError:
        # Stored before expiries were bounded: its purge date is past the calendar.
        purge_at = None
    return Outlook(
        expires_at=memory.expires_at,
        expired=memory.is_expired,
        purge_at=purge_at,
        purge_due=purge_at is not None and purge_at <= timezone.now(),
        days=days,
        paused=not maintenance_allowed(config),
    )


def reason_for(days: int) -> str:
    return (
        f"expired: purged by the maintenance schedule {days} day{'s' if days != 1 else ''} after "
        "its expiry (retention.expiredPurgeDays)"
    )


def purge_expired(*, now: datetime | None = None, batch: int = BATCH) -> dict | None:
    """Purge the memories that expired at least retention.expiredPurgeDays ago (at most `batch`,
    soonest expired first). None when none is due; else what the purge did."""
    days = get_config().expired_purge_days
    ids = expiry.due_for_purge(days, now=now, limit=batch)
    if not ids:
        return None
    try:
        receipt = purge.purge_memories(
            ids, reason=reason_for(days), actor=EXPIRY_ACTOR, scope=SCOPE
        )
    except Refused as refused:  # purged by an admin meanwhile: nothing left to do
        log.info("expired memories were not purged: %s", refused.message)
        return {"purged": 0, "refused": refused.code}
    if not receipt.verified:
        log.warning("the purge of %d expired memories could not verify", len(receipt.memories))
    return {
        "purged": len(receipt.memories),
        "verified": receipt.verified,
        "tombstone": receipt.tombstone,
    }
