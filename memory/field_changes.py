"""What an edit did to a memory's fields other than its text, as its audit row keeps it:
{field: [before, after]} in JSON values, so a trail tells a pin from an unpin and keeps the
tags, type, importance and expiry a change replaced (a QA pass: only the field names were kept,
and no copy of the row is archived for these changes)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memory.moments import iso


def as_json(value: Any) -> Any:
    """A field's value as JSON keeps it (a moment as ISO 8601 UTC)."""
    return iso(value) if isinstance(value, datetime) else value


def field_changes(before: dict[str, Any], updates: dict[str, Any]) -> dict[str, list]:
    """{field: [before, after]} for every field of `before` that `updates` gives a value."""
    return {
        name: [as_json(old), as_json(updates[name])]
        for name, old in before.items()
        if name in updates
    }
