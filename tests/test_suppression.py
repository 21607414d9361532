"""Learning from rejections: a rejected proposal's fingerprint suppresses the same proposal from
later jobs; the queue shows them under "Suppressed (N)" and a reviewer can unsuppress one."""

import json

import pytest

from memory.models import Memory
from memory.writes import Actor, forget
from pipeline.models import Proposal, RejectionFingerprint
from pipeline.tasks import process_pending
from pipeline.writes import record
from pipeline.writes import review as review_writes
from pipeline.writes.config import update_config
from tests.pipeline_support import ScriptedModel, decision, raw, set_mode

pytestmark = pytest.mark.django_db
RITA = Actor("rita", "operator")
FACT = "Priya prefers squash merges for feature branches"
# Different raw texts that all yield the same fact (the scripted model extracts it from each).
RAWS = [
    "Priya prefers squash merges for feature branches. Said in the review channel.",
    "Reminder from the retro: Priya prefers squash merges for feature branches.",
    "Priya again: squash merges for feature branches, please. From the standup.",
    "Once more, Priya prefers squash merges for feature branches. Team wiki.",
]


def run(text, **kwargs) -> Proposal:
    """Remember a raw memory, run its job, return the proposal for FACT."""
    source = raw(text, **kwargs).memory
    process_pending()
    return Proposal.objects.get(source_memory=source, fact_content=FACT)


@pytest.fixture
def model(fake_ollama):
    return ScriptedModel(fake_ollama, facts=[FACT])


@pytest.fixture
def rejected(model):
    set_mode("shadow")
    first = run(RAWS[0])
    assert (first.status, first.action, first.target_memory_id) == ("pending", "add", None)
    review_writes.reject(first.id, reviewer=RITA, reason="not durable knowledge")
    return first


def test_the_same_proposal_from_a_later_job_is_suppressed_and_counted(rejected):
    fingerprint = RejectionFingerprint.objects.get(proposal=rejected)
    assert fingerprint.active and fingerprint.hits == 0
    assert fingerprint.fingerprint == rejected.fingerprint == record.fingerprint("add", FACT, None)

    again = run(RAWS[1])
    assert (again.status, again.skipped_reason) == ("suppressed", "rejected_before")
    assert again.fingerprint == rejected.fingerprint
    fingerprint.refresh_from_db()
    assert fingerprint.hits == 1
    assert again.job.result["writeStats"]["suppressed"] == 1
    assert again.job.result["proposals"][0]["status"] == "suppressed"

    run(RAWS[2])
    fingerprint.refresh_from_db()
    assert fingerprint.hits == 2

    review_writes.unsuppress(again.id, reviewer=RITA)
    again.refresh_from_db()
    assert (again.status, again.skipped_reason) == ("pending", None)
    fingerprint.refresh_from_db()
    assert not fingerprint.active
    # The fingerprint no longer suppresses: the next identical proposal is queued for review.
    assert run(RAWS[3]).status == "pending"


def test_offline_run_of_the_same_raw_text_again_is_suppressed(pipeline_run):
    """No model server: the offline provider extracts the same fact from the same text."""
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    text = RAWS[0]
    (source,) = pipeline_run(text)
    first = Proposal.objects.get(source_memory=source, fact_content=f"{FACT}.")
    review_writes.reject(first.id, reviewer=RITA, reason="not durable")
    # The agent writes the very same text again later (after the first copy was forgotten).
    forget(source.id, actor=Actor("agent"), reason="cleanup")
    (again_source,) = pipeline_run(text)
    assert again_source.id != source.id
    again = Proposal.objects.get(source_memory=again_source, fact_content=f"{FACT}.")
    assert (again.status, again.skipped_reason) == ("suppressed", "rejected_before")
    assert RejectionFingerprint.objects.get(proposal=first).hits == 1
    # Only the rejected fact is suppressed; the other sentence of the text is queued as before.
    others = Proposal.objects.filter(source_memory=again_source).exclude(id=again.id)
    assert others and all(p.status == "pending" for p in others)


def test_a_suppressed_add_is_never_written_in_controlled_write_mode(rejected):
    set_mode("controlled-write")
    again = run(RAWS[1])
    assert again.status == "suppressed" and again.created_memory_id is None
    assert not Memory.objects.filter(source_type="pipeline-v2").exists()


def test_another_action_target_or_agent_is_not_suppressed(fake_ollama):
    set_mode("shadow")
    model = ScriptedModel(fake_ollama, facts=[FACT])
    first = run(RAWS[0])
    review_writes.reject(first.id, reviewer=RITA, reason="no")
    # The first raw memory is a candidate of the next job: target it with an UPDATE instead.
    model.decisions[FACT] = decision("update", first.source_memory_id)
    other = run(RAWS[1])  # same fact, another action and target
    assert (other.action, other.target_memory_id, other.status) == (
        "update",
        first.source_memory_id,
        "pending",
    )
    model.decisions.pop(FACT)
    assert run(RAWS[2], agent_id="other-agent").status == "pending"  # fingerprints are per agent


def test_reopening_a_rejection_lifts_its_fingerprint(rejected):
    review_writes.reopen(rejected.id, reviewer=RITA)
    assert not RejectionFingerprint.objects.get(proposal=rejected).active
    assert run(RAWS[1]).status == "pending"


# --- the queue and the dashboard ------------------------------------------------------------------


def test_the_queue_filter_offers_suppressed_with_a_count(viewer_client, rejected):
    body = viewer_client.get("/review/").content.decode()
    assert '<option value="suppressed">Suppressed (0)</option>' in body
    suppressed = [run(text) for text in RAWS[1:3]]
    body = viewer_client.get("/review/").content.decode()
    assert '<option value="suppressed">Suppressed (2)</option>' in body
    # The pending queue does not show them; the suppressed filter does.
    pending = viewer_client.get("/review/")
    assert not any(p.status == "suppressed" for p in pending.context["page"])
    response = viewer_client.get("/review/?status=suppressed")
    assert {p.id for p in response.context["page"]} == {p.id for p in suppressed}
    body = response.content.decode()
    assert '<option value="suppressed" selected>Suppressed (2)</option>' in body
    assert "skipped: rejected_before" in body
    assert 'data-action="unsuppress"' not in body  # a viewer sees no action


def test_unsuppress_from_the_queue_row_with_htmx(reviewer_client, rejected, hx):
    again = run(RAWS[1])
    body = reviewer_client.get("/review/?status=suppressed").content.decode()
    assert f'hx-post="/proposals/{again.id}/unsuppress/"' in body
    response = reviewer_client.post(
        f"/proposals/{again.id}/unsuppress/", HTTP_HX_TARGET=f"p-{again.id}", **hx
    )
    assert response.status_code == 200
    row = response.content.decode()
    assert row.strip().startswith(f'<tr id="p-{again.id}"')
    assert "Unsuppressed by rita: back in the pending queue." in row
    assert 'data-action="approve"' in row and 'data-action="unsuppress"' not in row
    events = json.loads(response["HX-Trigger"])
    assert "review-changed" in events and events["toast"]["message"].startswith("Unsuppressed")
    assert Proposal.objects.get(id=again.id).status == "pending"
    assert (
        '<option value="suppressed">Suppressed (0)</option>'
        in reviewer_client.get("/review/").content.decode()
    )
    # Twice: refused, told in the row.
    response = reviewer_client.post(
        f"/proposals/{again.id}/unsuppress/", HTTP_HX_TARGET=f"p-{again.id}", **hx
    )
    assert "Not unsuppressed: this proposal is pending, not suppressed" in response.content.decode()


def test_unsuppress_from_the_proposal_page(reviewer_client, viewer_client, rejected, hx):
    again = run(RAWS[1])
    page = reviewer_client.get(f"/proposals/{again.id}/").content.decode()
    assert 'data-testid="unsuppress"' in page and "rejected this exact proposal before" in page
    assert (
        'data-testid="unsuppress"'
        not in viewer_client.get(f"/proposals/{again.id}/").content.decode()
    )
    assert viewer_client.post(f"/proposals/{again.id}/unsuppress/").status_code == 403
    response = reviewer_client.post(f"/proposals/{again.id}/unsuppress/")
    assert response.status_code == 302 and response["Location"] == f"/proposals/{again.id}/"
    body = reviewer_client.get(response["Location"]).content.decode()
    assert "Unsuppressed by rita" in body
    assert Proposal.objects.get(id=again.id).status == "pending"
    # Now it can be reviewed like any pending proposal.
    response = reviewer_client.post(
        f"/proposals/{again.id}/decide/", {"from": "row", "decision": "approve"}, **hx
    )
    assert Proposal.objects.get(id=again.id).status == "applied"
