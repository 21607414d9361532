"""Migrations run forward and back, creating and dropping the keyword and vector indexes of the
engine under test (SQLite: FTS5 and vec0; PostgreSQL: a tsvector GIN index and pgvector HNSW)."""

import pytest
from django.core.management import call_command
from django.db import connection


def _tables():
    """Names of tables, triggers and indexes."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                "UNION SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
            )
        else:
            cursor.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')")
        return {row[0] for row in cursor.fetchall()}


def _search_indexes():
    if connection.vendor == "postgresql":
        return {"memories_search_vector", "embeddings_embedding_hnsw"}
    return {"memories_fts", "vec_embeddings", "memories_fts_au"}


@pytest.mark.slow  # every migration, down and up again
@pytest.mark.django_db(transaction=True)
def test_it_migrates_back_to_zero_and_forward_again():
    assert {"memories", "memory_jobs", *_search_indexes()} <= _tables()
    call_command("migrate", "pipeline", "zero", verbosity=0)
    call_command("migrate", "memory", "zero", verbosity=0)
    assert not {"memories", *_search_indexes()} & _tables()
    call_command("migrate", verbosity=0)
    assert {"memories", "pipeline_proposals", *_search_indexes()} <= _tables()
    from pipeline.models import PipelineConfig

    config = PipelineConfig.objects.get(pk=1)  # written by the data migration: shadow mode
    assert config.enabled and config.shadow_mode and not config.allow_update_delete


@pytest.mark.django_db(transaction=True)
def test_it_has_no_model_changes_missing_a_migration():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def _old_normalisation(text):
    """The normalisation stores were written with before visible text and NFC (the first
    memory.content): lowercase storage content minus a trailing .,!?;: run, and its SHA-256."""
    import hashlib
    import re

    storage = re.sub(r"\s+", " ", text).strip()
    normalized = re.sub(r"[.,!?;:]+$", "", storage.lower()).strip() or storage.lower()
    return normalized, hashlib.sha256(normalized.encode("utf-8")).hexdigest()


def _old_style(text, *, agent_id="default", minutes=0, deleted=False, pinned=False):
    """A memory as an old store holds it: written now, then given its old normalisation's hash."""
    from datetime import timedelta

    from django.utils import timezone

    from memory import writes
    from memory.models import Memory

    row = writes.remember(
        f"placeholder {agent_id} {minutes} {text}",
        actor=writes.Actor("agent-a", "agent"),
        agent_id=agent_id,
        pinned=pinned,
    ).memory
    normalized, old_hash = _old_normalisation(text)
    at = timezone.now() - timedelta(days=1) + timedelta(minutes=minutes)
    Memory.objects.filter(id=row.id).update(
        content=text,
        normalized_content=normalized,
        content_hash=old_hash,
        created_at=at,
        is_deleted=deleted,
        deleted_at=at if deleted else None,
    )
    return Memory.objects.get(id=row.id)


def _recompute(chunk=None, monkeypatch=None):
    import importlib

    from django.apps import apps

    module = importlib.import_module("memory.migrations.0008_recompute_content_hashes")
    if chunk:
        monkeypatch.setattr(module, "CHUNK", chunk)
    return module.recompute_content_hashes(apps, None)


@pytest.mark.django_db
def test_old_hashes_are_recomputed_and_true_duplicates_merged_oldest_kept(monkeypatch):
    from memory.content import normalize
    from memory.models import Embedding, Job, Memory, MemoryCold, MemoryHistory

    visible = "Café opens at nine on Mondays."
    nfc = _old_style(visible, minutes=0)
    nfd = _old_style("Cafe\u0301 opens at nine on Mondays.", minutes=1)
    zwsp = _old_style("Café opens at\u200b nine on Mondays", minutes=2)
    bom = _old_style("\ufeffCAFÉ opens at nine on Mondays!", minutes=3, pinned=True)
    other_agent = _old_style("Cafe\u0301 opens at nine on Mondays.", agent_id="other", minutes=4)
    gone = _old_style("Cafe\u0301 opens at nine on Mondays", minutes=5, deleted=True)
    # An older hidden-character copy and a newer copy already at the new hash: the older stays.
    older_zw = _old_style("Ship\u200b it on Fridays", minutes=6)
    newer_plain = writes_remember("Ship it on Fridays")
    target = normalize(visible).hash
    assert len({nfc.content_hash, nfd.content_hash, zwsp.content_hash, bom.content_hash}) == 4
    Embedding.objects.create(
        content_hash=nfd.content_hash,
        vector=b"\0" * 16,
        dimensions=4,
        model="m",
        source_memory_id=nfd.id,
        created_at=nfd.created_at,
    )
    pending = Job.objects.filter(memory_id=nfd.id, status="pending").count()
    assert pending == 1

    stats = _recompute(chunk=2, monkeypatch=monkeypatch)  # chunks of two: every boundary crossed

    rows = {m.id: m for m in Memory.objects.all()}
    assert {rows[i].content_hash for i in (nfc.id, nfd.id, zwsp.id, bom.id)} == {target}
    assert {rows[i].normalized_content for i in (nfc.id, nfd.id, zwsp.id, bom.id)} == {
        normalize(visible).normalized
    }
    assert not rows[nfc.id].is_deleted  # the oldest copy is kept
    assert all(rows[i].is_deleted for i in (nfd.id, zwsp.id, bom.id))
    assert rows[nfd.id].version == nfd.version + 1 and rows[nfd.id].updated_by == "system"
    assert rows[other_agent.id].content_hash == target and not rows[other_agent.id].is_deleted
    assert rows[gone.id].content_hash == target and rows[gone.id].is_deleted
    assert not rows[older_zw.id].is_deleted and rows[newer_plain.id].is_deleted
    assert rows[older_zw.id].content_hash == rows[newer_plain.id].content_hash
    assert stats == {"rehashed": 6, "merged": 4}  # the NFC and plain copies were right

    audits = MemoryHistory.objects.filter(event="deleted", actor_type="system")
    assert sorted(a.memory_id for a in audits) == sorted([nfd.id, zwsp.id, bom.id, newer_plain.id])
    audit = audits.get(memory_id=nfd.id)
    assert audit.changed_by == "system" and nfc.id in audit.reason and "duplicate" in audit.reason
    assert audit.metadata["duplicateOf"] == nfc.id and audit.metadata["contentHash"] == target
    assert audit.metadata["oldContentHash"] == nfd.content_hash
    assert audit.metadata["cancelledJobs"] == 1 and audit.old_content == nfd.content
    assert MemoryCold.objects.get(memory_id=nfd.id).archived_reason == "deduplicated"
    assert not Job.objects.filter(memory_id=nfd.id, status="pending").exists()
    assert Embedding.objects.get(source_memory_id=nfd.id).content_hash == target  # re-keyed
    assert (
        not MemoryHistory.objects.filter(memory_id__in=[nfc.id, other_agent.id, gone.id])
        .filter(event="deleted")
        .exists()
    )

    assert _recompute() == {"rehashed": 0, "merged": 0}  # a second run finds nothing to do


def writes_remember(text):
    from memory import writes

    return writes.remember(text, actor=writes.Actor("agent-a", "agent")).memory


@pytest.mark.django_db
def test_two_memories_holding_each_others_new_hash_swap_without_a_merge():
    from memory.content import normalize
    from memory.models import Memory, MemoryHistory

    first = writes_remember("Kettle\u200b on at four")
    second = writes_remember("Tea time at four")
    # Wrong hashes that cross: each row holds the slot the other one must move to.
    Memory.objects.filter(id=first.id).update(content_hash="x")
    Memory.objects.filter(id=second.id).update(content_hash=normalize(first.content).hash)
    Memory.objects.filter(id=first.id).update(content_hash=normalize(second.content).hash)

    assert _recompute() == {"rehashed": 2, "merged": 0}

    for row in (first, second):
        stored = Memory.objects.get(id=row.id)
        assert stored.content_hash == normalize(row.content).hash and not stored.is_deleted
    assert not MemoryHistory.objects.filter(event="deleted").exists()


def _previous_hash(text):
    """The hash of the release before 0015: visible text (no zero-width or bidi characters, NFC)
    with controls, variation selectors and blank fillers kept."""
    import hashlib
    import re

    from memory.content import visible_text

    comparable = re.sub(r"\s+", " ", visible_text(text)).strip().lower()
    normalized = re.sub(r"[.,!?;:]+$", "", comparable).strip() or comparable
    return normalized, hashlib.sha256(normalized.encode("utf-8")).hexdigest()


def _as_before_0015(text, *, minutes):
    from datetime import timedelta

    from django.utils import timezone

    from memory.models import Memory

    row = writes_remember(f"placeholder {minutes} {text}")
    normalized, old_hash = _previous_hash(text)
    at = timezone.now() - timedelta(days=1) + timedelta(minutes=minutes)
    Memory.objects.filter(id=row.id).update(
        content=text, normalized_content=normalized, content_hash=old_hash, created_at=at
    )
    return Memory.objects.get(id=row.id)


@pytest.mark.django_db
def test_texts_padded_with_blank_characters_are_rehashed_and_dedupe_into_their_visible_words():
    import importlib

    from django.apps import apps

    from memory import writes
    from memory.content import normalize
    from memory.erasure import PURGED
    from memory.models import Memory
    from pipeline import purge

    plain = _as_before_0015("The deploy window opens at nine", minutes=0)
    padded = _as_before_0015("The deploy window opens at nine\u2800\u3164", minutes=1)
    emoji = _as_before_0015("Ship it on Fridays \u2764\ufe0f", minutes=2)
    leaked = writes_remember("The staging password is hunter2-prod-77")
    purge.purge(
        purge.Request(purge.Scope.MEMORY, memory_id=leaked.id),
        reason="a leaked password",
        actor=writes.Actor("ops", "operator"),
    )
    assert padded.content_hash != plain.content_hash  # what let the padded copy in

    module = importlib.import_module("memory.migrations.0015_rehash_blank_characters")
    stats = module.rehash_blank_characters(apps, None)

    rows = {m.id: m for m in Memory.objects.all()}
    assert rows[padded.id].content_hash == rows[plain.id].content_hash
    assert rows[padded.id].is_deleted and not rows[plain.id].is_deleted  # the oldest is kept
    assert rows[emoji.id].content_hash == normalize("Ship it on Fridays \u2764").hash
    assert (rows[leaked.id].content, rows[leaked.id].content_hash) == (PURGED, "")
    assert stats == {"rehashed": 2, "merged": 1}
    assert module.rehash_blank_characters(apps, None) == {"rehashed": 0, "merged": 0}
    # And from now on a remember padded so is the memory already there.
    again = writes.remember(
        "The deploy window opens at nine\u0001\ufe0f", actor=writes.Actor("agent-a", "agent")
    )
    assert again.deduped and again.memory.id == plain.id


@pytest.mark.django_db
def test_the_blank_character_rehash_keeps_the_live_pinned_copy_not_an_older_expired_one():
    import importlib

    from django.apps import apps
    from django.utils import timezone

    from memory.models import Memory

    expired = _as_before_0015("Ship it on Fridays \u2764", minutes=0)
    pinned = _as_before_0015("Ship it on Fridays \u2764\ufe0f", minutes=1)
    Memory.objects.filter(id=expired.id).update(expires_at=timezone.now())
    Memory.objects.filter(id=pinned.id).update(pinned=True, asserted_by="person")

    module = importlib.import_module("memory.migrations.0015_rehash_blank_characters")
    assert module.rehash_blank_characters(apps, None) == {"rehashed": 1, "merged": 1}

    kept, gone = Memory.objects.get(id=pinned.id), Memory.objects.get(id=expired.id)
    assert not kept.is_deleted and kept.pinned  # what recall finds stays
    assert gone.is_deleted and kept.content_hash == gone.content_hash


@pytest.mark.django_db(transaction=True)
def test_a_purge_erases_a_vector_an_old_version_left_under_its_hash_before_0015():
    from django.utils import timezone

    from memory import writes
    from memory.models import Embedding
    from pipeline import purge

    first = "Ship it on Fridays \u2764\ufe0f tango-lima-42"
    memory = writes_remember(first)
    _, old_hash = _previous_hash(first)
    Embedding.objects.create(
        content_hash=old_hash,
        vector=b"\0" * 16,
        dimensions=4,
        model="m",
        source_memory_id=memory.id,
        created_at=timezone.now(),
    )
    writes.modify(
        memory.id,
        {"content": "Ship it on Fridays"},
        actor=writes.Actor("r", "operator"),
        reason="x",
    )
    receipt = purge.purge(
        purge.Request(purge.Scope.MEMORY, memory_id=memory.id),
        reason="a code name",
        actor=writes.Actor("ops", "operator"),
    )
    assert receipt.verified
    assert not Embedding.objects.filter(content_hash=old_hash).exists()


@pytest.mark.django_db
def test_the_blank_character_rehash_says_its_own_rule_in_the_merge_audit():
    import importlib

    from django.apps import apps
    from django.utils import timezone

    from memory.models import Memory, MemoryHistory

    expired = _as_before_0015("Ship it on Fridays \u2764", minutes=0)
    kept = _as_before_0015("Ship it on Fridays \u2764\ufe0f", minutes=1)
    Memory.objects.filter(id=expired.id).update(expires_at=timezone.now())
    module = importlib.import_module("memory.migrations.0015_rehash_blank_characters")
    module.rehash_blank_characters(apps, None)
    audit = MemoryHistory.objects.get(memory_id=expired.id, event="deleted")
    assert kept.id in audit.reason and "the copy recall finds is kept" in audit.reason
    assert "oldest copy is kept" not in audit.reason


@pytest.mark.django_db
def test_padded_and_blank_memory_types_are_tidied_as_remember_now_stores_them():
    import importlib

    from django.apps import apps

    from memory.models import Memory
    from memory.writes import Actor, remember

    writer = Actor("agent-one", "agent")
    stored = {
        kind: remember(f"A note typed {n}", actor=writer, create_job=False).memory.id
        for n, kind in enumerate([" decision ", "\u3164", "", "decision", "preference\t"])
    }
    for kind, memory_id in stored.items():
        Memory.objects.filter(id=memory_id).update(type=kind)  # as an older release stored them
    module = importlib.import_module("memory.migrations.0017_tidy_memory_types")
    assert module.tidy_types(apps) == {
        "": "fact",
        " decision ": "decision",
        "preference\t": "preference",
        "\u3164": "fact",
    }
    kinds = dict(Memory.objects.values_list("id", "type"))
    assert [kinds[stored[k]] for k in stored] == [
        "decision",
        "fact",
        "fact",
        "decision",
        "preference",
    ]
    assert module.tidy_types(apps) == {}
