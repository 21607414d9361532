"""One field of an item of an import file, checked: its value as the store takes it, or `Bad`
naming the field and what is wrong (pipeline.imports.formats turns it into the item's refusal).
No database here."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from django.conf import settings

from memory import expiry
from memory.content import is_effectively_empty, normalize

# The limits of the API's remember (api.memory_service), which the file's fields meet too.
MAX_TAGS, TAG_CHARS = 50, 100
NAME_CHARS, TYPE_CHARS = 200, 40


class Bad(ValueError):
    """A field of one item is wrong (becomes that item's Refusal)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field, self.message = field, message


def plain(value: str, field: str) -> str:
    """The text as it is, or Bad when it holds what no column stores: a NUL byte, or half of a
    UTF-16 surrogate pair (JSON's "\\ud800" alone), which the API refuses the same way."""
    if "\x00" in value:
        raise Bad(field, "contains a NUL byte")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise Bad(field, "contains an invalid unicode surrogate") from None
    return value


def content_of(value, field: str):
    """The memory's text, normalised, or Bad."""
    if not isinstance(value, str):
        raise Bad(field, "is required and must be a string")
    plain(value, field)
    if len(value) > settings.MEMORY_MAX_CONTENT_CHARS:
        raise Bad(field, f"is longer than {settings.MEMORY_MAX_CONTENT_CHARS} characters")
    if is_effectively_empty(value):
        raise Bad(field, "is empty after normalisation")
    return normalize(value)


def string_of(obj: dict, key: str, limit: int, default=None, *, field: str | None = None):
    value = obj.get(key)
    if value is None:
        return default
    name = field or key
    if not isinstance(value, str):
        raise Bad(name, "must be a string")
    if len(value) > limit:
        raise Bad(name, f"must be at most {limit} characters")
    return plain(value, name)


def text_of(obj: dict, key: str, field: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise Bad(field, "must be a string")
    return plain(value, field)


def bool_of(obj: dict, key: str, default: bool = False) -> bool:
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise Bad(key, "must be true or false")
    return value


def number_of(value, field: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise Bad(field, f"must be a number between {low:g} and {high:g}")
    return float(value)


def time_of(value, field: str) -> datetime | None:
    """An ISO 8601 instant (a naive one is read as UTC)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise Bad(field, "must be an ISO 8601 date and time, like 2027-01-31T00:00:00Z")
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise Bad(
            field, f"{value[:40]!r} is not an ISO 8601 date and time, like 2027-01-31T00:00:00Z"
        ) from None
    try:
        return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+05:00 is before the first moment a date can hold
        raise Bad(field, f"{value[:40]!r} is out of range once in UTC") from None


def json_text(value, field: str) -> str:
    """`value` as the JSON a JSON column stores, or Bad: Python's reader takes NaN and Infinity,
    which a JSON column refuses (the whole batch's write failed on them)."""
    try:  # not escaped to ASCII, so `plain` sees half a surrogate pair (PostgreSQL's json refuses it)
        return json.dumps(value, allow_nan=False, ensure_ascii=False)
    except ValueError:
        raise Bad(field, "holds NaN or Infinity, which are not JSON numbers") from None


def expiry_of(moment: datetime | None, field: str) -> datetime | None:
    """An expiry inside the range every memory's may take (memory.expiry.LATEST)."""
    if moment is None:
        return None
    try:
        return expiry.within_range(moment.astimezone(UTC), field)
    except (expiry.BadExpiry, OverflowError):
        raise Bad(
            field, f"too far ahead: the latest taken is before {expiry.LATEST.year}-01-01"
        ) from None


def tags_of(value, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(tag, str) for tag in value):
        raise Bad(field, "must be a list of strings")
    if len(value) > MAX_TAGS:
        raise Bad(field, f"may hold at most {MAX_TAGS} items, not {len(value)}")
    if any(len(tag) > TAG_CHARS for tag in value):
        raise Bad(field, f"each tag must be at most {TAG_CHARS} characters")
    return [plain(tag.strip(), field) for tag in value if tag.strip()]
