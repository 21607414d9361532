"""An import's batch in the store: memories read from a file, deduped as remember dedupes them
(an active memory of the agent with the same content hash is the same memory) and by id (a
memory of our own export that is already here), written with memory.batch's row builders in a
few statements. Runs in its caller's transaction (pipeline.writes.imports opens one per batch);
nothing here opens a transaction or does network I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from memory import jobs, linker
from memory.backend import lock_contents
from memory.batch import (
    LINKED_CONFIDENCE,
    entity_ids,
    history_row,
    insert_rows,
    memory_row,
    mention_row,
    write_mentions,
)
from memory.content import NormalizedContent
from memory.erasure import PURGED
from memory.graph import upsert_named_entities
from memory.models import (
    Authority,
    ExtractionStatus,
    Memory,
    MemoryCold,
    MemoryEntityMention,
    MemoryHistory,
    new_id,
)
from memory.writes import Actor

# The import's own audit of a memory: "created" when the file carries no history of it, else
# "imported" (the history's own "created" stays the first event of its story).
CREATED, IMPORTED = "created", "imported"


@dataclass(frozen=True)
class Mention:
    """An entity the memory names in its file: the entity's name and type, the text as written."""

    name: str
    type: str
    text: str
    confidence: float


@dataclass(frozen=True)
class HistoryEntry:
    """One audit row of the memory's history as the file carries it."""

    event: str
    old_content: str | None
    new_content: str | None
    changed_by: str
    actor_type: str
    reason: str | None
    metadata: dict
    created_at: datetime
    id: str | None = None  # kept when free: rows of one instant keep their order (by id)


@dataclass
class Incoming:
    """One memory of an import file, validated (pipeline.imports.formats) and ready to write."""

    line: int
    text: NormalizedContent
    agent_id: str
    type: str = "fact"
    tags: list[str] = field(default_factory=list)
    pinned: bool = False
    importance: float = 0.5
    who: str = ""
    why: str = ""
    source_type: str = "import"
    source_id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    version: int = 1
    id: str | None = None  # kept when free (our own export), so lineage links survive
    is_deleted: bool = False
    deleted_at: datetime | None = None
    # Kept as the file says, a moment already past too: the memory arrives expired, and the
    # purge counts from that moment as it would have in the store it came from.
    expires_at: datetime | None = None
    # A purge's tombstone stays one: never recovered, its text "[purged]".
    purged_at: datetime | None = None
    # None: the inline linker's mentions (existing entities only), as at remember.
    mentions: list[Mention] | None = None
    history: list[HistoryEntry] = field(default_factory=list)
    origin: dict = field(default_factory=dict)  # what the file said beyond the row: the audit's
    # A line of another agent's sent to this one (`--agent`): the id it had in its file.
    copy_of: str | None = None


@dataclass(frozen=True)
class Outcome:
    line: int
    status: str  # DONE, DEDUPED or PURGED_HERE
    memory_id: str
    # Deduplicated by its id into a memory whose text is another (edited since the export, say):
    # the stored text was kept, the file's not taken.
    text_differs: bool = False
    relation: str = ""  # a relation's line (memory_id ""): the relation, in words
    unlinked: str = ""  # a relation's side naming an entity no memory mentions (not written)


DONE, DEDUPED = "imported", "deduped"
# A copy of a memory purged in this store: not written (it would bring the purged text back).
PURGED_HERE = "purged_here"
# A copy holding a text its original here no longer holds anywhere (redacted since): not written.
TEXT_GONE = "text_gone"


def _same(item: Incoming, present: dict[str, str], same: dict) -> str | None:
    """The stored memory this item is, if any: the one with its id; else for a live memory the
    agent's live memory with its text (the rule of remember and of the UNIQUE index); a
    forgotten one with no id, the agent's forgotten memory with its text (a forgotten memory
    with an id is that memory only: two forgotten rows may hold one text)."""
    if item.id and item.id in present:
        return item.id
    if item.is_deleted and item.id:
        return None
    return same.get((item.agent_id, item.text.hash, item.is_deleted))


def _originals(items: list[Incoming]) -> tuple[set[str], dict[str, set[str]]]:
    """Of the lines' originals sent to another agent: the ids of those purged here, and every
    text each other one here holds (its text, its earlier versions, its audits'). An old export
    imported `--agent other` after a purge or a redaction brought the erased texts back (QA)."""
    originals = [item.copy_of for item in items if item.copy_of]
    if not originals:
        return set(), {}
    rows = Memory.objects.filter(id__in=originals).values_list("id", "content", "purged_at")
    purged = {pk for pk, _, gone in rows if gone is not None}
    held = {pk: {content} for pk, content, gone in rows if gone is None}
    if held:
        for pk, content in MemoryCold.objects.filter(memory_id__in=held).values_list(
            "memory_id", "content"
        ):
            held[pk].add(content)
        for pk, old, new in MemoryHistory.objects.filter(memory_id__in=held).values_list(
            "memory_id", "old_content", "new_content"
        ):
            held[pk] |= {old, new}
    return purged, held


def _texts_of(item: Incoming) -> set[str]:
    """The texts a line brings: its own and its history's."""
    texts = {item.text.storage}
    for entry in item.history:
        texts |= {entry.old_content, entry.new_content}
    return texts - {None, ""}


def _lock(items: list[Incoming]) -> None:
    """Wait for other writers of the same texts (PostgreSQL), agent by agent in key order."""
    by_agent: dict[str, list[str]] = {}
    for item in items:
        by_agent.setdefault(item.agent_id, []).append(item.text.hash)
    for agent_id in sorted(by_agent, key=lambda agent: f"{agent}:"):
        lock_contents(agent_id, by_agent[agent_id])


def _stored(items: list[Incoming]) -> tuple[dict[str, str], dict[tuple[str, str, bool], str]]:
    """The ids of the batch already stored (-> their text's hash), and (agent, hash, deleted) ->
    a stored memory's id."""
    ids = [item.id for item in items if item.id]
    rows = Memory.objects.filter(id__in=ids).values_list("id", "content_hash") if ids else []
    present = dict(rows)
    wanted = {(item.agent_id, item.text.hash) for item in items}
    # By hash alone, the agent checked here: asked for (agent, hashes), SQLite's planner walked
    # the agent's whole (agent, live) index, every memory of the agent for each batch.
    hashes = sorted({content_hash for _, content_hash in wanted})
    rows = Memory.objects.filter(content_hash__in=hashes).values_list(
        "agent_id", "content_hash", "is_deleted", "id"
    )
    same: dict[tuple[str, str, bool], str] = {}
    for agent_id, content_hash, deleted, memory_id in sorted(rows, key=lambda row: row[3]):
        if (agent_id, content_hash) in wanted:
            same.setdefault((agent_id, content_hash, deleted), memory_id)
    return present, same


@dataclass
class Prepared:
    """An item's rows, built before the write: the memory (its id fresh, or the file's), its
    audits, and its mentions of the agent's existing entities the inline linker found (for an
    item whose file names no entities). Deduplicated inside the write, these go unused."""

    item: Incoming
    memory: Memory
    audits: list[MemoryHistory]
    linked: list[MemoryEntityMention]


def prepare(
    items: list[Incoming], *, actor: Actor, at, process: bool, metadata: dict
) -> list[Prepared]:
    """The rows of each item, made outside the write transaction so the write only decides and
    inserts (one read: the ids of the entities the inline linker names, as the job's write
    does; an entity removed in between fails the write on its foreign key, and the batch is
    retried). `process`: a live memory is marked for extraction (write_in_transaction queues
    its job); `metadata` goes into every import audit (the run, the file)."""
    rows = [(item, _row(item, actor=actor, at=at, process=process)) for item in items]
    names = {
        memory.id: {linker.canonical_name(n): n for n in linker.candidate_names(memory.content)}
        for item, memory in rows
        if item.mentions is None and not item.is_deleted
    }
    known = entity_ids([(memory, names[memory.id]) for _, memory in rows if memory.id in names])
    prepared = []
    for item, memory in rows:
        linked = [
            mention_row(
                memory.id, known[(memory.agent_id, canonical)], text, LINKED_CONFIDENCE, at=at
            )
            for canonical, text in names.get(memory.id, {}).items()
            if (memory.agent_id, canonical) in known
        ]
        prepared.append(Prepared(item, memory, _audits(memory, item, actor, at, metadata), linked))
    return prepared


def write_in_transaction(prepared: list[Prepared], *, at) -> list[Outcome]:
    """Write the batch inside the caller's transaction: each item is imported, or deduped to the
    memory already here (same id, or same agent and text). Memories marked for extraction
    (prepare's `process`) get a pending job each, handed to the queue after the commit."""
    if not prepared:
        return []
    items = [p.item for p in prepared]
    _lock(items)
    present, same = _stored(items)
    purged, held = _originals(items)
    outcomes: list[Outcome] = []
    new: list[Prepared] = []
    for one in prepared:
        item = one.item
        if item.copy_of in purged:
            outcomes.append(Outcome(item.line, PURGED_HERE, item.copy_of))
            continue
        if item.copy_of in held and not _texts_of(item) <= held[item.copy_of]:
            outcomes.append(Outcome(item.line, TEXT_GONE, item.copy_of))
            continue
        existing = _same(item, present, same)
        if existing is not None:
            differs = (
                existing == item.id
                and item.purged_at is None  # a tombstone's text is no one's
                and present[existing] not in ("", item.text.hash)  # "": purged, no text kept
            )
            outcomes.append(Outcome(item.line, DEDUPED, existing, text_differs=differs))
            continue
        present[one.memory.id] = item.text.hash
        same.setdefault((item.agent_id, item.text.hash, item.is_deleted), one.memory.id)
        new.append(one)
        outcomes.append(Outcome(item.line, DONE, one.memory.id))
    if not new:
        return outcomes
    insert_rows(Memory, [one.memory for one in new])
    _keep_free_history_ids(new)
    insert_rows(MemoryHistory, [row for one in new for row in one.audits])
    _mention(new, at=at)
    queued = [
        one.memory.id for one in new if one.memory.extraction_status == ExtractionStatus.PENDING
    ]
    if queued:
        jobs.create_many_in_transaction(queued, at=at)
    return outcomes


def _live(item: Incoming, at) -> bool:
    """Neither forgotten nor expired at `at` (what recall finds, and what a job extracts)."""
    return not item.is_deleted and (item.expires_at is None or item.expires_at > at)


def _row(item: Incoming, *, actor: Actor, at, process: bool) -> Memory:
    """The memory's row (memory_row), every column given: the file's id, times and version."""
    created = item.created_at or at
    memory = memory_row(
        item.text,
        actor=actor,
        at=at,
        id=item.id or new_id(),
        type=item.type,
        who=item.who,
        why=item.why,
        agent_id=item.agent_id,
        pinned=item.pinned,
        importance=item.importance,
        tags=item.tags,
        source_type=item.source_type,
        source_id=item.source_id,
        version=item.version,
        is_deleted=item.is_deleted,
        deleted_at=(item.deleted_at or at) if item.is_deleted else None,
        expires_at=item.expires_at,
        purged_at=item.purged_at,
        # Only a live memory is extracted: a job of a forgotten or expired one would be
        # cancelled, and the memory left "pending" for good.
        extraction_status=(
            ExtractionStatus.PENDING if process and _live(item, at) else ExtractionStatus.NONE
        ),
        extraction_model=None,
        embedding_model=None,
        asserted_by=Authority.IMPORT,
    )
    memory.created_at, memory.updated_at = created, item.updated_at or created
    if item.purged_at is not None:  # the row a purge leaves (memory.erasure_rows)
        memory.normalized_content, memory.content_hash = PURGED, ""
    return memory


def _audits(memory: Memory, item: Incoming, actor: Actor, at, metadata: dict) -> list:
    """The file's history of the memory (as it was), then the import's own audit."""
    rows = [
        history_row(
            memory.id,
            entry.event,
            actor=Actor(entry.changed_by, entry.actor_type),
            reason=entry.reason,
            old_content=entry.old_content,
            new_content=entry.new_content,
            metadata=entry.metadata,
            at=entry.created_at,
        )
        for entry in item.history
    ]
    rows.append(
        history_row(
            memory.id,
            IMPORTED if item.history else CREATED,
            actor=actor,
            reason="import",
            new_content=memory.content,
            metadata={**item.origin, "import": {**metadata, "line": item.line}},
            at=at,
        )
    )
    return rows


def _keep_free_history_ids(new: list[Prepared]) -> None:
    """The file's history rows keep their ids unless a stored row (or an earlier one of the
    batch) has taken one; the builders gave every row a fresh id to fall back on."""
    wanted = [entry.id for one in new for entry in one.item.history if entry.id]
    if not wanted:
        return
    taken = set(MemoryHistory.objects.filter(id__in=wanted).values_list("id", flat=True))
    for one in new:
        # The file's rows first, then the import's own audit (which keeps its fresh id).
        for entry, row in zip(one.item.history, one.audits, strict=False):
            if entry.id and entry.id not in taken:
                row.id = entry.id
                taken.add(entry.id)


def _mention(new: list[Prepared], *, at) -> None:
    """The inline linker's mentions made by prepare, and the file's own (an entity the agent has
    no row for is created): all counted in one pass over the entity rows, in id order."""
    named_by_agent: dict[str, dict[str, tuple[str, str]]] = {}
    for one in new:
        for mention in _named(one.item):
            named_by_agent.setdefault(one.memory.agent_id, {}).setdefault(
                linker.canonical_name(mention.name),
                (" ".join(mention.name.split()), mention.type or "unknown"),
            )
    ids: dict[tuple[str, str], int] = {}
    retyped: dict[int, str] = {}
    for agent_id in sorted(named_by_agent):
        found, types = upsert_named_entities(agent_id, named_by_agent[agent_id], at)
        ids.update({(agent_id, canonical): pk for canonical, pk in found.items()})
        retyped.update(types)
    rows = []
    for one in new:
        rows += one.linked
        seen: set[int] = set()
        for mention in _named(one.item):
            pk = ids[(one.memory.agent_id, linker.canonical_name(mention.name))]
            if pk not in seen:
                seen.add(pk)
                rows.append(mention_row(one.memory.id, pk, mention.text, mention.confidence, at=at))
    write_mentions(rows, at=at, retyped=retyped)


def _named(item: Incoming) -> list[Mention]:
    """The file's mentions of the item that name someone: not a name an erasure left
    (`[redacted:pii]` stands for different people; linking by it would join them, as
    memory.graph refuses for a remember's triples)."""
    return [m for m in item.mentions or [] if not linker.is_erasure_marker(m.name)]
