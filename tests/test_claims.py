"""Claims (issue 26, item 1): focusing or opening a proposal claims it for review.claimMinutes;
another reviewer sees who holds it, cannot decide it without taking it over (audited), and bulk
actions skip it and say how many. A claim ends on a decision, when its reviewer moves to another
proposal or leaves the page, and on expiry. The poll that shows it costs the same whatever the
page holds."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from memory.models import MemoryHistory
from memory.writes import Actor, Refused
from pipeline import claims, review
from pipeline.models import Claim, Proposal
from tests.conftest import _token
from tests.pipeline_support import configure

RITA, SAM = Actor("rita", "operator"), Actor("sam", "operator")
OWNERS = [
    f"Engineer {i} owns the release checklist for project {i}. From planning." for i in range(4)
]


@pytest.fixture
def queue(db, pipeline_run):
    configure(shadowMode=True)
    pipeline_run(*OWNERS)
    return list(Proposal.objects.filter(status="pending").order_by("created_at", "position"))


@pytest.fixture
def sam_client(role_users):
    user = User.objects.create_user("sam", password="pw-sam")
    user.groups.add(Group.objects.get(name="reviewer"))
    client = Client()
    client.force_login(user)
    return client


def expire(proposal_id: str) -> None:
    """Move the claim's end into the past, as review.claimMinutes going by would."""
    Claim.objects.filter(proposal_id=proposal_id).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )


# --- the rule -------------------------------------------------------------------------------------


def test_a_claim_lasts_claim_minutes_and_shows_to_the_others_as_held(queue):
    configure(review__claimMinutes=3)
    first = queue[0]
    mine = review.claim(first.id, RITA, page="tab-1")
    assert mine.state == "mine" and mine.by == "rita"
    assert timedelta(minutes=2, seconds=59) < mine.until - timezone.now() <= timedelta(minutes=3)
    theirs = review.claim(first.id, SAM)
    assert theirs.state == "other" and theirs.by == "rita"
    assert Claim.objects.get(proposal_id=first.id).by == "rita"
    assert {s.proposal_id: s.state for s in claims.states([first.id], "sam")} == {first.id: "other"}


def test_another_reviewer_cannot_decide_a_claimed_proposal_until_taking_it_over(queue):
    first = queue[0]
    review.claim(first.id, RITA)
    for decide in (lambda: review.approve(first.id, SAM), lambda: review.reject(first.id, SAM)):
        with pytest.raises(Refused) as refused:
            decide()
        assert refused.value.code == "claimed" and "being reviewed by rita" in refused.value.message
    assert Proposal.objects.get(id=first.id).status == "pending"
    taken = review.claim(first.id, SAM, takeover=True)
    assert taken.state == "mine"
    (audit,) = MemoryHistory.objects.filter(
        metadata__proposalId=first.id, metadata__decision="taken_over"
    )
    assert (audit.changed_by, audit.metadata["from"]) == ("sam", "rita")
    with pytest.raises(Refused) as refused:
        review.approve(first.id, RITA)
    assert refused.value.code == "claimed" and "sam" in refused.value.message
    assert review.approve(first.id, SAM).status == "applied"
    assert not Claim.objects.filter(proposal_id=first.id).exists()  # a decision ends it


def test_an_expired_claim_holds_nothing(queue):
    first = queue[0]
    review.claim(first.id, RITA)
    expire(first.id)
    assert claims.states([first.id], "sam")[0].state == "free"
    assert review.claim(first.id, SAM).state == "mine"
    assert review.reject(first.id, SAM, reason="not durable").status == "rejected"


def test_moving_to_another_proposal_lets_the_last_one_go(queue):
    review.claim(queue[0].id, RITA)
    review.claim(queue[1].id, RITA)
    assert list(Claim.objects.values_list("proposal_id", "by")) == [(queue[1].id, "rita")]


def test_leaving_a_page_releases_only_that_pages_claim(queue):
    review.claim(queue[0].id, RITA, page="queue-tab")
    review.claim(queue[0].id, RITA, page="proposal-page")  # opened it: the newer page holds it
    assert not review.release(queue[0].id, RITA, page="queue-tab")
    assert Claim.objects.filter(proposal_id=queue[0].id).exists()
    assert not review.release(queue[0].id, SAM)  # never someone else's
    assert review.release(queue[0].id, RITA, page="proposal-page")
    assert not Claim.objects.exists()


def test_a_decided_proposal_is_claimed_by_nobody(queue):
    review.approve(queue[0].id, RITA)
    state = review.claim(queue[0].id, SAM)
    assert state.state == "decided" and state.by == "rita"
    assert not Claim.objects.exists()


def test_bulk_skips_rows_someone_else_holds_and_counts_them(queue):
    review.claim(queue[0].id, SAM)
    ids = [p.id for p in queue]
    outcomes = review.bulk_approve(ids, RITA, note="bulk")
    assert [o.code for o in outcomes if not o.done] == ["claimed"]
    assert outcomes[0].error == "Skipped: sam is reviewing it."
    assert Proposal.objects.get(id=queue[0].id).status == "pending"
    assert "pending" not in {Proposal.objects.get(id=i).status for i in ids[1:]}
    pending = Proposal.objects.filter(id__in=ids, status="pending")
    assert review.bulk_summary(pending, "rita")["claimed"] == 1
    assert review.bulk_summary(pending, "sam")["claimed"] == 0


def test_the_api_meets_a_claim_with_409_claimed(client, queue):
    review.claim(queue[0].id, RITA)
    response = client.post(
        f"/api/proposals/{queue[0].id}/approve",
        "{}",
        content_type="application/json",
        **_token(["review"], name="bot"),
    )
    assert response.status_code == 409
    body = response.json()
    assert body["error"] == "claimed" and body["claimedBy"] == "rita" and body["claimedUntil"]


# --- the dashboard --------------------------------------------------------------------------------


def claim_url(proposal):
    return reverse("dashboard:claim", args=[proposal.id])


def test_focusing_claims_and_the_marker_says_who_else_is_reviewing(
    reviewer_client, sam_client, queue, hx
):
    response = reviewer_client.post(claim_url(queue[0]), {"page": "p1"}, **hx)
    assert response.status_code == 200
    assert 'data-claim="mine"' in response.content.decode()
    # A claim just made lasts its whole claimMinutes (5): rounded down, it said 4 (or 0 for 1).
    assert "the others skip it for 5 minutes" in response.content.decode()
    other = sam_client.post(claim_url(queue[0]), {"page": "p2"}, **hx).content.decode()
    assert 'data-claim="other"' in other and "<strong>rita</strong> is reviewing" in other
    assert "for 5 minutes" in other
    assert 'data-testid="take-over"' in other
    taken = sam_client.post(claim_url(queue[0]), {"page": "p2", "takeover": "1"}, **hx)
    assert 'data-claim="mine"' in taken.content.decode()
    assert "You are reviewing it now" in taken.headers["HX-Trigger"]
    assert Claim.objects.get(proposal_id=queue[0].id).by == "sam"


def test_the_queue_row_shows_the_claim_and_hides_nothing_it_needs(reviewer_client, queue):
    review.claim(queue[0].id, SAM)
    body = reviewer_client.get(reverse("dashboard:review")).content.decode()
    row = re.search(rf'<tr id="p-{queue[0].id}".*?</tr>', body, re.S).group(0)
    assert "<strong>sam</strong> is reviewing" in row and 'data-testid="take-over"' in row
    assert f'data-claim-url="{claim_url(queue[0])}"' in row
    assert "data-claims-poll" in body


def test_the_poll_answers_every_shown_row_out_of_band(viewer_client, queue, hx):
    review.claim(queue[0].id, SAM)
    review.approve(queue[1].id, RITA)
    shown = " ".join(p.id for p in queue)
    body = viewer_client.get(reverse("dashboard:claims"), {"shown": shown}, **hx).content.decode()
    assert body.count('hx-swap-oob="true"') == len(queue)
    assert re.search(rf'id="claim-{queue[0].id}"[^>]*data-claim="other"', body)
    assert re.search(rf'id="claim-{queue[1].id}"[^>]*data-claim="decided"', body)
    assert "Applied by rita" in body
    assert 'data-testid="take-over"' not in body  # a viewer cannot take over


def test_a_viewer_cannot_claim(viewer_client, queue, hx):
    assert viewer_client.post(claim_url(queue[0]), **hx).status_code == 403
    assert not Claim.objects.exists()


def test_releasing_by_beacon_answers_204(reviewer_client, queue):
    review.claim(queue[0].id, Actor("rita", "operator"), page="p1")
    url = reverse("dashboard:release", args=[queue[0].id])
    assert reviewer_client.post(url, {"page": "p1"}).status_code == 204
    assert not Claim.objects.exists()


def _queries(client, url, **params) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url, params).status_code == 200
    return len(ctx.captured_queries)


def test_the_poll_and_the_queue_cost_the_same_whatever_the_rows(
    reviewer_client, queue, pipeline_run
):
    poll = reverse("dashboard:claims")
    few_ids = " ".join(p.id for p in queue)
    few = (_queries(reviewer_client, poll, shown=few_ids), _queries(reviewer_client, "/review/"))
    pipeline_run(*[f"Service {i} runs on node {i} in the Frankfurt region." for i in range(20)])
    configure(review__destructiveApprovals=2)
    pending = list(Proposal.objects.filter(status="pending"))
    for proposal in pending[:6]:
        review.claim(proposal.id, Actor(f"reviewer-{proposal.id[-4:]}", "operator"))
    many_ids = " ".join(p.id for p in pending)
    many = (_queries(reviewer_client, poll, shown=many_ids), _queries(reviewer_client, "/review/"))
    assert many == few
    assert few[0] <= 4  # session, user, role, the claims of the rows


def test_both_settings_are_on_the_settings_page(admin_client_role, db):
    body = admin_client_role.get("/settings/").content.decode()
    assert "review.claimMinutes" in body and "review.destructiveApprovals" in body
