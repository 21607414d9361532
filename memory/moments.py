"""A moment as every answer and file writes it: ISO 8601 in UTC with a `Z` (None stays None)."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z") if moment else None
