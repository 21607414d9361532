"""Data: every memory's normalized_content and content_hash recomputed with today's normalisation
(memory.content: visible text, NFC), embeddings re-keyed to the new hash, and active memories of one
agent that now share a hash merged by the dedupe rule: the oldest stays, each later one is
soft-deleted as the forget path does it (cold copy, version +1, pending jobs cancelled, a "deleted"
audit by the system saying why). Reads in chunks; running it again changes nothing."""

from django.db import migrations
from django.forms.models import model_to_dict
from django.utils import timezone

from memory.content import normalize

CHUNK = 500
ACTOR = "system"  # changed_by / updated_by of the merge; actor_type "system"
ARCHIVE_REASON = "deduplicated"
# A parked row holds no real hash (64 hex digits), so it blocks no other row's slot (see _settle).
PARKED = "rehash-pending-"


def _models(apps):
    return {
        name: apps.get_model("memory", name)
        for name in ("Memory", "MemoryHistory", "MemoryCold", "Embedding", "Job")
    }


def _forget_duplicate(
    m, duplicate, keeper, *, old_hash: str, new_hash: str, at, kept: str = "the oldest copy is kept"
) -> None:
    """Soft-delete `duplicate` the way memory.writes.forget_in_transaction does, by the system."""
    row = model_to_dict(duplicate)
    row.update(id=duplicate.id, created_at=duplicate.created_at, updated_at=duplicate.updated_at)
    m["MemoryCold"].objects.create(
        memory_id=duplicate.id,
        content=duplicate.content,
        normalized_content=duplicate.normalized_content,
        content_hash=old_hash,
        type=duplicate.type,
        who=duplicate.who,
        why=duplicate.why,
        agent_id=duplicate.agent_id,
        pinned=duplicate.pinned,
        importance=duplicate.importance,
        tags=duplicate.tags,
        source_type=duplicate.source_type,
        source_id=duplicate.source_id,
        version=duplicate.version,
        extraction_status=duplicate.extraction_status,
        extraction_model=duplicate.extraction_model,
        embedding_model=duplicate.embedding_model,
        original_created_at=duplicate.created_at,
        original_row_json={
            key: (value.isoformat() if hasattr(value, "isoformat") else value)
            for key, value in {**row, "content_hash": old_hash}.items()
        },
        archived_reason=ARCHIVE_REASON,
        archived_at=at,
    )
    version = duplicate.version + 1
    m["Memory"].objects.filter(id=duplicate.id).update(
        is_deleted=True, deleted_at=at, version=version, updated_at=at, updated_by=ACTOR
    )
    cancelled = (
        m["Job"]
        .objects.filter(memory_id=duplicate.id, status="pending")
        .update(status="cancelled", error="source memory was forgotten", updated_at=at)
    )
    m["MemoryHistory"].objects.create(
        memory_id=duplicate.id,
        event="deleted",
        old_content=duplicate.content,
        new_content=None,
        changed_by=ACTOR,
        actor_type="system",
        reason=(
            f"duplicate of memory {keeper.id} once content hashes were recomputed "
            f"(normalisation upgrade): {kept}"
        ),
        metadata={
            "force": True,
            "ifVersion": None,
            "version": version,
            "cancelledJobs": cancelled,
            "duplicateOf": keeper.id,
            "oldContentHash": old_hash,
            "contentHash": new_hash,
        },
        created_at=at,
    )
    duplicate.is_deleted = True


def _rekey_embedding(m, old_hash: str, new_hash: str) -> None:
    # One vector per hash: the old one moves to the new hash unless the new hash already has one
    # (then the old row is left unreferenced, as an edit leaves it).
    embeddings = m["Embedding"].objects
    if old_hash != new_hash and not embeddings.filter(content_hash=new_hash).exists():
        embeddings.filter(content_hash=old_hash).update(content_hash=new_hash)


def _oldest_first(row):
    return (row.created_at, row.id)


_oldest_first.kept = "the oldest copy is kept"  # what the merge's audit says of its rule


def _settle(m, memory, stats: dict, at, keeper_first=_oldest_first) -> None:
    """Give `memory` its recomputed hash, merging it with the active same-hash memory of its agent
    (the one that sorts first by `keeper_first` stays: the oldest here; 0015 passes its own)."""
    new = normalize(memory.content)
    old_hash = memory.content_hash
    if old_hash == new.hash and memory.normalized_content == new.normalized:
        return
    memories = m["Memory"].objects
    while not memory.is_deleted:
        holder = (
            memories.filter(agent_id=memory.agent_id, content_hash=new.hash, is_deleted=False)
            .exclude(id=memory.id)
            .first()
        )
        if holder is None:
            break
        if normalize(holder.content).hash != new.hash:
            # The holder moves away itself: park this row first, so no chain of moves can come back
            # to a slot that a row in progress still holds, then settle the holder.
            memories.filter(id=memory.id).update(content_hash=PARKED + memory.id)
            _settle(m, holder, stats, at, keeper_first)
            continue
        keeper, duplicate = sorted((memory, holder), key=keeper_first)
        _forget_duplicate(
            m,
            duplicate,
            keeper,
            old_hash=old_hash if duplicate is memory else duplicate.content_hash,
            new_hash=new.hash,
            at=at,
            kept=keeper_first.kept,
        )
        stats["merged"] += 1
    memories.filter(id=memory.id).update(normalized_content=new.normalized, content_hash=new.hash)
    _rekey_embedding(m, old_hash, new.hash)
    stats["rehashed"] += 1


def recompute_content_hashes(apps, schema_editor=None) -> dict:
    """Recompute every memory's hash in id order, CHUNK rows at a time; returns the counts."""
    return rehash(apps, {}, _oldest_first)


def rehash(apps, only: dict, keeper_first) -> dict:
    """Settle every memory matching `only` (filter keywords) whose stored normalized content or
    hash is not today's, in id order, CHUNK rows at a time, keeping of two the one that sorts
    first by `keeper_first` (0015 reruns it on its own terms)."""
    m = _models(apps)
    stats = {"rehashed": 0, "merged": 0}
    at = timezone.now()
    last = ""
    while True:
        chunk = list(
            m["Memory"]
            .objects.filter(id__gt=last, **only)
            .order_by("id")
            .values_list("id", "content", "normalized_content", "content_hash")[:CHUNK]
        )
        if not chunk:
            return stats
        last = chunk[-1][0]
        for memory_id, content, normalized, content_hash in chunk:
            new = normalize(content)
            if content_hash == new.hash and normalized == new.normalized:
                continue  # the common case costs no query
            # Read again: an earlier row's merge or move may have changed this one.
            memory = m["Memory"].objects.get(id=memory_id)
            _settle(m, memory, stats, at, keeper_first)


class Migration(migrations.Migration):
    dependencies = [("memory", "0007_drop_like_indexes")]

    operations = [migrations.RunPython(recompute_content_hashes, migrations.RunPython.noop)]
