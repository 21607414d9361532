"""What the model proposed and what a reviewer applied are two facts (#19 item 5): approving an
UPDATE whose text is already the raw memory applies a DELETE, "Keep both" applies an ADD; the
proposal keeps `action` as proposed and records `applied_as`, every page shows both, revert and
undo follow the applied action, the API says `appliedAs`, and a migration splits old rows."""

import html
import importlib
import json

import pytest
from django.apps import apps

from memory.models import Memory
from memory.writes import Actor
from pipeline import review as reviewing
from pipeline.models import Proposal
from pipeline.writes.config import update_config

pytestmark = pytest.mark.django_db
RITA = Actor("rita", "operator")
OLD = "The team uses Kafka for billing events. Standup notes from Monday."
REPLACED_BY_RAW = "The team doesn't use Kafka for billing events anymore."
# Two sentences each (as in test_review_views), so the offline model's fact is not the raw text.
BASE = [
    OLD,
    "Automatic staging deploys are enabled for every service. Noted by the release bot.",
]
KEPT_BESIDE = "Automatic staging deploys are disabled for every service. Noted by the release bot."
REPLACE_WORDS = "Model proposed UPDATE · reviewer applied as DELETE"
KEEP_BOTH_WORDS = "Model proposed UPDATE · reviewer applied as ADD"


def _flagged_update(pipeline_run, later: str) -> Proposal:
    """A contradicting UPDATE of a memory BASE became, waiting for review (offline model)."""
    update_config({"shadowMode": False}, changed_by="t", reason="t")
    pipeline_run(*BASE)
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    (raw,) = pipeline_run(later)
    return Proposal.objects.get(source_memory=raw, action="update", review_needed=True)


@pytest.fixture
def replaced(pipeline_run):
    """Approved UPDATE whose new text is the whole raw memory: applied by retiring the target."""
    proposal = _flagged_update(pipeline_run, REPLACED_BY_RAW)
    assert proposal.fact_content == proposal.source_memory.content
    return reviewing.decide(proposal.id, RITA, "approve")


@pytest.fixture
def kept_both(pipeline_run):
    """ "Keep both" on a contradicting UPDATE: the new fact became a memory of its own."""
    proposal = _flagged_update(pipeline_run, KEPT_BESIDE)
    return reviewing.decide(proposal.id, RITA, "keep_both")


def _text(response) -> str:
    return html.unescape(response.content.decode())


def test_approving_an_update_equal_to_the_raw_memory_keeps_update_and_records_delete(replaced):
    assert (replaced.status, replaced.action, replaced.applied_as) == (
        "applied",
        "update",
        "delete",
    )
    assert replaced.applied_action == "delete" and replaced.risk == 1  # still an UPDATE's rank
    assert Memory.objects.get(id=replaced.target_memory_id).is_deleted
    audit = replaced.source_memory.history.get(event="reviewed", metadata__decision="approved")
    assert (audit.metadata["proposedAction"], audit.metadata["appliedAs"]) == ("update", "delete")


def test_keep_both_keeps_update_and_records_add(kept_both):
    assert (kept_both.status, kept_both.action, kept_both.applied_as) == (
        "applied",
        "update",
        "add",
    )
    assert (
        kept_both.created_memory_id
        and not Memory.objects.get(id=kept_both.target_memory_id).is_deleted
    )


def test_an_approval_as_proposed_records_no_applied_as(pipeline_run):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    (raw,) = pipeline_run("Kenji maintains the ingest-worker service. From the team wiki.")
    add = Proposal.objects.filter(source_memory=raw, action="add").first()
    approved = reviewing.decide(add.id, RITA, "approve")
    assert (approved.status, approved.action, approved.applied_as) == ("applied", "add", None)


@pytest.mark.parametrize(
    "later,decision,applied,words",
    [
        (REPLACED_BY_RAW, "approve", "delete", REPLACE_WORDS),
        (KEPT_BESIDE, "keep_both", "add", KEEP_BOTH_WORDS),
    ],
    ids=["replaced", "kept_both"],
)
def test_the_decided_queue_row_and_the_proposal_page_show_both_facts(
    reviewer_client, pipeline_run, hx, later, decision, applied, words
):
    proposal = _flagged_update(pipeline_run, later)
    response = reviewer_client.post(
        f"/proposals/{proposal.id}/decide/", {"from": "row", "decision": decision}, **hx
    )
    row = _text(response)
    assert row.lstrip().startswith(f'<tr id="p-{proposal.id}"') and "Approved by rita" in row
    assert '<span class="badge badge-update" title="what the model proposed">update</span>' in row
    assert f'data-testid="applied-as" title="{words}">applied as' in row
    assert f'<span class="badge badge-{applied}">{applied}</span>' in row
    page = _text(reviewer_client.get(f"/proposals/{proposal.id}/"))
    assert f'<dd data-testid="relabel">{words}</dd>' in page
    assert f'title="{words}">applied as <span class="badge badge-{applied}">' in page  # the h1


def test_the_lineage_and_the_timeline_say_what_was_proposed_and_what_was_applied(
    viewer_client, replaced
):
    raw_page = _text(viewer_client.get(f"/memories/{replaced.source_memory_id}/"))
    # The fact step: the model's decision, then what the approval did, in the same story.
    assert "decided UPDATE memory" in raw_page and "→ UPDATE, applied as DELETE<" in raw_page
    assert f"Forgot memory {replaced.target_memory_id[-8:]}" in raw_page
    assert f"{REPLACE_WORDS}." in raw_page
    # The raw memory's audit timeline: "update proposed", then the approval with both facts.
    assert "update proposed" in raw_page and f'data-testid="relabel">{REPLACE_WORDS}<' in raw_page
    # The retired memory's own story: forgotten by the proposal, both facts told.
    target_page = _text(viewer_client.get(f"/memories/{replaced.target_memory_id}/"))
    assert "(DELETE from raw memory" in target_page and f"{REPLACE_WORDS}." in target_page


def test_keep_both_is_told_on_the_kept_memory_and_its_raw_memory(viewer_client, kept_both):
    raw_page = _text(viewer_client.get(f"/memories/{kept_both.source_memory_id}/"))
    assert "→ UPDATE, applied as ADD<" in raw_page and f"{KEEP_BOTH_WORDS}." in raw_page
    assert f'data-testid="relabel">{KEEP_BOTH_WORDS}<' in raw_page
    kept = _text(viewer_client.get(f"/memories/{kept_both.target_memory_id}/"))
    assert "proposed to UPDATE this memory" in kept and f"{KEEP_BOTH_WORDS}." in kept


def test_reverting_a_replace_recovers_the_retired_memory_and_undo_retires_it_again(replaced):
    target = replaced.target_memory_id
    reverted = reviewing.revert_once(replaced.id, RITA)
    assert reverted.reverted_at and not Memory.objects.get(id=target).is_deleted
    reviewing.revert_once(replaced.id, RITA, undo=True)
    assert Memory.objects.get(id=target).is_deleted
    assert Proposal.objects.get(id=replaced.id).applied_as == "delete"


def test_reverting_a_keep_both_forgets_the_new_memory_and_undo_brings_it_back(kept_both):
    made = kept_both.created_memory_id
    reviewing.revert_once(kept_both.id, RITA)
    assert Memory.objects.get(id=made).is_deleted
    assert not Memory.objects.get(id=kept_both.target_memory_id).is_deleted
    reviewing.revert_once(kept_both.id, RITA, undo=True)
    assert not Memory.objects.get(id=made).is_deleted


@pytest.mark.parametrize("scenario", ["replaced", "kept_both"])
def test_undoing_the_decision_reverts_the_applied_action_and_forgets_applied_as(request, scenario):
    proposal = request.getfixturevalue(scenario)
    undone = reviewing.undo(proposal.id, RITA)
    assert (undone.status, undone.action, undone.applied_as) == ("pending", "update", None)
    assert not Memory.objects.get(id=proposal.target_memory_id).is_deleted
    if proposal.created_memory_id:
        assert Memory.objects.get(id=proposal.created_memory_id).is_deleted
    # Pending again as the model proposed it: an approval now applies the UPDATE itself.
    again = reviewing.decide(undone.id, RITA, "merge", content="Kafka was dropped for billing.")
    assert (again.action, again.applied_as, again.updated_memory_id) == (
        "update",
        None,
        proposal.target_memory_id,
    )


def test_the_api_proposal_says_applied_as(client, replaced, kept_both, review_auth):
    response = client.get("/api/proposals?status=applied", **review_auth)
    by_id = {p["id"]: p for p in response.json()["proposals"]}
    assert (by_id[replaced.id]["action"], by_id[replaced.id]["appliedAs"]) == ("update", "delete")
    assert (by_id[kept_both.id]["action"], by_id[kept_both.id]["appliedAs"]) == ("update", "add")
    # Applied as proposed (the pipeline's own ADDs in controlled-write): null.
    assert {p["appliedAs"] for i, p in by_id.items() if i not in {replaced.id, kept_both.id}} == {
        None
    }


def test_the_api_approval_answers_with_applied_as(client, pipeline_run, review_auth):
    proposal = _flagged_update(pipeline_run, REPLACED_BY_RAW)
    response = client.post(
        f"/api/proposals/{proposal.id}/approve", json.dumps({}), content_type="application/json",
        **review_auth,
    )  # fmt: skip
    assert response.status_code == 200
    assert (response.json()["action"], response.json()["appliedAs"]) == ("update", "delete")


# --- the migration that splits rows approved before applied_as ----------------------------------


def _split():
    module = importlib.import_module("pipeline.migrations.0014_proposal_applied_as")
    return module.split_applied_action(apps, None), module


def _as_before(proposal: Proposal) -> None:
    """The row as approvals used to leave it: `action` overwritten with the applied one."""
    Proposal.objects.filter(id=proposal.id).update(
        action=proposal.applied_as,
        applied_as=None,
        risk=0 if proposal.applied_as == "delete" else 2,
    )


def test_the_migration_gives_old_rows_back_the_models_action_and_records_the_applied_one(
    replaced, kept_both, pipeline_run
):
    _as_before(replaced)
    _as_before(kept_both)
    untouched = {
        p.id: (p.action, p.applied_as, p.status)
        for p in Proposal.objects.exclude(id__in=[replaced.id, kept_both.id])
    }
    assert Proposal.objects.get(id=replaced.id).action == "delete"

    split, module = _split()

    assert split == 2
    for proposal, applied in ((replaced, "delete"), (kept_both, "add")):
        row = Proposal.objects.get(id=proposal.id)
        assert (row.action, row.applied_as, row.risk) == ("update", applied, 1)
    after = {
        p.id: (p.action, p.applied_as, p.status)
        for p in Proposal.objects.exclude(id__in=[replaced.id, kept_both.id])
    }
    assert after == untouched
    assert _split()[0] == 0  # a second run finds nothing to do

    module.join_applied_action(apps, None)  # backwards: one field again, the applied action
    row = Proposal.objects.get(id=replaced.id)
    assert (row.action, row.risk) == ("delete", 0)
