"""The job's write keeps the seed's rules: a source edited while its job ran is never processed as
if unedited (issue 10 item 1), ADD gates run in the seed's order, a flagged UPDATE/DELETE in
controlled-write waits as destructive, and a NONE keeps the memory that covers the fact (item 8).
"""

import numpy as np
import pytest
from django.urls import reverse

from memory import writes
from memory.models import Embedding, Job, Memory, MemoryHistory
from memory.writes import Actor
from pipeline import tasks
from pipeline.llm.offline import OfflineEmbedder
from pipeline.models import LlmCall, Proposal
from pipeline.writes import jobs, record
from tests.pipeline_support import (
    CONTRADICTING_FACT,
    NONE_FACT,
    RAW_TEXT,
    ScriptedModel,
    decision,
    fact,
    raw,
    seed,
    seed_store,
    set_mode,
)

pytestmark = pytest.mark.django_db

HOME = "Dana lives at 12 Harbor Street in Oslo with her two cats."
EDITED = "Dana asked us to keep no home address on file for her anymore."


# --- issue 10 item 1: a source edited while its job runs ------------------------------------------


def test_a_source_edited_while_its_job_ran_writes_nothing_and_is_requeued_on_the_new_text(
    django_capture_on_commit_callbacks,
):
    set_mode("controlled-write")
    result = raw(HOME)
    claim = jobs.claim_job(result.job.id)
    outcome = tasks.compute(claim, [])  # the model read the home address
    assert any("Harbor" in f.content for f in outcome.facts)
    writes.modify(result.memory.id, {"content": EDITED}, actor=Actor("dana"), reason="no address")

    with django_capture_on_commit_callbacks(execute=False) as handed_off:
        written = record.record_job(outcome)

    assert "requeued" in written
    job = Job.objects.get(id=result.job.id)
    assert job.status == "pending" and job.leased_at is None
    assert job.attempts == 0  # an edit is not a failed attempt
    assert len(handed_off) == 1  # back to the queue at once
    assert not Proposal.objects.exists()
    assert not Memory.objects.filter(source_type="pipeline-v2").exists()
    assert not MemoryHistory.objects.filter(event="none").exists()
    source = Memory.objects.get(id=result.memory.id)
    # The old text's vector went nowhere: not under the edited text, not under the old one.
    assert source.embedding_model is None and not Embedding.objects.exists()
    assert source.extraction_status == "pending"
    assert LlmCall.objects.filter(job=job, kind="extract").count() == 1  # what the model saw

    assert tasks.process_pending() == {"completed": 1}  # the retry reads the current text
    job.refresh_from_db()
    facts = [f["content"] for f in job.result["facts"]]
    assert facts and not any("Harbor" in f for f in facts)
    assert all("Harbor" not in p.fact_content for p in Proposal.objects.all())
    stored = Embedding.objects.get(content_hash=source.content_hash)
    expected = OfflineEmbedder(768).embed_one(EDITED)
    assert np.allclose(np.frombuffer(stored.vector, dtype=np.float32), expected, atol=1e-6)


def test_a_source_edited_back_to_the_same_text_is_recorded_as_usual():
    set_mode("controlled-write")
    result = raw(HOME)
    outcome = tasks.compute(jobs.claim_job(result.job.id), [])
    actor = Actor("dana")
    writes.modify(result.memory.id, {"tags": ["home"]}, actor=actor, reason="tagged")
    assert "requeued" not in record.record_job(outcome)  # same text: the facts still hold
    assert Job.objects.get(id=result.job.id).status == "completed"


def test_a_source_moved_to_another_agent_while_its_job_ran_is_requeued_not_written():
    """The write looks up duplicates among the agent's memories the model's job was read for:
    under another agent those lookups would miss, so the job runs again for the new owner."""
    set_mode("controlled-write")
    result = raw(HOME)
    outcome = tasks.compute(jobs.claim_job(result.job.id), [])
    Memory.objects.filter(id=result.memory.id).update(agent_id="another-agent")

    assert record.record_job(outcome)["requeued"] == record.MOVED
    assert Job.objects.get(id=result.job.id).status == "pending"
    assert not Proposal.objects.exists()
    assert not Memory.objects.filter(source_type="pipeline-v2").exists()


# --- issue 10 item 8: the seed's gate order --------------------------------------------------------


def test_a_low_confidence_duplicate_is_skipped_for_confidence_not_deduped(fake_ollama):
    set_mode("controlled-write")
    existing = seed("Priya prefers squash merges for every repository.")
    ScriptedModel(
        fake_ollama, facts=[fact("Priya prefers squash merges for every repository", 0.4)]
    )
    result = raw(RAW_TEXT)
    tasks.process_pending()
    proposal = Proposal.objects.get(job=result.job)
    assert proposal.status == "skipped" and proposal.skipped_reason == "low_fact_confidence"
    assert proposal.deduped_existing_id is None
    assert Memory.objects.filter(id=existing.id, is_deleted=False).exists()


def test_a_flagged_update_in_controlled_write_waits_as_a_destructive_change(fake_ollama):
    set_mode("controlled-write")
    store = seed_store()
    ScriptedModel(
        fake_ollama,
        facts=[CONTRADICTING_FACT],
        decisions={CONTRADICTING_FACT: decision("update", store.postgres)},
    )
    result = raw(RAW_TEXT)
    tasks.process_pending()
    proposal = Proposal.objects.get(job=result.job)
    assert proposal.status == "pending" and proposal.review_needed
    assert proposal.blocked_reason == "destructive_mutations_disabled"
    audit = MemoryHistory.objects.get(event="none", metadata__proposalId=proposal.id)
    assert audit.metadata["blockedReason"] == "destructive_mutations_disabled"
    assert audit.metadata["reviewNeeded"] is True and audit.metadata["contradictionRisk"] is True


def test_a_none_decision_keeps_the_memory_that_covers_the_fact(
    fake_ollama, client, ingest_auth, viewer_client
):
    set_mode("controlled-write")
    kenji = seed(NONE_FACT)
    ScriptedModel(
        fake_ollama,
        facts=[NONE_FACT + " and its alerts"],
        decisions={NONE_FACT + " and its alerts": decision("none", 1, reason="Already stored")},
    )
    result = raw(RAW_TEXT)
    tasks.process_pending()
    proposal = Proposal.objects.get(job=result.job)
    assert proposal.action == "none" and proposal.status == "recorded"
    assert proposal.target_memory_id == kenji.id and proposal.target_content == kenji.content

    listed = client.get(f"/api/proposals?sourceMemoryId={result.memory.id}", **ingest_auth).json()
    assert listed["proposals"][0]["targetMemoryId"] == kenji.id
    page = viewer_client.get(reverse("dashboard:proposal", args=[proposal.id]))
    body = page.content.decode()
    assert 'data-testid="covered-by"' in body
    assert reverse("dashboard:memory", args=[kenji.id]) in body


# --- the candidates a proposal records ------------------------------------------------------------


def test_a_proposal_records_whether_each_candidate_is_pinned_as_true_or_false():
    pinned = seed("The billing service runs on Postgres 14 in production", pinned=True)
    loose = seed("The billing service runs on Postgres 14 in staging")
    claim = jobs.claim_job(raw("The billing service runs on Postgres 14.").job.id)
    outcome = tasks.compute(claim, [])
    record.record_job(outcome)

    recorded = {c["memoryId"]: c["pinned"] for p in Proposal.objects.all() for c in p.candidates}
    # Booleans (the JSON, the review page and the eval export read them), not 0 and 1.
    assert recorded[pinned.id] is True
    assert recorded[loose.id] is False
