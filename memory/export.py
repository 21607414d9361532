"""The store as JSON Lines: a header line naming the format and its version, then one object per
memory (its text, fields, entity mentions and, when asked, its history), then one per relation
between the entities those memories mention (`"kind": "relation"`), read a page at a time.

Reads only. Memories come in id order, a keyset page of PAGE rows per query with their mentions
and history in one query each, so the memory an export holds never grows with the store: the
command, the API and the dashboard stream the lines as they are made. The export is not a
snapshot: each page is read as it is when its turn comes (no transaction is held open for the
minutes a large store takes).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from django.db.models import Exists, OuterRef
from django.utils import timezone

from memory import linker
from memory.erasure_details import for_one_agent
from memory.imported_relations import MAX_MENTIONS
from memory.models import (
    Memory,
    MemoryEntityMention,
    MemoryHistory,
    Relation,
    RelationStatement,
)
from memory.moments import iso

FORMAT = "memory-curation-export"
VERSION = 1
PAGE = 1000
# A line's `kind`: a memory's record carries none (files written before relations were exported
# hold only memories), a relation's carries this.
RELATION = "relation"

# Memory columns an export reads (values_list order) and the record keys they become.
_COLUMNS = (
    ("id", "id"),
    ("content", "content"),
    ("type", "type"),
    ("tags", "tags"),
    ("pinned", "pinned"),
    ("importance", "importance"),
    ("who", "who"),
    ("why", "why"),
    ("agent_id", "agentId"),
    ("source_type", "sourceType"),
    ("source_id", "sourceId"),
    ("created_at", "createdAt"),
    ("updated_at", "updatedAt"),
    ("version", "version"),
    ("asserted_by", "assertedBy"),
    ("is_deleted", "isDeleted"),
    ("deleted_at", "deletedAt"),
    ("expires_at", "expiresAt"),
    ("purged_at", "purgedAt"),
)
_HISTORY_COLUMNS = (
    ("id", "id"),
    ("event", "event"),
    ("old_content", "oldContent"),
    ("new_content", "newContent"),
    ("changed_by", "changedBy"),
    ("actor_type", "actorType"),
    ("reason", "reason"),
    ("metadata", "metadata"),
    ("created_at", "createdAt"),
)


def file_name(agent: str | None, at=None) -> str:
    """What a download of the export is called: memories[-agent]-YYYYMMDD-HHMMSS.jsonl."""
    stamp = (at or timezone.now()).strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", agent)[:60] if agent else ""
    return f"memories-{safe + '-' if safe else ''}{stamp}.jsonl"


def header(*, agent: str | None, include_history: bool, include_deleted: bool, at=None) -> dict:
    """The first line: what the file is and what it holds."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "exportedAt": iso(at or timezone.now()),
        "agent": agent,
        "includeHistory": include_history,
        "includeDeleted": include_deleted,
    }


def _memories(agent: str | None, include_deleted: bool):
    query = Memory.objects.all()
    if agent is not None:
        query = query.filter(agent_id=agent)
    if not include_deleted:
        query = query.filter(is_deleted=False)
    return query


def records(
    *,
    agent: str | None = None,
    include_history: bool = False,
    include_deleted: bool = False,
    page: int | None = None,
    every_agent: bool = True,
) -> Iterator[dict]:
    """Every memory (of `agent`, or of all agents) as an export record, in id order;
    `every_agent` False (a reader of one agent) leaves erasures' cross-agent details out."""
    page = page or PAGE
    query = _memories(agent, include_deleted).order_by("id")
    after = None
    while True:
        rows = list(
            (query if after is None else query.filter(id__gt=after)).values_list(
                *(column for column, _ in _COLUMNS)
            )[:page]
        )
        if not rows:
            return
        ids = [row[0] for row in rows]
        mentions = _mentions(ids)
        history = _history(ids, every_agent) if include_history else {}
        for row in rows:
            record = {key: value for (_, key), value in zip(_COLUMNS, row, strict=True)}
            for key in ("createdAt", "updatedAt", "deletedAt", "expiresAt", "purgedAt"):
                record[key] = iso(record[key])
            record["entities"] = mentions.get(record["id"], [])
            if include_history:
                record["history"] = history.get(record["id"], [])
            yield record
        after = ids[-1]
        if len(rows) < page:
            return


def _mentions(ids: list[str]) -> dict[str, list[dict]]:
    """memory id -> the entities it mentions (name, type, the text as written, confidence)."""
    found: dict[str, list[dict]] = {}
    rows = (
        MemoryEntityMention.objects.filter(memory_id__in=ids)
        .order_by("memory_id", "entity__canonical_name")
        .values_list(
            "memory_id", "entity__name", "entity__entity_type", "mention_text", "confidence"
        )
    )
    for memory_id, name, kind, text, confidence in rows:
        found.setdefault(memory_id, []).append(
            {"name": name, "type": kind, "mention": text, "confidence": confidence}
        )
    return found


def _history(ids: list[str], every_agent: bool = True) -> dict[str, list[dict]]:
    """memory id -> its audit rows, oldest first (the API's history shape)."""
    found: dict[str, list[dict]] = {}
    rows = (
        MemoryHistory.objects.filter(memory_id__in=ids)
        .order_by("memory_id", "created_at", "id")
        .values_list("memory_id", *(column for column, _ in _HISTORY_COLUMNS))
    )
    for memory_id, *values in rows:
        row = {key: value for (_, key), value in zip(_HISTORY_COLUMNS, values, strict=True)}
        row["createdAt"] = iso(row["createdAt"])
        if not every_agent:
            row["metadata"] = for_one_agent(row["event"], row["metadata"])
        found.setdefault(memory_id, []).append(row)
    return found


def relation_records(
    *, agent: str | None = None, include_deleted: bool = False, page: int | None = None
) -> Iterator[dict]:
    """Every relation (of `agent`'s entities, or of all agents') that a memory the export holds
    stated, in id order, with those memories' ids (`statedBy`, a query more per page); not one naming what an erasure left (`[redacted:pii]` stands for
    different people: the import refuses it). One that only memories left out of the export
    stated (forgotten ones, without `include_deleted`) stays out."""
    page = page or PAGE
    # An entity is its agent's, and so are the memories stating its relations: the agent is the
    # relation's source's, and only forgotten memories may be left out.
    by_exported = {} if include_deleted else {"memory__is_deleted": False}
    stated = RelationStatement.objects.filter(relation_id=OuterRef("pk"), **by_exported)
    query = Relation.objects.filter(Exists(stated))
    if agent is not None:
        query = query.filter(source__agent_id=agent)
    columns = (
        "id",
        "source__agent_id",
        "source__name",
        "source__entity_type",
        "target__name",
        "target__entity_type",
        "relation_type",
        "confidence",
        "mentions",
        "created_at",
        "updated_at",
    )
    after = 0
    while True:
        rows = list(query.filter(id__gt=after).order_by("id").values_list(*columns)[:page])
        speakers: dict[int, list[str]] = {}
        for relation_id, memory_id in (
            RelationStatement.objects.filter(
                relation_id__in=[row[0] for row in rows], **by_exported
            )
            .order_by("relation_id", "memory_id")
            .values_list("relation_id", "memory_id")
        ):
            speakers.setdefault(relation_id, []).append(memory_id)
        for pk, agent_id, source, source_type, target, target_type, kind, *rest in rows:
            if linker.is_erasure_marker(source) or linker.is_erasure_marker(target):
                continue
            confidence, mentions, created, updated = rest
            yield {
                "kind": RELATION,
                "agentId": agent_id,
                "source": source,
                "sourceType": source_type,
                "target": target,
                "targetType": target_type,
                "relation": kind,
                "confidence": confidence,
                # Its import's bound: the line comes back (the count stated more often, cut).
                "mentions": min(mentions, MAX_MENTIONS),
                "createdAt": iso(created),
                "updatedAt": iso(updated),
                "statedBy": speakers.get(pk, []),  # the exported memories that stated it
            }
        if len(rows) < page:
            return
        after = rows[-1][0]


def dumps(value: dict) -> str:
    """One line of the file (no newline inside: JSON escapes every line break it holds)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def lines(
    *,
    agent: str | None = None,
    include_history: bool = False,
    include_deleted: bool = False,
    page: int | None = None,
    every_agent: bool = True,
) -> Iterator[str]:
    """The whole file, line by line (each ends with a newline): the header, the memories' records,
    then the relations between the entities they mention."""
    first = header(agent=agent, include_history=include_history, include_deleted=include_deleted)
    yield dumps(first) + "\n"
    for record in records(
        agent=agent,
        include_history=include_history,
        include_deleted=include_deleted,
        page=page,
        every_agent=every_agent,
    ):
        yield dumps(record) + "\n"
    for record in relation_records(agent=agent, include_deleted=include_deleted, page=page):
        yield dumps(record) + "\n"
