"""A redaction's side in the store: a span of sensitive text replaced by `[redacted:<kind>]` in
memories' own rows (content, its normalized form and hash, why, tags), each change a version
with a `redacted` audit that names who, why and the kind, never the span or a hash of it; and
the vectors of the texts that held it dropped. Copies elsewhere are scrubbed with the pieces of
memory.erasure and memory.erasure_rows (the PLACES table). Nothing here opens a transaction or
calls a model: pipeline.writes.redact holds the transaction, pipeline.redaction decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory import keyword
from memory.batch import history_row, insert_rows
from memory.content import hashes_ever, normalize
from memory.erasure import PURGED, Texts, scrub
from memory.erasure_rows import TEXT_EVENTS, TYPE_CHARS, _drop_vectors
from memory.models import Embedding, Memory, MemoryCold, MemoryHistory, lock_rows
from memory.refused import Refused

# The version compare-and-set of every memory change has one owner (memory.writes).
from memory.writes import Actor, _set_at_version, _set_content_at_version, active_duplicate

REDACTED_EVENT = "redacted"
MARKER_PREFIX = "[redacted:"


def marker(kind: str) -> str:
    """What a redacted span reads as: `[redacted:password]`."""
    return f"{MARKER_PREFIX}{kind}]"


@dataclass
class Changed:
    """One memory a redaction rewrote: its new version and, when its new text is the text of
    another active memory of its agent, that memory (it is then soft-deleted as a duplicate)."""

    memory_id: str
    version: int
    old_version: int
    old_hash: str
    duplicate_of: str | None = None
    event: str = ""  # the id of its `redacted` audit


def holding(memory_ids, texts: Texts) -> list[str]:
    """The memories among these (not purged) whose content or the writer's free text (why,
    tags, sourceId, who, type: _rewrite scrubs them all) hold one of the texts."""
    rows = Memory.objects.filter(id__in=memory_ids, purged_at__isnull=True).values_list(
        "id", "content", "why", "tags", "source_id", "who", "type"
    )
    return sorted(pk for pk, *values in rows if any(texts.held_in(v) for v in values))


def redacted_text(memory: Memory, texts: Texts, replacement: str) -> str:
    """The memory's content with every copy of the texts replaced (what the preview shows)."""
    return normalize(scrub(memory.content, texts, replacement)).storage


def duplicate_after(memory: Memory, texts: Texts, replacement: str) -> str | None:
    """The active memory of the same agent whose text this one's redacted text would equal."""
    if memory.is_deleted:
        return None
    text = normalize(scrub(memory.content, texts, replacement))
    found = active_duplicate(memory.agent_id, text.hash, exclude_id=memory.id)
    return found.id if found else None


def redact_memories_in_transaction(
    memory_ids: list[str],
    texts: Texts,
    replacement: str,
    *,
    actor: Actor,
    reason: str,
    metadata: dict,
    at,
) -> list[Changed]:
    """Rewrite these memories (locked in id order, rewritten in the order given) with every copy
    of the texts replaced; each gets version + 1 and a `redacted` audit (`metadata` plus its
    version, and `duplicateOfMemoryId` when it became another active memory's exact text: the
    partial UNIQUE (agent, hash) then keeps the memory that had the text, and this one is
    soft-deleted beside it)."""
    if (locking := lock_rows(Memory, memory_ids)) is not None:
        locking.all()
    changed, audits = [], []
    memories = Memory.objects.in_bulk(memory_ids)
    # In the order given (the memory the reviewer asked about first): of two that become the
    # same text, the first keeps it.
    for memory in [memories[pk] for pk in memory_ids if pk in memories]:
        if memory.is_purged:
            continue
        old_version, old_hash = memory.version, memory.content_hash
        duplicate = _rewrite(memory, texts, replacement, actor=actor, at=at)
        details = {**metadata, "version": memory.version}
        if duplicate:
            details.update(duplicateOfMemoryId=duplicate, deleted=True)
        audit = history_row(
            memory.id, REDACTED_EVENT, actor=actor, reason=reason, metadata=details, at=at
        )
        audits.append(audit)
        changed.append(
            Changed(memory.id, memory.version, old_version, old_hash, duplicate, audit.id)
        )
    insert_rows(MemoryHistory, audits)
    return changed


def _rewrite(memory: Memory, texts: Texts, replacement: str, *, actor: Actor, at) -> str | None:
    """One memory's rewrite at its version; returns the duplicate it became, if any."""
    text = normalize(scrub(memory.content, texts, replacement))
    columns = {
        "content": text.storage,
        "normalized_content": text.normalized,
        "content_hash": text.hash,
        "why": scrub(memory.why, texts, replacement),
        "tags": scrub(memory.tags, texts, replacement),
        # The writer's own free text too (a QA pass found the span left in sourceId, where no
        # later redaction could find it: its span must be in the content).
        "source_id": scrub(memory.source_id, texts, replacement),
        "who": scrub(memory.who, texts, replacement),
        "type": scrub(memory.type, texts, replacement)[:TYPE_CHARS],
        # A vector of the new text may exist (another memory's); else it is embedded after commit.
        "embedding_model": Embedding.objects.filter(content_hash=text.hash)
        .values_list("model", flat=True)
        .first(),
    }
    if memory.is_deleted:
        _set_at_version(memory, deleted=True, doing="redacted", actor=actor, at=at, **columns)
        return None
    duplicate = active_duplicate(memory.agent_id, text.hash, exclude_id=memory.id)
    if duplicate is None:
        try:
            _set_content_at_version(memory, actor=actor, at=at, **columns)
            return None
        except Refused as refused:  # a writer of the same text won the race (PostgreSQL)
            if refused.code != "duplicate_content_hash":
                raise
            duplicate = active_duplicate(memory.agent_id, text.hash, exclude_id=memory.id)
    columns.update(is_deleted=True, deleted_at=at)
    _set_at_version(memory, deleted=False, doing="redacted", actor=actor, at=at, **columns)
    return duplicate.id


def old_hashes(memory_ids: list[str], texts: Texts, current: list[str]) -> set[str]:
    """Hashes of every version of these memories that held the texts (current ones given: read
    before the rewrite), from their cold copies and their change audits."""
    hashes = set(current)
    for start in range(0, len(memory_ids), 500):
        ids = memory_ids[start : start + 500]
        versions = list(
            MemoryCold.objects.filter(memory_id__in=ids).values_list("content", flat=True)
        )
        for old, new in MemoryHistory.objects.filter(
            memory_id__in=ids, event__in=TEXT_EVENTS
        ).values_list("old_content", "new_content"):
            versions += [old, new]
        hashes |= {
            digest
            for v in versions
            if v and v != PURGED and texts.held_in(v)
            for digest in hashes_ever(v)
        }
    return hashes


def stale_vectors(hashes: set[str]) -> list[tuple[int, str, int]]:
    """(id, model, dimensions) of the vectors of these texts that no memory holds any more (call
    after the rewrite: a memory not redacted that still has such a text keeps its vector)."""
    kept = set(
        Memory.objects.filter(content_hash__in=hashes).values_list("content_hash", flat=True)
    )
    return list(
        Embedding.objects.filter(content_hash__in=hashes - kept)
        .order_by("id")
        .values_list("id", "model", "dimensions")
    )


def drop_vectors_in_transaction(embeddings: list[tuple[int, str, int]]) -> None:
    """The vectors of texts that held the span: out of the index, then deleted."""
    _drop_vectors([pk for pk, _, _ in embeddings])


def leftovers(changed: list[Changed], texts: Texts) -> list[tuple[str, int]]:
    """(where, count): redacted memories the full-text index still finds by a word of the span
    that their new text does not hold, and dropped vectors still stored."""
    found = 0
    rows = Memory.objects.filter(id__in=[c.memory_id for c in changed]).values_list("id", "content")
    for pk, content in rows:
        found += keyword.still_indexed([pk], list(texts.needles), but=content)
    return [("memories_fts", found)] if found else []
