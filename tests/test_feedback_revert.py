"""An agent's feedback (or any note on a memory's trail that does not change it) never blocks the
revert or the undo of the proposal that made the memory; a real change since still does."""

import json

import pytest

from memory import feedback, writes
from memory.models import Memory
from memory.writes import Actor, Refused
from pipeline import review as reviewing
from pipeline.models import Proposal
from tests.pipeline_support import RAW_TEXT, four_decisions, raw, seed_store, set_mode

pytestmark = pytest.mark.django_db
RITA = Actor("rita", "operator")
CLAUDE = Actor("claude-code", "agent")


@pytest.fixture
def full_job(fake_ollama):
    """A raw memory whose job applied an ADD, an UPDATE and a DELETE in full mode."""
    from pipeline.tasks import process_pending

    four_decisions(fake_ollama, seed_store())
    set_mode("full")
    source = raw(RAW_TEXT).memory
    process_pending()
    return {p.action: p for p in Proposal.objects.filter(source_memory=source)}


@pytest.mark.parametrize("action", ["add", "update"])
def test_a_revert_goes_through_after_an_agents_feedback_on_the_memory(
    client, full_job, review_auth, action
):
    proposal = full_job[action]
    memory_id = proposal.created_memory_id or proposal.updated_memory_id
    feedback.record_feedback(memory_id, actor=CLAUDE, verdict="used", note="it helped")
    response = client.post(
        f"/api/proposals/{proposal.id}/revert",
        json.dumps({"reason": "wrong fact"}),
        content_type="application/json",
        **review_auth,
    )
    assert response.status_code == 200, response.json()
    assert response.json()["revertedBy"] == "reviewer-bot"
    memory = Memory.objects.get(id=memory_id)
    assert memory.is_deleted if action == "add" else memory.content != proposal.fact_content


def test_undoing_an_approval_goes_through_after_feedback(fake_ollama):
    from pipeline.tasks import process_pending

    four_decisions(fake_ollama, seed_store())
    set_mode("shadow")
    raw(RAW_TEXT)
    process_pending()
    add = Proposal.objects.get(action="add")
    approved = reviewing.approve(add.id, RITA)
    feedback.record_feedback(approved.created_memory_id, actor=CLAUDE, verdict="contradicted")
    undone = reviewing.undo(add.id, RITA)
    assert undone.status == "pending"
    assert Memory.objects.get(id=approved.created_memory_id).is_deleted


def test_a_real_edit_after_feedback_still_blocks_the_revert(full_job):
    proposal = full_job["add"]
    memory_id = proposal.created_memory_id
    feedback.record_feedback(memory_id, actor=CLAUDE, verdict="used")
    writes.modify(memory_id, {"tags": ["billing"]}, actor=RITA, reason="tagged")
    feedback.record_feedback(memory_id, actor=CLAUDE, verdict="used")
    with pytest.raises(Refused) as refused:
        reviewing.revert_once(proposal.id, RITA)
    assert refused.value.code == "changed_since"
    assert not Memory.objects.get(id=memory_id).is_deleted
