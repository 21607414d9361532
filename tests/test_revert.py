"""Lossless revert: ADD / UPDATE / DELETE undone as new audited events, undo of a revert, refusals,
reverting everything derived from one raw memory, the API, the dashboard and the undo toast."""

import json

import pytest

from memory.models import Memory, MemoryCold, MemoryHistory
from memory.writes import Actor, Refused, modify
from pipeline import review as reviewing
from pipeline.models import Proposal, RejectionFingerprint
from pipeline.review import revert_once
from pipeline.writes import review as review_writes
from pipeline.writes.config import update_config
from tests.pipeline_support import (
    RAW_TEXT,
    UPDATE_FACT,
    four_decisions,
    raw,
    seed_store,
    set_mode,
)

pytestmark = pytest.mark.django_db
RITA = Actor("rita", "operator")
RAW_ADD = "Priya prefers squash merges for feature branches. Said in the review channel."
ORIGINAL_POSTGRES = "The billing service runs on Postgres 14"


# --- fixtures: applied proposals built by the real pipeline ------------------------------------


@pytest.fixture
def added(pipeline_run):
    """An ADD applied by the pipeline in controlled-write mode (offline model)."""
    update_config({"shadowMode": False}, changed_by="test", reason="controlled-write")
    (source,) = pipeline_run(RAW_ADD)
    proposal = Proposal.objects.get(
        source_memory=source, fact_content="Priya prefers squash merges for feature branches."
    )
    assert proposal.status == "applied" and proposal.created_memory_id
    return proposal


@pytest.fixture
def store(db):
    return seed_store()


@pytest.fixture
def full_job(fake_ollama, store):
    """One raw memory whose job applied an ADD, an UPDATE and a DELETE in full mode."""
    from pipeline.tasks import process_pending

    four_decisions(fake_ollama, store)
    set_mode("full")
    source = raw(RAW_TEXT).memory
    process_pending()
    proposals = {p.action: p for p in Proposal.objects.filter(source_memory=source)}
    assert {a: p.status for a, p in proposals.items()} == {
        "add": "applied",
        "update": "applied",
        "delete": "applied",
        "none": "recorded",
    }
    return source, proposals


def snapshot(memory_id):
    """Everything a refused revert must leave untouched."""
    memory = Memory.objects.get(id=memory_id)
    return (
        memory.content,
        memory.version,
        memory.is_deleted,
        MemoryHistory.objects.count(),
        MemoryCold.objects.count(),
    )


def last_event(memory_id) -> MemoryHistory:
    return MemoryHistory.objects.filter(memory_id=memory_id).order_by("-created_at", "-id").first()


# --- ADD / UPDATE / DELETE and their undo ---------------------------------------------------------


def test_reverting_an_add_soft_deletes_the_memory_and_undo_brings_it_back(added):
    memory_id = added.created_memory_id
    reverted = review_writes.revert(added.id, reviewer=RITA, reason="not a durable fact")
    memory = Memory.objects.get(id=memory_id)
    assert memory.is_deleted and memory.deleted_at is not None and memory.version == 2
    assert (reverted.reverted_by, reverted.status) == ("rita", "applied")
    assert reverted.reverted_at is not None
    event = last_event(memory_id)
    assert (event.event, event.changed_by, event.actor_type) == ("deleted", "rita", "operator")
    assert event.reason == "not a durable fact"
    assert event.metadata["proposalId"] == added.id and event.metadata["revert"] is True
    assert MemoryCold.objects.get(memory_id=memory_id).archived_reason == "reverted"
    audit = MemoryHistory.objects.filter(
        memory_id=added.source_memory_id, event="reviewed", metadata__decision="reverted"
    ).get()
    assert audit.metadata["memoryId"] == memory_id and audit.changed_by == "rita"

    undone = review_writes.revert(added.id, reviewer=RITA, reason="it was right after all")
    memory.refresh_from_db()
    assert not memory.is_deleted and memory.version == 3
    assert undone.reverted_at is None and undone.reverted_by is None
    event = last_event(memory_id)
    assert event.event == "recovered" and event.metadata["undoRevert"] is True
    assert event.reason == "it was right after all"


def test_reverting_an_update_restores_the_previous_content_exactly(full_job, store):
    _, proposals = full_job
    postgres = Memory.objects.get(id=store.postgres.id)
    assert (postgres.content, postgres.version) == (UPDATE_FACT, 2)
    type_before = MemoryCold.objects.get(memory=postgres).type

    review_writes.revert(
        proposals["update"].id, reviewer=RITA, reason="the upgrade was rolled back"
    )
    postgres.refresh_from_db()
    assert postgres.content == ORIGINAL_POSTGRES and postgres.type == type_before
    assert postgres.normalized_content == "the billing service runs on postgres 14"
    assert postgres.version == 3 and not postgres.is_deleted
    # The cold tier keeps both the original (superseded) and the pipeline's version (reverted).
    cold = list(MemoryCold.objects.filter(memory=postgres).order_by("version"))
    assert [(c.version, c.content, c.archived_reason) for c in cold] == [
        (1, ORIGINAL_POSTGRES, "superseded"),
        (2, UPDATE_FACT, "reverted"),
    ]
    event = last_event(postgres.id)
    assert (event.event, event.changed_by, event.reason) == (
        "updated",
        "rita",
        "the upgrade was rolled back",
    )
    assert (event.old_content, event.new_content) == (UPDATE_FACT, ORIGINAL_POSTGRES)
    assert event.metadata["proposalId"] == proposals["update"].id
    # The history is only ever appended to: the pipeline's update is still there.
    assert MemoryHistory.objects.filter(memory=postgres, event="updated").count() == 2

    assert postgres.asserted_by == "agent"  # the original's authority came back with it
    review_writes.revert(proposals["update"].id, reviewer=RITA)
    postgres.refresh_from_db()
    assert (postgres.content, postgres.version) == (UPDATE_FACT, 4)
    # Found by a QA pass: the undo brought the text back, not who asserted it.
    assert postgres.asserted_by == "model"
    assert last_event(postgres.id).reason == "revert undone"
    assert Proposal.objects.get(id=proposals["update"].id).reverted_at is None


def test_reverting_a_delete_recovers_the_target_and_undo_deletes_it_again(full_job, store):
    _, proposals = full_job
    staging = Memory.objects.get(id=store.staging.id)
    assert staging.is_deleted and staging.version == 2

    review_writes.revert(proposals["delete"].id, reviewer=RITA, reason="the cluster is back")
    staging.refresh_from_db()
    assert not staging.is_deleted and staging.version == 3
    assert staging.content == "The staging cluster lives in the eu-west-1 region"
    assert last_event(staging.id).event == "recovered"

    review_writes.revert(proposals["delete"].id, reviewer=RITA)
    staging.refresh_from_db()
    assert staging.is_deleted and staging.version == 4
    assert last_event(staging.id).event == "deleted"


def test_a_reviewer_approved_update_reverts_too(fake_ollama, store):
    """UPDATE approved by a reviewer from shadow mode (not the pipeline's full mode)."""
    from pipeline.tasks import process_pending

    four_decisions(fake_ollama, store)
    set_mode("shadow")
    raw(RAW_TEXT)
    process_pending()
    update = Proposal.objects.get(action="update")
    reviewing.approve(update.id, RITA, content="The billing service runs on Postgres 16.2")
    postgres = Memory.objects.get(id=store.postgres.id)
    assert postgres.content == "The billing service runs on Postgres 16.2"
    revert_once(update.id, RITA, reason="wrong")
    postgres.refresh_from_db()
    assert postgres.content == ORIGINAL_POSTGRES and postgres.version == 3
    # Undoing puts back what the reviewer approved, edited text included.
    revert_once(update.id, RITA, undo=True)
    postgres.refresh_from_db()
    assert postgres.content == "The billing service runs on Postgres 16.2"


# --- refusals -------------------------------------------------------------------------------------


def test_a_revert_is_refused_when_the_memory_changed_since_and_writes_nothing(full_job, store):
    _, proposals = full_job
    modify(
        store.postgres.id,
        {"content": "The billing service runs on Postgres 17"},
        actor=Actor("ada"),
        reason="upgraded again",
    )
    before = snapshot(store.postgres.id)
    with pytest.raises(Refused) as refused:
        review_writes.revert(proposals["update"].id, reviewer=RITA)
    assert refused.value.code == "changed_since"
    assert refused.value.details == {"memoryId": store.postgres.id, "currentVersion": 3}
    assert snapshot(store.postgres.id) == before
    assert Proposal.objects.get(id=proposals["update"].id).reverted_at is None


def test_a_human_edit_after_an_add_blocks_its_revert(added):
    modify(
        added.created_memory_id, {"content": "Priya prefers rebase merges."}, actor=RITA, reason="x"
    )
    before = snapshot(added.created_memory_id)
    with pytest.raises(Refused) as refused:
        revert_once(added.id, RITA)
    assert refused.value.code == "changed_since"
    assert snapshot(added.created_memory_id) == before


def test_only_applied_proposals_can_be_reverted(pipeline_run):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    pipeline_run(RAW_ADD)
    pending = Proposal.objects.filter(status="pending").first()
    with pytest.raises(Refused) as refused:
        revert_once(pending.id, RITA)
    assert refused.value.code == "not_applied"
    review_writes.reject(pending.id, reviewer=RITA, reason="no")
    with pytest.raises(Refused) as refused:
        revert_once(pending.id, RITA)
    assert refused.value.code == "not_applied"
    with pytest.raises(Refused) as refused:
        revert_once("no-such-proposal", RITA)
    assert refused.value.code == "not_found"


def test_reverting_twice_or_undoing_an_unreverted_proposal_is_refused(added):
    with pytest.raises(Refused) as refused:
        revert_once(added.id, RITA, undo=True)
    assert refused.value.code == "not_reverted"
    revert_once(added.id, RITA)
    before = snapshot(added.created_memory_id)
    with pytest.raises(Refused) as refused:
        revert_once(added.id, RITA)  # a double-clicked Undo must not flip it back
    assert refused.value.code == "already_reverted"
    assert refused.value.details["revertedBy"] == "rita"
    assert snapshot(added.created_memory_id) == before


def test_revert_is_refused_while_mutations_are_frozen(added):
    update_config({"mutationsFrozen": True}, changed_by="t", reason="brake")
    before = snapshot(added.created_memory_id)
    with pytest.raises(Refused) as refused:
        revert_once(added.id, RITA)
    assert refused.value.code == "frozen"
    assert snapshot(added.created_memory_id) == before
    update_config({"mutationsFrozen": False}, changed_by="t", reason="release")
    revert_once(added.id, RITA)
    assert Memory.objects.get(id=added.created_memory_id).is_deleted


# --- revert everything derived from one raw memory ----------------------------------------------


def test_revert_everything_derived_from_one_raw_memory(reviewer_client, full_job, store):
    source, proposals = full_job
    # A human edit after the UPDATE: that one is refused, the others still go through.
    modify(store.postgres.id, {"content": "Postgres 17 now"}, actor=Actor("ada"), reason="edit")
    response = reviewer_client.post(
        f"/sources/{source.id}/revert-derived/", {"reason": "bad batch"}
    )
    assert response.status_code == 302 and response["Location"] == f"/memories/{source.id}/"
    body = reviewer_client.get(response["Location"]).content.decode()
    assert "Reverted 2 of 3 proposals derived from this raw memory." in body
    assert "Not reverted:" in body and "changed after this proposal was applied" in body
    assert f'href="/memories/{store.postgres.id}/">Open the memory</a>' in body
    assert Memory.objects.get(id=proposals["add"].created_memory_id).is_deleted
    assert not Memory.objects.get(id=store.staging.id).is_deleted
    assert Memory.objects.get(id=store.postgres.id).content == "Postgres 17 now"
    reverted = Proposal.objects.filter(source_memory=source, reverted_at__isnull=False)
    assert {p.action for p in reverted} == {"add", "delete"}
    assert last_event(store.staging.id).reason == "bad batch"
    # The page still offers the one left; a second run reports it again and changes nothing.
    assert (
        "Revert everything derived from this raw memory" in body and "(1 applied proposal)" in body
    )
    response = reviewer_client.post(f"/sources/{source.id}/revert-derived/", follow=True)
    assert "Reverted 0 of 1 proposal derived" in response.content.decode()


def test_revert_derived_with_nothing_to_revert_says_so(reviewer_client, pipeline_run):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    (source,) = pipeline_run(RAW_ADD)
    response = reviewer_client.post(f"/sources/{source.id}/revert-derived/", follow=True)
    assert "Nothing to revert" in response.content.decode()
    assert reviewer_client.post("/sources/nope/revert-derived/").status_code == 404


def test_the_raw_memory_page_offers_revert_all_and_per_proposal_reverts(
    reviewer_client, viewer_client, full_job
):
    source, proposals = full_job
    body = reviewer_client.get(f"/memories/{source.id}/").content.decode()
    assert f'action="/sources/{source.id}/revert-derived/"' in body
    assert "(3 applied proposals)" in body
    for action in ("add", "update", "delete"):
        assert f'action="/proposals/{proposals[action].id}/revert/"' in body
    assert "revert-derived" not in viewer_client.get(f"/memories/{source.id}/").content.decode()
    # A derived memory's page links its proposal's revert, but has no revert-all button.
    created = proposals["add"].created_memory_id
    body = reviewer_client.get(f"/memories/{created}/").content.decode()
    assert "Revert everything derived" not in body
    assert f'action="/proposals/{proposals["add"].id}/revert/"' in body
    # Per-proposal revert from the memory page comes back to it.
    response = reviewer_client.post(
        f"/proposals/{proposals['add'].id}/revert/", {"next": f"/memories/{created}/"}
    )
    assert response["Location"] == f"/memories/{created}/"
    body = reviewer_client.get(f"/memories/{created}/").content.decode()
    assert f'action="/proposals/{proposals["add"].id}/revert/undo/"' in body


# --- JSON API -------------------------------------------------------------------------------------


def api_revert(client, proposal_id, auth, body=None):
    return client.post(
        f"/api/proposals/{proposal_id}/revert",
        data=json.dumps(body) if body is not None else "",
        content_type="application/json",
        **auth,
    )


def test_the_api_reverts_and_undoes_with_the_review_scope(client, added, review_auth):
    response = api_revert(client, added.id, review_auth, {"reason": "agent says wrong"})
    assert response.status_code == 200
    data = response.json()
    assert data["id"] == added.id and data["status"] == "applied"
    assert data["revertedBy"] == "reviewer-bot" and data["revertedAt"].endswith("Z")
    event = last_event(added.created_memory_id)
    assert (event.event, event.changed_by, event.reason) == (
        "deleted",
        "reviewer-bot",
        "agent says wrong",
    )
    again = api_revert(client, added.id, review_auth)
    assert again.status_code == 409
    assert again.json()["error"] == "already_reverted" and again.json()["message"]
    undone = api_revert(client, added.id, review_auth, {"undo": True})
    assert undone.status_code == 200
    assert undone.json()["revertedAt"] is None and undone.json()["revertedBy"] is None
    assert not Memory.objects.get(id=added.created_memory_id).is_deleted


def test_the_api_refusals(client, added, review_auth, ingest_auth, pipeline_run):
    assert api_revert(client, added.id, ingest_auth).status_code == 403
    assert api_revert(client, added.id, {}).status_code == 401
    assert client.get(f"/api/proposals/{added.id}/revert", **review_auth).status_code == 405
    assert api_revert(client, "nope", review_auth).status_code == 404
    bad = api_revert(client, added.id, review_auth, {"reason": 5})
    assert bad.status_code == 400 and bad.json()["error"] == "invalid_request"
    assert not Memory.objects.get(id=added.created_memory_id).is_deleted

    modify(added.created_memory_id, {"content": "Priya prefers rebases."}, actor=RITA, reason="x")
    conflict = api_revert(client, added.id, review_auth)
    assert conflict.status_code == 409
    data = conflict.json()
    assert data["error"] == "changed_since" and "changed after" in data["message"]
    assert (data["memoryId"], data["currentVersion"]) == (added.created_memory_id, 2)

    update_config({"mutationsFrozen": True}, changed_by="t", reason="brake")
    frozen = api_revert(client, added.id, review_auth)
    assert frozen.status_code == 409 and frozen.json()["error"] == "frozen"

    update_config({"mutationsFrozen": False, "shadowMode": True}, changed_by="t", reason="t")
    pipeline_run("Dana runs the weekly release train on Thursdays. From the release calendar.")
    pending = Proposal.objects.filter(status="pending").first()
    response = api_revert(client, pending.id, review_auth)
    assert response.status_code == 409 and response.json()["error"] == "not_applied"


# --- dashboard: roles, plain POST, htmx, the undo toast ----------------------------------------


@pytest.mark.parametrize(
    "path", ["revert/", "revert/undo/", "reopen/", "unsuppress/"], ids=lambda p: p.strip("/")
)
def test_a_viewer_cannot_revert_or_undo(viewer_client, client, added, path):
    assert viewer_client.post(f"/proposals/{added.id}/{path}").status_code == 403
    assert client.post(f"/proposals/{added.id}/{path}")["Location"].startswith("/login/")
    assert viewer_client.get(f"/proposals/{added.id}/{path}").status_code in {403, 405}
    assert not Memory.objects.get(id=added.created_memory_id).is_deleted
    source = added.source_memory_id
    assert viewer_client.post(f"/sources/{source}/revert-derived/").status_code == 403


def test_revert_and_undo_from_the_proposal_page_with_plain_posts(
    reviewer_client, viewer_client, added
):
    page = reviewer_client.get(f"/proposals/{added.id}/").content.decode()
    assert (
        'data-testid="revert-section"' in page and f'action="/proposals/{added.id}/revert/"' in page
    )
    assert (
        'data-testid="revert"' not in viewer_client.get(f"/proposals/{added.id}/").content.decode()
    )

    response = reviewer_client.post(f"/proposals/{added.id}/revert/", {"reason": "wrong"})
    assert response.status_code == 302 and response["Location"] == f"/proposals/{added.id}/"
    page = reviewer_client.get(response["Location"]).content.decode()
    assert "Reverted by rita: the memory it created is soft-deleted." in page
    assert 'data-testid="undo-revert"' in page and 'data-testid="reverted-badge"' in page
    assert Memory.objects.get(id=added.created_memory_id).is_deleted

    response = reviewer_client.post(f"/proposals/{added.id}/revert/", follow=True)
    assert "Not reverted: this proposal was already reverted by rita" in response.content.decode()

    response = reviewer_client.post(f"/proposals/{added.id}/revert/undo/", follow=True)
    assert "Revert undone by rita: the memory is back." in response.content.decode()
    assert not Memory.objects.get(id=added.created_memory_id).is_deleted
    # An external `next` is ignored.
    response = reviewer_client.post(
        f"/proposals/{added.id}/revert/", {"next": "https://evil.example/"}
    )
    assert response["Location"] == f"/proposals/{added.id}/"


def test_a_refused_revert_on_the_page_links_to_the_memory(reviewer_client, added):
    modify(added.created_memory_id, {"content": "Priya prefers rebases."}, actor=RITA, reason="x")
    response = reviewer_client.post(f"/proposals/{added.id}/revert/", follow=True)
    body = response.content.decode()
    assert "Not reverted: the memory changed after this proposal was applied" in body
    assert f'<a href="/memories/{added.created_memory_id}/">Open the memory</a>' in body


def test_no_revert_section_for_a_proposal_that_is_not_applied(reviewer_client, pipeline_run):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    pipeline_run(RAW_ADD)
    pending = Proposal.objects.filter(status="pending").first()
    body = reviewer_client.get(f"/proposals/{pending.id}/").content.decode()
    assert 'data-testid="revert-section"' not in body


@pytest.fixture
def shadow_queue(pipeline_run):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    pipeline_run(RAW_ADD)
    return Proposal.objects.filter(status="pending", action="add")


def trigger(response) -> dict:
    return json.loads(response["HX-Trigger"])


def test_the_undo_toast_after_an_approval_puts_it_back_to_pending(
    reviewer_client, shadow_queue, hx
):
    proposal = shadow_queue.first()
    response = reviewer_client.post(
        f"/proposals/{proposal.id}/decide/", {"from": "row", "decision": "approve"}, **hx
    )
    toast = trigger(response)["toast"]
    assert toast["undo"] == f"/proposals/{proposal.id}/undo/"
    assert toast["row"] == f"p-{proposal.id}"
    created = Proposal.objects.get(id=proposal.id).created_memory_id

    # The toast's Undo button targets the row: it comes back open, like after undoing a reject.
    response = reviewer_client.post(toast["undo"], HTTP_HX_TARGET=f"p-{proposal.id}", **hx)
    assert response.status_code == 200
    body = response.content.decode()
    assert body.strip().startswith(f'<tr id="p-{proposal.id}"')
    assert 'data-open="1"' in body and 'data-action="approve"' in body
    events = trigger(response)
    assert "review-changed" in events
    assert events["toast"]["message"].startswith("Decision undone by rita")
    assert Memory.objects.get(id=created).is_deleted
    proposal.refresh_from_db()
    assert (proposal.status, proposal.decided_by, proposal.created_memory_id) == (
        "pending",
        None,
        None,
    )
    # The mistaken "a" becomes a reject.
    reviewer_client.post(
        f"/proposals/{proposal.id}/decide/",
        {"from": "row", "decision": "reject", "reason": "not durable"},
        **hx,
    )
    assert Proposal.objects.get(id=proposal.id).status == "rejected"

    # Without a row to swap (the row left the page), a 204 with the toast; nothing left to undo.
    reviewer_client.post(f"/proposals/{proposal.id}/reopen/", **hx)
    response = reviewer_client.post(f"/proposals/{proposal.id}/undo/", **hx)
    assert response.status_code == 204 and response.content == b""
    assert trigger(response)["toast"]["message"].startswith("Not undone: this proposal is pending")


def test_undo_after_approving_an_update_restores_the_target_and_can_be_approved_again(
    full_job, hx, reviewer_client
):
    _, proposals = full_job
    update = proposals["update"]
    review_writes.revert(update.id, reviewer=RITA)  # back to the text the decision saw
    target = Memory.objects.get(id=update.target_memory_id)
    Proposal.objects.filter(id=update.id).update(
        status="pending", decided_by=None, reverted_at=None, target_version=target.version
    )
    reviewer_client.post(f"/proposals/{update.id}/decide/", {"decision": "approve"})
    approved_text = Memory.objects.get(id=target.id).content
    assert approved_text != target.content

    response = reviewer_client.post(f"/proposals/{update.id}/undo/", follow=True)
    assert "Decision undone by rita: UPDATE is pending again." in response.content.decode()
    assert Memory.objects.get(id=target.id).content == target.content
    pending = Proposal.objects.get(id=update.id)
    assert (pending.status, pending.action, pending.updated_memory_id) == (
        "pending",
        "update",
        None,
    )
    # Re-based on the restored version: approving again applies, it is not stale.
    reviewer_client.post(f"/proposals/{update.id}/decide/", {"decision": "approve"})
    assert Proposal.objects.get(id=update.id).status == "applied"
    assert Memory.objects.get(id=target.id).content == approved_text


def test_a_refused_undo_is_a_toast_not_an_error(reviewer_client, added, hx):
    modify(added.created_memory_id, {"content": "Priya prefers rebases."}, actor=RITA, reason="x")
    response = reviewer_client.post(f"/proposals/{added.id}/revert/", **hx)
    assert response.status_code == 204
    assert trigger(response)["toast"]["message"].startswith("Not reverted: the memory changed")
    response = reviewer_client.post(
        f"/proposals/{added.id}/revert/", HTTP_HX_TARGET=f"p-{added.id}", **hx
    )
    body = response.content.decode()
    assert 'class="row-note bad"' in body and "Not reverted" in body


def test_the_undo_toast_after_a_rejection_reopens_it(reviewer_client, shadow_queue, hx):
    proposal = shadow_queue.first()
    response = reviewer_client.post(
        f"/proposals/{proposal.id}/decide/",
        {"from": "row", "decision": "reject", "reason": "not durable"},
        **hx,
    )
    toast = trigger(response)["toast"]
    assert toast["undo"] == f"/proposals/{proposal.id}/reopen/"
    assert RejectionFingerprint.objects.get(proposal=proposal).active

    response = reviewer_client.post(toast["undo"], HTTP_HX_TARGET=f"p-{proposal.id}", **hx)
    body = response.content.decode()
    assert trigger(response)["toast"]["message"] == "Rejection undone by rita."
    assert 'data-open="1"' in body and 'data-action="approve"' in body  # open for a new decision
    proposal.refresh_from_db()
    assert (proposal.status, proposal.decided_by, proposal.review_note) == ("pending", None, None)
    assert not RejectionFingerprint.objects.get(proposal=proposal).active
    # Undoing again is refused politely.
    response = reviewer_client.post(toast["undo"], **hx)
    assert trigger(response)["toast"]["message"].startswith("Rejection not undone")


def test_no_undo_is_offered_for_a_refused_or_deduplicated_decision(
    reviewer_client, admin_client_role, shadow_queue, hx
):
    proposal = shadow_queue.first()
    admin_client_role.post(
        f"/proposals/{proposal.id}/decide/", {"from": "row", "decision": "approve"}, **hx
    )
    response = reviewer_client.post(
        f"/proposals/{proposal.id}/decide/", {"from": "row", "decision": "approve"}, **hx
    )
    assert "undo" not in trigger(response)["toast"]  # ada decided, not rita


def test_reopen_from_the_proposal_page(reviewer_client, shadow_queue):
    proposal = shadow_queue.first()
    review_writes.reject(proposal.id, reviewer=RITA, reason="no")
    page = reviewer_client.get(f"/proposals/{proposal.id}/").content.decode()
    assert f'action="/proposals/{proposal.id}/reopen/"' in page
    response = reviewer_client.post(f"/proposals/{proposal.id}/reopen/", follow=True)
    assert "Rejection undone by rita." in response.content.decode()
    assert Proposal.objects.get(id=proposal.id).status == "pending"


def test_a_deduplicated_decision_is_undone_from_the_proposal_page(reviewer_client, shadow_queue):
    """Found by a QA pass: an approval that ended deduplicated could only be undone from the
    toast; the proposal page offered nothing."""
    from memory.writes import remember

    proposal = shadow_queue.first()
    existing = remember(
        proposal.fact_content, actor=Actor("agent-one", "agent"), create_job=False
    ).memory
    assert reviewing.approve(proposal.id, RITA).status == "deduped"
    page = reviewer_client.get(f"/proposals/{proposal.id}/").content.decode()
    assert 'data-testid="undo-decision"' in page and f"/memories/{existing.id}/" in page
    response = reviewer_client.post(f"/proposals/{proposal.id}/undo/", follow=True)
    assert "Decision undone by rita" in response.content.decode()
    assert Proposal.objects.get(id=proposal.id).status == "pending"
    assert not Memory.objects.get(id=existing.id).is_deleted
    # The proposal's own trail tells both, with who.
    page = reviewer_client.get(f"/proposals/{proposal.id}/").content.decode()
    trail = page[page.index('data-testid="proposal-trail"') :]
    labels = [label for label in ("ADD proposed", "approved", "decision undone") if label in trail]
    assert labels == ["ADD proposed", "approved", "decision undone"] and "rita" in trail


def test_the_trail_keeps_the_memory_an_undone_approval_made(reviewer_client, shadow_queue):
    """Found by a second review: once an approval was undone, the proposal no longer named the
    memory it had made, and its trail lost that memory's rows (made, then forgotten)."""
    proposal = shadow_queue.first()
    created = reviewing.approve(proposal.id, RITA).created_memory_id
    reviewing.undo(proposal.id, RITA, reason="too early")
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from pipeline.trail import trail_of

    undone = Proposal.objects.get(id=proposal.id)
    with CaptureQueriesContext(connection) as queries:
        trail = trail_of(undone)
    assert len(queries) == 2  # the proposal's memories, then the one the undone decision made
    made = [(row.label, row.memory_id) for row in trail if row.memory_id == created]
    assert made == [("memory created", created), ("reverted", created)]
    page = reviewer_client.get(f"/proposals/{proposal.id}/").content.decode()
    assert f"/memories/{created}/#h-" in page
