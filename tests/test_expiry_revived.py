"""An expired memory keeps its text's one place among the agent's memories (the partial unique
index on agent and content): a remember, a job's ADD or an approved ADD of that same text brings
it back, live, with the new write's expiry, as an audited edit. They used to be folded into the
expired memory as duplicates, so what was said again could never be recalled."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from memory import writes
from memory.models import Memory, MemoryHistory
from memory.writes import REVIVED, Actor
from pipeline import review
from pipeline.models import Proposal, ProposalStatus
from pipeline.tasks import process_pending
from tests.pipeline_support import ScriptedModel, fact, raw, set_mode

pytestmark = pytest.mark.django_db

AGENT = Actor("claude-code", "agent")
REVIEWER = Actor("ada", "operator")
FACT = "The staging cluster is named quokka"


def expired(text: str = FACT) -> Memory:
    """A memory that expired a moment ago (set as a PATCH or the dashboard sets it)."""
    memory = writes.remember(text, actor=AGENT, create_job=False).memory
    past = timezone.now() - timedelta(seconds=1)
    writes.modify(memory.id, {"expires_at": past}, actor=REVIEWER, reason="no longer true")
    memory.refresh_from_db()
    assert memory.is_expired
    return memory


def revivals(memory: Memory) -> list[MemoryHistory]:
    return list(MemoryHistory.objects.filter(memory_id=memory.id, reason__contains=REVIVED))


def test_remembering_an_expired_memorys_text_brings_it_back_with_the_new_expiry():
    old = expired()
    later = (timezone.now() + timedelta(days=2)).replace(microsecond=0)
    again = writes.remember(FACT, actor=AGENT, create_job=False, expires_at=later)
    assert again.deduped and again.memory.id == old.id
    old.refresh_from_db()
    assert not old.is_expired and old.expires_at == later
    (audit,) = revivals(old)
    assert audit.event == "updated" and audit.changed_by == AGENT.name
    assert Memory.objects.filter(content=FACT).count() == 1
    # Said again without an expiry: none is kept.
    expire_again = timezone.now() - timedelta(seconds=1)
    writes.modify(old.id, {"expires_at": expire_again}, actor=REVIEWER, reason="over again")
    writes.remember(FACT, actor=AGENT, create_job=False)
    old.refresh_from_db()
    assert old.expires_at is None and len(revivals(old)) == 2


def test_the_api_answers_the_memory_it_brought_back_and_recall_finds_it(client, ingest_auth):
    old = expired()
    response = client.post(
        "/api/memory/remember",
        json.dumps({"content": FACT}),
        content_type="application/json",
        **ingest_auth,
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["deduped"] is True and body["id"] == old.id
    shown = client.get(f"/api/memory/{old.id}", **ingest_auth).json()
    assert shown["expiresAt"] is None and shown["expired"] is False
    found = client.post(
        "/api/memory/recall",
        json.dumps({"query": "staging cluster quokka"}),
        content_type="application/json",
        **ingest_auth,
    )
    assert old.id in [hit["id"] for hit in found.json()["results"]]


def test_a_live_duplicate_is_left_as_it_is():
    memory = writes.remember(FACT, actor=AGENT, create_job=False).memory
    later = timezone.now() + timedelta(days=2)
    again = writes.remember(FACT, actor=AGENT, create_job=False, expires_at=later)
    assert again.deduped and again.memory.id == memory.id
    memory.refresh_from_db()
    assert memory.expires_at is None and memory.version == 1 and not revivals(memory)


def test_a_jobs_add_of_an_expired_memorys_text_brings_it_back_with_the_raw_memorys_expiry(
    fake_ollama,
):
    set_mode("controlled-write")
    old = expired()
    ScriptedModel(fake_ollama, facts=[fact(FACT)])
    when = (timezone.now() + timedelta(days=3)).replace(microsecond=0)
    source = raw("The staging cluster is called quokka now.", expires_at=when).memory
    process_pending()
    proposal = Proposal.objects.get(source_memory=source, action="add")
    assert proposal.status == ProposalStatus.DEDUPED and proposal.deduped_existing_id == old.id
    old.refresh_from_db()
    assert not old.is_expired and old.expires_at == when
    (audit,) = revivals(old)
    assert audit.changed_by == "pipeline-v2" and source.id in audit.reason
    assert Memory.objects.filter(content=FACT).count() == 1


def test_in_shadow_mode_the_add_waits_for_review_and_its_approval_brings_the_memory_back(
    fake_ollama,
):
    set_mode("shadow")
    old = expired()
    ScriptedModel(fake_ollama, facts=[fact(FACT)])
    source = raw("The staging cluster is called quokka now.").memory
    process_pending()
    pending = Proposal.objects.get(source_memory=source, action="add")
    assert pending.status == ProposalStatus.PENDING  # not folded into the expired memory
    old.refresh_from_db()
    assert old.is_expired and not revivals(old)
    review.approve(pending.id, REVIEWER)
    old.refresh_from_db()
    assert not old.is_expired and old.expires_at is None
    (audit,) = revivals(old)
    assert audit.changed_by == REVIEWER.name
    assert Memory.objects.filter(content=FACT).count() == 1


def test_approving_an_add_whose_raw_memory_expired_since_leaves_the_expired_memory_as_it_is(
    fake_ollama,
):
    """The fact's raw memory expired before the approval: the write has expired too, so the
    expired memory with that text stays expired and the ADD is deduped into it (it was refused
    with "nothing to change")."""
    set_mode("shadow")
    old = expired()
    ScriptedModel(fake_ollama, facts=[fact(FACT)])
    when = timezone.now() + timedelta(days=1)
    source = raw("The staging cluster is called quokka now.", expires_at=when).memory
    process_pending()
    pending = Proposal.objects.get(source_memory=source, action="add")
    Memory.objects.filter(id=source.id).update(expires_at=timezone.now() - timedelta(seconds=1))
    approved = review.approve(pending.id, REVIEWER)
    assert approved.status == ProposalStatus.DEDUPED and approved.deduped_existing_id == old.id
    old.refresh_from_db()
    assert old.is_expired and not revivals(old)
