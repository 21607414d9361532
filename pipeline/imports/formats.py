"""What an import file holds, read item by item: our export (memory.export: JSON Lines under a
header line), mem0's `get_all` answer (`{"results": [...]}`, or a plain list from its older
versions) or plain text / Markdown (one memory per paragraph or list item).

Each item becomes an `Incoming` memory ready for the store, or a `Refusal` naming its line and
field (the item is refused alone; the others go on). A file that cannot be read at all (an
export header of a newer version, a mem0 document that is not JSON) raises `FileRefused`. Lines
arrive as bytes, one at a time, so a large export or text file is never held whole; mem0's one
JSON document is. No database here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from memory import export
from memory.erasure import PURGED, PURGED_EVENT, text_values_purged
from memory.imported import HistoryEntry, Incoming, Mention
from memory.imported_relations import IncomingRelation
from memory.models import DERIVED_SOURCE_TYPE, ActorType, Authority
from pipeline.imports import copies, relations
from pipeline.imports.fields import (
    NAME_CHARS,
    TYPE_CHARS,
    Bad,
    bool_of,
    content_of,
    expiry_of,
    json_text,
    number_of,
    plain,
    string_of,
    tags_of,
    text_of,
    time_of,
)

EXPORT, MEM0, TEXT = "export", "mem0", "text"
FORMATS = {
    EXPORT: "our export (JSON Lines)",
    MEM0: "mem0's get_all (JSON)",
    TEXT: "plain text or Markdown",
}
MAX_MENTIONS = 200
MAX_VERSION = 2**31 - 1  # the column's range on PostgreSQL
_ID = re.compile(r"^[0-9A-Za-z-]{1,36}$")
_JSON_LIST = re.compile(r"^\[\s*(?:$|\{|\]\s*$)")  # mem0's lists hold objects
# Ids the API's routes take for words (GET /api/memory/recall is recall's): a memory under one
# could not be read, edited or forgotten through the API.
ROUTE_WORDS = frozenset({"remember", "recall"})


@dataclass(frozen=True)
class Refusal:
    """An item of the file that is not imported: where, which field, and why."""

    line: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.field}: {self.message}"


class FileRefused(ValueError):
    """The file as a whole cannot be read as the format: nothing of it is imported."""


@dataclass(frozen=True)
class Options:
    file_name: str
    agent: str | None = None  # every memory to this agent, whatever the file says
    who: str = ""  # who a text file's memories are from (the importer)


def detect(first_line: bytes) -> str:
    """The format of a file from its first non-blank line."""
    text = first_line.decode("utf-8-sig", errors="replace").strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError:
            return MEM0  # the first line of a JSON document written over several lines
        if isinstance(value, dict) and value.get("format") == export.FORMAT:
            return EXPORT
        if isinstance(value, dict) and "content" in value and "results" not in value:
            return EXPORT  # a line of our export without its header: refused as such, saying so
        return MEM0
    # mem0's list opens with "[" and then an object, its end, or a line break; Markdown may open
    # with a link, a box or a wiki link ("[Runbook](...)", "[ ] todo", "[[Billing]] ...").
    return MEM0 if _JSON_LIST.match(text) else TEXT


def items(
    lines: Iterable[bytes], fmt: str, options: Options
) -> Iterator[Incoming | IncomingRelation | Refusal]:
    """The file's items in order, each a memory (or, in our export, a relation) to write, or a
    refusal."""
    if fmt == EXPORT:
        return _export_items(lines, options)
    if fmt == MEM0:
        return _mem0_items(b"".join(lines), options)
    if fmt == TEXT:
        return _text_items(lines, options)
    raise FileRefused(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def _agent(obj: dict, keys: tuple[str, ...], options: Options) -> str:
    """The agent an item goes to: `--agent`, else its own (`_own_agent`)."""
    return options.agent or _own_agent(obj, keys)


def _own_agent(obj: dict, keys: tuple[str, ...]) -> str:
    """The agent the file names for an item (the first of `keys` it has), else "default"."""
    for key in keys:
        value = string_of(obj, key, NAME_CHARS)
        if value and value.strip():
            return value.strip()
    return "default"


# --- our export -----------------------------------------------------------------------------------


def _json_lines(lines: Iterable[bytes]) -> Iterator[tuple[int, dict | Refusal]]:
    """(line number, the line's JSON object or its refusal) for every non-blank line."""
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError:
            yield number, Refusal(number, "line", "is not valid UTF-8")
            continue
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as exc:
            yield number, Refusal(number, "line", f"is not valid JSON: {exc}")
            continue
        if not isinstance(value, dict):
            yield number, Refusal(number, "line", "must be a JSON object")
            continue
        yield number, value


def _export_items(
    lines: Iterable[bytes], options: Options
) -> Iterator[Incoming | IncomingRelation | Refusal]:
    parsed = _json_lines(lines)
    first = next(parsed, None)
    if first is None:
        raise FileRefused("the file is empty: an export starts with its header line")
    number, head = first
    if not isinstance(head, dict) or head.get("format") != export.FORMAT:
        raise FileRefused(
            f"line {number}: an export starts with its header line "
            f'{{"format": "{export.FORMAT}", "version": {export.VERSION}, ...}}'
        )
    version = head.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise FileRefused(f"line {number}: version must be a positive integer")
    if version > export.VERSION:
        raise FileRefused(
            f"line {number}: the file is version {version} of the format, written by a newer "
            f"release; this one reads version {export.VERSION}: upgrade, then import it"
        )
    for number, value in parsed:
        if isinstance(value, Refusal):
            yield value
            continue
        try:
            yield _export_record(number, value, options)
        except Bad as bad:
            yield Refusal(number, bad.field, bad.message)


def _export_record(line: int, obj: dict, options: Options) -> Incoming | IncomingRelation:
    """A line of our export: a memory (no `kind`), or a relation between two entities."""
    kind = obj.get("kind")
    if kind == export.RELATION:
        own = _own_agent(obj, ("agentId",))
        copy_for = options.agent if options.agent and options.agent != own else None
        return relations.from_export(line, obj, _agent(obj, ("agentId",), options), copy_for)
    if kind is not None and kind != "memory":
        raise Bad("kind", f"must be {export.RELATION!r}, or left out for a memory")
    return from_export(line, obj, options)


def from_export(line: int, obj: dict, options: Options) -> Incoming:
    """One record of our export (memory.export.records) as a memory to write."""
    memory_id = string_of(obj, "id", 36)
    if memory_id is not None and not _ID.match(memory_id):
        raise Bad("id", "must be a memory id (letters, digits and dashes, at most 36)")
    if memory_id is not None and memory_id.lower() in ROUTE_WORDS:
        raise Bad("id", f"{memory_id!r} is a word of the API's routes, not a memory id")
    source_type = (string_of(obj, "sourceType", TYPE_CHARS) or "import").strip() or "import"
    source_id = string_of(obj, "sourceId", NAME_CHARS)
    copy_of = None
    if options.agent and options.agent != _own_agent(obj, ("agentId",)):
        copy_of = memory_id
        memory_id, source_id = copies.ids_of_copy(memory_id, source_type, source_id, options.agent)
    version = obj.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= MAX_VERSION:
        raise Bad("version", f"must be a whole number from 1 to {MAX_VERSION}")
    asserted = string_of(obj, "assertedBy", 10)
    if asserted is not None and asserted not in Authority.values:
        raise Bad("assertedBy", f"must be one of {', '.join(Authority.values)}")
    importance = obj.get("importance")
    deleted = bool_of(obj, "isDeleted")
    purged = time_of(obj.get("purgedAt"), "purgedAt")
    if purged is not None and not deleted:
        raise Bad("purgedAt", "a purged memory is forgotten too: isDeleted must be true")
    history = _history(obj.get("history"))
    if purged is not None and not _only_a_tombstone(obj, history):
        # Stored as purged, a text could never be erased again (purge and redaction skip it).
        raise Bad(
            "purgedAt",
            f"a purged memory holds nothing but its tombstone: content {PURGED}, no why, tags, "
            "entities, sourceId or texts in its history (its audits' metadata as a purge leaves "
            "it)",
        )
    return Incoming(
        line=line,
        text=content_of(obj.get("content"), "content"),
        agent_id=_agent(obj, ("agentId",), options),
        type=(string_of(obj, "type", TYPE_CHARS) or "fact").strip() or "fact",
        tags=tags_of(obj.get("tags"), "tags"),
        pinned=bool_of(obj, "pinned"),
        importance=0.5 if importance is None else number_of(importance, "importance", 0, 1),
        who=string_of(obj, "who", NAME_CHARS, ""),
        why=string_of(obj, "why", NAME_CHARS, ""),
        source_type=source_type,
        source_id=source_id,
        created_at=time_of(obj.get("createdAt"), "createdAt"),
        updated_at=time_of(obj.get("updatedAt"), "updatedAt"),
        version=version,
        id=memory_id,
        is_deleted=deleted,
        deleted_at=time_of(obj.get("deletedAt"), "deletedAt") if deleted else None,
        expires_at=expiry_of(time_of(obj.get("expiresAt"), "expiresAt"), "expiresAt"),
        purged_at=purged,
        mentions=_mentions(obj.get("entities")),
        history=history,
        origin={"assertedBy": asserted} if asserted else {},
        copy_of=copy_of,
    )


def _only_a_tombstone(obj: dict, history: list[HistoryEntry]) -> bool:
    """What a purge leaves of a memory: its marker, no why, tags or entities, no writer's
    reference (a derived memory's raw memory id stays), no text in its audits, their metadata
    as a purge leaves it (every text value the marker; the `purged` event's own is its record).
    A QA pass imported tombstones carrying a key in sourceId and in an audit's metadata, which
    no purge or redaction reaches again."""
    if obj.get("content") != PURGED or obj.get("why") or obj.get("tags") or obj.get("entities"):
        return False
    if obj.get("sourceId") and obj.get("sourceType") != DERIVED_SOURCE_TYPE:
        return False
    kept = (None, PURGED)
    return all(
        e.old_content in kept
        and e.new_content in kept
        and (e.event == PURGED_EVENT or text_values_purged(e.metadata) == e.metadata)
        for e in history
    )


def _mentions(value) -> list[Mention] | None:
    """The entities the record names; None when it has no `entities` key (the inline linker
    then links the entities the agent already has, as at remember)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise Bad("entities", "must be a list of {name, type, mention, confidence} objects")
    if len(value) > MAX_MENTIONS:
        raise Bad("entities", f"may hold at most {MAX_MENTIONS} items, not {len(value)}")
    found = []
    for index, item in enumerate(value):
        where = f"entities[{index}]"
        if not isinstance(item, dict):
            raise Bad(where, "must be an object")
        name = string_of(item, "name", 300, field=f"{where}.name")
        if not name or not name.strip():
            raise Bad(f"{where}.name", "is required")
        confidence = item.get("confidence", 0.8)
        found.append(
            Mention(
                name=name.strip(),
                type=(string_of(item, "type", TYPE_CHARS, field=f"{where}.type") or "unknown"),
                text=string_of(item, "mention", 300, field=f"{where}.mention") or name.strip(),
                confidence=number_of(confidence, f"{where}.confidence", 0, 1),
            )
        )
    return found


def _history(value) -> list[HistoryEntry]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Bad("history", "must be a list of audit rows")
    rows = []
    for index, item in enumerate(value):
        where = f"history[{index}]"
        if not isinstance(item, dict):
            raise Bad(where, "must be an object")
        event = string_of(item, "event", 20, field=f"{where}.event")
        if not event:
            raise Bad(f"{where}.event", "is required")
        actor_type = string_of(item, "actorType", 20, ActorType.SYSTEM, field=f"{where}.actorType")
        if actor_type not in ActorType.values:
            raise Bad(f"{where}.actorType", f"must be one of {', '.join(ActorType.values)}")
        metadata = item.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise Bad(f"{where}.metadata", "must be an object")
        plain(json_text(metadata, f"{where}.metadata"), f"{where}.metadata")
        created = time_of(item.get("createdAt"), f"{where}.createdAt")
        if created is None:
            raise Bad(f"{where}.createdAt", "is required")
        row_id = string_of(item, "id", 36, field=f"{where}.id")
        if row_id is not None and not _ID.match(row_id):
            raise Bad(f"{where}.id", "must be an id (letters, digits and dashes, at most 36)")
        rows.append(
            HistoryEntry(
                event=event,
                old_content=text_of(item, "oldContent", f"{where}.oldContent"),
                new_content=text_of(item, "newContent", f"{where}.newContent"),
                changed_by=string_of(item, "changedBy", NAME_CHARS, "", field=f"{where}.changedBy"),
                actor_type=actor_type,
                reason=text_of(item, "reason", f"{where}.reason"),
                metadata=metadata,
                created_at=created,
                id=row_id,
            )
        )
    return rows


# --- mem0 -----------------------------------------------------------------------------------------

# What of mem0's memory item (its MemoryItem) the import's audit keeps beside the text: not its
# `hash`, a digest of the text, which would outlive a purge of it (and a short secret's digest
# can be brute-forced).
MEM0_KEYS = ("id", "metadata", "user_id", "agent_id", "run_id", "actor_id", "role")


def _mem0_items(data: bytes, options: Options) -> Iterator[Incoming | Refusal]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise FileRefused(f"line {line}: the file is not valid UTF-8") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FileRefused(f"line {exc.lineno}: not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise FileRefused("the JSON document is nested too deeply") from None
    if isinstance(document, dict):
        if not isinstance(document.get("results"), list):
            raise FileRefused(
                'line 1: mem0\'s get_all answer is {"results": [...]} (or, from older '
                "versions, a list of memories); this object has no results list"
            )
    elif not isinstance(document, list):
        raise FileRefused("line 1: mem0's get_all answer is an object or a list")
    for line, item in _array_items(text):
        if not isinstance(item, dict):
            yield Refusal(line, "item", "must be an object with a memory")
            continue
        try:
            yield from_mem0(line, item, options)
        except Bad as bad:
            yield Refusal(line, bad.field, bad.message)


def from_mem0(line: int, item: dict, options: Options) -> Incoming:
    """One of mem0's memories (`memory`, its scopes, `categories` on its platform)."""
    metadata = item.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise Bad("metadata", "must be an object")
    mem0_id = item.get("id")
    if mem0_id is not None and not isinstance(mem0_id, str | int):
        raise Bad("id", "must be a string")
    kept = {key: item[key] for key in MEM0_KEYS if item.get(key) is not None}
    plain(json_text(kept, "metadata"), "metadata")
    return Incoming(
        line=line,
        text=content_of(item.get("memory"), "memory"),
        agent_id=_agent(item, ("agent_id", "user_id"), options),
        tags=tags_of(item.get("categories"), "categories"),
        who=(
            string_of(item, "actor_id", NAME_CHARS) or string_of(item, "user_id", NAME_CHARS) or ""
        ).strip(),
        source_type=MEM0,
        source_id=None if mem0_id is None else str(mem0_id)[:NAME_CHARS],
        created_at=time_of(item.get("created_at"), "created_at"),
        updated_at=time_of(item.get("updated_at"), "updated_at"),
        expires_at=expiry_of(_mem0_expiry(item.get("expiration_date")), "expiration_date"),
        mentions=None,
        origin={"mem0": kept},
    )


def _mem0_expiry(value) -> datetime | None:
    """mem0's `expiration_date` (YYYY-MM-DD, UTC): the memory is found all through that day, so
    it expires at the start of the next."""
    if value is None or value == "":
        return None
    try:
        following = date.fromisoformat(value.strip()) + timedelta(days=1)
    except (AttributeError, ValueError, OverflowError):  # no text, no date, 9999-12-31
        raise Bad("expiration_date", "must be a date like 2030-01-31") from None
    return datetime.combine(following, time.min, tzinfo=UTC)


def _array_items(text: str) -> Iterator[tuple[int, object]]:
    """(line where it starts, value) of each element of the memories list of a valid JSON
    document: the document itself when it is a list, else its `results`."""
    decoder = json.JSONDecoder()
    position = _skip(text, 0)
    if text[position] == "{":
        position = _skip(text, position + 1)
        while True:
            key, position = decoder.raw_decode(text, position)
            position = _skip(text, _skip(text, position) + 1)  # past the colon
            if key == "results":
                break
            _, position = decoder.raw_decode(text, position)
            position = _skip(text, _skip(text, position) + 1)  # past the comma
    position = _skip(text, position + 1)  # past the [
    line, counted = 1, 0
    while text[position] != "]":
        line += text.count("\n", counted, position)
        counted = position
        value, position = decoder.raw_decode(text, position)
        yield line, value
        position = _skip(text, position)
        if text[position] == ",":
            position = _skip(text, position + 1)


_SPACE = re.compile(r"[ \t\r\n]*")


def _skip(text: str, position: int) -> int:
    return _SPACE.match(text, position).end()


# --- plain text and Markdown ---------------------------------------------------------------------

_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)])(?:\s+|$)(?:\[[ xX]\]\s+)?")
_HEADING = re.compile(r"^\s{0,3}#{1,6}(?:\s|$)")
_UNDERLINE = re.compile(r"^\s{0,3}(?:=+|-+)\s*$")
_RULE = re.compile(r"^\s{0,3}([-*_])(?:\s*\1){2,}\s*$")
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_QUOTE = re.compile(r"^\s{0,3}>\s?")


def blocks(lines: Iterable[bytes]) -> Iterator[tuple[int, str] | Refusal]:
    """(first line, text) of each paragraph or list item: blank lines, headings and rules end
    one; a list item starts one; a fenced code block stays whole in the block around it; a
    front matter block (--- at the very top) and headings are not memories."""
    start, parts, fence, front = 0, [], "", False
    for number, raw in enumerate(lines, start=1):
        try:
            line = raw.decode("utf-8-sig" if number == 1 else "utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            yield Refusal(number, "line", "is not valid UTF-8")
            continue
        if number == 1 and line.strip() == "---":
            front = True
            continue
        if front:
            front = line.strip() not in {"---", "..."}
            continue
        if fence:
            parts.append(line)
            fence = "" if line.strip().startswith(fence) else fence
            continue
        if opened := _FENCE.match(line):
            start, fence = start or number, opened.group(1)
            parts.append(line)
            continue
        line = _unquoted(line)
        marker = _ITEM.match(line)
        if marker and not line[marker.end() :].strip() and (not parts or _ITEM.match(parts[0])):
            # A list item with nothing after its marker ("- "): its own item, refused as empty,
            # not an underline that ends the list unseen (it was in no count).
            if parts:
                yield start, "\n".join(parts)
            yield number, line
            start, parts = 0, []
            continue
        if not line.strip() or _HEADING.match(line) or _UNDERLINE.match(line) or _RULE.match(line):
            # A single line underlined with === or --- is a heading, not a memory.
            if _UNDERLINE.match(line) and len(parts) == 1 and not _ITEM.match(parts[0]):
                parts = []
            if parts:
                yield start, "\n".join(parts)
            start, parts = 0, []
            continue
        if _ITEM.match(line):
            if parts:
                yield start, "\n".join(parts)
            start, parts = number, [line]
            continue
        start = start or number
        parts.append(line)
    if parts:
        yield start, "\n".join(parts)


def _unquoted(line: str) -> str:
    while _QUOTE.match(line):
        line = _QUOTE.sub("", line, count=1)
    return line


def _text_items(lines: Iterable[bytes], options: Options) -> Iterator[Incoming | Refusal]:
    for block in blocks(lines):
        if isinstance(block, Refusal):
            yield block
            continue
        line, text = block
        item = _ITEM.match(text)
        try:
            content = content_of(text[item.end() :] if item else text, "content")
        except Bad as bad:
            yield Refusal(line, bad.field, bad.message)
            continue
        yield Incoming(
            line=line,
            text=content,
            agent_id=options.agent or "default",
            who=options.who,
            why="import",
            source_type=TEXT,
            source_id=f"{options.file_name[: NAME_CHARS - 12]}:{line}",
            mentions=None,
        )
