"""Pinned memories change only on purpose (issue 10, item 3): approving an UPDATE or DELETE of a
pinned memory needs an explicit force (API `force: true`, a ticked box in the dashboard), and a
bulk approval never includes one."""

from types import SimpleNamespace

import pytest

from memory.models import Memory, MemoryHistory
from memory.writes import Actor, Refused
from pipeline import review, tasks
from pipeline.models import Proposal
from tests.pipeline_support import (
    NONE_FACT,
    RAW_TEXT,
    approve,
    four_decisions,
    raw,
    seed,
)

pytestmark = pytest.mark.django_db
PERSON = Actor("dana")


@pytest.fixture
def store(db):
    """The usual three memories; the UPDATE's and the DELETE's targets are pinned."""
    return SimpleNamespace(
        postgres=seed("The billing service runs on Postgres 14", pinned=True),
        staging=seed("The staging cluster lives in the eu-west-1 region", pinned=True),
        kenji=seed(NONE_FACT),
    )


@pytest.fixture
def pending(fake_ollama, store):
    """Shadow mode: ADD, UPDATE (pinned target) and DELETE (pinned target) wait for a reviewer."""
    four_decisions(fake_ollama, store)
    result = raw(RAW_TEXT)
    tasks.process_pending()
    return {p.action: p for p in Proposal.objects.filter(job=result.job)}


def unchanged(memory) -> bool:
    current = Memory.objects.get(id=memory.id)
    return (current.version, current.is_deleted, current.content) == (1, False, memory.content)


# --- API ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("action", "target"), [("delete", "staging"), ("update", "postgres")])
def test_the_api_refuses_a_pinned_target_without_force(
    client, pending, store, review_auth, action, target
):
    response = approve(client, review_auth, pending[action])
    assert response.status_code == 409
    assert response.json()["error"] == "pinned_requires_force"
    assert unchanged(getattr(store, target))
    assert Proposal.objects.get(id=pending[action].id).status == "pending"
    assert not MemoryHistory.objects.filter(event="reviewed").exists()


def test_the_api_applies_a_pinned_delete_with_force(client, pending, store, review_auth):
    response = approve(client, review_auth, pending["delete"], force=True)
    assert response.status_code == 200 and response.json()["status"] == "applied"
    assert Memory.objects.get(id=store.staging.id).is_deleted


def test_the_api_rejects_a_force_that_is_not_a_boolean(client, pending, review_auth):
    response = approve(client, review_auth, pending["delete"], force="yes")
    assert response.status_code == 400


def test_keeping_both_needs_no_force(pending, store):
    kept = review.approve(pending["update"].id, PERSON, action="add")
    assert kept.status == "applied" and unchanged(store.postgres)


# --- bulk -----------------------------------------------------------------------------------------


def test_bulk_approval_leaves_pinned_targets_for_one_by_one(pending, store):
    ids = [pending[action].id for action in ("add", "update", "delete")]
    outcomes = {
        outcome.proposal_id: outcome for outcome in review.bulk_approve(ids, PERSON, note="ok")
    }
    assert outcomes[pending["add"].id].done
    for action in ("update", "delete"):
        assert outcomes[pending[action].id].error == review.PINNED_LEFT_FOR_ONE_BY_ONE
        assert Proposal.objects.get(id=pending[action].id).status == "pending"
    assert unchanged(store.postgres) and unchanged(store.staging)


def test_the_bulk_preview_and_result_name_the_pinned_ones(reviewer_client, pending, hx):
    ids = " ".join(pending[action].id for action in ("add", "update", "delete"))
    form = {"decision": "approve", "scope": "selected", "ids": ids, "filters": ""}
    preview = reviewer_client.post(
        "/review/bulk/", {**form, "step": "preview"}, **hx
    ).content.decode()
    assert 'data-testid="bulk-pinned">2 would change or delete a pinned memory' in preview
    done = reviewer_client.post("/review/bulk/", {**form, "step": "apply"}, **hx).content.decode()
    assert review.PINNED_LEFT_FOR_ONE_BY_ONE in done
    assert Proposal.objects.get(id=pending["add"].id).status == "applied"
    assert Proposal.objects.get(id=pending["delete"].id).status == "pending"


# --- the dashboard: a ticked box is the confirmation ----------------------------------------------


def decide(client, proposal, hx, **data):
    return client.post(f"/proposals/{proposal.id}/decide/", {"from": "row", **data}, **hx)


def test_a_dashboard_approval_of_a_pinned_delete_asks_for_the_box(
    reviewer_client, pending, store, hx
):
    delete = pending["delete"]
    page = reviewer_client.get("/review/").content.decode()
    assert 'data-testid="force-pinned"' in page  # offered on the pinned targets' rows
    refused = decide(reviewer_client, delete, hx, decision="approve").content.decode()
    assert "pinned" in refused and "apply anyway" in refused
    assert unchanged(store.staging)
    applied = decide(reviewer_client, delete, hx, decision="approve", force="on")
    assert "Approved by rita" in applied.content.decode()
    assert Memory.objects.get(id=store.staging.id).is_deleted


def test_the_contradiction_card_and_the_proposal_page_offer_the_box(
    reviewer_client, pending, store, hx
):
    detail = reviewer_client.get(f"/proposals/{pending['update'].id}/").content.decode()
    assert 'data-testid="force-pinned"' in detail
    merged = reviewer_client.post(
        f"/proposals/{pending['update'].id}/decide/",
        {
            "from": "card",
            "decision": "merge",
            "content": "Billing runs on Postgres 16",
            "force": "on",
        },
        **hx,
    )
    assert merged.status_code == 200
    assert Memory.objects.get(id=store.postgres.id).content == "Billing runs on Postgres 16"


@pytest.mark.parametrize("source", ["row", "card", "detail"])
def test_a_refused_pinned_decision_says_so_by_its_checkbox(
    reviewer_client, pending, store, hx, source
):
    """Found by a QA pass: the card and the proposal page said "tick pinned: apply anyway" at the
    top only, the checkbox itself unmarked; every form error goes next to its field."""
    update = pending["update"]
    headers = {} if source == "detail" else hx
    page = reviewer_client.post(
        f"/proposals/{update.id}/decide/",
        {"from": source, "decision": "approve" if source != "card" else "replace"},
        **headers,
    ).content.decode()
    error_id = "force-error" if source == "detail" else f"force-error-{update.id}"
    error_at = page.index(f'<p class="field-error" id="{error_id}">')
    box = page[page.rindex('data-testid="force-pinned"', 0, error_at) : error_at]
    assert 'aria-invalid="true"' in box and f'aria-describedby="{error_id}"' in box
    assert "tick this and decide again" in page
    assert unchanged(store.postgres)


def test_the_store_entry_point_needs_force_too(pending, store):
    with pytest.raises(Refused) as refused:
        review.decide(pending["delete"].id, PERSON, "delete_old")
    assert refused.value.code == "pinned_requires_force"
    assert unchanged(store.staging)
