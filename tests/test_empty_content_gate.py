"""The empty-content gate on every path (issue 10, item 2): text that is only punctuation or hidden
characters never becomes a memory's content, whether it comes from the store's callers, the
pipeline in full mode, a reviewer's approval through the API or the dashboard, or an edit."""

import json

import pytest

from memory import writes
from memory.models import Memory, MemoryHistory
from memory.writes import Actor, Refused
from pipeline import review, tasks
from pipeline.models import Proposal
from tests.aria_checks import assert_errors_described
from tests.fake_ollama import Script
from tests.pipeline_support import (
    RAW_TEXT,
    ScriptedModel,
    approve,
    decision,
    fact,
    four_decisions,
    raw,
    seed_store,
    set_mode,
)

pytestmark = pytest.mark.django_db
PERSON = Actor("dana")
NOT_TEXT = [
    "!!!!!!!!!!....",
    ".....",
    "?!\u200b.",
    "\u200b\u200b\ufeff...",
    # Blank characters and a lone accent (a QA pass stored each as a memory).
    "\u0001\u0002",
    "\u3164",
    "\u2800",
    "\u0301",
    "\u061c\ufe0f \u034f",
]


@pytest.fixture
def store(db):
    return seed_store()


@pytest.fixture
def pending(fake_ollama, store):
    """Shadow mode: the ADD, UPDATE and DELETE of one raw memory wait for a reviewer."""
    four_decisions(fake_ollama, store)
    result = raw(RAW_TEXT)
    tasks.process_pending()
    return {p.action: p for p in Proposal.objects.filter(job=result.job)}


@pytest.mark.parametrize("text", NOT_TEXT)
def test_the_store_refuses_text_without_visible_words(store, text):
    with pytest.raises(Refused) as modify:
        writes.modify(store.postgres.id, {"content": text}, actor=PERSON, reason="edit")
    assert modify.value.code == "invalid_content"
    with pytest.raises(Refused) as derive:
        writes.derive_in_transaction(
            text,
            type="fact",
            agent_id="default",
            source_id=store.kenji.id,
            who="pipeline-v2",
            why="extracted-fact",
            importance=0.9,
            extraction_model=None,
            actor=PERSON,
            reason="approved",
        )
    assert derive.value.code == "invalid_content"
    assert Memory.objects.get(id=store.postgres.id).version == 1
    assert Memory.objects.count() == 3


def test_a_pipeline_update_to_punctuation_is_skipped_with_a_reason(fake_ollama, store):
    set_mode("full")
    tasks.embed_missing()  # the candidates' vectors
    junk = "!!!!!!!!!!...."
    ScriptedModel(
        fake_ollama, facts=[fact(junk)], decisions={junk: decision("update", store.postgres)}
    )
    # A real embedding model gives punctuation a vector too; this one lands on the target.
    embed = fake_ollama.embedder.embed_one
    fake_ollama.script(
        "/api/embed",
        Script({"embeddings": [embed(RAW_TEXT).tolist(), embed(store.postgres.content).tolist()]}),
    )
    result = raw(RAW_TEXT)
    tasks.process_pending()
    (proposal,) = Proposal.objects.filter(job=result.job)
    assert (proposal.action, proposal.status) == ("update", "skipped")
    assert proposal.skipped_reason == "update_invalid_content"
    target = Memory.objects.get(id=store.postgres.id)
    assert (target.content, target.version) == ("The billing service runs on Postgres 14", 1)


@pytest.mark.parametrize("action", ["add", "update"])
def test_approving_with_punctuation_is_a_400_like_patch(
    client, pending, store, review_auth, action
):
    response = approve(client, review_auth, pending[action], content=".....")
    patch = client.patch(
        f"/api/memory/{store.postgres.id}",
        json.dumps({"content": ".....", "reason": "edit"}),
        content_type="application/json",
        **review_auth,
    )
    assert response.status_code == patch.status_code == 400
    assert response.json()["error"] == patch.json()["error"]
    assert Proposal.objects.get(id=pending[action].id).status == "pending"
    assert Memory.objects.get(id=store.postgres.id).version == 1


@pytest.mark.parametrize("action", ["add", "update"])
def test_the_reviewer_entry_point_refuses_punctuation_too(pending, store, action):
    with pytest.raises(Refused) as refused:
        review.approve(pending[action].id, PERSON, content="?!\u200b.")
    assert refused.value.code == "invalid_content"
    assert Proposal.objects.get(id=pending[action].id).status == "pending"
    assert not MemoryHistory.objects.filter(event="reviewed").exists()


def test_a_dashboard_approval_with_punctuation_shows_the_error_in_the_row(
    reviewer_client, pending, hx
):
    add = pending["add"]
    response = reviewer_client.post(
        f"/proposals/{add.id}/decide/",
        {"from": "row", "decision": "approve", "content": "....."},
        **hx,
    )
    # The decision's form says it before the store's gate would (dashboard.review_forms).
    assert "The text is empty: write the fact before approving it." in response.content.decode()
    assert Proposal.objects.get(id=add.id).status == "pending"


def test_a_dashboard_edit_to_punctuation_shows_the_error_next_to_the_content(
    reviewer_client, store, hx
):
    response = reviewer_client.post(
        f"/memories/{store.postgres.id}/action/",
        {"action": "edit", "content": "!!!!....", "reason": "edit", "if_version": 1},
        **hx,
    )
    body = response.content.decode()
    assert "The content is empty after normalisation.</p>" in body
    assert_errors_described(body)
    assert Memory.objects.get(id=store.postgres.id).version == 1
