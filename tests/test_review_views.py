"""Overview, review queue, decisions, bulk actions, proposal detail and the contradiction workbench."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory.models import Memory, MemoryHistory
from pipeline.config import update_config
from pipeline.models import Proposal

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}

# Two sentences per raw memory, so each extracted fact differs from its raw source text.
BASE = [
    "The team uses Kafka for billing events. Standup notes from Monday.",
    "Priya prefers squash merges for feature branches. Said in the review channel.",
    "Automatic staging deploys are enabled for every service. Noted by the release bot.",
]
LATER = [
    "The team doesn't use Kafka for billing events anymore. Standup notes from Friday.",
    "Automatic staging deploys are disabled for every service. Noted by the release bot today.",
    "Kenji maintains the ingest-worker service and its Kafka consumers. From the team wiki.",
]


@pytest.fixture
def queue(pipeline_run):
    """Base facts applied in controlled-write, then contradicting ones proposed in shadow mode."""
    update_config({"shadowMode": False}, changed_by="test", reason="seed")
    pipeline_run(*BASE)
    update_config({"shadowMode": True}, changed_by="test", reason="review")
    pipeline_run(*LATER)
    return Proposal.objects.filter(status="pending")


def decide(client, proposal, htmx=True, **data):
    headers = HX if htmx else {}
    return client.post(f"/proposals/{proposal.id}/decide/", {"from": "row", **data}, **headers)


@pytest.mark.parametrize("url", ["/", "/review/", "/contradictions/", "/banner/"])
def test_pages_need_login(client, url):
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_the_overview_shows_counts_and_svg_charts(viewer_client, queue):
    response = viewer_client.get("/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "waiting for review" in body and body.count('<svg class="chart"') == 3
    assert f'data-testid="stat-pending">{queue.count()}<' in body
    assert "SHADOW" in body  # the mode banner


def test_every_page_shows_the_mode_banner_for_each_mode(viewer_client, queue):
    for changes, label in (
        ({"shadowMode": True}, "SHADOW"),
        ({"shadowMode": False}, "CONTROLLED-WRITE"),
        ({"allowUpdateDelete": True}, "FULL"),
        ({"mutationsFrozen": True}, "FROZEN"),
        ({"enabled": False}, "DISABLED"),
    ):
        update_config(changes, changed_by="t", reason="t")
        assert (
            f'<strong class="banner-label">{label}</strong>'
            in viewer_client.get("/review/").content.decode()
        )


def test_the_queue_lists_pending_proposals_riskiest_first_with_the_targets_text(
    viewer_client, queue
):
    response = viewer_client.get("/review/")
    body = response.content.decode()
    assert response.status_code == 200
    rows = list(response.context["page"])
    ranks = [{"delete": 0, "update": 1, "add": 2}.get(p.action, 3) for p in rows]
    assert ranks == sorted(ranks)
    update = next(p for p in rows if p.action == "update")
    assert update.target_memory.content in body


def test_the_queue_filters_and_rejects_bad_filter_values_next_to_the_field(viewer_client, queue):
    response = viewer_client.get("/review/?action=update&review_needed=yes")
    assert all(p.action == "update" and p.review_needed for p in response.context["page"])
    response = viewer_client.get("/review/?conf_min=0.9&conf_max=0.2")
    assert "Must be at least the lower bound." in response.content.decode()
    response = viewer_client.get("/review/?conf_min=abc")
    assert "Enter a number." in response.content.decode()


def test_the_queue_fragment_is_served_to_htmx(viewer_client, queue):
    response = viewer_client.get("/review/?action=add", HTTP_HX_TARGET="queue", **HX)
    body = response.content.decode()
    assert "<html" not in body and body.strip().startswith('<section id="queue">')


def test_a_viewer_cannot_decide_anything(viewer_client, queue):
    proposal = queue.first()
    response = decide(viewer_client, proposal, decision="approve")
    assert response.status_code == 403
    assert Proposal.objects.get(id=proposal.id).status == "pending"
    assert (
        viewer_client.post(
            "/review/bulk/", {"decision": "approve", "scope": "all", "step": "apply"}
        ).status_code
        == 403
    )


def test_approving_a_row_swaps_it_and_updates_the_counts(reviewer_client, queue):
    proposal = queue.filter(action="add").first()
    response = decide(reviewer_client, proposal, decision="approve")
    assert response.status_code == 200
    assert "review-changed" in response["HX-Trigger"]
    body = response.content.decode()
    assert f'id="p-{proposal.id}"' in body and "Approved by rita" in body
    proposal.refresh_from_db()
    assert proposal.status == "applied" and proposal.decided_by == "rita"
    reviewed = MemoryHistory.objects.get(memory_id=proposal.source_memory_id, event="reviewed")
    assert (reviewed.changed_by, reviewed.actor_type) == ("rita", "operator")


def test_rejecting_needs_a_reason_shown_in_the_row(reviewer_client, queue):
    proposal = queue.first()
    response = decide(reviewer_client, proposal, decision="reject", reason="")
    assert "Say why you reject it" in response.content.decode()
    assert Proposal.objects.get(id=proposal.id).status == "pending"
    decide(reviewer_client, proposal, decision="reject", reason="not durable")
    proposal.refresh_from_db()
    assert proposal.status == "rejected" and proposal.review_note == "not durable"


def test_edit_then_approve_stores_the_edited_text(reviewer_client, queue):
    proposal = queue.filter(action="add").first()
    decide(reviewer_client, proposal, decision="approve", content="Kenji maintains ingest-worker.")
    proposal.refresh_from_db()
    assert proposal.created_memory.content == "Kenji maintains ingest-worker."


def test_a_second_reviewer_is_told_who_decided(reviewer_client, admin_client_role, queue):
    proposal = queue.filter(action="add").first()
    decide(admin_client_role, proposal, decision="approve")
    response = decide(reviewer_client, proposal, decision="approve")
    assert "already applied (by ada" in response.content.decode()
    assert (
        Memory.objects.filter(
            source_id=proposal.source_memory_id,
            source_type="pipeline-v2",
            content=proposal.fact_content,
        ).count()
        == 1
    )


def test_plain_posts_redirect_to_the_detail_with_a_message(reviewer_client, queue):
    proposal = queue.filter(action="add").first()
    response = decide(reviewer_client, proposal, htmx=False, decision="approve")
    assert response.status_code == 302 and response["Location"] == f"/proposals/{proposal.id}/"
    follow = reviewer_client.get(response["Location"])
    assert "Approved by rita" in follow.content.decode()


def test_bulk_preview_shows_counts_per_action_and_apply_runs_in_chunks(
    reviewer_client, queue, settings
):
    from dashboard.views import review as views

    total = queue.count()
    views.BULK_CHUNK = 2
    try:
        response = reviewer_client.post(
            "/review/bulk/",
            {"decision": "approve", "scope": "all", "step": "preview", "filters": "action=add"},
            **HX,
        )
        body = response.content.decode()
        adds = queue.filter(action="add").count()
        assert f"Approve {adds} proposal" in body and "Confirm: approve" in body
        assert (
            Proposal.objects.filter(status="pending").count() == total
        )  # nothing applied by a preview
        data = {
            "decision": "approve",
            "scope": "all",
            "step": "apply",
            "filters": "action=add",
            "total": adds,
        }
        response = reviewer_client.post("/review/bulk/", data, **HX)
        assert 'hx-trigger="load delay:30ms"' in response.content.decode() or adds <= 2
        while 'hx-trigger="load' in response.content.decode():
            body = response.content.decode()
            after = re.search(r'name="after" value="([^"]*)"', body).group(1)
            done = re.search(r'name="done" value="([^"]*)"', body).group(1)
            response = reviewer_client.post(
                "/review/bulk/", {**data, "after": after, "done": done, "failed": 0}, **HX
            )
        assert "Done" in response.content.decode()
    finally:
        views.BULK_CHUNK = 25
    assert not Proposal.objects.filter(status="pending", action="add").exists()
    assert Proposal.objects.filter(status="pending").exclude(action="add").count() == total - adds


def test_bulk_reject_needs_a_reason_and_selected_scope_needs_rows(reviewer_client, queue):
    response = reviewer_client.post(
        "/review/bulk/", {"decision": "reject", "scope": "all", "step": "preview"}, **HX
    )
    assert "A bulk rejection needs a reason." in response.content.decode()
    response = reviewer_client.post(
        "/review/bulk/", {"decision": "approve", "scope": "selected", "step": "preview"}, **HX
    )
    assert "Select at least one row" in response.content.decode()


def test_the_proposal_detail_shows_source_candidates_diff_and_what_the_model_saw(
    viewer_client, queue
):
    proposal = queue.filter(action="update").first()
    response = viewer_client.get(f"/proposals/{proposal.id}/")
    body = response.content.decode()
    assert response.status_code == 200
    assert "Candidates the decision saw" in body and "<ins>" in body or "<del>" in body
    assert "Prompt" in body and "Raw reply" in body
    assert 'data-testid="source"' in body


def test_the_contradiction_workbench_resolves_with_keep_both(reviewer_client, queue):
    flagged = queue.filter(review_needed=True).first()
    assert flagged is not None
    body = reviewer_client.get("/contradictions/").content.decode()
    assert '<mark class="overlap">' in body and flagged.target_memory.content.split()[0] in body
    response = reviewer_client.post(
        f"/proposals/{flagged.id}/decide/", {"from": "card", "decision": "keep_both"}, **HX
    )
    assert f'id="c-{flagged.id}"' in response.content.decode()
    flagged.refresh_from_db()
    assert (
        flagged.status == "applied"
        and flagged.action == "add"
        and flagged.created_memory is not None
    )
    assert not Memory.objects.get(id=flagged.target_memory_id).is_deleted


def test_delete_the_old_one_soft_deletes_the_target(reviewer_client, queue):
    flagged = queue.filter(review_needed=True).first()
    reviewer_client.post(
        f"/proposals/{flagged.id}/decide/", {"from": "card", "decision": "delete_old"}, **HX
    )
    assert Memory.objects.get(id=flagged.target_memory_id).is_deleted


def test_merge_needs_text_and_updates_the_target(reviewer_client, queue):
    flagged = queue.filter(review_needed=True).first()
    response = reviewer_client.post(
        f"/proposals/{flagged.id}/decide/",
        {"from": "card", "decision": "merge", "content": ""},
        **HX,
    )
    assert "Write the merged text." in response.content.decode()
    reviewer_client.post(
        f"/proposals/{flagged.id}/decide/",
        {"from": "card", "decision": "merge", "content": "Billing events moved off Kafka in 2026."},
        **HX,
    )
    target = Memory.objects.get(id=flagged.target_memory_id)
    assert target.content == "Billing events moved off Kafka in 2026." and target.version == 2


def test_a_stale_proposal_is_shown_and_can_be_re_decided(reviewer_client, queue):
    from memory.writes import Actor, modify

    proposal = queue.filter(action="update").first()
    modify(
        proposal.target_memory_id,
        {"content": "Someone edited this meanwhile."},
        actor=Actor("x"),
        reason="edit",
    )
    response = decide(reviewer_client, proposal, decision="approve")
    assert "target memory changed since the decision" in response.content.decode()
    proposal.refresh_from_db()
    assert proposal.status == "stale"
    body = reviewer_client.get("/contradictions/").content.decode()
    assert "Someone edited this meanwhile." in body and "Apply to current version" in body
    decide(reviewer_client, proposal, decision="redecide")
    proposal.refresh_from_db()
    assert proposal.status == "applied"


def test_memory_content_is_escaped_everywhere(reviewer_client, pipeline_run):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    pipeline_run(
        "<script>alert(1)</script> Marco said <img src=x onerror=alert(2)> is fine. Billing is fine too."
    )
    for url in ("/review/", f"/proposals/{Proposal.objects.first().id}/"):
        body = reviewer_client.get(url).content.decode()
        assert "<script>alert(1)" not in body and "<img src=x" not in body
        assert "&lt;script&gt;" in body


def _queries(client, url):
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def test_list_and_detail_query_counts_do_not_grow_with_rows(viewer_client, pipeline_run):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    pipeline_run(*BASE)
    few = {url: _queries(viewer_client, url) for url in ("/", "/review/", "/contradictions/")}
    detail_few = _queries(viewer_client, f"/proposals/{Proposal.objects.first().id}/")
    pipeline_run(
        *[f"Service number {i} runs on node {i} in the Frankfurt region." for i in range(30)]
    )
    many = {url: _queries(viewer_client, url) for url in few}
    assert many == few
    assert _queries(viewer_client, f"/proposals/{Proposal.objects.last().id}/") == detail_few
