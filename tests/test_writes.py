"""Write paths: remember, modify, forget, recover and the cold archive, each audited."""

from datetime import timedelta

import numpy as np
import pytest
from django.db import connection
from django.utils import timezone

from memory import writes
from memory.batch import entity_ids
from memory.models import (
    Embedding,
    Entity,
    Job,
    Memory,
    MemoryCold,
    MemoryEntityMention,
    MemoryHistory,
)
from memory.writes import Actor, Refused, Triple, Vector
from pipeline.llm.offline import OfflineEmbedder

pytestmark = pytest.mark.django_db
AGENT = Actor("claude-code", "agent")
OPERATOR = Actor("dana", "operator")
PIPELINE = Actor("pipeline-v2", "pipeline")


def remember(text, **kw):
    return writes.remember(text, actor=AGENT, **kw)


def fts_ids(query):
    """Ids the engine's full-text index holds for one quoted word (read straight from the index)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id FROM memories WHERE search_vector @@ plainto_tsquery('english', %s)",
                [query.strip('"')],
            )
            return {row[0] for row in cursor.fetchall()}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT m.id FROM memories_fts JOIN memories m ON m.rowid = memories_fts.rowid WHERE memories_fts MATCH %s",
            [query],
        )
        return {row[0] for row in cursor.fetchall()}


def test_it_remembers_raw_first_with_fts_audit_and_a_pending_job(
    django_capture_on_commit_callbacks,
):
    with django_capture_on_commit_callbacks() as callbacks:
        result = remember("  Priya prefers   squash merges. ", who="cursor", tags=["git"])
    memory = result.memory
    assert memory.content == "Priya prefers squash merges."
    assert memory.normalized_content == "priya prefers squash merges"
    assert memory.extraction_status == "pending"
    assert fts_ids('"squash"') == {memory.id}
    history = list(MemoryHistory.objects.filter(memory=memory))
    assert [h.event for h in history] == ["created"]
    assert history[0].actor_type == "agent"
    assert result.job.status == "pending"
    assert len(callbacks) == 1  # the hand-off to django-q2 runs only after commit


def test_it_dedupes_an_exact_duplicate_per_agent_and_not_across_agents():
    first = remember("Priya prefers squash merges.")
    again = remember("priya prefers SQUASH merges")
    other_agent = remember("Priya prefers squash merges.", agent_id="ops-bot")
    assert again.deduped and again.memory.id == first.memory.id and again.job is None
    assert not other_agent.deduped
    assert Memory.objects.count() == 2
    assert Job.objects.count() == 2


def test_the_database_enforces_one_active_hash_per_agent():
    from django.db import IntegrityError, transaction

    first = remember("Redis is the cache").memory
    with pytest.raises(IntegrityError), transaction.atomic():
        Memory.objects.create(
            content="x",
            normalized_content=first.normalized_content,
            content_hash=first.content_hash,
            created_at=timezone.now(),
            updated_at=timezone.now(),
        )


def test_modify_requires_a_reason_checks_the_version_and_archives_the_old_row():
    memory = remember("Billing uses Postgres 14").memory
    with pytest.raises(Refused) as missing:
        writes.modify(
            memory.id, {"content": "Billing uses Postgres 16"}, actor=OPERATOR, reason=" "
        )
    assert missing.value.code == "reason_required"
    with pytest.raises(Refused) as conflict:
        writes.modify(
            memory.id,
            {"content": "Billing uses Postgres 16"},
            actor=OPERATOR,
            reason="upgrade",
            if_version=7,
        )
    assert (
        conflict.value.code == "version_conflict" and conflict.value.details["currentVersion"] == 1
    )
    updated = writes.modify(
        memory.id,
        {"content": "Billing uses Postgres 16"},
        actor=OPERATOR,
        reason="upgrade",
        if_version=1,
    )
    assert updated.version == 2 and updated.content == "Billing uses Postgres 16"
    snapshot = MemoryCold.objects.get(memory=memory)
    assert snapshot.content == "Billing uses Postgres 14" and snapshot.version == 1
    assert snapshot.original_row_json["content"] == "Billing uses Postgres 14"
    event = MemoryHistory.objects.filter(memory=memory, event="updated").get()
    assert (event.old_content, event.new_content, event.reason) == (
        "Billing uses Postgres 14",
        "Billing uses Postgres 16",
        "upgrade",
    )
    assert fts_ids('"16"') == {memory.id} and fts_ids('"14"') == set()


def test_a_change_of_other_fields_keeps_their_values_before_and_after_in_its_audit(viewer_client):
    """Found by a QA pass: a pin and an unpin read the same ("changedFields pinned"), and the
    tags, type or importance a change replaced were lost (no copy of the row is archived)."""
    from datetime import UTC, datetime

    memory = remember("Billing uses Postgres 14").memory
    writes.modify(memory.id, {"pinned": True}, actor=OPERATOR, reason="keep")
    writes.modify(memory.id, {"pinned": False, "tags": ["infra"]}, actor=OPERATOR, reason="drop")
    moment = datetime(2099, 1, 31, tzinfo=UTC)
    writes.modify(memory.id, {"importance": 0.9, "type": "decision"}, actor=OPERATOR, reason="x")
    writes.modify(memory.id, {"expires_at": moment}, actor=OPERATOR, reason="until then")
    writes.modify(memory.id, {"expires_at": None}, actor=OPERATOR, reason="for good")
    changes = [
        row.metadata["changes"]
        for row in MemoryHistory.objects.filter(memory=memory, event="updated").order_by(
            "created_at", "id"
        )
    ]
    old_importance = memory.importance
    assert changes == [
        {"pinned": [False, True]},
        {"pinned": [True, False], "tags": [[], ["infra"]]},
        {"importance": [old_importance, 0.9], "type": [memory.type, "decision"]},
        {"expires_at": [None, "2099-01-31T00:00:00Z"]},
        {"expires_at": ["2099-01-31T00:00:00Z", None]},
    ]
    assert not MemoryCold.objects.filter(memory=memory).exists()  # the text never changed
    page = viewer_client.get(f"/memories/{memory.id}/").content.decode()
    assert "pinned no → yes" in page and "pinned yes → no; tags none → infra" in page
    assert "expires_at 2099-01-31T00:00:00Z → none" in page
    from dashboard import lineage

    edits = [s.text for s in lineage.build(Memory.objects.get(id=memory.id)) if s.kind == "updated"]
    assert edits[0].startswith(f"Edited by {OPERATOR.name} (operator): pinned no → yes, now")


def test_modify_refuses_a_duplicate_content_hash_and_writes_nothing():
    a = remember("Kafka carries billing events").memory
    b = remember("Kafka carries audit events").memory
    with pytest.raises(Refused) as refused:
        writes.modify(
            b.id, {"content": "kafka carries billing events."}, actor=OPERATOR, reason="merge"
        )
    assert refused.value.code == "duplicate_content_hash"
    assert refused.value.details["duplicateMemoryId"] == a.id
    assert Memory.objects.get(id=b.id).version == 1
    assert MemoryCold.objects.count() == 0


def test_modify_stores_the_vector_computed_before_the_transaction():
    memory = remember("Grafana dashboards live in the ops repo").memory
    embedder = OfflineEmbedder(768)
    vector = Vector(embedder.embed_one("Grafana dashboards live in the infra repo"), embedder.model)
    updated = writes.modify(
        memory.id,
        {"content": "Grafana dashboards live in the infra repo"},
        actor=OPERATOR,
        reason="moved",
        vector=vector,
    )
    stored = Embedding.objects.get(content_hash=updated.content_hash)
    assert stored.model == embedder.model and stored.dimensions == 768
    assert np.allclose(np.frombuffer(stored.vector, dtype=np.float32), vector.values)
    assert updated.embedding_model == embedder.model


def test_forget_is_soft_needs_force_for_pinned_and_never_lets_the_pipeline_force():
    pinned = remember("Never deploy on Fridays", pinned=True).memory
    with pytest.raises(Refused) as needs_force:
        writes.forget(pinned.id, actor=OPERATOR, reason="old rule")
    assert needs_force.value.code == "pinned_requires_force"
    with pytest.raises(Refused) as denied:
        writes.forget(pinned.id, actor=PIPELINE, reason="contradicted", force=True)
    assert denied.value.code == "autonomous_force_denied"
    forgotten = writes.forget(pinned.id, actor=OPERATOR, reason="old rule", force=True)
    row = Memory.objects.get(id=pinned.id)
    assert row.is_deleted and row.deleted_at and row.version == 2 and forgotten.version == 2
    assert MemoryCold.objects.get(memory=row).archived_reason == "forgotten"
    with pytest.raises(Refused) as again:
        writes.forget(pinned.id, actor=OPERATOR, reason="twice", force=True)
    assert again.value.code == "already_deleted"


def test_forget_cancels_the_memorys_pending_job():
    result = remember("Ingest worker retries three times")
    writes.forget(result.memory.id, actor=OPERATOR, reason="wrong")
    assert Job.objects.get(id=result.job.id).status == "cancelled"


def test_recover_works_within_thirty_days_and_not_after():
    memory = remember("The staging database is reset nightly").memory
    writes.forget(memory.id, actor=OPERATOR, reason="oops")
    recovered = writes.recover(memory.id, actor=OPERATOR, reason="undo")
    assert not recovered.is_deleted and recovered.version == 3
    assert [h.event for h in MemoryHistory.objects.filter(memory=memory)] == [
        "created",
        "deleted",
        "recovered",
    ]
    writes.forget(memory.id, actor=OPERATOR, reason="again")
    Memory.objects.filter(id=memory.id).update(deleted_at=timezone.now() - timedelta(days=31))
    with pytest.raises(Refused) as expired:
        writes.recover(memory.id, actor=OPERATOR, reason="too late")
    assert expired.value.code == "retention_expired"
    with pytest.raises(Refused) as not_deleted:
        writes.recover(remember("something else entirely").memory.id, actor=OPERATOR, reason="x")
    assert not_deleted.value.code == "not_deleted"


def test_recover_refuses_when_the_same_content_became_active_again():
    memory = remember("Use pnpm for the web app").memory
    writes.forget(memory.id, actor=OPERATOR, reason="dup")
    remember("use pnpm for the web app!")
    with pytest.raises(Refused) as refused:
        writes.recover(memory.id, actor=OPERATOR, reason="undo")
    assert refused.value.code == "duplicate_content_hash"


def test_the_inline_linker_links_only_existing_entities_of_the_same_agent():
    now = timezone.now()
    priya = Entity.objects.create(
        name="Priya", canonical_name="priya", agent_id="default", created_at=now, updated_at=now
    )
    Entity.objects.create(
        name="Kafka", canonical_name="kafka", agent_id="ops-bot", created_at=now, updated_at=now
    )
    shouting = remember("PRIYA said Kafka and Redis are fine. Marco agreed.")
    assert shouting.linked_entity_ids == [priya.pk]  # case-insensitive; ops-bot's Kafka is not ours
    result = remember("Kafka topics were moved. Redis too.")
    assert result.linked_entity_ids == []
    assert Entity.objects.count() == 2  # never creates entities
    assert MemoryEntityMention.objects.get(memory=shouting.memory).mention_text == "PRIYA"
    assert Entity.objects.get(pk=priya.pk).mentions == 1


def test_a_structured_entities_payload_creates_entities_relations_and_mentions():
    triples = [Triple("Priya", "maintains", "billing-api", "person", "project", 0.9)]
    first = remember("Priya maintains billing-api", triples=triples)
    second = remember("Priya still maintains billing-api in 2026", triples=triples)
    assert Entity.objects.filter(canonical_name__in=["priya", "billing-api"]).count() == 2
    from memory.models import Relation

    relation = Relation.objects.get()
    assert relation.mentions == 2 and relation.relation_type == "maintains"
    assert MemoryEntityMention.objects.filter(memory=first.memory).count() == 2
    assert MemoryEntityMention.objects.filter(memory=second.memory).count() == 2
    assert Entity.objects.get(canonical_name="priya").entity_type == "person"


def derive(text, source, vector=None):
    return writes.derive_in_transaction(
        text,
        type="preference",
        agent_id=source.agent_id,
        source_id=source.id,
        who="pipeline-v2",
        why="extracted-fact",
        importance=0.9,
        extraction_model="qwen3:4b",
        actor=OPERATOR,
        reason="approved",
        vector=vector,
        metadata={"proposalId": "p-1"},
    )


def test_a_derived_memory_is_created_from_plain_values_audited_linked_and_embedded():
    now = timezone.now()
    priya = Entity.objects.create(
        name="Priya", canonical_name="priya", agent_id="default", created_at=now, updated_at=now
    )
    source = remember("Standup: Priya said she prefers squash merges.").memory
    vector = Vector(OfflineEmbedder(8).embed(["Priya prefers squash merges"])[0], "offline-8")
    result = derive("  Priya prefers squash merges ", source, vector)
    memory = result.memory
    assert not result.deduped and memory.is_derived
    assert (memory.content, memory.type, memory.importance) == (
        "Priya prefers squash merges",
        "preference",
        0.9,
    )
    assert (memory.who, memory.why, memory.source_id) == (
        "pipeline-v2",
        "extracted-fact",
        source.id,
    )
    assert (memory.extraction_status, memory.extraction_model) == ("completed", "qwen3:4b")
    assert (memory.embedding_model, memory.updated_by) == ("offline-8", "dana")
    created = MemoryHistory.objects.get(memory=memory)
    assert (created.event, created.changed_by, created.actor_type) == (
        "created",
        "dana",
        "operator",
    )
    assert created.reason == "approved" and created.metadata == {"proposalId": "p-1"}
    assert MemoryEntityMention.objects.get(memory=memory).entity == priya
    assert Embedding.objects.get(content_hash=memory.content_hash).model == "offline-8"

    again = derive("Priya prefers squash merges.", source)  # same normalised content
    assert again.deduped and again.memory == memory
    assert Memory.objects.filter(source_id=source.id).count() == 1


def test_extraction_status_changes_only_the_listed_memories():
    first, second, third = (
        remember(text).memory for text in ("Ana uses Vim", "Bo uses Emacs", "Cy uses Nano")
    )
    changed = writes.set_extraction_status(
        [first.id, second.id], "completed", model="qwen3:4b", embedding_model="nomic"
    )
    assert changed == 2
    rows = dict(
        Memory.objects.values_list("id", "extraction_status").filter(
            id__in=[first.id, second.id, third.id]
        )
    )
    assert rows == {first.id: "completed", second.id: "completed", third.id: "pending"}
    first.refresh_from_db()
    assert (first.extraction_model, first.embedding_model) == ("qwen3:4b", "nomic")
    assert writes.set_extraction_status([], "failed") == 0


def test_batched_inserts_keep_each_rows_own_time():
    memory = remember("Ana uses Vim").memory
    earlier = timezone.now() - timedelta(days=3)
    later = earlier + timedelta(hours=5)
    times = {"a": earlier, "b": earlier, "c": later, "d": earlier}
    writes.insert_rows(
        MemoryHistory,
        [
            MemoryHistory(
                memory_id=memory.id,
                event="none",
                changed_by="t",
                actor_type="agent",
                reason=label,
                metadata={},
                created_at=at,
            )
            for label, at in times.items()
        ],
    )
    stored = dict(
        MemoryHistory.objects.filter(memory_id=memory.id, event="none").values_list(
            "reason", "created_at"
        )
    )
    assert stored == times


@pytest.mark.django_db
def test_entity_ids_finds_each_agents_own_entities_by_name_and_no_one_elses():

    now = timezone.now()

    def entity(name, agent_id):
        return Entity.objects.create(
            name=name,
            canonical_name=name.lower(),
            agent_id=agent_id,
            created_at=now,
            updated_at=now,
        )

    ours, priya, theirs = (
        entity("Kafka", "default"),
        entity("Priya", "default"),
        entity("Kafka", "ops-bot"),
    )
    entity("Grafana", "ops-bot")

    found = entity_ids(
        [
            (
                Memory(agent_id="default"),
                {"kafka": "Kafka", "priya": "Priya", "grafana": "Grafana"},
            ),
            (Memory(agent_id="ops-bot"), {"kafka": "KAFKA"}),
            (Memory(agent_id="nobody"), {}),
        ]
    )

    assert found == {
        ("default", "kafka"): ours.pk,
        ("default", "priya"): priya.pk,
        ("ops-bot", "kafka"): theirs.pk,
    }
    assert entity_ids([(Memory(agent_id="default"), {})]) == {}
