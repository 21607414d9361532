"""Pipeline jobs end to end: claim -> extract -> decide -> one write, in every mode, through every
ADD gate, and through provider failures, retries, stale leases, the sweep and maintenance.

Where model behaviour matters the fake Ollama server answers (scripted per test); elsewhere the
offline provider runs.
"""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone
from django_q.models import OrmQ

from memory import writes
from memory.content import normalize
from memory.models import Embedding, Entity, Job, Memory, MemoryCold, MemoryHistory
from memory.writes import Actor
from pipeline import tasks
from pipeline.config import get_config
from pipeline.decision import NO_CANDIDATES_REASON
from pipeline.models import LlmCall, PipelineConfig, Proposal
from pipeline.writes import jobs, record
from tests.fake_ollama import Script
from tests.pipeline_support import (
    ADD_FACT,
    CONTRADICTING_FACT,
    DELETE_FACT,
    NONE_FACT,
    RAW_TEXT,
    UPDATE_FACT,
    ScriptedModel,
    configure,
    decision,
    fact,
    four_decisions,
    make_due,
    raw,
    seed,
    seed_store,
    set_mode,
)

pytestmark = pytest.mark.django_db

# Facts §5.3: every decision audit carries these keys.
DECISION_AUDIT_KEYS = {
    "shadow",
    "proposedAction",
    "targetMemoryId",
    "targetContent",
    "confidence",
    "fact",
    "extractionModel",
    "factCount",
    "entityCount",
    "createdMemoryId",
    "updatedMemoryId",
    "deletedMemoryId",
    "dedupedExistingId",
    "blockedReason",
    "reviewNeeded",
    "contradictionRisk",
    "skippedReason",
}


@pytest.fixture
def store(db):
    return seed_store()


@pytest.fixture(name="four_decisions")
def four_decisions_fixture(fake_ollama, store):
    return four_decisions(fake_ollama, store)


def run(text=RAW_TEXT, **kwargs):
    """Remember a raw memory and process every pending job; returns (source, job) refreshed."""
    result = raw(text, **kwargs)
    tasks.process_pending()
    result.memory.refresh_from_db()
    result.job.refresh_from_db()
    return result.memory, result.job


def by_action(job) -> dict[str, Proposal]:
    proposals = list(Proposal.objects.filter(job=job))
    assert len({p.action for p in proposals}) == len(proposals)
    return {p.action: p for p in proposals}


def unchanged(memory) -> bool:
    before = memory.content, memory.version, memory.is_deleted
    memory.refresh_from_db()
    return (memory.content, memory.version, memory.is_deleted) == before


# --- one job, start to finish ---------------------------------------------------------------------


def test_a_job_claims_extracts_decides_records_and_completes(
    four_decisions, fake_ollama, client, ingest_auth
):
    source, job = run()

    assert job.status == "completed" and job.attempts == 1 and job.error is None
    assert job.leased_at is None and job.completed_at is not None
    assert source.extraction_status == "completed" and source.extraction_model == "qwen3:4b"
    result = job.result
    assert {"facts", "entities", "proposals", "writeMode", "writeStats", "warnings"} <= set(result)
    assert [f["content"] for f in result["facts"]] == [
        ADD_FACT,
        UPDATE_FACT,
        DELETE_FACT,
        NONE_FACT,
    ]
    assert result["entities"][0]["source"] == "Priya"
    assert not Entity.objects.exists()  # extraction triples are reported, not written
    assert result["writeMode"] == "shadow" and result["warnings"] == []
    proposals = list(Proposal.objects.filter(job=job).order_by("position"))
    assert [p.id for p in proposals] == [p["id"] for p in result["proposals"]]
    assert [p.action for p in proposals] == ["add", "update", "delete", "none"]
    assert all(p.source_memory_id == source.id for p in proposals)

    # One decision audit per proposal, filed under the SOURCE memory.
    audits = list(MemoryHistory.objects.filter(event="none").order_by("created_at"))
    assert len(audits) == 4 and {a.memory_id for a in audits} == {source.id}
    for audit in audits:
        assert set(audit.metadata) >= DECISION_AUDIT_KEYS
        assert audit.old_content is None and audit.new_content is None
        assert audit.metadata["factCount"] == 4 and audit.metadata["entityCount"] == 1
        assert audit.metadata["extractionModel"] == "qwen3:4b"
    assert {a.metadata["proposalId"] for a in audits} == {p.id for p in proposals}

    # The raw memory's own vector is stored.
    embedding = Embedding.objects.get(content_hash=source.content_hash)
    assert embedding.model == "nomic-embed-text" and embedding.source_memory_id == source.id
    assert source.embedding_model == "nomic-embed-text"

    # Every model call is logged: what the model saw and what it said.
    calls = list(LlmCall.objects.filter(job=job).order_by("created_at", "id"))
    kinds = [c.kind for c in calls]
    assert kinds.count("extract") == 1 and kinds.count("embed") == 1
    decides = [c for c in calls if c.kind == "decide"]
    assert len(decides) == len(fake_ollama.calls("/api/chat")) - 1 == 3  # ADD had no candidates
    assert sorted(c.fact_index for c in decides) == [1, 2, 3]
    chat_calls = [c for c in calls if c.kind != "embed"]
    # Decisions run side by side: each call is logged as it returns, so compare them as a set.
    assert chat_calls[0].raw_response == four_decisions.replies[0]
    assert sorted(c.raw_response for c in decides) == sorted(four_decisions.replies[1:])
    for call in calls:
        assert call.prompt and call.raw_response and call.duration_ms > 0 and call.error is None
    for call in chat_calls:
        assert call.model == "qwen3:4b" and call.prompt_tokens and call.completion_tokens
    assert calls[0].prompt.endswith(RAW_TEXT)
    assert [UPDATE_FACT in c.prompt for c in decides].count(True) == 1

    body = client.get(f"/api/jobs/{job.id}", **ingest_auth).json()
    assert body["status"] == "completed" and body["memoryId"] == source.id
    assert body["attempts"] == 1 and body["maxAttempts"] == 3
    assert body["result"]["writeMode"] == "shadow"
    assert len(body["result"]["proposals"]) == 4


@pytest.mark.parametrize("mode", ["shadow", "controlled-write", "full", "frozen"])
def test_the_raw_memory_vector_is_stored_in_every_mode(mode):
    set_mode(mode)
    source, job = run("Kenji deploys billing-api with Terraform every Friday.")
    assert job.status == "completed" and job.result["writeMode"] == mode  # the brake: "frozen"
    assert Embedding.objects.filter(content_hash=source.content_hash).exists()
    assert source.embedding_model == "offline-hash-768"


# --- modes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode,blocked", [("shadow", "shadow_mode"), ("frozen", "mutations_frozen")]
)
def test_shadow_and_frozen_record_every_proposal_and_write_no_memory(
    four_decisions, store, mode, blocked
):
    set_mode(mode)
    memories_before = Memory.objects.count() + 1  # plus the raw memory itself
    source, job = run()

    assert Memory.objects.count() == memories_before
    proposals = by_action(job)
    for action in ("add", "update", "delete"):
        assert proposals[action].status == "pending"
        assert proposals[action].blocked_reason == blocked
        assert proposals[action].mode == mode  # the brake is recorded as "frozen"
    assert proposals["none"].status == "recorded"
    assert proposals["update"].target_memory_id == store.postgres.id
    assert proposals["update"].target_version == 1
    assert proposals["update"].target_content == store.postgres.content
    assert all(unchanged(m) for m in (store.postgres, store.staging, store.kenji))
    assert not MemoryCold.objects.exists()
    audits = MemoryHistory.objects.filter(memory=source, event="none")
    assert audits.count() == 4
    assert set(audits.values_list("changed_by", "actor_type")) == {("pipeline-shadow", "pipeline")}
    assert all(a.metadata["shadow"] is True for a in audits)
    assert job.result["writeMode"] == mode
    assert job.result["writeStats"]["added"] == 0 and job.result["writeStats"]["recorded"] == 1


def test_controlled_write_applies_add_and_sends_update_and_delete_to_review(four_decisions, store):
    set_mode("controlled-write")
    source, job = run()

    proposals = by_action(job)
    add = proposals["add"]
    assert add.status == "applied" and add.decided_by == "pipeline-v2"
    created = Memory.objects.get(id=add.created_memory_id)
    assert created.content == ADD_FACT
    assert (created.who, created.why) == ("pipeline-v2", "extracted-fact")
    assert (created.source_type, created.source_id) == ("pipeline-v2", source.id)
    assert created.extraction_model == "qwen3:4b" and created.extraction_status == "completed"
    assert created.importance == 0.9 and created.agent_id == "default"
    assert created.embedding_model == "nomic-embed-text"
    assert Embedding.objects.get(content_hash=created.content_hash).source_memory_id == created.id
    (history,) = MemoryHistory.objects.filter(memory=created)
    assert history.event == "created" and history.new_content == ADD_FACT
    assert (history.changed_by, history.actor_type) == ("pipeline-v2", "pipeline")
    assert history.metadata["sourceMemoryId"] == source.id
    assert history.metadata["proposalId"] == add.id

    for action in ("update", "delete"):
        assert proposals[action].status == "pending"
        assert proposals[action].blocked_reason == "destructive_mutations_disabled"
    assert proposals["none"].status == "recorded"
    assert all(unchanged(m) for m in (store.postgres, store.staging, store.kenji))
    assert not MemoryCold.objects.exists()

    audits = MemoryHistory.objects.filter(memory=source, event="none")
    assert set(audits.values_list("changed_by", flat=True)) == {"pipeline-v2"}
    add_audit = audits.get(metadata__proposalId=add.id)
    assert add_audit.metadata["createdMemoryId"] == created.id
    assert add_audit.metadata["shadow"] is False
    stats = job.result["writeStats"]
    assert (stats["added"], stats["embeddingsAdded"], stats["blockedDestructive"]) == (1, 1, 2)
    assert (stats["recorded"], stats["pending"]) == (1, 2)
    assert job.result["writeMode"] == "controlled-write"


def test_full_mode_applies_update_and_delete_through_the_guarded_paths(four_decisions, store):
    set_mode("full")
    source, job = run()

    proposals = by_action(job)
    assert {a: p.status for a, p in proposals.items()} == {
        "add": "applied",
        "update": "applied",
        "delete": "applied",
        "none": "recorded",
    }
    postgres, staging = store.postgres, store.staging
    postgres.refresh_from_db()
    staging.refresh_from_db()

    assert postgres.content == UPDATE_FACT and postgres.version == 2
    assert proposals["update"].updated_memory_id == postgres.id
    cold = MemoryCold.objects.get(memory=postgres)
    assert cold.archived_reason == "superseded"
    assert cold.content == "The billing service runs on Postgres 14" and cold.version == 1
    updated = MemoryHistory.objects.get(memory=postgres, event="updated")
    assert (updated.changed_by, updated.actor_type) == ("pipeline-v2", "pipeline")
    assert updated.old_content == "The billing service runs on Postgres 14"
    assert updated.new_content == UPDATE_FACT and updated.reason == "Postgres was upgraded"
    # The pre-fetched vector goes with the new content.
    assert postgres.embedding_model == "nomic-embed-text"
    assert Embedding.objects.filter(content_hash=postgres.content_hash).exists()

    assert staging.is_deleted and staging.deleted_at is not None and staging.version == 2
    assert proposals["delete"].deleted_memory_id == staging.id
    assert MemoryCold.objects.get(memory=staging).archived_reason == "pipeline_delete"
    deleted = MemoryHistory.objects.get(memory=staging, event="deleted")
    assert (deleted.changed_by, deleted.actor_type) == ("pipeline-v2", "pipeline")
    assert deleted.metadata["force"] is False

    stats = job.result["writeStats"]
    assert (stats["added"], stats["updated"], stats["deleted"]) == (1, 1, 1)
    assert job.result["writeMode"] == "full"
    audits = MemoryHistory.objects.filter(memory=source, event="none")
    update_audit = audits.get(metadata__proposalId=proposals["update"].id)
    assert update_audit.metadata["updatedMemoryId"] == postgres.id
    delete_audit = audits.get(metadata__proposalId=proposals["delete"].id)
    assert delete_audit.metadata["deletedMemoryId"] == staging.id


def test_full_mode_never_changes_a_pinned_target(four_decisions, store):
    set_mode("full")
    Memory.objects.filter(id__in=[store.postgres.id, store.staging.id]).update(pinned=True)
    store.postgres.refresh_from_db()
    store.staging.refresh_from_db()
    _, job = run()

    proposals = by_action(job)
    for action in ("update", "delete"):
        assert proposals[action].status == "pending"
        assert proposals[action].blocked_reason == "pinned_target"
    assert unchanged(store.postgres) and unchanged(store.staging)
    assert not MemoryCold.objects.exists()
    assert proposals["add"].status == "applied"


@pytest.mark.parametrize("mode", ["shadow", "controlled-write", "full"])
def test_a_flagged_contradiction_waits_for_review_in_every_mode(fake_ollama, store, mode):
    set_mode(mode)
    ScriptedModel(
        fake_ollama,
        facts=[CONTRADICTING_FACT],
        decisions={CONTRADICTING_FACT: decision("update", store.postgres)},
    )
    _, job = run()

    proposal = Proposal.objects.get(job=job)
    assert proposal.status == "pending" and proposal.review_needed
    assert proposal.contradiction["flagged"] is True
    assert unchanged(store.postgres) and not MemoryCold.objects.exists()
    assert job.result["writeStats"]["reviewNeeded"] == 1
    audit = MemoryHistory.objects.get(event="none", metadata__proposalId=proposal.id)
    assert audit.metadata["reviewNeeded"] is True
    if mode != "shadow":
        # Controlled-write holds every UPDATE/DELETE as destructive, flagged or not (the seed's
        # reason); full mode holds it for the contradiction.
        expected = "contradiction_review" if mode == "full" else "destructive_mutations_disabled"
        assert proposal.blocked_reason == audit.metadata["blockedReason"] == expected
        assert audit.metadata["contradictionRisk"] is True


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("shadow", "shadow_mode"),
        ("controlled-write", "contradiction_review"),
        ("full", "contradiction_review"),
    ],
)
def test_a_none_on_a_fact_that_contradicts_its_memory_waits_for_review_in_every_mode(
    fake_ollama, store, mode, why
):
    # The model said the store already says it; the fact negates it. Recorded, no reviewer
    # would ever have seen it, and the memory it negates stayed as true (a line-by-line review).
    set_mode(mode)
    ScriptedModel(
        fake_ollama,
        facts=[CONTRADICTING_FACT],
        decisions={CONTRADICTING_FACT: decision("none", store.postgres)},
    )
    _, job = run()
    proposal = Proposal.objects.get(job=job)
    assert (proposal.action, proposal.status, proposal.blocked_reason) == ("none", "pending", why)
    assert proposal.review_needed and proposal.contradiction["kind"] == "negation"
    assert proposal.target_memory_id == store.postgres.id
    assert unchanged(store.postgres)
    assert job.result["writeStats"]["reviewNeeded"] == 1
    assert job.result["writeStats"]["recorded"] == 0


def test_a_none_naming_no_memory_is_checked_against_the_most_similar_and_names_it(
    fake_ollama, store
):
    set_mode("full")
    ScriptedModel(
        fake_ollama,
        facts=[CONTRADICTING_FACT],
        decisions={CONTRADICTING_FACT: decision("none")},
    )
    _, job = run()
    proposal = Proposal.objects.get(job=job)
    assert (proposal.status, proposal.review_needed) == ("pending", True)
    assert proposal.target_memory_id == store.postgres.id
    assert proposal.target_content == store.postgres.content


def test_a_none_on_a_fact_the_memory_already_says_is_recorded_as_before(fake_ollama, store):
    set_mode("full")
    same = "The billing service runs on Postgres 14 in production"
    ScriptedModel(fake_ollama, facts=[same], decisions={same: decision("none", store.postgres)})
    _, job = run()
    proposal = Proposal.objects.get(job=job)
    assert (proposal.status, proposal.review_needed) == ("recorded", False)
    assert proposal.contradiction is None


def _full_mode_job_on_an_end(fake_ollama, store, action: str) -> Proposal:
    """The proposal of a full-mode job whose one fact says the billing memory's subject ended."""
    set_mode("full")
    ended = "The billing service on Postgres 14 was decommissioned last week"
    ScriptedModel(fake_ollama, facts=[ended], decisions={ended: decision(action, store.postgres)})
    _, job = run()
    return Proposal.objects.get(job=job)


def test_full_mode_holds_an_update_that_rewrites_a_memory_into_its_end(fake_ollama, store):
    # "was decommissioned" says as much as "no longer runs": full mode used to apply it.
    proposal = _full_mode_job_on_an_end(fake_ollama, store, "update")
    assert (proposal.status, proposal.blocked_reason) == ("pending", "contradiction_review")
    assert proposal.contradiction["kind"] == "retraction"
    assert unchanged(store.postgres) and not MemoryCold.objects.exists()


def test_full_mode_applies_a_delete_of_what_the_fact_says_ended(fake_ollama, store):
    # The end the fact says is what a DELETE does: it is not held for contradicting the memory.
    proposal = _full_mode_job_on_an_end(fake_ollama, store, "delete")
    assert (proposal.status, proposal.review_needed) == ("applied", False)
    assert "what a DELETE does" in proposal.contradiction["reason"]
    store.postgres.refresh_from_db()
    assert store.postgres.is_deleted


def test_disabled_leaves_jobs_pending_and_runs_nothing(fake_ollama):
    set_mode("disabled")
    result = raw(RAW_TEXT)
    assert tasks.process_pending() == {}
    assert tasks.run_job(result.job.id) is None
    job = Job.objects.get(id=result.job.id)
    assert job.status == "pending" and job.attempts == 0
    assert not LlmCall.objects.exists() and fake_ollama.calls("/api/chat") == []
    assert not Proposal.objects.exists()

    set_mode("shadow")  # switched back on: the waiting job runs
    assert tasks.process_pending() == {"completed": 1}


# --- ADD gates (controlled-write) -----------------------------------------------------------------


@pytest.fixture
def controlled(db):
    set_mode("controlled-write")


def test_a_low_confidence_fact_is_skipped(controlled, fake_ollama):
    ScriptedModel(fake_ollama, facts=[fact(ADD_FACT, confidence=0.5)])
    source, job = run()
    proposal = Proposal.objects.get(job=job)
    assert proposal.status == "skipped" and proposal.skipped_reason == "low_fact_confidence"
    assert Memory.objects.filter(source_type="pipeline-v2").count() == 0
    assert job.result["writeStats"]["skippedLowConfidence"] == 1
    audit = MemoryHistory.objects.get(memory=source, event="none")
    assert audit.metadata["skippedReason"] == "low_fact_confidence"


def test_a_punctuation_only_fact_is_skipped_as_empty(controlled, fake_ollama):
    seed("The billing service runs on Postgres 14")
    assert tasks.embed_missing() == 1  # the vector leg runs too (the fact's vector is all zeros)
    fake_ollama.chat_reply(
        json.dumps({"facts": [fact("?!.,;:?!.,;:", confidence=0.95)], "entities": []})
    )
    _, job = run()
    proposal = Proposal.objects.get(job=job)
    assert proposal.status == "skipped" and proposal.skipped_reason == "empty_fact_content"
    assert Memory.objects.filter(source_type="pipeline-v2").count() == 0
    assert job.result["writeStats"]["skippedLowConfidence"] == 1


def test_a_raw_memory_without_words_never_breaks_later_jobs(controlled):
    first, first_job = run("?!?! ... !!!")  # no word: its vector is all zeros
    assert first_job.status == "completed"
    _, job = run("Kenji deploys the billing service with Terraform.")
    assert job.status == "completed" and job.error is None


def test_an_existing_duplicate_is_deduped_not_added(controlled, fake_ollama, client, ingest_auth):
    existing = seed("Priya prefers squash merges for every repository.")
    ScriptedModel(fake_ollama, facts=[ADD_FACT])  # the model says add anyway
    source, job = run()
    proposal = Proposal.objects.get(job=job)
    assert proposal.action == "add" and proposal.status == "deduped"
    assert proposal.deduped_existing_id == existing.id
    assert Memory.objects.filter(source_type="pipeline-v2").count() == 0
    assert job.result["writeStats"]["deduped"] == 1
    audit = MemoryHistory.objects.get(memory=source, event="none")
    assert audit.metadata["dedupedExistingId"] == existing.id
    listed = client.get(f"/api/proposals?sourceMemoryId={source.id}", **ingest_auth).json()
    assert listed["proposals"][0]["dedupedExistingId"] == existing.id


def test_a_fact_without_candidates_is_added_without_a_decide_call(controlled, fake_ollama):
    ScriptedModel(fake_ollama, facts=[ADD_FACT])
    _, job = run()
    assert len(fake_ollama.calls("/api/chat")) == 1  # extraction only
    assert sorted(LlmCall.objects.filter(job=job).values_list("kind", flat=True)) == [
        "embed",
        "extract",
    ]
    proposal = Proposal.objects.get(job=job)
    assert proposal.action == "add" and proposal.status == "applied"
    assert proposal.reason == NO_CANDIDATES_REASON and proposal.confidence == 0.9
    assert proposal.candidates == []


@pytest.mark.parametrize(
    "reply,warning",
    [
        (
            decision("update", "0d2c7a9e-0000-4000-8000-hallucinated"),
            "Decision references non-candidate ID",
        ),
        (decision("delete", 9), "Decision references non-candidate ID"),
        ({"action": "update", "confidence": 0.9, "reason": "x"}, "missing targetId"),
        (decision("merge"), "Invalid action"),
        ({"action": "add", "targetId": None, "confidence": 0.9, "reason": " "}, "missing reason"),
        ("I would update memory 1, it is outdated.", "Failed to parse model output as JSON"),
    ],
)
def test_an_unusable_decision_is_dropped_with_a_warning_on_the_job(
    controlled, fake_ollama, store, client, ingest_auth, reply, warning
):
    ScriptedModel(
        fake_ollama,
        facts=[UPDATE_FACT, ADD_FACT],
        decisions={UPDATE_FACT: reply},
    )
    _, job = run()
    assert [p.fact_content for p in Proposal.objects.filter(job=job)] == [ADD_FACT]
    assert unchanged(store.postgres)
    body = client.get(f"/api/jobs/{job.id}", **ingest_auth).json()
    assert body["status"] == "completed"
    (message,) = body["result"]["warnings"]
    assert message.startswith(f'Dropped decision for fact 1 ("{UPDATE_FACT}")')
    assert warning in message
    # The dropped decision's call is still in the log, with what the model said.
    decide = LlmCall.objects.get(job=job, kind="decide", fact_index=0)
    assert decide.raw_response == (reply if isinstance(reply, str) else json.dumps(reply))


def test_a_target_changed_between_decision_and_write_makes_the_proposal_stale(fake_ollama, store):
    set_mode("full")
    ScriptedModel(
        fake_ollama,
        facts=[UPDATE_FACT],
        decisions={UPDATE_FACT: decision("update", store.postgres)},
    )
    result = raw(RAW_TEXT)
    claim = jobs.claim_job(result.job.id)
    outcome = tasks.compute(claim, [])  # the model decided against version 1
    writes.modify(
        store.postgres.id,
        {"content": "The billing service runs on Postgres 15"},
        actor=Actor("dana"),
        reason="manual correction",
    )
    record.record_job(outcome)

    proposal = Proposal.objects.get(job=result.job)
    assert proposal.status == "stale" and proposal.blocked_reason == "target_changed"
    assert proposal.target_version == 1
    store.postgres.refresh_from_db()
    assert store.postgres.content == "The billing service runs on Postgres 15"
    assert store.postgres.version == 2  # only the manual edit
    assert list(MemoryCold.objects.values_list("archived_reason", flat=True)) == ["edited"]
    job = Job.objects.get(id=result.job.id)
    assert job.status == "completed" and job.result["writeStats"]["stale"] == 1


def test_a_target_deleted_between_decision_and_write_makes_the_proposal_stale(fake_ollama, store):
    set_mode("full")
    ScriptedModel(
        fake_ollama, facts=[DELETE_FACT], decisions={DELETE_FACT: decision("delete", store.staging)}
    )
    result = raw(RAW_TEXT)
    outcome = tasks.compute(jobs.claim_job(result.job.id), [])
    writes.forget(store.staging.id, actor=Actor("dana"), reason="gone already")
    record.record_job(outcome)
    proposal = Proposal.objects.get(job=result.job)
    assert proposal.status == "stale" and proposal.blocked_reason == "target_deleted"
    assert MemoryHistory.objects.filter(memory=store.staging, event="deleted").count() == 1


def test_a_source_forgotten_after_the_claim_cancels_the_job(four_decisions):
    set_mode("full")
    result = raw(RAW_TEXT)
    claim = jobs.claim_job(result.job.id)
    outcome = tasks.compute(claim, [])
    writes.forget(result.memory.id, actor=Actor("dana"), reason="pasted a secret")
    record.record_job(outcome)

    job = Job.objects.get(id=result.job.id)
    assert job.status == "cancelled" and "forgotten" in job.result["cancelled"]
    assert not Proposal.objects.exists()
    assert Memory.objects.filter(source_type="pipeline-v2").count() == 0
    assert not MemoryHistory.objects.filter(event="none").exists()


def test_a_source_forgotten_before_the_model_call_is_cancelled_without_calling_it(fake_ollama):
    result = raw(RAW_TEXT)
    claim = jobs.claim_job(result.job.id)
    writes.forget(result.memory.id, actor=Actor("dana"), reason="oops")
    assert tasks.compute(claim, []) is None
    assert fake_ollama.calls("/api/chat") == [] and fake_ollama.calls("/api/embed") == []
    record.record_job(record.JobOutcome(claim=claim, provider="-", model="-"))  # run_job's branch
    assert Job.objects.get(id=claim.job_id).status == "cancelled"


def test_a_source_expired_before_its_job_runs_is_cancelled_without_a_model_call(fake_ollama):
    result = raw(RAW_TEXT)
    Memory.objects.filter(id=result.memory.id).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert tasks.run_job(result.job.id) == "cancelled"
    assert fake_ollama.calls("/api/chat") == [] and fake_ollama.calls("/api/embed") == []
    job = Job.objects.get(id=result.job.id)
    assert job.result["cancelled"] == "source memory expired"
    assert not Memory.objects.filter(source_id=result.memory.id).exists()


def test_a_source_that_expires_while_the_model_reads_it_gives_nothing(four_decisions):
    set_mode("full")
    result = raw(RAW_TEXT)
    outcome = tasks.compute(jobs.claim_job(result.job.id), [])
    assert outcome is not None and outcome.decisions  # the model did read it
    Memory.objects.filter(id=result.memory.id).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    record.record_job(outcome)
    job = Job.objects.get(id=result.job.id)
    assert job.status == "cancelled" and job.result["cancelled"] == "source memory expired"
    assert not Proposal.objects.exists()
    assert not Memory.objects.filter(source_id=result.memory.id).exists()
    assert LlmCall.objects.filter(job=job).exists()  # the calls it made stay logged


def test_forgetting_a_source_cancels_its_pending_job(fake_ollama):
    result = raw(RAW_TEXT)
    writes.forget(result.memory.id, actor=Actor("dana"), reason="oops")
    assert Job.objects.get(id=result.job.id).status == "cancelled"
    assert tasks.process_pending() == {}
    assert fake_ollama.calls("/api/chat") == []


# --- provider failures, retries, dead jobs --------------------------------------------------------


PROVIDER_FAILURES = {
    "500": (Script({"error": "model runner crashed"}, 500), "answered 500"),
    "timeout": (Script({"message": {"content": "{}"}}, delay=0.6), "timed out"),
    "empty body": (Script(b"", 200), "empty body"),
    "garbage body": (Script("<html>502 Bad Gateway</html>", 200), "invalid JSON"),
}


@pytest.mark.parametrize("failure", list(PROVIDER_FAILURES))
def test_a_provider_error_sends_the_job_back_with_backoff(fake_ollama, settings, failure):
    settings.MEMORY_LLM_TIMEOUT_SECONDS = 0.3
    script, message = PROVIDER_FAILURES[failure]
    fake_ollama.script("/api/chat", script)
    result = raw(RAW_TEXT)
    started = timezone.now()

    assert tasks.run_job(result.job.id) == "pending"
    job = Job.objects.get(id=result.job.id)
    assert job.status == "pending" and job.attempts == 1 and job.leased_at is None
    assert "ProviderError" in job.error and message in job.error
    assert job.next_attempt_at > started + timedelta(seconds=5)
    assert tasks.process_pending() == {}  # not due yet
    failed = LlmCall.objects.get(job=job)
    assert failed.kind == "extract" and message in failed.error and failed.prompt
    memory = Memory.objects.get(id=result.memory.id)
    assert memory.content == RAW_TEXT and memory.extraction_status == "pending"
    assert not Proposal.objects.exists()

    make_due(job)  # the server recovered: the retry completes
    assert tasks.process_pending() == {"completed": 1}
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2 and job.error is None


def test_a_provider_error_during_a_decision_fails_the_whole_job(fake_ollama, store):
    fake_ollama.chat_reply(json.dumps({"facts": [fact(UPDATE_FACT)], "entities": []}))
    fake_ollama.script("/api/chat", Script({"error": "overloaded"}, 503))
    result = raw(RAW_TEXT)
    assert tasks.run_job(result.job.id) == "pending"
    kinds = list(LlmCall.objects.filter(job=result.job).values_list("kind", "error"))
    assert [k for k, _ in kinds] == ["extract", "embed", "decide"]
    assert kinds[2][1] and "503" in kinds[2][1]
    assert not Proposal.objects.exists() and unchanged(store.postgres)


def test_an_embedder_that_cannot_be_built_fails_the_job_before_any_model_call(
    fake_ollama, settings
):
    """Nothing between the extraction's reply and its log may fail: a model call made and never
    logged would hide what the model saw. A misconfigured embedder stops the job first."""
    settings.MEMORY_EMBEDDING_PROVIDER = "no-such-provider"
    result = raw(RAW_TEXT)
    assert tasks.run_job(result.job.id) == "pending"
    assert fake_ollama.calls("/api/chat") == [] and fake_ollama.calls("/api/embed") == []
    assert not LlmCall.objects.filter(job=result.job).exists()
    assert "no-such-provider" in Job.objects.get(id=result.job.id).error


def test_after_max_attempts_the_job_is_dead_and_the_raw_memory_is_kept(fake_ollama):
    fake_ollama.script(
        "/api/chat", *[Script({"error": f"failure number {n}"}, 500) for n in (1, 2, 3)]
    )
    result = raw(RAW_TEXT)
    statuses = []
    for _ in range(3):
        statuses.append(tasks.run_job(result.job.id))
        make_due(result.job)
    assert statuses == ["pending", "pending", "dead"]
    job = Job.objects.get(id=result.job.id)
    assert job.status == "dead" and job.attempts == 3 == job.max_attempts
    assert "failure number 3" in job.error and job.failed_at is not None
    memory = Memory.objects.get(id=result.memory.id)
    assert memory.content == RAW_TEXT and not memory.is_deleted
    assert memory.extraction_status == "failed"
    assert tasks.process_pending() == {} and tasks.run_job(job.id) is None
    assert LlmCall.objects.filter(job=job, kind="extract").count() == 3

    assert jobs.retry_job(job.id, actor=Actor("dana"))  # a person sends it back
    assert tasks.process_pending() == {"completed": 1}
    assert Memory.objects.get(id=memory.id).extraction_status == "completed"


def test_max_attempts_comes_from_the_config(fake_ollama):
    configure(jobs__maxAttempts=1)
    fake_ollama.script("/api/chat", Script({"error": "nope"}, 500))
    result = raw(RAW_TEXT)
    assert tasks.run_job(result.job.id) == "dead"


def test_a_reply_that_is_not_json_is_a_failed_attempt_then_dead_with_the_reply_logged(
    fake_ollama,
):
    # Issue 10 item 7: it used to complete with 0 facts and a warning nobody saw.
    configure(jobs__maxAttempts=2)
    apology = "Sorry, I could not find any durable facts in this text!"
    fake_ollama.chat_reply(apology, apology)
    result = raw(RAW_TEXT)
    assert tasks.run_job(result.job.id) == "pending"
    make_due(result.job)
    assert tasks.run_job(result.job.id) == "dead"
    job = Job.objects.get(id=result.job.id)
    assert "UnusableReply" in job.error and "Failed to parse model output as JSON" in job.error
    assert "Sorry, I could not find" in job.error
    logged = list(LlmCall.objects.filter(job=job, kind="extract"))
    assert [call.raw_response for call in logged] == [apology, apology]
    assert all("Failed to parse" in call.error for call in logged)
    assert not Proposal.objects.exists()
    assert Memory.objects.get(id=result.memory.id).extraction_status == "failed"


def test_input_shorter_than_a_fact_skips_the_model_call_with_a_warning(fake_ollama):
    source, job = run("Hi there")
    assert job.status == "completed" and fake_ollama.calls("/api/chat") == []
    assert job.result["facts"] == []
    assert job.result["warnings"] == ["Input too short (< 10 chars)"]


# --- leases, sweep, command, maintenance ----------------------------------------------------------


def age_lease(job_id, minutes=30):
    Job.objects.filter(id=job_id).update(leased_at=timezone.now() - timedelta(minutes=minutes))


def test_a_stale_lease_is_reclaimed_and_retried():
    result = raw(RAW_TEXT)
    claim = jobs.claim_job(result.job.id)
    assert claim.attempts == 1
    assert jobs.claim_job(result.job.id) is None  # leased: nobody else gets it
    assert jobs.reclaim_stale_leases(timedelta(minutes=10)) == {"dead": 0, "retried": 0}
    age_lease(claim.job_id)
    assert jobs.reclaim_stale_leases(timedelta(minutes=10)) == {"dead": 0, "retried": 1}
    job = Job.objects.get(id=claim.job_id)
    assert job.status == "pending" and job.leased_at is None and "lease expired" in job.error
    assert tasks.process_pending() == {"completed": 1}
    assert Job.objects.get(id=claim.job_id).attempts == 2


def test_a_stale_lease_with_no_attempts_left_is_dead():
    configure(jobs__maxAttempts=1)
    result = raw(RAW_TEXT)
    jobs.claim_job(result.job.id)
    age_lease(result.job.id)
    assert jobs.reclaim_stale_leases(timedelta(minutes=10)) == {"dead": 1, "retried": 0}
    job = Job.objects.get(id=result.job.id)
    assert job.status == "dead" and "lease expired" in job.error
    memory = Memory.objects.get(id=result.memory.id)
    assert memory.extraction_status == "failed" and memory.content == RAW_TEXT


def queued_job_ids() -> list:
    return [task.args()[0] for task in OrmQ.objects.all()]


def test_sweep_hands_off_pending_jobs_whose_hand_off_was_lost():
    fresh = raw("Fresh memory about the billing service and its database.")
    lost = raw("Old memory about the staging cluster in eu-west-1.")
    waiting = raw("A retried memory about Kenji and the billing dashboard.")
    long_ago = timezone.now() - timedelta(minutes=5)
    Job.objects.filter(id=lost.job.id).update(updated_at=long_ago)
    Job.objects.filter(id=waiting.job.id).update(
        attempts=1, next_attempt_at=timezone.now() - timedelta(seconds=1)
    )
    assert not OrmQ.objects.exists()  # on_commit hand-offs never ran in this test

    report = tasks.sweep()
    assert report["handedOff"] == 2
    assert sorted(queued_job_ids()) == sorted([lost.job.id, waiting.job.id])
    assert fresh.job.id not in queued_job_ids()
    task = OrmQ.objects.first().task
    assert task["func"] == "pipeline.tasks.run_job"


def test_sweep_reclaims_stale_leases_and_hands_nothing_off_while_disabled():
    result = raw(RAW_TEXT)
    jobs.claim_job(result.job.id)
    age_lease(result.job.id, minutes=60)
    set_mode("disabled")
    report = tasks.sweep()
    assert report == {"dead": 0, "retried": 1, "handedOff": 0}
    assert not OrmQ.objects.exists()


def run_process_jobs(*args) -> str:
    out = StringIO()
    call_command("process_jobs", *args, stdout=out)
    return out.getvalue().strip()


def test_the_process_jobs_command_runs_pending_jobs_and_reports():
    raw("Kenji deploys billing-api with Terraform every Friday.")
    raw("Priya prefers squash merges for every repository.")
    assert run_process_jobs("--limit", "1") == "Processed 1 job(s): 1 completed."
    assert Job.objects.filter(status="pending").count() == 1
    assert run_process_jobs() == "Processed 1 job(s): 1 completed."
    assert run_process_jobs() == "Processed 0 job(s): nothing to do."
    raw("Ana maintains the payments gateway in Go.")
    set_mode("disabled")
    assert "disabled" in run_process_jobs()
    assert Job.objects.filter(status="pending").count() == 1


@pytest.fixture
def unembedded(db):
    """A memory written without a job, so nothing has computed its vector yet."""
    memory = seed("Ana maintains the payments gateway in Go.")
    assert not Embedding.objects.filter(content_hash=memory.content_hash).exists()
    return memory


def has_vector(memory) -> bool:
    return Embedding.objects.filter(content_hash=memory.content_hash).exists()


def test_tick_runs_maintenance_when_due_and_embeds_missing_vectors(unembedded):
    report = tasks.tick()
    assert report["maintenance"]["embedded"] == 1 and has_vector(unembedded)
    assert Memory.objects.get(id=unembedded.id).embedding_model == "offline-hash-768"
    assert get_config().last_maintenance_at is not None

    second = seed("Kenji owns the billing dashboard and its alerts.")
    report = tasks.tick()  # within intervalMinutes: sweep only
    assert "maintenance" not in report and "sweep" in report and not has_vector(second)

    PipelineConfig.objects.filter(pk=1).update(
        last_maintenance_at=timezone.now() - timedelta(minutes=31)
    )
    assert tasks.tick()["maintenance"]["embedded"] == 1 and has_vector(second)


@pytest.mark.parametrize("changes", [{"autonomous__enabled": False}, {"autonomous__frozen": True}])
def test_tick_skips_maintenance_when_autonomous_is_off_or_frozen(unembedded, changes):
    configure(**changes)
    report = tasks.tick()
    assert "maintenance" not in report and "sweep" in report
    assert not has_vector(unembedded) and get_config().last_maintenance_at is None


def test_tick_respects_the_configured_interval(unembedded):
    configure(autonomous__intervalMinutes=5)
    PipelineConfig.objects.filter(pk=1).update(
        last_maintenance_at=timezone.now() - timedelta(minutes=4)
    )
    assert "maintenance" not in tasks.tick()
    PipelineConfig.objects.filter(pk=1).update(
        last_maintenance_at=timezone.now() - timedelta(minutes=6)
    )
    assert "maintenance" in tasks.tick()


def test_maintenance_purges_old_completed_jobs_call_logs(db):
    _, old_with_proposals = run("Kenji deploys billing-api with Terraform every Friday.")
    _, old_without = run("ok thanks")  # too short for a fact: no proposals
    _, recent = run("Priya prefers squash merges for every repository.")
    assert old_without.result["facts"] == []
    assert Proposal.objects.filter(job=old_with_proposals).exists()
    long_ago = timezone.now() - timedelta(days=get_config().retention_days + 1)
    Job.objects.filter(id__in=[old_with_proposals.id, old_without.id]).update(updated_at=long_ago)

    report = tasks.maintenance()
    assert report["purged"]["jobs"] == 1
    assert not LlmCall.objects.filter(job_id__in=[old_with_proposals.id, old_without.id])
    assert LlmCall.objects.filter(job=recent).exists()
    assert Job.objects.filter(id=old_with_proposals.id).exists()  # its proposals point at it
    assert not Job.objects.filter(id=old_without.id).exists()
    assert Memory.objects.filter(content="ok thanks").exists()  # the raw memory stays


def test_embed_missing_stores_vectors_without_touching_content(unembedded):
    assert tasks.embed_missing() == 1
    assert tasks.embed_missing() == 0
    memory = Memory.objects.get(id=unembedded.id)
    assert memory.version == 1 and memory.content == unembedded.content
    assert normalize(memory.content).hash == memory.content_hash
