"""Reviewer actions through the JSON API: approve (as is, edited, re-decided), reject, refusals,
list filters, and exactly-once under two concurrent reviewers."""

import threading

import pytest
from django.db import connections

from memory import writes
from memory.models import Memory, MemoryCold, MemoryHistory
from memory.writes import Actor, Refused
from pipeline import review, tasks
from pipeline.models import Proposal
from tests.pipeline_support import (
    ADD_FACT,
    CONTRADICTING_FACT,
    DELETE_FACT,
    NONE_FACT,
    RAW_TEXT,
    UPDATE_FACT,
    ScriptedModel,
    approve,
    configure,
    decision,
    fact,
    four_decisions,
    raw,
    reject,
    seed_store,
    set_mode,
)

REVIEWER = "reviewer-bot"  # the review_auth token's name


@pytest.fixture
def store(db):
    return seed_store()


@pytest.fixture
def pending(fake_ollama, store):
    """Shadow mode: ADD, UPDATE and DELETE pending review, NONE recorded."""
    four_decisions(fake_ollama, store)
    result = raw(RAW_TEXT)
    tasks.process_pending()
    proposals = {p.action: p for p in Proposal.objects.filter(job=result.job)}
    assert {a: p.status for a, p in proposals.items()} == {
        "add": "pending",
        "update": "pending",
        "delete": "pending",
        "none": "recorded",
    }
    return proposals


def reviewed_audits(proposal):
    return MemoryHistory.objects.filter(event="reviewed", metadata__proposalId=proposal.id)


def test_reviewer_actions_need_the_review_scope(client, pending, ingest_auth):
    for action in (approve, reject):
        response = action(client, ingest_auth, pending["add"])
        assert response.status_code == 403 and response.json()["error"] == "forbidden"
    assert client.post(f"/api/proposals/{pending['add'].id}/approve").status_code == 401
    assert Proposal.objects.get(id=pending["add"].id).status == "pending"
    assert not MemoryHistory.objects.filter(event="reviewed").exists()


def test_approving_an_add_creates_the_memory_and_audits_the_reviewer(
    client, pending, review_auth, drain_queue
):
    add = pending["add"]
    response = approve(client, review_auth, add, note="looks right")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "applied" and body["decidedBy"] == REVIEWER and body["decidedAt"]
    created = Memory.objects.get(id=body["createdMemoryId"])
    assert created.content == ADD_FACT and created.source_id == add.source_memory_id
    assert created.who == "pipeline-v2" and created.source_type == "pipeline-v2"
    assert not created.embedding_model  # embedded after the commit, by a queue worker
    assert drain_queue() == 1
    created.refresh_from_db()
    assert created.embedding_model
    (history,) = MemoryHistory.objects.filter(memory=created)
    assert (history.event, history.changed_by, history.actor_type) == (
        "created",
        REVIEWER,
        "operator",
    )
    (audit,) = reviewed_audits(add)
    assert audit.memory_id == add.source_memory_id
    assert (audit.changed_by, audit.actor_type, audit.reason) == (
        REVIEWER,
        "operator",
        "looks right",
    )
    assert audit.metadata["decision"] == "approved" and audit.metadata["edited"] is False


def test_approving_an_edited_add_writes_the_reviewers_text(client, pending, review_auth):
    edited = "Priya prefers squash merges in every Git repository"
    response = approve(client, review_auth, pending["add"], content=edited)
    assert response.status_code == 200
    body = response.json()
    assert body["appliedContent"] == edited and body["fact"]["content"] == ADD_FACT
    assert Memory.objects.get(id=body["createdMemoryId"]).content == edited
    (audit,) = reviewed_audits(pending["add"])
    assert audit.metadata["edited"] is True


def test_approving_an_update_modifies_the_target_with_a_cold_copy(
    client, pending, store, review_auth
):
    response = approve(client, review_auth, pending["update"], note="upgrade confirmed")
    assert response.status_code == 200
    assert response.json()["updatedMemoryId"] == store.postgres.id
    target = Memory.objects.get(id=store.postgres.id)
    assert target.content == UPDATE_FACT and target.version == 2
    assert target.updated_by == REVIEWER
    cold = MemoryCold.objects.get(memory=target)
    assert cold.content == "The billing service runs on Postgres 14" and cold.version == 1
    updated = MemoryHistory.objects.get(memory=target, event="updated")
    assert (updated.changed_by, updated.actor_type) == (REVIEWER, "operator")
    assert updated.old_content == "The billing service runs on Postgres 14"
    assert updated.new_content == UPDATE_FACT
    (audit,) = reviewed_audits(pending["update"])
    assert (audit.changed_by, audit.actor_type) == (REVIEWER, "operator")


def test_approving_a_delete_soft_deletes_the_target(client, pending, store, review_auth):
    response = approve(client, review_auth, pending["delete"])
    assert response.status_code == 200 and response.json()["status"] == "applied"
    target = Memory.objects.get(id=store.staging.id)
    assert target.is_deleted and target.version == 2  # soft: the row is still there
    assert MemoryCold.objects.filter(memory=target).count() == 1
    deleted = MemoryHistory.objects.get(memory=target, event="deleted")
    assert (deleted.changed_by, deleted.actor_type) == (REVIEWER, "operator")


def test_rejecting_records_the_reason_and_writes_nothing(client, pending, store, review_auth):
    response = reject(client, review_auth, pending["update"], reason="still on 14 in prod")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "rejected" and body["reviewNote"] == "still on 14 in prod"
    assert body["decidedBy"] == REVIEWER
    target = Memory.objects.get(id=store.postgres.id)
    assert target.version == 1 and target.content.endswith("14")
    rows = {row.metadata["decision"]: row for row in reviewed_audits(pending["update"])}
    audit, kept = rows["rejected"], rows["kept"]
    assert audit.metadata["decision"] == "rejected" and audit.reason == "still on 14 in prod"
    assert audit.actor_type == "operator"
    # The memory it kept says so on its own trail; nothing of it changed.
    assert (kept.memory_id, kept.metadata["decision"]) == (target.id, "kept")
    assert kept.reason == "kept as it is: the proposed UPDATE was rejected: still on 14 in prod"


def test_a_decided_proposal_cannot_be_decided_again(client, pending, review_auth):
    assert approve(client, review_auth, pending["add"]).status_code == 200
    for action in (approve, reject):
        response = action(client, review_auth, pending["add"])
        assert response.status_code == 409
        body = response.json()
        assert body["error"] == "already_decided"
        assert REVIEWER in body["message"] and body["decidedBy"] == REVIEWER
        assert body["decidedAt"] and body["currentStatus"] == "applied"
    assert reject(client, review_auth, pending["delete"]).status_code == 200
    response = approve(client, review_auth, pending["delete"])
    assert response.status_code == 409 and response.json()["currentStatus"] == "rejected"
    response = approve(client, review_auth, pending["none"])  # recorded, never pending
    assert response.status_code == 409
    assert Memory.objects.filter(source_type="pipeline-v2").count() == 1
    assert reviewed_audits(pending["add"]).count() == 1


def test_nothing_is_applied_while_mutations_are_frozen(client, pending, store, review_auth):
    configure(mutationsFrozen=True)
    for action in ("add", "update", "delete"):
        response = approve(client, review_auth, pending[action])
        assert response.status_code == 409 and response.json()["error"] == "frozen"
        assert Proposal.objects.get(id=pending[action].id).status == "pending"
    assert Memory.objects.filter(source_type="pipeline-v2").count() == 0
    assert Memory.objects.get(id=store.postgres.id).version == 1
    assert not Memory.objects.get(id=store.staging.id).is_deleted
    assert not MemoryHistory.objects.filter(event="reviewed").exists()

    configure(mutationsFrozen=False)  # the brake is released: the same approval works
    assert approve(client, review_auth, pending["add"]).status_code == 200


def test_a_changed_target_is_stale_and_can_be_redecided(client, pending, store, review_auth):
    writes.modify(
        store.postgres.id,
        {"content": "The billing service runs on Postgres 15"},
        actor=Actor("dana"),
        reason="hotfix",
    )
    update = pending["update"]
    response = approve(client, review_auth, update)
    assert response.status_code == 409
    body = response.json()
    assert body["error"] == "stale" and body["currentVersion"] == 2 and body["targetVersion"] == 1
    assert body["currentContent"] == "The billing service runs on Postgres 15"
    proposal = Proposal.objects.get(id=update.id)
    assert proposal.status == "stale" and proposal.blocked_reason == "target_changed"
    target = Memory.objects.get(id=store.postgres.id)
    assert target.version == 2 and target.content.endswith("15")  # never applied blindly
    assert reviewed_audits(update).get().metadata["decision"] == "stale"

    assert approve(client, review_auth, update).status_code == 409  # not without re-deciding
    response = approve(client, review_auth, update, redecide=True, note="16 is right")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "applied" and body["targetVersion"] == 2
    target.refresh_from_db()
    assert target.content == UPDATE_FACT and target.version == 3
    assert MemoryCold.objects.filter(memory=target).count() == 2


def test_a_deleted_target_is_stale(client, pending, store, review_auth):
    writes.forget(store.postgres.id, actor=Actor("dana"), reason="obsolete")
    response = approve(client, review_auth, pending["update"])
    assert response.status_code == 409 and response.json()["error"] == "stale"
    proposal = Proposal.objects.get(id=pending["update"].id)
    assert proposal.status == "stale" and proposal.blocked_reason == "target_deleted"
    assert reject(client, review_auth, pending["update"], reason="gone").status_code == 200


def test_a_skipped_low_confidence_fact_can_be_approved_but_not_rejected(
    client, fake_ollama, review_auth
):
    set_mode("controlled-write")
    ScriptedModel(fake_ollama, facts=[fact(ADD_FACT, confidence=0.4)])
    raw(RAW_TEXT)
    tasks.process_pending()
    skipped = Proposal.objects.get()
    assert skipped.status == "skipped" and skipped.skipped_reason == "low_fact_confidence"

    response = reject(client, review_auth, skipped, reason="meh")
    assert response.status_code == 409 and response.json()["error"] == "already_decided"
    response = approve(client, review_auth, skipped)  # a human overrides the gate
    assert response.status_code == 200 and response.json()["status"] == "applied"
    assert Memory.objects.get(id=response.json()["createdMemoryId"]).content == ADD_FACT


def test_a_contradiction_can_be_resolved_by_keeping_both(client, fake_ollama, store, review_auth):
    ScriptedModel(
        fake_ollama,
        facts=[CONTRADICTING_FACT],
        decisions={CONTRADICTING_FACT: decision("update", store.postgres)},
    )
    raw(RAW_TEXT)
    tasks.process_pending()
    flagged = Proposal.objects.get(review_needed=True)
    response = approve(client, review_auth, flagged, action="add", note="both are true")
    assert response.status_code == 200
    body = response.json()
    # Two facts: the model proposed the UPDATE, the reviewer applied it as an ADD.
    assert (body["action"], body["appliedAs"], body["status"]) == ("update", "add", "applied")
    assert Memory.objects.get(id=body["createdMemoryId"]).content == CONTRADICTING_FACT
    assert Memory.objects.get(id=store.postgres.id).version == 1


@pytest.mark.parametrize(
    "body,status",
    [
        ({"content": "   "}, 400),
        ({"content": 7}, 400),
        ({"action": "merge"}, 400),
        ({"redecide": "yes"}, 400),
        # An ADD names no memory to change: bad input (it answered 404 "the target memory no
        # longer exists", found by a QA pass).
        ({"action": "delete"}, 400),
        ({"action": "update"}, 400),
    ],
)
def test_approve_rejects_bad_bodies(client, pending, review_auth, body, status):
    assert approve(client, review_auth, pending["add"], **body).status_code == status
    assert Proposal.objects.get(id=pending["add"].id).status == "pending"


def test_a_misspelt_field_is_refused_not_dropped(client, pending, review_auth):
    """`contnet` used to be dropped: the model's text was applied, unedited, with a 200."""
    response = approve(client, review_auth, pending["add"], contnet="The edited fact")
    assert response.status_code == 400 and response.json()["error"] == "invalid_request"
    assert "unknown field contnet: did you mean content?" in response.json()["message"]
    refused = reject(client, review_auth, pending["update"], reson="not durable")
    assert refused.status_code == 400 and "did you mean reason?" in refused.json()["message"]
    assert (
        Proposal.objects.filter(id__in=[pending["add"].id, pending["update"].id])
        .filter(status="pending")
        .count()
        == 2
    )
    # The fields each takes still work; an extra field unlike any of them is ignored, as ever.
    edited = approve(client, review_auth, pending["add"], content="The edited fact", reason="ok")
    assert edited.status_code == 200
    assert reject(client, review_auth, pending["update"], reason="not durable").status_code == 200


def test_unknown_proposals_are_404(client, review_auth, db):
    assert approve(client, review_auth, Proposal(id="nope")).status_code == 404
    assert reject(client, review_auth, Proposal(id="nope")).status_code == 404


def undo(client, auth, proposal, **body):
    return client.post(
        f"/api/proposals/{proposal.id}/undo", body, content_type="application/json", **auth
    )


def test_every_decision_is_taken_back_through_the_api(client, pending, store, review_auth):
    """Found by a QA pass: a rejection, or an approval that ended deduplicated, could be taken
    back in the dashboard only (revert answers 409 not_applied for them)."""
    update, delete = pending["update"], pending["delete"]
    assert approve(client, review_auth, update).status_code == 200
    assert Memory.objects.get(id=store.postgres.id).content == UPDATE_FACT
    taken_back = undo(client, review_auth, update, reason="approved too early")
    assert taken_back.status_code == 200 and taken_back.json()["status"] == "pending"
    assert taken_back.json()["decidedBy"] is None
    assert Memory.objects.get(id=store.postgres.id).content.endswith("14")  # reverted
    assert reject(client, review_auth, delete, reason="still running").status_code == 200
    assert undo(client, review_auth, delete).json()["status"] == "pending"
    audits = reviewed_audits(update).values_list("metadata__decision", "reason")
    assert ("undone", "approved too early") in list(audits)
    # Nothing left to take back; a misspelt field, an unknown proposal, the wrong scope.
    again = undo(client, review_auth, delete)
    assert again.status_code == 409 and again.json()["error"] == "not_undoable"
    assert undo(client, review_auth, delete, reson="x").status_code == 400
    assert undo(client, review_auth, Proposal(id="nope")).status_code == 404


def test_undo_needs_the_review_scope(client, pending, ingest_auth):
    response = undo(client, ingest_auth, pending["add"])
    assert response.status_code == 403 and response.json()["error"] == "forbidden"


# --- listing ----------------------------------------------------------------------------------------


def listed(client, auth, query=""):
    response = client.get(f"/api/proposals{query}", **auth)
    assert response.status_code == 200, response.json()
    body = response.json()
    return {p["fact"]["content"] for p in body["proposals"]}, body["count"]


def test_the_proposal_list_filters_and_counts(client, fake_ollama, pending, store, ingest_auth):
    ScriptedModel(
        fake_ollama,
        facts=[CONTRADICTING_FACT],
        decisions={CONTRADICTING_FACT: decision("update", store.postgres)},
    )
    other = raw("Second note from the platform sync, about the database.")
    tasks.process_pending()
    first_source = pending["add"].source_memory_id

    assert listed(client, ingest_auth)[1] == 5
    assert listed(client, ingest_auth, "?status=pending") == (
        {ADD_FACT, UPDATE_FACT, DELETE_FACT, CONTRADICTING_FACT},
        4,
    )
    assert listed(client, ingest_auth, "?status=recorded") == ({NONE_FACT}, 1)
    assert listed(client, ingest_auth, "?action=update") == (
        {UPDATE_FACT, CONTRADICTING_FACT},
        2,
    )
    assert listed(client, ingest_auth, "?reviewNeeded=true") == ({CONTRADICTING_FACT}, 1)
    assert listed(client, ingest_auth, "?reviewNeeded=false")[1] == 4
    assert listed(client, ingest_auth, f"?sourceMemoryId={first_source}")[1] == 4
    assert listed(client, ingest_auth, f"?sourceMemoryId={other.memory.id}&action=update") == (
        {CONTRADICTING_FACT},
        1,
    )
    assert listed(client, ingest_auth, "?status=pending&action=add&reviewNeeded=false") == (
        {ADD_FACT},
        1,
    )
    page = client.get("/api/proposals?limit=2", **ingest_auth).json()
    assert len(page["proposals"]) == 2 and page["count"] == 5
    for bad in ("?status=maybe", "?action=merge", "?reviewNeeded=perhaps", "?limit=0"):
        response = client.get(f"/api/proposals{bad}", **ingest_auth)
        assert response.status_code == 400 and "error" in response.json()
    assert client.get("/api/proposals").status_code == 401


# --- two reviewers at once ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_two_reviewers_approving_the_same_twenty_proposals_apply_each_exactly_once(file_db):
    text = " ".join(f"Service number {n} runs on host alpha-{n} in the lab." for n in range(20))
    raw(text)
    tasks.process_pending()
    ids = list(Proposal.objects.filter(status="pending", action="add").values_list("id", flat=True))
    assert len(ids) == 20

    outcomes: dict[str, list] = {"rita": [], "sam": []}
    errors: list[str] = []
    barrier = threading.Barrier(2)

    def reviewer(name: str, order: list[str]) -> None:
        try:
            barrier.wait()
            for proposal_id in order:
                try:
                    review.approve(proposal_id, Actor(name, "operator"))
                    outcomes[name].append((proposal_id, "applied"))
                except Refused as refused:
                    outcomes[name].append((proposal_id, refused.code))
        except Exception as exc:  # "database is locked" would land here
            errors.append(f"{name}: {exc!r}")
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=reviewer, args=("rita", ids)),
        threading.Thread(target=reviewer, args=("sam", ids[::-1])),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    for proposal_id in ids:
        results = [code for name in outcomes for pid, code in outcomes[name] if pid == proposal_id]
        assert sorted(results) == ["already_decided", "applied"]
        assert reviewed_audits(Proposal(id=proposal_id)).count() == 1
    assert set(Proposal.objects.filter(id__in=ids).values_list("status", flat=True)) == {"applied"}
    winners = dict(Proposal.objects.filter(id__in=ids).values_list("id", "decided_by"))
    for name in outcomes:
        for proposal_id, code in outcomes[name]:
            assert (winners[proposal_id] == name) == (code == "applied")
    derived = Memory.objects.filter(source_type="pipeline-v2")
    assert derived.count() == 20 == len(set(derived.values_list("content", flat=True)))
    assert MemoryHistory.objects.filter(event="created", memory__in=derived).count() == 20
