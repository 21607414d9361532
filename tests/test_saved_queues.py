"""Saved queues with guidelines (issue 26, item 3): a name, a filter, Markdown guidelines shown
beside the rows and optional reviewers; three ship; the overview counts each, and a proposal
page names the queues it is in."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from memory.models import Memory
from pipeline import queues, tasks
from pipeline.models import Proposal, SavedQueue
from pipeline.team import parse_filters
from tests.pipeline_support import RAW_TEXT, four_decisions, raw, seed_store

pytestmark = pytest.mark.django_db


@pytest.fixture
def proposals(fake_ollama, db):
    """Shadow mode: an ADD, an UPDATE and a DELETE wait for review."""
    four_decisions(fake_ollama, seed_store())
    result = raw(RAW_TEXT)
    tasks.process_pending()
    return {p.action: p for p in Proposal.objects.filter(job=result.job, status="pending")}


def shipped():
    return {q.slug: q for q in SavedQueue.objects.all()}


def in_queue(slug):
    return set(Proposal.objects.filter(status="pending").filter(shipped()[slug].condition()))


def test_three_queues_ship_with_guidelines():
    queues_ = shipped()
    assert list(queues_) == ["destructive", "contradictions", "personal-data-and-secrets"]
    assert [q.name for q in queues_.values()] == [
        "Destructive",
        "Contradictions",
        "Personal data and secrets",
    ]
    assert all(q.guidelines.strip() for q in queues_.values())


def test_the_shipped_queues_select_what_their_names_say(proposals):
    add, update, delete = proposals["add"], proposals["update"], proposals["delete"]
    assert in_queue("destructive") == {update, delete}
    assert in_queue("contradictions") == set()
    Proposal.objects.filter(id=add.id).update(review_needed=True)
    assert in_queue("contradictions") == {add}
    Proposal.objects.filter(id=update.id).update(safety_kinds="pii")
    Proposal.objects.filter(id=delete.id).update(safety_kinds="secret")
    assert in_queue("personal-data-and-secrets") == {update, delete}
    # The two kinds added since the queue shipped (pipeline migration 0023) are in it too.
    Proposal.objects.filter(id=update.id).update(safety_kinds="address")
    Proposal.objects.filter(id=delete.id).update(safety_kinds="password")
    Proposal.objects.filter(id=add.id).update(safety_kinds="hidden")
    assert in_queue("personal-data-and-secrets") == {update, delete}


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ("action=add", {"add"}),
        ("action=update&action=delete", {"update", "delete"}),
        ("authority=person", {"update"}),
        ("authority=agent", {"delete"}),
        ("agent=default", {"add", "update", "delete"}),
        ("agent=someone-else", set()),
        ("age=24h", {"update", "delete"}),
        ("age=older", {"add"}),
        ("model=nope", set()),
    ],
)
def test_a_queue_filter_selects_by_each_key(proposals, filters, expected):
    Memory.objects.filter(id=proposals["update"].target_memory_id).update(asserted_by="person")
    Proposal.objects.filter(id=proposals["add"].id).update(
        created_at=timezone.now() - timedelta(days=9)
    )
    queue = SavedQueue(name="q", slug="q", filters=filters)
    pending = Proposal.objects.filter(status="pending").filter(queue.condition())
    assert {p.action for p in pending} == expected


@pytest.mark.parametrize(
    "filters", ["colour=red", "action=merge", "authority=robot", "age=3d", "review_needed=maybe"]
)
def test_a_filter_the_queue_does_not_know_is_refused_with_its_name(filters):
    with pytest.raises(ValueError, match=filters.split("=")[0]):
        parse_filters(filters)
    with pytest.raises(ValidationError):
        SavedQueue(name="bad", slug="bad", filters=filters).full_clean()


def test_the_review_page_of_a_queue_shows_its_rows_and_its_guidelines(proposals, viewer_client):
    SavedQueue.objects.filter(slug="destructive").update(
        guidelines="Read **both** texts.\n\n- one\n- <script>alert(1)</script>"
    )
    page = viewer_client.get("/review/?queue=destructive").content.decode()
    assert proposals["update"].id in page and proposals["delete"].id in page
    assert proposals["add"].id not in page
    assert 'data-testid="queue-guidelines"' in page
    assert "Read <strong>both</strong> texts." in page and "<li>one</li>" in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page


def test_a_queue_on_top_of_the_reviewers_own_filter(proposals, viewer_client):
    page = viewer_client.get("/review/?queue=destructive&action=delete").content.decode()
    assert proposals["delete"].id in page and proposals["update"].id not in page


def test_the_overview_lists_each_queue_with_its_pending_count_and_oldest_age(
    proposals, viewer_client
):
    Proposal.objects.filter(id=proposals["delete"].id).update(
        created_at=timezone.now() - timedelta(hours=30)
    )
    counted = {c.queue.slug: c for c in queues.counts(queues.saved_queues())}
    assert (counted["destructive"].pending, counted["contradictions"].pending) == (2, 0)
    assert counted["destructive"].oldest < timezone.now() - timedelta(hours=29)
    page = viewer_client.get("/").content.decode()
    assert page.count('data-testid="queue-row"') == 3
    assert "?queue=destructive" in page and "30.0 h" in page


def test_a_proposal_page_names_the_queues_it_is_in(proposals, viewer_client):
    page = viewer_client.get(f"/proposals/{proposals['delete'].id}/").content.decode()
    assert 'data-testid="proposal-queues"' in page and "?queue=destructive" in page
    add_page = viewer_client.get(f"/proposals/{proposals['add'].id}/").content.decode()
    assert "in no saved queue" in add_page


def test_admins_edit_the_queues_and_reviewers_cannot(admin_client_role, reviewer_client):
    assert admin_client_role.get("/admin/pipeline/savedqueue/").status_code == 200
    assert reviewer_client.get("/admin/pipeline/savedqueue/").status_code in (302, 403)


def test_the_overview_names_a_queues_assigned_reviewers(proposals, viewer_client, role_users):
    shipped()["destructive"].reviewers.add(role_users["reviewer"])
    page = viewer_client.get("/").content.decode()
    assert 'data-testid="queue-reviewers"' in page and "rita" in page


def test_bulk_on_a_queue_counts_only_the_queues_rows(proposals, reviewer_client, hx):
    response = reviewer_client.post(
        "/review/bulk/",
        {
            "filters": "queue=destructive",
            "step": "preview",
            "decision": "reject",
            "scope": "all",
            "reason": "stale",
        },
        **hx,
    )
    assert "Reject 2 proposals" in response.content.decode()
    assert Proposal.objects.filter(status="pending").count() == 3  # a preview decides nothing


def test_a_none_that_contradicts_its_memory_is_in_the_destructive_queue(proposals):
    """A flagged NONE is decided as the UPDATE it may become; the queue left it out."""
    add, update, delete = proposals["add"], proposals["update"], proposals["delete"]
    Proposal.objects.filter(id=add.id).update(
        action="none", target_memory=update.target_memory, review_needed=True
    )
    assert in_queue("destructive") == {add, update, delete}
    Proposal.objects.filter(id=add.id).update(review_needed=False)  # a plain NONE: not
    assert in_queue("destructive") == {update, delete}
