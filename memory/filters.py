"""Which memories a list or a search admits by their own fields: one rule for the dashboard's
Memories page, the JSON API and MCP (type, who, pinned, tags, origin)."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Q

from memory import backend
from memory.models import DERIVED_SOURCE_TYPE

ORIGINS = ("raw", "derived")


def attributes(
    *,
    type: str = "",
    who: str = "",
    pinned: bool | None = None,
    tags: Iterable[str] = (),
    origin: str = "",
) -> Q:
    """A Q on Memory: this type exactly, `who` as a case-insensitive substring, pinned or not,
    every one of the tags, raw (what a writer stored) or derived (what the pipeline extracted).
    An empty value (None for pinned) admits every memory."""
    where = Q()
    if type:
        where &= Q(type=type)
    if who:
        where &= Q(who__icontains=who)
    if pinned is not None:
        where &= Q(pinned=pinned)
    for tag in tags:
        where &= backend.list_holds("tags", tag)
    if origin == "derived":
        where &= Q(source_type=DERIVED_SOURCE_TYPE)
    elif origin == "raw":
        where &= ~Q(source_type=DERIVED_SOURCE_TYPE)
    return where
