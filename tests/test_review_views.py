"""Overview, review queue, decisions, bulk actions, proposal detail and the contradiction workbench."""

import json
import re
from html.parser import HTMLParser

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils.html import escape

from memory.models import Memory, MemoryHistory
from memory.writes import Actor
from pipeline.models import Proposal
from pipeline.trail import trail_of
from pipeline.writes.claims import claim
from pipeline.writes.config import update_config
from tests.aria_checks import assert_errors_described

pytestmark = pytest.mark.django_db

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


@pytest.fixture
def decide(hx):
    def post(client, proposal, htmx=True, **data):
        headers = hx if htmx else {}
        return client.post(f"/proposals/{proposal.id}/decide/", {"from": "row", **data}, **headers)

    return post


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
    # Disabled with the brake still on: the brake stops approvals, so the banner says so too (a
    # QA pass: it showed only DISABLED, and Approve then answered "frozen").
    assert "The emergency brake is on too" in viewer_client.get("/review/").content.decode()
    update_config({"mutationsFrozen": False}, changed_by="t", reason="t")
    assert "The emergency brake is on too" not in viewer_client.get("/review/").content.decode()
    # Full mode under the two-person rule applies no DELETE by itself (a QA pass: the banner
    # and the Settings preview said "ADD, UPDATE and DELETE are applied automatically").
    update_config(
        {"enabled": True, "review": {"destructiveApprovals": 2}}, changed_by="t", reason="t"
    )
    page = viewer_client.get("/review/").content.decode()
    assert '<strong class="banner-label">FULL</strong>' in page
    assert "DELETE waits for two reviewers (the two-person rule)" in page


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
    assert_errors_described(response.content.decode())


def test_the_queue_fragment_is_served_to_htmx(viewer_client, queue, hx):
    response = viewer_client.get("/review/?action=add", HTTP_HX_TARGET="queue", **hx)
    body = response.content.decode()
    assert "<html" not in body and body.strip().startswith('<section id="queue"')


def test_a_viewer_cannot_decide_anything(viewer_client, queue, decide):
    page = viewer_client.get("/review/").content.decode()
    # Nothing offered that only a reviewer may do (a QA pass: boxes to tick, keys to approve).
    assert "data-select" not in page and "Approve <kbd>a</kbd>" not in page
    assert "deciding needs the reviewer role" in page
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


def test_approving_a_row_swaps_it_and_updates_the_counts(reviewer_client, queue, decide):
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


def test_rejecting_needs_a_reason_shown_in_the_row(reviewer_client, queue, decide):
    proposal = queue.first()
    response = decide(reviewer_client, proposal, decision="reject", reason="   ")
    body = response.content.decode()
    # By the reason box, which stays open with what was typed (it closed, and the error stood
    # only in the toast and the row's note: a QA pass).
    error = re.search(
        r'<p class="field-error" id="reject-([^"]+)-error" role="alert"[^>]*>([^<]+)', body
    )
    assert error and error.group(1) == proposal.id and "Say why you reject it" in error.group(2)
    box = re.search(rf'<input id="reject-{proposal.id}"[^>]*>', body).group(0)
    assert 'aria-invalid="true"' in box and f'aria-describedby="reject-{proposal.id}-error"' in box
    assert re.search(r'<form data-reveal="reject"[^>]*hidden', body) is None
    assert Proposal.objects.get(id=proposal.id).status == "pending"
    decide(reviewer_client, proposal, decision="reject", reason="not durable")
    proposal.refresh_from_db()
    assert proposal.status == "rejected" and proposal.review_note == "not durable"


def test_edit_then_approve_stores_the_edited_text(reviewer_client, queue, decide):
    proposal = queue.filter(action="add").first()
    decide(reviewer_client, proposal, decision="approve", content="Kenji maintains ingest-worker.")
    proposal.refresh_from_db()
    assert proposal.created_memory.content == "Kenji maintains ingest-worker."


@pytest.mark.parametrize("emptied", ["", "   ", "\n.\n"])
def test_an_emptied_edit_box_approves_nothing_and_says_so(reviewer_client, queue, decide, emptied):
    """Before, an emptied box meant "as proposed": the model's text was approved unseen."""
    proposal = queue.filter(action="add").first()
    response = decide(reviewer_client, proposal, decision="approve", content=emptied)
    assert "The text is empty: write the fact before approving it." in response.content.decode()
    proposal.refresh_from_db()
    assert proposal.status == "pending" and proposal.created_memory is None
    decide(reviewer_client, proposal, decision="approve")  # no box at all: as proposed
    proposal.refresh_from_db()
    assert proposal.status == "applied"
    assert proposal.created_memory.content == proposal.fact_content


def test_an_emptied_box_on_a_contradiction_card_decides_only_what_needs_no_text(
    reviewer_client, queue, hx
):
    flagged = queue.filter(review_needed=True).first()
    url = f"/proposals/{flagged.id}/decide/"
    for decision in ("approve", "keep_both"):
        response = reviewer_client.post(
            url, {"from": "card", "decision": decision, "content": " "}, **hx
        )
        assert "The text is empty" in response.content.decode()
        assert Proposal.objects.get(id=flagged.id).status == "pending"
    reviewer_client.post(url, {"from": "card", "decision": "delete_old", "content": ""}, **hx)
    assert Memory.objects.get(id=flagged.target_memory_id).is_deleted


def test_the_bulk_bars_counts_are_asked_again_after_a_decision_elsewhere(
    reviewer_client, queue, decide, hx
):
    """The page asks on each review-changed event; before, a row's decision left them stale."""
    page = reviewer_client.get("/review/?action=add").content.decode()
    assert 'hx-get="/review/?action=add&amp;counts=1"' in page
    adds = queue.filter(action="add").count()
    decide(reviewer_client, queue.filter(action="add").first(), decision="approve")
    counts = reviewer_client.get("/review/?action=add&counts=1", **hx).content.decode()
    assert (
        f'<span id="queue-counts" hx-swap-oob="true"><strong>{adds - 1}</strong> matching' in counts
    )
    assert f'<span id="scope-all-count" hx-swap-oob="true">{adds - 1}</span>' in counts
    assert "<tr" not in counts  # the counts alone, not the page


def test_a_rejection_refused_because_someone_decided_meanwhile_gives_its_reason_back(
    reviewer_client, admin_client_role, queue, decide
):
    """Found by a day of reviewing: the row came back "already applied (by ada)" and the
    reason typed for the rejection was gone from the page (cards gave it back already)."""
    proposal = queue.filter(action="add").first()
    decide(admin_client_role, proposal, decision="approve")
    typed = "the fact is a one-off <remark> from a chat, not a durable rule"
    body = decide(reviewer_client, proposal, decision="reject", reason=typed).content.decode()
    assert "already applied (by ada" in body
    kept = re.search(r'data-testid="kept-edit".*?<textarea[^>]*>([^<]*)</textarea>', body, re.S)
    assert kept and kept.group(1).strip() == typed.replace("<", "&lt;").replace(">", "&gt;")


def test_a_second_reviewer_is_told_who_decided(reviewer_client, admin_client_role, queue, decide):
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


def test_plain_posts_redirect_to_the_detail_with_a_message(reviewer_client, queue, decide):
    proposal = queue.filter(action="add").first()
    response = decide(reviewer_client, proposal, htmx=False, decision="approve")
    assert response.status_code == 302 and response["Location"] == f"/proposals/{proposal.id}/"
    follow = reviewer_client.get(response["Location"])
    assert "Approved by rita" in follow.content.decode()


class _DecisionForms(HTMLParser):
    """Every form of a page that posts a decision: its attributes and the values it would send."""

    def __init__(self):
        super().__init__()
        self.forms: list[dict] = []
        self._in: dict | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form" and "/decide/" in (attrs.get("hx-post") or ""):
            self._in = {"attrs": attrs, "fields": {}}
            self.forms.append(self._in)
        elif self._in is not None and tag == "input" and attrs.get("name"):
            if attrs.get("type") in {"hidden", None, "text"}:
                self._in["fields"][attrs["name"]] = attrs.get("value") or ""
        elif self._in is not None and tag == "textarea" and attrs.get("name"):
            self._textarea = attrs["name"]
            self._in["fields"][self._textarea] = ""

    def handle_data(self, data):
        if self._in is not None and self._textarea:
            self._in["fields"][self._textarea] += data

    def handle_endtag(self, tag):
        if tag == "textarea":
            self._textarea = None
        elif tag == "form":
            self._in = None


def test_the_decision_forms_post_without_javascript_and_carry_their_csrf_token(role_users, queue):
    """Before htmx has loaded (or without it) a decision form posts to its own URL, with the
    CSRF token, instead of putting the typed text in a GET of the page."""
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(role_users["reviewer"])
    pages = {}
    for url in ("/review/", "/contradictions/"):
        parser = _DecisionForms()
        parser.feed(strict.get(url).content.decode())
        assert parser.forms, url
        pages[url] = parser.forms
        for found in parser.forms:
            attrs = found["attrs"]
            assert attrs.get("method") == "post" and attrs.get("action") == attrs["hx-post"]
            assert found["fields"].get("csrfmiddlewaretoken")
    approve = next(
        f
        for f in pages["/review/"]
        if f["fields"].get("decision") == "approve" and "content" not in f["fields"]
    )
    proposal = Proposal.objects.get(id=approve["attrs"]["action"].split("/")[2])
    response = strict.post(approve["attrs"]["action"], approve["fields"])
    assert response.status_code == 302 and response["Location"] == f"/proposals/{proposal.id}/"
    proposal.refresh_from_db()
    assert proposal.status == "applied" and proposal.decided_by == "rita"
    reject = next(
        f
        for f in pages["/review/"]
        if f["fields"].get("decision") == "reject"
        and f["attrs"]["action"] != approve["attrs"]["action"]
    )
    rejected = Proposal.objects.get(id=reject["attrs"]["action"].split("/")[2])
    response = strict.post(reject["attrs"]["action"], {**reject["fields"], "reason": "not durable"})
    assert response.status_code == 302
    rejected.refresh_from_db()
    assert rejected.status == "rejected"
    # Without its token the same post is refused, and decides nothing.
    other = Proposal.objects.filter(status="pending").first()
    fields = {k: v for k, v in approve["fields"].items() if k != "csrfmiddlewaretoken"}
    assert strict.post(f"/proposals/{other.id}/decide/", fields).status_code == 403
    other.refresh_from_db()
    assert other.status == "pending"


def test_a_refused_decision_on_the_proposal_page_keeps_what_was_typed_by_its_fields(
    reviewer_client, queue, decide
):
    """Before, a refusal redirected: the edited text and the reason were gone, and the error
    stood only in the page's top banner."""
    proposal = queue.filter(action="add").first()
    response = decide(reviewer_client, proposal, htmx=False, decision="reject", reason=" ")
    body = response.content.decode()
    assert response.status_code == 200  # the page itself, not a redirect
    assert '<p class="field-error" id="reason-error">Say why you reject it' in body
    assert 'data-testid="decide-refused"' in body
    assert_errors_described(body)

    edited = "Kenji maintains ingest-worker <and> its consumers."
    body = decide(
        reviewer_client, proposal, htmx=False, decision="reject", reason="", content=edited
    ).content.decode()
    assert f">{escape(edited)}</textarea>" in body  # escaped, as every text the page shows

    body = decide(
        reviewer_client, proposal, htmx=False, decision="approve", content=" ", reason="typo"
    ).content.decode()
    assert '<p class="field-error" id="content-error">The text is empty' in body
    assert 'value="typo"' in body
    assert Proposal.objects.get(id=proposal.id).status == "pending"


def test_after_a_refused_decision_the_pages_triple_forms_come_back_to_the_page(
    reviewer_client, queue, decide
):
    """The page is then drawn at the decision's POST-only address: a triple decided without
    htmx was sent back there and met 405."""
    proposal = queue.filter(job__triples__isnull=False).first()
    assert proposal is not None, "the queue's jobs extracted entity triples"
    body = decide(reviewer_client, proposal, htmx=False, decision="reject", reason="").content
    assert f'name="next" value="/proposals/{proposal.id}/"' in body.decode()


def test_bulk_preview_shows_counts_per_action_and_apply_runs_in_chunks(
    reviewer_client, queue, settings, hx
):
    from dashboard.views import review as views

    total = queue.count()
    views.BULK_CHUNK = 2
    try:
        response = reviewer_client.post(
            "/review/bulk/",
            {"decision": "approve", "scope": "all", "step": "preview", "filters": "action=add"},
            **hx,
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
        response = reviewer_client.post("/review/bulk/", data, **hx)
        assert 'hx-trigger="load delay:30ms"' in response.content.decode() or adds <= 2
        while 'hx-trigger="load' in response.content.decode():
            body = response.content.decode()
            after = re.search(r'name="after" value="([^"]*)"', body).group(1)
            done = re.search(r'name="done" value="([^"]*)"', body).group(1)
            response = reviewer_client.post(
                "/review/bulk/", {**data, "after": after, "done": done, "failed": 0}, **hx
            )
        assert "Done" in response.content.decode()
    finally:
        views.BULK_CHUNK = 25
    assert not Proposal.objects.filter(status="pending", action="add").exists()
    assert Proposal.objects.filter(status="pending").exclude(action="add").count() == total - adds


def test_the_bulk_preview_leaves_out_a_proposal_whose_memory_was_edited_since(
    reviewer_client, queue, hx
):
    """Found by a day of reviewing: the preview said "Approve 2 proposals?" for two UPDATEs, one
    of whose targets had been edited since the decision; the result was "1 approved, 1 not
    applied: target memory changed"."""
    from memory import writes

    updates = list(queue.filter(action="update", target_memory__isnull=False)[:2])
    assert len(updates) == 2
    moved = updates[0]
    writes.modify(
        moved.target_memory_id,
        {"content": moved.target_memory.content + " (checked)"},
        actor=Actor("ada", "operator"),
        reason="edited meanwhile",
    )
    form = {"decision": "approve", "scope": "selected", "ids": [u.id for u in updates]}
    body = reviewer_client.post("/review/bulk/", {**form, "step": "preview"}, **hx)
    body = body.content.decode()
    assert "Approve 1 of the 2 proposals?" in body
    assert 'data-testid="bulk-moved">1 changes a memory that was edited since the decision' in body
    rejecting = reviewer_client.post(
        "/review/bulk/", {**form, "decision": "reject", "reason": "no", "step": "preview"}, **hx
    ).content.decode()
    assert 'data-testid="bulk-moved"' not in rejecting  # a rejection needs no current memory


def _bulk_run(client, hx, data: dict) -> str:
    """A bulk apply posted chunk after chunk, as its panel does; the last answer."""
    body = client.post("/review/bulk/", data, **hx).content.decode()
    while 'hx-trigger="load' in body:
        carried = dict(re.findall(r'name="(after|done|failed|previewed_at)" value="([^"]*)"', body))
        body = client.post("/review/bulk/", {**data, **carried}, **hx).content.decode()
    return body


def test_bulk_on_all_matching_decides_only_what_its_preview_counted(
    reviewer_client, queue, pipeline_run, hx, monkeypatch
):
    """Before, the apply ran the filter again: proposals that arrived after the preview were
    decided too ("Approve 2?", then "Done 4 approved of 4"), and so was one put back to pending
    after it (a reopen keeps its old created_at)."""
    from dashboard.views import review as views
    from memory.writes import Actor
    from pipeline import review

    sam = Actor("sam", "operator")
    adds = list(queue.filter(action="add").order_by("id").values_list("id", flat=True))
    rejected = review.reject(adds[0], sam, reason="not durable").id  # not pending: not counted
    counted = set(adds[1:])
    preview = reviewer_client.post(
        "/review/bulk/",
        {"decision": "approve", "scope": "all", "step": "preview", "filters": "action=add"},
        **hx,
    ).content.decode()
    assert f"Confirm: approve {len(counted)}" in preview
    previewed_at = re.search(r'name="previewed_at" value="([^"]+)"', preview).group(1)

    pipeline_run("Sofia owns the component library in packages/ui. From the design sync.")
    review.reopen(rejected, sam)  # pending again after the preview
    pending = Proposal.objects.filter(status="pending", action="add")
    new = set(pending.values_list("id", flat=True)) - counted - {rejected}
    assert new  # a proposal the preview could not count now matches the filter

    data = {"decision": "approve", "scope": "all", "step": "apply", "filters": "action=add"}
    monkeypatch.setattr(views, "BULK_CHUNK", 1)  # chunk after chunk, each carrying the time
    body = _bulk_run(
        reviewer_client, hx, data | {"total": len(counted), "previewed_at": previewed_at}
    )
    assert f"{len(counted)} approved of {len(counted)}" in body
    assert f"{len(new)} proposal" in body and "since the preview" in body
    statuses = dict(Proposal.objects.values_list("id", "status"))
    assert {statuses[i] for i in counted} == {"applied"}
    assert {statuses[i] for i in new | {rejected}} == {"pending"}


def test_a_bulk_run_counts_the_filters_age_from_its_preview(reviewer_client, queue, hx):
    """ "Older than 7 days" at the preview takes in no proposal that grew old during the run."""
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    old, growing = queue.filter(action="add")[:2]
    # One was older than 7 days at the preview an hour ago; the other became so since.
    eight = now - timedelta(days=8)
    Proposal.objects.filter(id=old.id).update(created_at=eight, updated_at=eight)
    grown = now - timedelta(days=7, minutes=30)
    Proposal.objects.filter(id=growing.id).update(created_at=grown, updated_at=grown)
    data = {"decision": "approve", "scope": "all", "step": "apply", "filters": "age=older"}
    previewed_at = (now - timedelta(hours=1)).isoformat()
    body = _bulk_run(reviewer_client, hx, data | {"total": 1, "previewed_at": previewed_at})
    assert "1 approved of 1" in body
    assert Proposal.objects.get(id=old.id).status == "applied"
    assert Proposal.objects.get(id=growing.id).status == "pending"


def test_a_bulk_run_on_selected_rows_says_nothing_of_the_filters_new_proposals(
    reviewer_client, queue, pipeline_run, hx
):
    ticked = queue.filter(action="add").first()
    preview = reviewer_client.post(
        "/review/bulk/",
        {"decision": "approve", "scope": "selected", "ids": ticked.id, "step": "preview"},
        **hx,
    ).content.decode()
    previewed_at = re.search(r'name="previewed_at" value="([^"]+)"', preview).group(1)
    pipeline_run("Sofia owns the component library in packages/ui. From the design sync.")
    data = {"decision": "approve", "scope": "selected", "ids": ticked.id, "step": "apply"}
    body = _bulk_run(reviewer_client, hx, data | {"total": 1, "previewed_at": previewed_at})
    assert "1 approved of 1" in body and "since the preview" not in body


def test_bulk_reject_needs_a_reason_and_selected_scope_needs_rows(reviewer_client, queue, hx):
    response = reviewer_client.post(
        "/review/bulk/", {"decision": "reject", "scope": "all", "step": "preview"}, **hx
    )
    body = response.content.decode()
    # By the bar's reason box, out of band (it stood in the panel alone: a QA pass).
    assert re.search(
        r'<span id="bulk-reason-error" class="field-error" hx-swap-oob="true" role="alert">'
        r"A bulk rejection needs a reason.</span>",
        body,
    )
    page = reviewer_client.get("/review/").content.decode()
    assert 'aria-describedby="bulk-reason-error"' in page and 'id="bulk-reason-error"' in page
    cleared = reviewer_client.post(
        "/review/bulk/",
        {"decision": "reject", "scope": "all", "step": "preview", "reason": "stale"},
        **hx,
    ).content.decode()
    assert '<span id="bulk-reason-error" class="field-error" hx-swap-oob="true"></span>' in cleared
    response = reviewer_client.post(
        "/review/bulk/", {"decision": "approve", "scope": "selected", "step": "preview"}, **hx
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


def test_the_contradiction_workbench_resolves_with_keep_both(reviewer_client, queue, hx):
    flagged = queue.filter(review_needed=True).first()
    assert flagged is not None
    body = reviewer_client.get("/contradictions/").content.decode()
    assert '<mark class="overlap">' in body and flagged.target_memory.content.split()[0] in body
    # The merge box starts from the model's text, folded.
    assert f'aria-label="Merged text">{escape(flagged.fact_content)}</textarea>' in body
    assert "<details><summary" in body
    response = reviewer_client.post(
        f"/proposals/{flagged.id}/decide/", {"from": "card", "decision": "keep_both"}, **hx
    )
    assert f'id="c-{flagged.id}"' in response.content.decode()
    flagged.refresh_from_db()
    # The model proposed an UPDATE; the reviewer kept both, which applied an ADD: two facts.
    assert (flagged.status, flagged.action, flagged.applied_as) == ("applied", "update", "add")
    assert flagged.created_memory is not None
    assert not Memory.objects.get(id=flagged.target_memory_id).is_deleted


def test_undoing_a_card_decision_brings_the_card_back_open(reviewer_client, queue, hx):
    """The toast's Undo after a workbench decision targets the card, as it does a queue row: the
    card comes back with its decision buttons (it kept showing the undone decision)."""
    flagged = queue.filter(review_needed=True).first()
    response = reviewer_client.post(
        f"/proposals/{flagged.id}/decide/", {"from": "card", "decision": "approve"}, **hx
    )  # "Replace"
    toast = json.loads(response["HX-Trigger"])["toast"]
    assert toast["undo"] == f"/proposals/{flagged.id}/undo/" and toast["row"] == f"c-{flagged.id}"
    undone = reviewer_client.post(toast["undo"], HTTP_HX_TARGET=f"c-{flagged.id}", **hx)
    body = undone.content.decode()
    assert undone.status_code == 200 and body.strip().startswith("<article")
    assert f'id="c-{flagged.id}"' in body and 'data-open="1"' in body
    assert 'value="keep_both"' in body and 'value="delete_old"' in body  # its buttons are back
    assert Proposal.objects.get(id=flagged.id).status == "pending"


def test_undoing_a_keep_both_says_so_on_the_old_memorys_trail(reviewer_client, queue, hx):
    """ "Keep both" writes on the old memory's own trail that it was kept beside the new fact; the
    undo of that decision is written there too (the trail went on saying "kept both")."""
    flagged = queue.filter(review_needed=True).first()
    reviewer_client.post(
        f"/proposals/{flagged.id}/decide/", {"from": "card", "decision": "keep_both"}, **hx
    )
    reviewer_client.post(f"/proposals/{flagged.id}/undo/", **hx)
    trail = MemoryHistory.objects.filter(
        memory_id=flagged.target_memory_id, event="reviewed"
    ).order_by("created_at", "id")
    decisions = [row.metadata["decision"] for row in trail]
    assert decisions == ["keep_both", "keep_both_undone"]
    assert trail.last().changed_by == "rita" and flagged.id in trail.last().reason


def test_delete_the_old_one_soft_deletes_the_target(reviewer_client, queue, hx):
    flagged = queue.filter(review_needed=True).first()
    reviewer_client.post(
        f"/proposals/{flagged.id}/decide/", {"from": "card", "decision": "delete_old"}, **hx
    )
    assert Memory.objects.get(id=flagged.target_memory_id).is_deleted


def test_merge_needs_text_and_updates_the_target(reviewer_client, queue, hx):
    flagged = queue.filter(review_needed=True).first()
    response = reviewer_client.post(
        f"/proposals/{flagged.id}/decide/",
        {"from": "card", "decision": "merge", "content": ""},
        **hx,
    )
    assert "Write the merged text." in response.content.decode()
    reviewer_client.post(
        f"/proposals/{flagged.id}/decide/",
        {"from": "card", "decision": "merge", "content": "Billing events moved off Kafka in 2026."},
        **hx,
    )
    target = Memory.objects.get(id=flagged.target_memory_id)
    assert target.content == "Billing events moved off Kafka in 2026." and target.version == 2


def test_a_refused_merge_on_a_card_gives_back_the_note_and_marks_the_text_box(
    reviewer_client, queue, hx
):
    flagged = queue.filter(review_needed=True).first()
    body = reviewer_client.post(
        f"/proposals/{flagged.id}/decide/",
        {"from": "card", "decision": "merge", "content": " ", "reason": "both halves matter"},
        **hx,
    ).content.decode()
    assert '<details open><summary class="small">Merge: edit the text first' in body
    assert (
        f'<p class="field-error" id="merge-error-{flagged.id}">Write the merged text.</p>' in body
    )
    assert 'value="both halves matter"' in body
    assert_errors_described(body)
    assert Proposal.objects.get(id=flagged.id).status == "pending"


def test_a_card_that_asks_to_confirm_a_secret_stays_open_and_offers_the_box(
    reviewer_client, queue, hx
):
    """Before, the card asked "Approve it anyway?" with no box to say yes, and without data-open
    the focus moved on, so the next key decided another card."""
    flagged = queue.filter(review_needed=True).first()
    Proposal.objects.filter(id=flagged.id).update(safety_kinds="secret")
    url = f"/proposals/{flagged.id}/decide/"
    body = reviewer_client.post(
        url, {"from": "card", "decision": "approve", "content": flagged.fact_content}, **hx
    ).content.decode()
    assert "Approve it anyway?" in body
    assert body.lstrip().startswith(f'<article class="card contradiction" id="c-{flagged.id}"')
    assert 'data-open="1"' in body and 'data-testid="confirm-secret-box"' in body
    assert Proposal.objects.get(id=flagged.id).status == "pending"
    reviewer_client.post(
        url,
        {
            "from": "card",
            "decision": "approve",
            "content": flagged.fact_content,
            "confirm_secret": "on",
        },
        **hx,
    )
    assert Proposal.objects.get(id=flagged.id).status == "applied"


def test_a_card_another_reviewer_holds_offers_the_take_over_and_keeps_what_was_typed(
    reviewer_client, queue, hx
):
    from memory.writes import Actor
    from pipeline import review

    flagged = queue.filter(review_needed=True).first()
    review.claim(flagged.id, Actor("sam", "operator"))
    merged = "Billing events moved off Kafka in 2026; the old consumers stay for replays."
    body = reviewer_client.post(
        f"/proposals/{flagged.id}/decide/",
        {"from": "card", "decision": "merge", "content": merged, "reason": "merged"},
        **hx,
    ).content.decode()
    assert "being reviewed by sam" in body and "take it over to decide it" in body
    assert 'data-testid="take-over"' in body  # before: the words said "from its row", on a card
    assert f">{merged}</textarea>" in body and "<details open>" in body
    assert 'value="merged"' in body
    assert Proposal.objects.get(id=flagged.id).status == "pending"


def test_a_stale_proposal_is_shown_and_can_be_re_decided(reviewer_client, queue, decide):
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


# --- issue 11: the review flow at full speed ------------------------------------------------------

NAMES = ["Amara", "Bruno", "Chen", "Dana", "Eli", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kofi"]


def many_raw(n: int) -> list[str]:
    """Two sentences each: two pending ADDs per raw memory (the offline model), none alike."""
    return [
        f"{NAMES[i % len(NAMES)]} owns the release checklist for project {i}. "
        f"The planning notes of week {i} say so."
        for i in range(n)
    ]


def _next_link(body: str) -> str | None:
    found = re.search(r'<a class="btn" data-next-page href="([^"]+)"', body)
    return "/review/" + found.group(1).replace("&amp;", "&") if found else None


def test_deciding_rows_never_skips_a_pending_proposal_on_the_next_page(
    reviewer_client, pipeline_run, decide
):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    pipeline_run(*many_raw(30))
    pending_at_start = set(Proposal.objects.filter(status="pending").values_list("id", flat=True))
    assert len(pending_at_start) > 2 * 25  # three pages
    seen: list[str] = []
    url, decided = "/review/?sort=age", set()
    while url:
        response = reviewer_client.get(url)
        rows = [p.id for p in response.context["page"]]
        seen += rows
        for proposal in Proposal.objects.filter(id__in=rows[:3]):  # decide the first three rows
            decide(reviewer_client, proposal, decision="reject", reason="not durable")
            decided.add(proposal.id)
        url = _next_link(response.content.decode())
    assert len(seen) == len(set(seen)) == len(pending_at_start)  # each pending id exactly once
    assert set(seen) == pending_at_start
    # The previous link of the last page goes back to the rows just before its first row.
    last = reviewer_client.get(f"/review/?sort=age&after={seen[-30]}")
    before = re.search(r'href="(\?[^"]*before=[^"]+)"', last.content.decode()).group(1)
    back = reviewer_client.get("/review/" + before.replace("&amp;", "&"))
    assert [p.id for p in back.context["page"]][-1] == seen[-30]


def test_the_queue_pages_count_from_where_the_page_starts(reviewer_client, pipeline_run):
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    pipeline_run(*many_raw(15))
    total = Proposal.objects.filter(status="pending").count()
    body = reviewer_client.get("/review/?sort=age").content.decode()
    assert f"1–25 of {total}" in body and "before=" not in body


def _proposal_counts(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return sum(
        "COUNT(" in q["sql"] and "pipeline_proposals" in q["sql"] for q in captured.captured_queries
    )


def test_the_first_queue_page_counts_nothing_twice_and_no_rows_before_it(
    reviewer_client, pipeline_run
):
    """Page one starts at row one by definition, and the counts by action already add up to
    its total: at 100k pending each of those two counts cost milliseconds."""
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    pipeline_run(*many_raw(15))
    total = Proposal.objects.filter(status="pending").count()
    first = reviewer_client.get("/review/?sort=age")
    second_url = _next_link(first.content.decode())
    assert f"26–{min(50, total)} of {total}" in reviewer_client.get(second_url).content.decode()
    # A later page counts the rows before it (its start); the first page does not.
    assert _proposal_counts(reviewer_client, second_url) == (
        _proposal_counts(reviewer_client, "/review/?sort=age") + 1
    )
    with CaptureQueriesContext(connection) as captured:
        reviewer_client.get("/review/?sort=age")
    pending_counts = [
        q["sql"]
        for q in captured.captured_queries
        if q["sql"].startswith('SELECT COUNT(*) AS "__count" FROM "pipeline_proposals" WHERE')
        and q["sql"].endswith("\"status\" = 'pending'")
    ]
    assert len(pending_counts) == 1  # the banner's; the page's total is the counts by action


def test_replace_works_when_the_new_fact_is_the_whole_raw_memory(reviewer_client, pipeline_run, hx):
    """The new text already lives in the raw memory: Replace retires the old memory and links it."""
    update_config({"shadowMode": False}, changed_by="t", reason="t")
    pipeline_run("The team uses Kafka for billing events. Standup notes from Monday.")
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    (raw,) = pipeline_run("The team doesn't use Kafka for billing events anymore.")
    flagged = Proposal.objects.get(source_memory=raw, action="update", review_needed=True)
    assert flagged.fact_content == raw.content
    response = reviewer_client.post(
        f"/proposals/{flagged.id}/decide/", {"from": "card", "decision": "approve"}, **hx
    )
    body = response.content.decode()
    assert (
        "Approved by rita: replaced. The old memory is retired" in body and "its raw memory" in body
    )
    flagged.refresh_from_db()
    # The model proposed the UPDATE; the approval applied it as a DELETE (the target retired).
    assert (flagged.status, flagged.action, flagged.applied_as, flagged.deduped_existing_id) == (
        "applied",
        "update",
        "delete",
        raw.id,
    )
    old = Memory.objects.get(id=flagged.target_memory_id)
    assert old.is_deleted and flagged.deleted_memory_id == old.id
    retired = old.history.order_by("-created_at", "-id").first()
    assert retired.event == "deleted" and retired.metadata["replacedBy"] == raw.id
    # Undo puts it back as the UPDATE the model proposed, with the old memory live again.
    reviewer_client.post(f"/proposals/{flagged.id}/undo/", **hx)
    flagged.refresh_from_db()
    assert (flagged.status, flagged.action, flagged.applied_as) == ("pending", "update", None)
    assert not Memory.objects.get(id=old.id).is_deleted


def test_refusals_read_as_sentences_with_a_next_step(reviewer_client, queue, decide):
    from memory.writes import Actor, forget

    proposal = queue.filter(action="add").first()
    forget(proposal.source_memory_id, actor=Actor("x"), reason="gone")
    body = decide(reviewer_client, proposal, decision="approve").content.decode()
    assert "The raw memory this fact came from was forgotten. Reject it, or recover" in body


def test_keep_both_says_what_happened_and_leaves_a_trace_on_the_old_memory(
    reviewer_client, pipeline_run, hx
):
    update_config({"shadowMode": False}, changed_by="t", reason="t")
    pipeline_run("The team uses Kafka for billing events. Standup notes from Monday.")
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    (raw,) = pipeline_run("The team doesn't use Kafka for billing events anymore.")
    flagged = Proposal.objects.get(source_memory=raw, action="update")
    response = reviewer_client.post(
        f"/proposals/{flagged.id}/decide/", {"from": "card", "decision": "keep_both"}, **hx
    )
    body = response.content.decode()
    assert "deduplicated" not in body
    assert (
        "kept both. The old memory stays, and the new text is already stored as its raw memory"
        in body
    )
    trail = Memory.objects.get(id=flagged.target_memory_id).history.order_by("-created_at").first()
    assert trail.event == "reviewed" and trail.metadata["decision"] == "keep_both"
    assert trail.changed_by == "rita" and trail.metadata["keptWith"] == raw.id


@pytest.fixture
def flagged(pipeline_run):
    """Six ADDs pending in shadow mode: one holds a secret, one personal data."""
    update_config({"shadowMode": True}, changed_by="t", reason="t")
    pipeline_run(
        "The staging deploy key is AKIAIOSFODNN7EXAMPLE for billing-api. Rotate it monthly.",
        "Kenji maintains ingest-worker. Mail him at kenji@lumen.dev if it breaks.",
        "Priya prefers squash merges for feature branches. Said in the review channel.",
    )
    return Proposal.objects.filter(status="pending", action="add")


def test_bulk_confirmation_lists_safety_findings_and_personal_data_needs_an_opt_in(
    reviewer_client, flagged, hx
):
    pending = flagged
    secret = pending.get(safety_kinds__contains="secret")
    personal = pending.get(safety_kinds__contains="pii")
    data = {"decision": "approve", "scope": "all", "filters": "action=add"}
    body = reviewer_client.post("/review/bulk/", {**data, "step": "preview"}, **hx).content.decode()
    findings = re.search(r'data-testid="bulk-findings">(.*?)</div>', body, re.S).group(1)
    assert ">1 secret<" in findings and ">1 personal data<" in findings
    assert "1 with a secret or a password will be left for a one-by-one approval" in findings
    assert 'name="include_personal_data"' in body
    total = pending.count()
    # Without the opt-in, neither the secret nor the personal data is approved.
    body = reviewer_client.post(
        "/review/bulk/", {**data, "step": "apply", "total": total}, **hx
    ).content.decode()
    assert "left for a one-by-one approval" in body and "personal data was left out" in body
    assert Proposal.objects.get(id=personal.id).status == "pending"
    assert Proposal.objects.get(id=secret.id).status == "pending"
    # With it, personal data goes through; a secret never does in bulk.
    reviewer_client.post(
        "/review/bulk/",
        {**data, "step": "apply", "total": 2, "include_personal_data": "on"},
        **hx,
    )
    assert Proposal.objects.get(id=personal.id).status == "applied"
    assert Proposal.objects.get(id=secret.id).status == "pending"


def test_the_bulk_confirmation_counts_only_what_it_will_decide(reviewer_client, flagged, hx):
    """A secret (never in bulk), personal data (unless ticked) and a proposal another reviewer
    holds are said apart and left out of the number the button confirms, each counted once; a
    bulk rejection leaves out only the held ones."""
    pending = flagged
    total = pending.count()
    secret = pending.get(safety_kinds__contains="secret")
    held = pending.exclude(safety_kinds__contains="secret").filter(safety_kinds="").first()
    # Another reviewer holds the secret too: it is left out once, not twice.
    # Held by two other reviewers (a reviewer holds one row at a time).
    for proposal, who in ((held, "ada"), (secret, "sam")):
        claim(proposal.id, Actor(who, "operator"))
    data = {"decision": "approve", "scope": "all", "filters": "action=add"}
    body = reviewer_client.post("/review/bulk/", {**data, "step": "preview"}, **hx).content.decode()
    approves = total - 3  # the secret, the personal data and the held one
    assert f"Approve {approves} of the {total} proposals?" in body
    button = re.search(r'data-testid="bulk-confirm"[^>]*>([^<]*)<', body).group(1)
    assert button == f"Confirm: approve {approves} ({approves + 1} with the box ticked)"
    body = reviewer_client.post(
        "/review/bulk/", {**data, "decision": "reject", "reason": "no", "step": "preview"}, **hx
    ).content.decode()
    assert f"Reject {total - 2} of the {total} proposals?" in body
    assert f'data-testid="bulk-confirm">Confirm: reject {total - 2}<' in body
    # Applied, it decides that many and no more.
    reviewer_client.post("/review/bulk/", {**data, "step": "apply", "total": total}, **hx)
    assert Proposal.objects.filter(status="applied").count() == approves


def test_after_edit_then_approve_the_row_shows_the_edited_text(reviewer_client, queue, decide):
    proposal = queue.filter(action="add").first()
    body = decide(
        reviewer_client, proposal, decision="approve", content="Kenji maintains ingest-worker."
    ).content.decode()
    fact = re.search(r"<div class=\"prewrap\" data-fact>(.*?)</div>", body, re.S).group(1)
    assert fact == "Kenji maintains ingest-worker." and 'data-testid="edited"' in body


def test_the_banner_refresh_also_refreshes_the_nav_counts(viewer_client, queue, hx):
    body = viewer_client.get("/banner/", **hx).content.decode()
    pending = queue.count()
    assert f'<span id="nav-review-count" class="pill" hx-swap-oob="true">{pending}</span>' in body
    assert 'id="nav-contradiction-count"' in body
    page = viewer_client.get("/review/").content.decode()
    assert f'<span id="nav-review-count" class="pill">{pending}</span>' in page  # not oob


def test_waiting_words_say_what_holds_a_proposal_now(viewer_client, queue):
    body = viewer_client.get("/review/").content.decode()
    assert "held for review: shadow mode writes nothing by itself" in body
    assert "waiting: shadow_mode" not in body
    update_config({"mutationsFrozen": True}, changed_by="t", reason="brake")
    body = viewer_client.get("/review/").content.decode()
    shown = re.findall(r'data-testid="waiting"[^>]*>([^<]*)<', body)
    assert shown and all(text.startswith("held: the emergency brake is on") for text in shown)
    # What the row says once the brake is lifted while the page stays open (static/js/app.js).
    assert 'data-brake-off="held for review: shadow mode writes nothing by itself"' in body


def test_the_contradiction_card_says_why_once(viewer_client, queue):
    flagged = queue.filter(review_needed=True).first()
    body = viewer_client.get("/contradictions/").content.decode()
    card = body[body.index(f'id="c-{flagged.id}"') :]
    why = re.search(r'data-testid="contradiction-why">(.*?)</span>', card).group(1)
    assert why.startswith("The ") and "Negation on the" not in card[:600]
    assert card[:2000].count(flagged.contradiction["reason"].split(" (")[0]) == 1


def test_a_pending_update_reads_as_proposed_in_the_audit_not_none(viewer_client, queue):
    update = queue.filter(action="update").first()
    body = viewer_client.get(f"/memories/{update.source_memory_id}/").content.decode()
    assert 'data-testid="event">update proposed<' in body
    assert 'data-testid="event">none<' not in body


def test_the_queue_filters_are_one_queryset_method_and_the_views_read_it(reviewer_client, queue):
    """Proposal.objects.queue() is the review queue: the page shows exactly what it selects."""
    updates = Proposal.objects.queue(action="update", sort="newest")
    assert list(updates) and all(p.action == "update" and p.is_pending for p in updates)
    page = reviewer_client.get("/review/?action=update&sort=newest").context["page"]
    assert [p.id for p in page] == [p.id for p in updates][: len(page)]
    assert list(Proposal.objects.queue()) == list(Proposal.objects.queue(status="pending"))
    assert not Proposal.objects.queue(conf_min=1.0, conf_max=1.0, flag="secret").exists()


def test_work_under_the_brake_is_recorded_and_shown_as_the_brake_not_shadow(
    reviewer_client, queue, pipeline_run, decide
):
    """Issue 19, defect 9: the brake is its own state at decision; decided proposals wait no more."""
    update_config({"mutationsFrozen": True}, changed_by="t", reason="brake")
    (raw,) = pipeline_run("Nadia runs the on-call rota for ingest. From the ops sync.")
    held = Proposal.objects.filter(source_memory=raw, status="pending").first()
    assert held.mode == "frozen" and held.job.result["writeMode"] == "frozen"
    page = reviewer_client.get(f"/proposals/{held.id}/").content.decode()
    assert 'data-testid="mode-at-decision">frozen<' in page and "emergency brake was on" in page
    assert "held: the emergency brake is on" in page
    job = reviewer_client.get(f"/jobs/{held.job_id}/").content.decode()
    assert 'data-testid="write-mode">frozen<' in job and "mutations_frozen" not in job

    update_config({"mutationsFrozen": False}, changed_by="t", reason="lifted")
    for url in (f"/proposals/{held.id}/", f"/jobs/{held.job_id}/", "/review/"):
        body = reviewer_client.get(url).content.decode()
        assert "mutations_frozen" not in body and not SAID_BRAKE_ON.search(body), url
    assert (
        "the brake is lifted now" in reviewer_client.get(f"/proposals/{held.id}/").content.decode()
    )

    shadow = queue.filter(action="add", blocked_reason="shadow_mode").first()
    assert decide(reviewer_client, shadow, decision="approve").status_code == 200
    page = reviewer_client.get(f"/proposals/{shadow.id}/").content.decode()
    assert "shadow_mode" not in page and 'data-testid="waiting"' not in page
    assert 'data-testid="mode-at-decision">shadow<' in page
    job = reviewer_client.get(f"/jobs/{shadow.job_id}/").content.decode()
    row = job[job.index(f"/proposals/{shadow.id}/") - 2500 : job.index(f"/proposals/{shadow.id}/")]
    assert "held for review" not in row.split("<tr")[-1]


# Shown on the page (text, or a button's title), not the data the page keeps to say it when the
# brake comes on while it is open (data-brake-on, data-brake-held).
SAID_BRAKE_ON = re.compile(r'(>[^<]*|title="[^"]*)the emergency brake is on', re.IGNORECASE)
APPLY_BUTTONS = re.compile(
    r'<button[^>]*(?:data-action="approve"|value="(?:keep_both|merge|delete_old|approve)"'
    r'|data-testid="confirm-secret"|>Save &amp; approve)[^>]*>'
)


@pytest.mark.parametrize("flags", [{"enabled": False}, {"shadowMode": False}])
def test_under_the_brake_no_page_offers_an_apply_it_would_refuse(
    reviewer_client, queue, decide, flags
):
    """Found by a QA pass: with the pipeline disabled and the brake on, the queue, the cards and
    the proposal page offered Approve, which answered "frozen". Every apply button is disabled and
    says why, in any mode; rejecting is still offered (the brake holds writes to memories only)."""
    update_config({**flags, "mutationsFrozen": True}, changed_by="t", reason="brake")
    flagged = queue.filter(review_needed=True).first()
    pages = {
        "queue": reviewer_client.get("/review/").content.decode(),
        "cards": reviewer_client.get("/contradictions/").content.decode(),
        "proposal": reviewer_client.get(f"/proposals/{flagged.id}/").content.decode(),
    }
    for name, page in pages.items():
        buttons = APPLY_BUTTONS.findall(page)
        assert buttons, name
        assert all(" disabled " in b and "emergency brake is on" in b for b in buttons), name
        assert 'value="reject"' in page or 'data-reveal-button="reject"' in page, name
        assert "held: the emergency brake is on" in page or name == "cards", name
    assert 'data-testid="brake-note"' in pages["cards"]
    applied = Proposal.objects.filter(status="applied").first()
    page = reviewer_client.get(f"/proposals/{applied.id}/").content.decode()
    revert = re.search(r'<button[^>]*data-testid="revert"[^>]*>', page).group(0)
    assert " disabled " in revert
    refused = decide(reviewer_client, flagged, decision="approve").content.decode()
    assert "brake" in refused and Proposal.objects.get(id=flagged.id).is_pending

    update_config({"mutationsFrozen": False}, changed_by="t", reason="lifted")
    page = reviewer_client.get("/review/").content.decode()
    assert APPLY_BUTTONS.findall(page) and " disabled " not in "".join(APPLY_BUTTONS.findall(page))


def _bulk_until_done(client, hx, data) -> list[str]:
    """Post a bulk apply and follow the panel's chunk-to-chunk form to the end: every answer."""
    body = client.post("/review/bulk/", data, **hx).content.decode()
    bodies = [body]
    while 'hx-trigger="load' in body:
        form = body[body.index('hx-trigger="load') : body.index("</form>")]
        fields = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form)
        follow = {}
        for name, value in fields:
            follow.setdefault(name, []).append(value)
        body = client.post("/review/bulk/", follow, **hx).content.decode()
        bodies.append(body)
    return bodies


def test_bulk_progress_words_reasons_of_every_chunk_and_what_others_took(
    reviewer_client, admin_client_role, queue, pipeline_run, hx, decide
):
    """Issue 19, defect 8: "rejected" (not "rejectd"), every chunk's reasons, and the ones another
    reviewer decided first said as such (the bar ends at 100%); counts and rows redrawn."""
    from dashboard.views import review as views

    pipeline_run("The staging deploy key is AKIAIOSFODNN7EXAMPLE for billing-api. Rotate it.")
    pinned = queue.filter(action="update").first()
    Memory.objects.filter(id=pinned.target_memory_id).update(pinned=True)
    pending = list(Proposal.objects.filter(status="pending").order_by("id"))
    total = len(pending)
    taken = [p for p in pending if p.action == "add" and not p.safety_kinds][-1]
    views.BULK_CHUNK = 2
    try:
        data = {"decision": "approve", "scope": "all", "step": "apply", "total": total}
        data["shown"] = " ".join(p.id for p in pending)
        assert decide(admin_client_role, taken, decision="approve").status_code == 200
        bodies = _bulk_until_done(reviewer_client, hx, data)
    finally:
        views.BULK_CHUNK = 25
    body = bodies[-1]
    reasons = re.findall(r'data-testid="bulk-reason">([^<]*)<', body)
    assert any("pinned" in r for r in reasons) and any("secret" in r for r in reasons), reasons
    left = Proposal.objects.filter(status="pending").count()
    assert f"Done</strong> {total - 1 - left} approved, {left} not applied of {total}." in body
    assert "1 was no longer waiting as counted when their turn came" in body
    assert '<rect width="100.0" height="1"/>' in body  # the bar ends full
    # The bar's counts are the queue's now, and the rows of the page say what happened to them.
    assert re.search(rf'id="queue-counts" hx-swap-oob="true"><strong>{left}</strong>', body)
    assert re.search(rf'id="scope-all-count" hx-swap-oob="true">{left}<', body)
    approved = Proposal.objects.filter(status="applied", decided_by="rita").first()
    assert f'id="p-{approved.id}" data-row hx-swap-oob="true"' in "".join(bodies)

    rejects = [p.id for p in Proposal.objects.filter(status="pending")[:2]]
    data = {"decision": "reject", "scope": "selected", "step": "apply", "ids": " ".join(rejects)}
    body = _bulk_until_done(reviewer_client, hx, {**data, "reason": "dup", "total": 2})[-1]
    assert "Done</strong> 2 rejected of 2." in body and "rejectd" not in body


def test_an_htmx_post_after_the_session_ended_is_401_with_the_session_ended_event(
    client, queue, hx
):
    """dashboard/access.py: no login form pasted into a row; the page says so and keeps itself."""
    import json

    proposal = queue.first()
    headers = {**hx, "HTTP_HX_CURRENT_URL": "http://testserver/review/?action=add"}
    response = client.post(
        f"/proposals/{proposal.id}/decide/", {"decision": "approve", "from": "row"}, **headers
    )
    assert response.status_code == 401
    event = json.loads(response.headers["HX-Trigger"])["session-ended"]
    assert event["message"].startswith("Your session ended — sign in again")
    assert event["login"] == "/login/?next=/review/%3Faction%3Dadd"
    assert "id_password" not in response.content.decode()
    assert Proposal.objects.get(id=proposal.id).status == "pending"
    # Without htmx it is still the redirect to the login form.
    plain = client.post(f"/proposals/{proposal.id}/decide/", {"decision": "approve"})
    assert plain.status_code == 302 and plain.url.startswith("/login/?next=")


def test_a_bulk_post_with_several_ids_values_previews_and_decides_every_one(
    reviewer_client, queue, hx
):
    """dashboard/review_forms.py IdsField: each ticked checkbox sends its own `ids` value."""
    ids = list(queue.filter(action="add").values_list("id", flat=True)[:3])
    assert len(ids) == 3
    pending = queue.count()
    data = {"decision": "reject", "scope": "selected", "reason": "not durable", "ids": ids}
    body = reviewer_client.post("/review/bulk/", {**data, "step": "preview"}, **hx)
    assert "Reject 3 proposals?" in body.content.decode()
    assert Proposal.objects.filter(id__in=ids, status="pending").count() == 3  # nothing yet
    body = reviewer_client.post("/review/bulk/", {**data, "step": "apply", "total": 3}, **hx)
    assert "Done</strong> 3 rejected of 3." in body.content.decode()
    assert set(Proposal.objects.filter(id__in=ids).values_list("status", flat=True)) == {"rejected"}
    assert Proposal.objects.filter(status="pending").count() == pending - 3


def test_rows_another_reviewer_decided_meanwhile_are_not_left_for_one_by_one(
    reviewer_client, queue, hx, monkeypatch
):
    """Found by a QA pass: two reviewers' bulk runs over the same rows; a row the other one
    decided between this chunk's read and its decision was counted "left for one by one", with
    nothing left to do. The other reviewer's decision is made at that moment here."""
    from memory.writes import Actor
    from pipeline import review as reviewing

    ids = sorted(queue.filter(action="add").values_list("id", flat=True)[:3])
    real = reviewing.bulk_reject

    def racing(chunk, actor, *, reason):
        reviewing.approve(chunk[0], Actor("ada", "operator"))  # the other reviewer, first
        return real(chunk, actor, reason=reason)

    monkeypatch.setattr(reviewing, "bulk_reject", racing)
    data = {"decision": "reject", "scope": "selected", "reason": "not durable", "ids": ids}
    body = reviewer_client.post("/review/bulk/", {**data, "step": "apply", "total": 3}, **hx)
    text = body.content.decode() + json.dumps(dict(body.headers))  # the toast is a header
    assert "left for one by one" not in text and "2 rejected" in text
    assert "1 was no longer waiting" in text and "decided by ada" in text


def test_a_row_refused_for_its_status_but_decided_by_nobody_is_still_left_for_one_by_one():
    """Second review: a stale row refused as "already_decided" (re-decide it) is not "gone"."""
    from pipeline.review import BulkOutcome

    stale = BulkOutcome("p1", "this proposal is stale: re-decide", "already_decided")
    taken = BulkOutcome("p2", "already rejected (by ada)", "already_decided", decided_by="ada")
    assert (stale.decided_elsewhere, taken.decided_elsewhere) == (False, True)


def test_a_bulk_row_your_own_token_approved_meanwhile_waits_for_another_and_refusals_say_so():
    """A QA pass: rows the same reviewer's token approved first while the bulk ran (refused
    inside the write as same_approver) were "left for one by one"; and rows the brake refused
    were too, where the panel said why."""
    from dashboard import wording
    from pipeline.review import BulkOutcome

    mine = BulkOutcome("p1", "you already approved this proposal", "same_approver")
    assert mine.yours and not mine.done
    progress = {"done": 0, "failed": 28, "claimed": 0, "awaiting": 0, "yours": 2}
    toast = wording.bulk_toast("approve", progress)
    assert toast == (
        "Bulk: 0 approved, 28 not approved: the panel says why, "
        "2 you approved already wait for another reviewer."
    )


def test_a_bulk_chunk_draws_its_rows_again_with_one_run_of_the_context_processors(
    reviewer_client, queue, hx
):
    """The rows come back out of band in one render: the banner's reads (the settings row and
    the review counts) do not run again for every ticked row."""
    ids = list(queue.values_list("id", flat=True)[:5])
    assert len(ids) == 5

    def reads_of_the_banner(chosen: list[str]) -> int:
        data = {"decision": "reject", "scope": "selected", "reason": "not durable", "ids": chosen}
        with CaptureQueriesContext(connection) as ctx:
            body = reviewer_client.post(
                "/review/bulk/", {**data, "step": "apply", "total": len(chosen)}, **hx
            ).content.decode()
        assert body.count("<template>") == len(chosen)  # every ticked row, with its outcome
        assert all(f'id="p-{i}"' in body for i in chosen)
        return sum('"pipeline_config"' in q["sql"] or "pipeline_config " in q["sql"] for q in ctx)

    assert reads_of_the_banner(ids[:1]) == reads_of_the_banner(ids[1:]) > 0


@pytest.mark.parametrize("undo", ["undo", "reopen"])
def test_keep_existing_says_so_on_the_kept_memorys_trail_and_its_undo_too(
    reviewer_client, queue, hx, undo
):
    """ "Keep existing" rejects the UPDATE or DELETE; the memory it would have changed shows on its
    own timeline that a reviewer kept it (the rejection's row is on the raw memory), and the
    undo of that rejection is written there too, as for "keep both"."""
    flagged = queue.filter(review_needed=True, action__in=("update", "delete")).first()
    reviewer_client.post(
        f"/proposals/{flagged.id}/decide/",
        {"from": "card", "decision": "reject", "reason": "the old one is right"},
        **hx,
    )
    page = reviewer_client.get(f"/memories/{flagged.target_memory_id}/").content.decode()
    assert f"kept as it is: the proposed {flagged.action.upper()} was rejected" in page
    assert "the old one is right" in page
    trail = [row.label for row in trail_of(Proposal.objects.get(id=flagged.id))]
    assert trail[-2:] == ["rejected", "existing memory kept"]  # the rejection first
    reviewer_client.post(f"/proposals/{flagged.id}/{undo}/", **hx)
    assert Proposal.objects.get(id=flagged.id).status == "pending"
    trail = MemoryHistory.objects.filter(
        memory_id=flagged.target_memory_id, event="reviewed"
    ).order_by("created_at", "id")
    assert [row.metadata["decision"] for row in trail] == ["kept", "kept_undone"]
    assert {row.changed_by for row in trail} == {"rita"}
    # The proposal's own trail names both, in words.
    proposal_page = reviewer_client.get(f"/proposals/{flagged.id}/").content.decode()
    assert "existing memory kept" in proposal_page and "keeping undone" in proposal_page
