"""A proposal whose raw memory changed since its job is stale, like one whose target changed:
approve (API, dashboard, bulk) answers `stale` and writes nothing, until a reviewer re-decides on
the raw memory's current version."""

import pytest

from memory import feedback, writes
from memory.models import Memory, MemoryHistory
from memory.writes import Actor
from pipeline import review, tasks
from pipeline.models import Proposal
from tests.pipeline_support import (
    ADD_FACT,
    RAW_TEXT,
    UPDATE_FACT,
    approve,
    four_decisions,
    raw,
    seed_store,
)

CORRECTED = "Notes from the Tuesday platform sync: Priya prefers rebase merges after all."


@pytest.fixture
def store(db):
    return seed_store()


@pytest.fixture
def pending(fake_ollama, store):
    """Shadow mode: the raw memory's ADD, UPDATE and DELETE wait for a reviewer."""
    four_decisions(fake_ollama, store)
    result = raw(RAW_TEXT)
    tasks.process_pending()
    return {p.action: p for p in Proposal.objects.filter(job=result.job)}


def correct_the_raw_memory(proposal):
    return writes.modify(
        proposal.source_memory_id,
        {"content": CORRECTED},
        actor=Actor("dana"),
        reason="the notes were wrong",
    )


def test_the_job_records_the_version_of_the_raw_memory_it_read(pending):
    add = pending["add"]
    assert add.source_version == 1 == Memory.objects.get(id=add.source_memory_id).version


def test_approving_an_add_from_a_corrected_raw_memory_is_stale_until_re_decided(
    client, pending, review_auth
):
    add = pending["add"]
    correct_the_raw_memory(add)
    response = approve(client, review_auth, add)
    assert response.status_code == 409
    body = response.json()
    assert body["error"] == "stale"
    assert body["sourceVersion"] == 1 and body["currentSourceVersion"] == 2
    assert body["currentSourceContent"] == CORRECTED
    assert not Memory.objects.filter(content=ADD_FACT).exists()  # the corrected-away fact
    proposal = Proposal.objects.get(id=add.id)
    assert proposal.status == "stale" and proposal.blocked_reason == "source_changed"
    audit = MemoryHistory.objects.get(event="reviewed", metadata__proposalId=add.id)
    assert audit.metadata["decision"] == "stale"

    assert approve(client, review_auth, add).status_code == 409  # never without re-deciding
    response = approve(client, review_auth, add, redecide=True, note="still true")
    assert response.status_code == 200 and response.json()["status"] == "applied"
    proposal.refresh_from_db()
    assert proposal.source_version == 2
    assert Memory.objects.filter(content=ADD_FACT, is_deleted=False).count() == 1


def test_an_update_from_a_corrected_raw_memory_leaves_its_target_alone(
    client, pending, store, review_auth
):
    correct_the_raw_memory(pending["update"])
    response = approve(client, review_auth, pending["update"])
    assert response.status_code == 409 and response.json()["error"] == "stale"
    target = Memory.objects.get(id=store.postgres.id)
    assert target.version == 1 and target.content != UPDATE_FACT


def test_bulk_approval_leaves_proposals_of_a_corrected_raw_memory_undecided(pending):
    correct_the_raw_memory(pending["add"])
    ids = [pending["add"].id, pending["delete"].id]
    outcomes = review.bulk_approve(ids, Actor("rita"), note="bulk")
    assert [o.done for o in outcomes] == [False, False]
    assert all("raw memory" in o.error for o in outcomes)
    assert set(Proposal.objects.filter(id__in=ids).values_list("status", flat=True)) == {"stale"}
    assert not Memory.objects.filter(content=ADD_FACT).exists()


def test_feedback_on_the_raw_memory_does_not_make_its_proposals_stale(client, pending, review_auth):
    add = pending["add"]
    feedback.record_feedback(add.source_memory_id, actor=Actor("claude", "agent"), verdict="used")
    assert approve(client, review_auth, add).status_code == 200


def test_the_dashboard_shows_the_corrected_raw_memory_and_offers_re_deciding(
    reviewer_client, pending, hx
):
    add = pending["add"]
    correct_the_raw_memory(add)
    response = reviewer_client.post(
        f"/proposals/{add.id}/decide/", {"from": "row", "decision": "approve"}, **hx
    )
    assert "raw memory this fact came from changed" in response.content.decode()
    assert not Memory.objects.filter(content=ADD_FACT).exists()
    page = reviewer_client.get(f"/proposals/{add.id}/").content.decode()
    assert "Apply to the current version" in page
    assert 'data-testid="source-changed"' in page and "v1 → v2" in page
    assert RAW_TEXT in page  # what the job read, beside the current text
    workbench = reviewer_client.get("/contradictions/").content.decode()
    assert "Its raw memory was edited since the job." in workbench and CORRECTED in workbench
    reviewer_client.post(
        f"/proposals/{add.id}/decide/", {"from": "row", "decision": "redecide"}, **hx
    )
    assert Proposal.objects.get(id=add.id).status == "applied"
    assert Memory.objects.filter(content=ADD_FACT, is_deleted=False).exists()
