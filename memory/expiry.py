"""Expiry: a memory whose `expires_at` has passed is no longer found. The search legs of both
engines add `unexpired_sql` to the SQL they already run (no query more, no check in Python),
and ORM reads use `unexpired()`, so an expired memory leaves recall and candidate search at the
moment it expires, not when a sweep runs. Which expired memories are past their retention (for
the maintenance purge) is `due_for_purge`, read through the partial index `memories_expiry`.
`parse` is the one reading of an expiry a caller writes (ISO 8601 with a time zone)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import connection
from django.db.models import Q
from django.utils import timezone

from memory.models import Memory

EXAMPLE = "2027-01-31T00:00:00Z"
# The latest expiry taken: a memory's purge date (its expiry plus up to ten years of retention)
# and every date shown from it must stay inside the calendar Python and the databases hold.
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


class BadExpiry(ValueError):
    """An expiry that is not an ISO 8601 date and time with a time zone (the message says why)."""


def parse(value, *, name: str = "expiresAt", default_utc: bool = False) -> datetime:
    """The moment an ISO 8601 text names, in UTC. A time without a zone is refused (whose
    midnight?) unless `default_utc` (a form whose field says it is UTC)."""
    if not isinstance(value, str):
        raise BadExpiry(f"{name} must be a string: an ISO 8601 date and time, e.g. {EXAMPLE}")
    text = value.strip()
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadExpiry(
            f"{name} is not an ISO 8601 date and time: '{text[:40]}' (e.g. {EXAMPLE})"
        ) from None
    if moment.tzinfo is None or moment.utcoffset() is None:
        if not default_utc:
            raise BadExpiry(
                f"{name} needs a time zone: add Z for UTC or an offset such as +02:00 "
                f"(e.g. {EXAMPLE})"
            )
        moment = moment.replace(tzinfo=UTC)
    try:
        moment = moment.astimezone(UTC)
    except OverflowError:
        raise BadExpiry(f"{name} is out of range") from None
    return within_range(moment, name)


def within_range(moment: datetime, name: str = "expiresAt") -> datetime:
    """`moment`, refused (BadExpiry) from LATEST on."""
    if moment >= LATEST:
        raise BadExpiry(
            f"{name} is too far ahead: give a moment before {LATEST.year}-01-01, or none for a "
            "memory that never expires"
        )
    return moment


def unexpired(now: datetime | None = None, *, through: str = "") -> Q:
    """Memories not expired at `now` (default: this moment): no expiry, or one still ahead;
    `through` names the memory from another model ("memory_mentions__memory__")."""
    moment = now or timezone.now()
    return Q(**{f"{through}expires_at__isnull": True}) | Q(**{f"{through}expires_at__gt": moment})


def expired(now: datetime | None = None) -> Q:
    """Memories expired at `now` (default: this moment)."""
    return Q(expires_at__lte=now or timezone.now())


def unexpired_sql(column: str) -> tuple[str, list]:
    """`unexpired()` as SQL on `column` (the expiry column as the query names it: `m.expires_at`)
    and its one parameter, this moment as the engine stores times."""
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    return f"({column} IS NULL OR {column} > %s)", [now]


def due_for_purge(days: int, *, now: datetime | None = None, limit: int = 100) -> list[str]:
    """Ids of the memories (not purged yet) that expired at least `days` days before `now`,
    soonest expired first; none when `days` is 0 (never)."""
    if days <= 0:
        return []
    before = (now or timezone.now()) - timedelta(days=days)
    due = Memory.objects.filter(expires_at__lte=before, purged_at__isnull=True)
    return list(due.order_by("expires_at", "id").values_list("id", flat=True)[:limit])


def as_changed(current: datetime | None, changes: dict, now: datetime) -> dict:
    """An edit's changes with the expiry it stores (`current`: the memory's own). A past moment
    expires a live memory now, so the wait before its purge counts from now (stored as given, a
    wrong year typed was due for erasure at the next maintenance run); a memory already expired
    keeps its own moment (sent again with another edit, it changes nothing and never restarts
    that wait)."""
    moment = changes.get("expires_at")
    if moment is None or moment >= now:
        return changes
    expired = current is not None and current <= now
    return {**changes, "expires_at": current if expired else now}


def change_described(current: datetime | None, moment: datetime | None, now: datetime) -> str:
    """What giving `moment` as the expiry of a memory whose own is `current` does (as as_changed
    stores it), in words for its audit: "expiry set to ...", "expired now ...", "expiry lifted"."""
    if moment is None:
        return "expiry lifted"
    if moment >= now:
        return f"expiry set to {moment:%Y-%m-%d %H:%M:%S} UTC"
    given = f"the moment given, {moment:%Y-%m-%d %H:%M:%S} UTC, had passed"
    stored = as_changed(current, {"expires_at": moment}, now)["expires_at"]
    if stored is current:
        return f"already expired at {current:%Y-%m-%d %H:%M:%S} UTC, which it keeps ({given})"
    return f"expired now ({given})"
